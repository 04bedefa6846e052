#!/usr/bin/env python3
"""tailtrim proxy vs nutcracker in front of the same memcached backends, interleaved.

Starts N memcached backends, nutcracker and `tailtrim proxy` over them (same ketama ring:
hash md5, distribution ketama, so both place every key on the same backend), plus one more
memcached for the "direct" baseline. Preloads through nutcracker (and the direct server),
then for each repetition runs `tailtrim bench` against direct, nutcracker and tailtrim in
turn, at a fixed rate (added latency) and at an over-capacity rate (throughput at
saturation). Prints the median of each figure and writes all runs as JSON.

  python3 crates/proxy/scripts/bench_vs_nutcracker.py --bin target/release/tailtrim \
      --reps 5 --rate 10000 --saturation-rate 150000 --duration 5 --out /tmp/proxy-bench.json
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                "experiments"))
from harness import free_port, wait_port  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", default="target/release/tailtrim")
    parser.add_argument("--backends", type=int, default=3)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--rate", type=int, default=10000, help="fixed rate for the latency runs")
    parser.add_argument("--saturation-rate", type=int, default=150000, help="over-capacity rate")
    parser.add_argument("--duration", type=int, default=5)
    parser.add_argument("--workload", default="etc")
    parser.add_argument("--proxy-threads", default="1,2",
                        help="comma-separated tailtrim proxy thread counts, one target each")
    parser.add_argument("--out", default="proxy-bench.json")
    args = parser.parse_args()

    procs = []
    user = ["-u", "root"] if os.geteuid() == 0 else []

    def memcached():
        port = free_port()
        procs.append(subprocess.Popen(["memcached", "-l", "127.0.0.1", "-p", str(port), "-U", "0",
                                       "-m", "256", "-t", "1"] + user))
        wait_port(port)
        return port

    try:
        ports = [memcached() for _ in range(args.backends)]
        direct = memcached()
        servers = [f"127.0.0.1:{p}:1" for p in ports]
        tmp = tempfile.mkdtemp(prefix="proxy-bench-")
        nc_port, nc_stats = free_port(), free_port()
        with open(os.path.join(tmp, "nc.yml"), "w") as f:
            f.write(f"pool:\n  listen: 127.0.0.1:{nc_port}\n  hash: md5\n  distribution: ketama\n"
                    f"  timeout: 2000\n  auto_eject_hosts: false\n  servers:\n")
            for s in servers:
                f.write(f"   - {s}\n")
        procs.append(subprocess.Popen(["nutcracker", "-c", os.path.join(tmp, "nc.yml"), "-s", str(nc_stats),
                                       "-a", "127.0.0.1", "-o", os.path.join(tmp, "nc.log")]))
        wait_port(nc_port)
        targets = {"direct": direct, "nutcracker": nc_port}
        for threads in [int(t) for t in args.proxy_threads.split(",")]:
            tt_port = free_port()
            procs.append(subprocess.Popen([args.bin, "proxy", "-l", f"127.0.0.1:{tt_port}", "--admin", "off",
                                           "-s", ",".join(servers), "--hash", "md5", "--distribution", "ketama",
                                           "--timeout-ms", "2000", "-t", str(threads),
                                           # like nutcracker's auto_eject_hosts: false: overload
                                           # timeouts must not mark backends down mid-benchmark
                                           "--server-failure-limit", "1000000000"],
                                          stderr=subprocess.DEVNULL))
            wait_port(tt_port)
            targets[f"tailtrim-t{threads}"] = tt_port

        def bench(port, rate, extra):
            out = os.path.join(tmp, f"run-{port}-{rate}-{time.monotonic_ns()}.json")
            cmd = [args.bin, "bench", "-s", f"127.0.0.1:{port}", "-w", args.workload, "-r", str(rate),
                   "-d", str(args.duration), "--warmup", "1", "-q", "--json", out] + extra
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            with open(out) as f:
                return json.load(f)

        # Preload through nutcracker (same placement as tailtrim) and into the direct server.
        for port in (nc_port, direct):
            subprocess.run([args.bin, "bench", "-s", f"127.0.0.1:{port}", "-w", args.workload,
                            "--preload-only", "-q"], check=True, stdout=subprocess.DEVNULL)

        runs = []
        for rep in range(args.reps):
            for mode, rate in (("latency", args.rate), ("saturation", args.saturation_rate)):
                for name, port in targets.items():
                    result = bench(port, rate, ["--no-preload"])
                    row = {
                        "rep": rep, "mode": mode, "target": name, "rate": rate,
                        "achieved_rps": result["achieved_rps"],
                        "p50_us": result["classes"]["all"]["p50_us"],
                        "p99_us": result["classes"]["all"]["p99_us"],
                        "errors": result["errors"], "timeouts": result["timeouts"],
                        "hit_ratio": result["hit_ratio"],
                    }
                    runs.append(row)
                    print(json.dumps(row), flush=True)
        with open(args.out, "w") as f:
            json.dump(runs, f, indent=1)

        print(f"\nmedians over {args.reps} interleaved repetitions ({args.workload}, {args.duration} s runs)")
        print(f"{'mode':<11}{'target':<14}{'achieved_rps':>14}{'p50_us':>10}{'p99_us':>10}{'errors':>8}")
        for mode in ("latency", "saturation"):
            for name in targets:
                rows = [r for r in runs if r["mode"] == mode and r["target"] == name]
                med = lambda k: statistics.median(r[k] for r in rows)
                print(f"{mode:<11}{name:<14}{med('achieved_rps'):>14.0f}{med('p50_us'):>10.0f}"
                      f"{med('p99_us'):>10.0f}{sum(r['errors'] for r in rows):>8}")
        for name in [t for t in targets if t != "direct"]:
            lat = [r for r in runs if r["mode"] == "latency"]
            added = lambda q: statistics.median(
                next(r[q] for r in lat if r["target"] == name and r["rep"] == rep)
                - next(r[q] for r in lat if r["target"] == "direct" and r["rep"] == rep)
                for rep in range(args.reps))
            print(f"added vs direct at {args.rate} rps, {name}: p50 +{added('p50_us'):.0f} us, "
                  f"p99 +{added('p99_us'):.0f} us (median of per-rep differences)")
    finally:
        for p in procs:
            p.kill()
            p.wait()


if __name__ == "__main__":
    sys.exit(main())
