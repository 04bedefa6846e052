#!/usr/bin/env python3
"""How often `avoid-slow` leaves round robin's connection: the proxy's `backend_stuck_skips`
against `backend_requests` after the saturated 10-key closed loop of `syscalls.py`
(`mget10-closed`), one `tailtrim proxy -t 1 --connection-choice avoid-slow` over 3 memcached.

  python3 experiments/proxy/connection-choice/avoid-slow/skips.py \
      --bin "avoid-slow=target/debug/tailtrim --connection-choice avoid-slow" \
      --server-connections 4 --reps 3 --duration 3 --out .../skips.json
"""

import os
import socket
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(HERE))))
from harness import (arg_parser, build_closedloop, closed_cmd, closed_preload,  # noqa: E402
                     free_port, loadavg, memcached_cmd, parse_args, recorder_for, shown, start,
                     stop_all, write_results)


def backend_totals(port):
    """Sums of `backend_requests` and `backend_stuck_skips` over the proxy's backends."""
    with socket.create_connection(("127.0.0.1", port)) as conn:
        conn.sendall(b"stats\r\n")
        data = b""
        while not data.endswith(b"END\r\n"):
            data += conn.recv(65536)
    totals = {"backend_requests": 0, "backend_stuck_skips": 0}
    for line in data.decode().splitlines():
        fields = line.split()
        if len(fields) == 3 and fields[0] == "STAT":
            name = fields[1].split(":")[0]
            if name in totals:
                totals[name] += int(fields[2])
    return totals


def main():
    parser = arg_parser(__doc__, "NAME=PATH [PROXY FLAGS...] of the proxy (one)", "unused")
    parser.add_argument("--server-connections", type=int, default=4)
    args, bins, _, pin = parse_args(parser, HERE)
    recorder = recorder_for(bins)
    procs = []
    commands = {}
    try:
        ports = []
        for _ in range(3):
            port = free_port()
            start(procs, pin(1) + memcached_cmd(port, 1), port)
            ports.append(port)
        name, spec = bins[0]
        path, *extra = spec.split()
        port = free_port()
        cmd = pin(0) + [path, "proxy", "-l", f"127.0.0.1:{port}", "--admin", "off",
                        "-s", ",".join(f"127.0.0.1:{p}:1" for p in ports), "--hash",
                        "fnv1a_64", "--distribution", "ketama", "--timeout-ms", "2000", "-t",
                        "1", "--server-failure-limit", "1000000000", "--server-connections",
                        str(args.server_connections)] + extra
        commands[name] = shown(cmd)
        start(procs, cmd, port, stderr=subprocess.DEVNULL)
        closedloop = build_closedloop()
        commands["closedloop"] = shown(pin(1) + closed_cmd(closedloop, "PORT", 8, 1, 10,
                                                              args.duration))
        closed_preload(closedloop, port)
        runs = []
        for rep in range(args.reps):
            before = backend_totals(port)
            load = loadavg()
            subprocess.run(pin(1) + closed_cmd(closedloop, port, 8, 1, 10, args.duration),
                           check=True, stdout=subprocess.DEVNULL)
            after = backend_totals(port)
            requests = after["backend_requests"] - before["backend_requests"]
            skips = after["backend_stuck_skips"] - before["backend_stuck_skips"]
            run = {"rep": rep, "case": "mget10-closed", "target": name,
                   "backend_requests": requests, "stuck_skips": skips,
                   "skip_share": round(skips / max(requests, 1), 5), "loadavg": load}
            print(run, flush=True)
            runs.append(run)
        summary = [{"case": "mget10-closed", "target": name,
                    "skip_share_median": sorted(r["skip_share"] for r in runs)[len(runs) // 2]}]
        write_results(args.out, commands, args.reps, args.duration, summary, runs, recorder)
    finally:
        stop_all(procs)


if __name__ == "__main__":
    main()
