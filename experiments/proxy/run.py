#!/usr/bin/env python3
"""tailtrim proxy vs nutcracker over the same memcached backends: CPU per request and rate.

Starts 3 memcached backends (`-t 1`), nutcracker and one `tailtrim proxy -t 1` per `--bin`
over them, all on the same ring (ketama, fnv1a_64, so every key lands on the same backend
through either proxy). The proxies are pinned to CPU 0, the backends and the load generator
(`tailtrim bench`) to CPU 1. For every repetition, every case runs against every target in
turn (the order rotates with the repetition), and the proxy's CPU time (utime + stime from
/proc/PID/stat, all threads) over the run is divided by the requests it carried.

Cases (workloads in this folder; 20 B keys, 32 B values, 10k keys preloaded):
  single-open   get:set 10:1 at a fixed rate (open loop): CPU/request, added p50/p99
  mget10-open   10-key gets at a fixed rate
  mget100-open  100-key gets at a fixed rate
  single-closed 8 connections, one request in flight each (closed loop, closedloop/: a small
                Go load generator, get:set 10:1 on its own 10k keys): carried rate
  mget10-closed the same with 10-key gets
  pipelined     8 connections, 16 requests in flight each (pipelined single-key load)
  direct-*      (with --direct) the open-loop cases against one memcached, for added latency

  python3 experiments/proxy/run.py --bin tailtrim=target/release/tailtrim --reps 5 \
      --duration 3 --out experiments/proxy/results.json

Several `--bin NAME=PATH` compare builds side by side (e.g. before/after a change).
"""

import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from harness import (shown, arg_parser, bench_cmd, bench_preload, build_closedloop,  # noqa: E402
                     closed_cmd, closed_preload, free_port, measure, memcached_cmd, parse_args,
                     print_summary, rotated, start, stop_all, summarize, write_results,
                     recorder_for, check_percentiles, read_results, shown_row)


def main():
    parser = arg_parser(__doc__, "NAME=PATH [PROXY FLAGS...] of a tailtrim binary whose proxy "
                        "is a target, with extra proxy flags if any (repeatable)",
                        "tailtrim binary running the bench (default: the first --bin)")
    parser.add_argument("--cases", default="single-open,mget10-open,mget100-open,"
                        "single-closed,mget10-closed,pipelined")
    parser.add_argument("--single-rate", type=int, default=8000)
    parser.add_argument("--mget10-rate", type=int, default=3000)
    parser.add_argument("--mget100-rate", type=int, default=500)
    parser.add_argument("--server-connections", type=int, default=None,
                        help="tailtrim proxy --server-connections (default: its own default)")
    parser.add_argument("--direct", action="store_true",
                        help="also run the open-loop cases against one memcached directly")
    args, bins, bench_bin, pin = parse_args(parser, HERE)
    if args.replot:
        return replot(args.out)
    recorder = recorder_for(bins, [("nutcracker", ["nutcracker", "--version"])])

    cases = {
        "single-open": ("single.toml", args.single_rate, 16),
        "mget10-open": ("mget10.toml", args.mget10_rate, 16),
        "mget100-open": ("mget100.toml", args.mget100_rate, 16),
        # Closed loop (closedloop/): connections, requests in flight each, keys per get.
        "single-closed": ("closed", 8, 1, 1),
        "mget10-closed": ("closed", 8, 1, 10),
        "pipelined": ("closed", 8, 16, 1),
    }
    chosen = args.cases.split(",")
    procs = []
    tmp = tempfile.mkdtemp(prefix="proxy-exp-")

    def memcached():
        port = free_port()
        start(procs, pin(1) + memcached_cmd(port, 1), port)
        return port

    commands = {}
    try:
        ports = [memcached() for _ in range(3)]
        servers = [f"127.0.0.1:{p}:1" for p in ports]
        targets = {}  # name -> (port, pid)
        nc_port, nc_stats = free_port(), free_port()
        with open(os.path.join(tmp, "nc.yml"), "w") as f:
            f.write(f"pool:\n  listen: 127.0.0.1:{nc_port}\n  hash: fnv1a_64\n"
                    f"  distribution: ketama\n  timeout: 2000\n  auto_eject_hosts: false\n"
                    f"  servers:\n")
            for s in servers:
                f.write(f"   - {s}\n")
        nc_cmd = pin(0) + ["nutcracker", "-c", os.path.join(tmp, "nc.yml"), "-s", str(nc_stats),
                           "-a", "127.0.0.1", "-o", os.path.join(tmp, "nc.log")]
        commands["nutcracker"] = shown(nc_cmd, tmp)
        nc = start(procs, nc_cmd, nc_port)
        targets["nutcracker"] = (nc_port, nc.pid)
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
            p = start(procs, cmd, port, stderr=subprocess.DEVNULL)
            targets[name] = (port, p.pid)
        if args.direct:
            direct = memcached()
            targets["direct"] = (direct, None)

        closedloop = build_closedloop()
        commands["closedloop"] = shown(pin(1) + closed_cmd(closedloop, "PORT", "8", "DEPTH",
                                                              "KEYS", args.duration), tmp)
        commands["bench"] = shown(pin(1) + bench_cmd(
            bench_bin, "PORT", os.path.join(HERE, "WORKLOAD.toml"), "RATE", "IN_FLIGHT",
            args.duration, "out.json"), tmp)
        # One preload through nutcracker fills the shared backends for every proxy.
        preload = [nc_port] + ([targets["direct"][0]] if "direct" in targets else [])
        for port in preload:
            bench_preload(bench_bin, port, os.path.join(HERE, "single.toml"))
        # Its own keys through the first tailtrim proxy (same ring; a burst of 10k noreply
        # sets through nutcracker has stalled on a loaded host).
        closed_preload(closedloop, targets[bins[0][0]][0])

        runs = []
        names = list(targets)
        for rep in range(args.reps):
            for case in chosen:
                for name in rotated(names, rep):
                    port, pid = targets[name]
                    closed = cases[case][0] == "closed"
                    if name == "direct" and closed:
                        continue
                    if closed:
                        _, conns, depth, keys = cases[case]
                        offered, in_flight = None, depth
                        m = measure(pin(1) + closed_cmd(closedloop, port, conns, depth, keys,
                                                        args.duration), pid, "proxy_cpu_s")
                    else:
                        workload, offered, in_flight = cases[case]
                        out = os.path.join(tmp, f"{rep}-{case}-{name}.json")
                        cmd = pin(1) + bench_cmd(bench_bin, port, os.path.join(HERE, workload),
                                                 offered, in_flight, args.duration, out)
                        m = measure(cmd, pid, "proxy_cpu_s", bench_out=out)
                    row = {"rep": rep, "case": case, "target": name, "offered_rps": offered,
                           "max_in_flight": in_flight, **m}
                    runs.append(row)
                    print(json.dumps(shown_row(row)), flush=True)
    finally:
        stop_all(procs)

    summary = conclude(runs, chosen, names)
    write_results(args.out, commands, args.reps, args.duration, summary, runs,
                  recorder=recorder)
    show(summary)


def conclude(runs, chosen, names):
    """The summary of `runs`: medians, ratios to nutcracker, user and system time."""
    summary = summarize(runs, chosen, names, "nutcracker",
                        ratios=(("cpu", "cpu_us_per_request"), ("user", "user_us_per_request"),
                                ("sys", "sys_us_per_request")))
    return summary


def replot(path):
    """--replot: every run's p50/p99 checked against its histogram, then the summary of
    `path` recomputed from its runs."""
    results = read_results(path)
    runs = results["runs"]
    checked = check_percentiles(runs)
    print(f"{checked} of {len(runs)} runs kept a histogram; their p50 and p99 match it")
    chosen = list(dict.fromkeys(r["case"] for r in runs))
    names = list(dict.fromkeys(r["target"] for r in runs if r["rep"] == 0))
    results["summary"] = conclude(runs, chosen, names)
    with open(path, "w") as f:
        json.dump(results, f, indent=1)
    show(results["summary"])


def show(summary):
    """The summary as a table."""
    print_summary(summary, [("cpu_ratio_to_nutcracker_median", "x nc"),
                            ("user_ratio_to_nutcracker_median", "user x nc"),
                            ("sys_ratio_to_nutcracker_median", "sys x nc")])


if __name__ == "__main__":
    sys.exit(main())
