#!/usr/bin/env python3
"""System calls per request of the proxy and of its memcached backends, by connection choice.

The saturated 10-key closed loop of `../../run.py` (`mget10-closed`: 8 connections, one
10-key get in flight each) against nutcracker and one `tailtrim proxy -t 1` per `--bin`, over
the same 3 memcached (`-t 1`); proxies pinned to CPU 0, backends and the load generator to
CPU 1. During each load, `perf stat -e raw_syscalls:sys_enter` counts the system calls of the
proxy and, separately, of the 3 memcached; each count is divided by the requests the load
generator completed. A count of calls depends much less on the host's load than a CPU time:
it measures how many requests share a write and a read (the batching that stacking requests
on one connection gives), not how fast each call runs.

  python3 experiments/proxy/connection-choice/avoid-slow/syscalls.py \
      --bin "round-robin=target/ab/tailtrim-C --connection-choice round-robin" \
      --bin "avoid-slow=target/ab/tailtrim-C --connection-choice avoid-slow" \
      --server-connections 4 --reps 3 --duration 3 --out .../syscalls.json
"""

import os
import signal
import statistics
import subprocess
import sys
import tempfile
import json

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(HERE))))
from harness import (arg_parser, build_closedloop, closed_cmd, closed_preload,  # noqa: E402
                     cpu_seconds, free_port, loadavg, memcached_cmd, parse_args, recorder_for,
                     rotated, shown, start, stop_all, write_results)


def counted(cmd, pids, proxy_pid):
    """Runs the load `cmd` while perf counts the system calls of `proxy_pid` and of `pids`
    (the backends); returns (load's JSON, proxy calls, backend calls, proxy CPU seconds)."""
    def perf(targets, out):
        return subprocess.Popen(["perf", "stat", "-x,", "-e", "raw_syscalls:sys_enter",
                                 "-p", ",".join(str(p) for p in targets), "-o", out])
    tmp = tempfile.mkdtemp(prefix="syscalls-")
    proxy_out, backend_out = os.path.join(tmp, "proxy"), os.path.join(tmp, "backends")
    counters = [perf([proxy_pid], proxy_out), perf(pids, backend_out)]
    cpu_before = cpu_seconds(proxy_pid)
    got = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True)
    cpu = cpu_seconds(proxy_pid) - cpu_before
    for counter in counters:
        counter.send_signal(signal.SIGINT)
        counter.wait()

    def calls(path):
        with open(path) as f:
            for line in f:
                fields = line.strip().split(",")
                if len(fields) > 2 and fields[2] == "raw_syscalls:sys_enter":
                    return int(fields[0])
        raise RuntimeError(f"no count in {path}")
    return json.loads(got.stdout), calls(proxy_out), calls(backend_out), cpu


def main():
    parser = arg_parser(__doc__, "NAME=PATH [PROXY FLAGS...] of a tailtrim binary whose proxy "
                        "is a target (repeatable)", "unused")
    parser.add_argument("--server-connections", type=int, default=None)
    args, bins, _, pin = parse_args(parser, HERE)
    recorder = recorder_for(bins, [("nutcracker", ["nutcracker", "--version"]),
                                   ("perf", ["perf", "--version"])])
    procs = []
    tmp = tempfile.mkdtemp(prefix="syscalls-exp-")
    commands = {}
    try:
        backends = []
        for _ in range(3):
            port = free_port()
            backends.append((port, start(procs, pin(1) + memcached_cmd(port, 1), port).pid))
        servers = [f"127.0.0.1:{port}:1" for port, _ in backends]
        targets = {}
        nc_port, nc_stats = free_port(), free_port()
        with open(os.path.join(tmp, "nc.yml"), "w") as f:
            f.write(f"pool:\n  listen: 127.0.0.1:{nc_port}\n  hash: fnv1a_64\n"
                    f"  distribution: ketama\n  timeout: 2000\n  auto_eject_hosts: false\n"
                    f"  servers:\n" + "".join(f"   - {s}\n" for s in servers))
        nc_cmd = pin(0) + ["nutcracker", "-c", os.path.join(tmp, "nc.yml"), "-s", str(nc_stats),
                           "-a", "127.0.0.1", "-o", os.path.join(tmp, "nc.log")]
        commands["nutcracker"] = shown(nc_cmd, tmp)
        targets["nutcracker"] = (nc_port, start(procs, nc_cmd, nc_port).pid)
        for name, spec in bins:
            path, *extra = spec.split()
            port = free_port()
            cmd = pin(0) + [path, "proxy", "-l", f"127.0.0.1:{port}", "--admin", "off",
                            "-s", ",".join(servers), "--hash", "fnv1a_64",
                            "--distribution", "ketama", "--timeout-ms", "2000", "-t", "1",
                            "--server-failure-limit", "1000000000"]
            if args.server_connections:
                cmd += ["--server-connections", str(args.server_connections)]
            cmd += extra
            commands[name] = shown(cmd, tmp)
            targets[name] = (port, start(procs, cmd, port, stderr=subprocess.DEVNULL).pid)
        closedloop = build_closedloop()
        commands["closedloop"] = shown(pin(1) + closed_cmd(closedloop, "PORT", 8, 1, 10,
                                                              args.duration), tmp)
        closed_preload(closedloop, targets[bins[0][0]][0])
        runs = []
        names = list(targets)
        for rep in range(args.reps):
            for name in rotated(names, rep):
                port, pid = targets[name]
                load = loadavg()
                result, proxy_calls, backend_calls, cpu = counted(
                    pin(1) + closed_cmd(closedloop, port, 8, 1, 10, args.duration),
                    [p for _, p in backends], pid)
                requests = result["completed"]
                run = {"rep": rep, "case": "mget10-closed", "target": name,
                       "completed": requests, "carried_rps": round(result["rps"]),
                       "proxy_syscalls": proxy_calls, "backend_syscalls": backend_calls,
                       "proxy_syscalls_per_request": round(proxy_calls / requests, 3),
                       "backend_syscalls_per_request": round(backend_calls / requests, 3),
                       "cpu_us_per_request": round(cpu / requests * 1e6, 3),
                       "loadavg": load}
                print(run, flush=True)
                runs.append(run)
        summary = []
        for name in names:
            mine = [run for run in runs if run["target"] == name]
            row = {"case": "mget10-closed", "target": name, "runs": len(mine)}
            for key in ("carried_rps", "proxy_syscalls_per_request",
                        "backend_syscalls_per_request", "cpu_us_per_request"):
                row[f"{key}_median"] = round(statistics.median(r[key] for r in mine), 3)
                row[f"{key}_range"] = [min(r[key] for r in mine), max(r[key] for r in mine)]
            summary.append(row)
        for row in summary:
            print(row)
        write_results(args.out, commands, args.reps, args.duration, summary, runs, recorder)
    finally:
        stop_all(procs)


if __name__ == "__main__":
    main()
