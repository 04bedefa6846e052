#!/usr/bin/env python3
"""`planner = "auto"` against the fixed planners on the EMULATED testbed.

Testbed (the herd check's, experiments/tailx-testbed/herd/): 4 x `tailtrim serve -t 2` with
Chisel's profile (`--emulate-service const=3.3us,key=0.6us` and `--emulate-network
const=85us,byte=45ns`, both dilated 500x), every key on each backend; one real `tailtrim
proxy` per planner over the same backends (`-r 4`, 64 connections per backend, no bound on
queries in flight, no proxy-side priority window: the backends serve the classes, as in
`tailtrim experiment tailx-testbed`): batch, batch-aa (a second batch proxy: the A/A gauge), chisel (its online
analyzer), rein-sbf, cost-rel and auto. `tailtrim bench` drives one proxy at a time, open loop
(Poisson), 512 connections with one request in flight each.

Workloads (`--workload`):
  homogeneous     8-key gets over 10 000 keys, 24-byte keys, 100-byte values, uniform
  mice-elephants  Chisel's: 1-key and 100-key gets at 9:1, same keys and values
  rare-elephants  issue 30's: 2-key and 500-key gets at 199:1, same keys and values
Rates: about 65 % of the backends' emulated worker time under batch (see RATES).

Rounds: every planner once per round (order rotated each round), `--warmup` unmeasured seconds
then `--duration` measured ones. After each run the proxy's planner gauges are read from its
`stats` (auto's choice, switches, fallbacks; chisel's fallback).

Writes emulated/<workload>.json (every run, the metadata); `--summary` reads every such file
beside this script and writes summary.json (the workloads summarised) and results.md.

    python3 experiments/auto/emulated/run.py --bin target/suite/tailtrim --workload homogeneous
    python3 experiments/auto/emulated/run.py --summary
"""

import argparse
import glob
import itertools
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))
from harness import RunRecorder, free_port, loadavg_fields, rotated, start, stop_all  # noqa: E402

DILATION = 500
SERVICE = f"const=3.3us,key=0.6us,dilation={DILATION}"
NETWORK = f"const=85us,byte=45ns,dilation={DILATION}"
BACKENDS = 4
WORKERS = 2
PLANNERS = ["batch", "batch-aa", "chisel", "rein-sbf", "cost-rel", "auto"]
FIXED = ["batch", "chisel", "rein-sbf", "cost-rel"]
GAUGE = "batch-aa"
HOMOGENEOUS_KEYS = 8
# Worker time per request under batch, emulated µs before dilation:
#   homogeneous: 8 keys on ~3.6 of the 4 backends (distinct backends of 8 uniform draws):
#     3.6 x 3.3 + 8 x 0.6 = 16.7 µs;
#   mice-elephants: 0.9 x (3.3 + 0.6) + 0.1 x (4 x 3.3 + 100 x 0.6) = 10.83 µs (the herd's).
#   rare-elephants: 0.995 x (1.75 x 3.3 + 2 x 0.6) + 0.005 x (4 x 3.3 + 500 x 0.6) = 8.53 µs.
# 4 backends x 2 workers at 65 %.
WORK_US = {"homogeneous": 16.7, "mice-elephants": 10.83, "rare-elephants": 8.53}
RATES = {name: round(0.65 * BACKENDS * WORKERS / (us * 1e-6 * DILATION))
         for name, us in WORK_US.items()}
COMMON = ["--keys", "10000", "--key-size", "24", "--value-size", "100", "-w", "chisel"]
# Chisel's built-in workload: uniform popularity, Poisson arrivals, gets only; homogeneous is
# its two operations at the same 8 keys.
WORKLOAD_FLAGS = {
    "homogeneous": COMMON + ["--mice-per-elephant", "9", "--mice-keys", str(HOMOGENEOUS_KEYS),
                             "--elephant-keys", str(HOMOGENEOUS_KEYS)],
    "mice-elephants": COMMON + ["--mice-per-elephant", "9", "--mice-keys", "1",
                                "--elephant-keys", "100"],
    # Issue 30's rare elephants (2-key gets at 99.5 %, 500-key at 0.5 %): where the simulator's
    # auto leaves batch for cost-rel.
    "rare-elephants": COMMON + ["--mice-per-elephant", "199", "--mice-keys", "2",
                                "--elephant-keys", "500"],
}
# The proxy's planner gauges kept with each run.
GAUGE_PREFIXES = ("pool_planner", "pool_auto_", "chisel_fallback", "chisel_decision",
                  "chisel_chunk_size", "chisel_merge_level")


def planner_gauges(port):
    """The proxy's planner gauges from its `stats`."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(b"stats\r\n")
        with conn.makefile("rb") as reply:
            lines = itertools.takewhile(lambda line: line not in (b"", b"END\r\n"),
                                        iter(reply.readline, None))
            fields = [line.decode().rstrip("\r\n").split(" ", 2) for line in lines]
    return {f[1]: f[2] for f in fields if len(f) == 3 and f[1].startswith(GAUGE_PREFIXES)}


def testbed(binary, directory):
    """Starts the backends and one proxy per planner; returns (processes, planner -> port)."""
    procs = []
    servers = []
    for i in range(BACKENDS):
        port = free_port()
        with open(os.path.join(directory, f"backend{i}.log"), "w") as log:
            start(procs, [binary, "serve", "-l", "127.0.0.1", "-p", str(port), "-U", "0",
                          "-t", str(WORKERS), "-m", "64", "--emulate-service", SERVICE,
                          "--emulate-network", NETWORK], port, stdout=log, stderr=log)
        servers.append(f"127.0.0.1:{port}")
    ports = {}
    for planner in PLANNERS:
        port = free_port()
        with open(os.path.join(directory, f"proxy-{planner}.log"), "w") as log:
            start(procs, [binary, "proxy", "-l", f"127.0.0.1:{port}", "--admin", "off",
                          "-s", ",".join(servers), "-r", str(BACKENDS),
                          "--planner", "batch" if planner == GAUGE else planner,
                          "-t", "1", "--query-threads", "0", "--backend-window", "0",
                          "--server-connections", "64",
                          "--timeout-ms", "60000", "--server-failure-limit", "1000000000"],
                  port, stdout=log, stderr=log)
        ports[planner] = port
    return procs, ports


def bench(binary, port, flags, extra):
    command = [binary, "bench", "-s", f"127.0.0.1:{port}", *flags, "-c", "512",
               "--max-in-flight", "1", "--drain-ms", "60000", "-q", *extra]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)


def run(args):
    recorder = RunRecorder()
    recorder.tool("tailtrim", [args.bin, "--version"])
    rate = RATES[args.workload]
    runs = []
    with tempfile.TemporaryDirectory() as directory:
        flags = WORKLOAD_FLAGS[args.workload]
        procs, ports = testbed(args.bin, directory)
        try:
            bench(args.bin, ports["batch"], flags,
                  ["--preload-only", "--preload-connections", "16"])
            for round_no in range(args.rounds):
                for planner in rotated(PLANNERS, round_no):
                    out = os.path.join(directory, "bench.json")
                    load_before = loadavg_fields()
                    bench(args.bin, ports[planner], flags,
                          ["--no-preload", "-r", str(rate), "-d", str(args.duration),
                           "--warmup", str(args.warmup), "--seed", str(args.seed + round_no),
                           "--json", out])
                    with open(out) as f:
                        result = json.load(f)
                    every = result["classes"]["all"]
                    record = {
                        "round": round_no, "planner": planner, "target_rps": rate,
                        "achieved_rps": result["achieved_rps"], "errors": result["errors"],
                        "completed": result["completed"],
                        "send_lag_p99_us": result["send_lag"]["p99_us"],
                        "dispatch_lag_p99_us": result["dispatch_lag"]["p99_us"],
                        "classes": {c: {q: v[f"{q}_us"] for q in ("p50", "p95", "p99", "p999")}
                                    for c, v in result["classes"].items() if v.get("count")},
                        "gauges": planner_gauges(ports[planner]),
                        "loadavg_before": load_before, "loadavg_after": loadavg_fields(),
                        "histogram_all": result.get("histograms", {}).get("all"),
                    }
                    runs.append(record)
                    print(json.dumps({k: v for k, v in record.items()
                                      if k not in ("histogram_all", "classes")}), file=sys.stderr)
        finally:
            stop_all(procs)
    meta = recorder.snapshot()
    meta["what"] = (f"EMULATED: auto against the fixed planners, workload {args.workload}, "
                    f"{rate} req/s offered")
    meta["command"] = "python3 experiments/auto/emulated/run.py " + " ".join(sys.argv[1:])
    with open(os.path.join(HERE, f"{args.workload}.json"), "w") as f:
        json.dump({"metadata": meta, "workload": args.workload, "rate": rate,
                   "service": SERVICE, "network": NETWORK, "runs": runs}, f, indent=1)


def p99(run_record):
    return run_record["classes"]["all"]["p99"]


def summarize_workload(data):
    runs = data["runs"]
    by_planner = {p: [r for r in runs if r["planner"] == p] for p in PLANNERS}
    medians = {p: statistics.median(p99(r) for r in rs) for p, rs in by_planner.items() if rs}
    best = min(FIXED, key=lambda p: medians[p])
    gauge = abs(medians[GAUGE] / medians["batch"] - 1)
    ratio = medians["auto"] / medians[best]
    rounds = sorted({r["round"] for r in runs})

    def in_round(planner, round_no):
        return next(r for r in by_planner[planner] if r["round"] == round_no)

    per_round = [{
        "round": k,
        "auto_over_best": p99(in_round("auto", k)) / min(p99(in_round(p, k)) for p in FIXED),
        "aa": p99(in_round(GAUGE, k)) / p99(in_round("batch", k)),
    } for k in rounds]
    last_auto = max(by_planner["auto"], key=lambda r: r["round"])["gauges"]
    return {
        "rate": data["rate"],
        "p99_us_median": medians,
        "p50_us_median": {p: statistics.median(r["classes"]["all"]["p50"] for r in rs)
                          for p, rs in by_planner.items() if rs},
        "best_fixed": best,
        "auto_over_best": ratio,
        "aa_gauge": gauge,
        "met": ratio <= 1.10,
        "resolved": gauge <= 0.10,
        "per_round": per_round,
        "auto_choice_per_round": [r["gauges"].get("pool_planner_choice")
                                  for r in sorted(by_planner["auto"], key=lambda r: r["round"])],
        "auto_gauges_end": last_auto,
        "achieved_min_share": min(r["achieved_rps"] / r["target_rps"] for r in runs),
        "behind_schedule": sum(r["achieved_rps"] < 0.95 * r["target_rps"] for r in runs),
        "errors": sum(r["errors"] for r in runs),
        "send_lag_p99_us_max": max(r["send_lag_p99_us"] for r in runs),
        "metadata": data["metadata"],
    }


def summary():
    workloads = {}
    for path in sorted(glob.glob(os.path.join(HERE, "*.json"))):
        if os.path.basename(path) == "summary.json":
            continue
        with open(path) as f:
            data = json.load(f)
        workloads[data["workload"]] = summarize_workload(data)
    with open(os.path.join(HERE, "summary.json"), "w") as f:
        json.dump({"workloads": workloads}, f, indent=1)
    lines = ["# EMULATED: auto against the fixed planners (experiments/auto/emulated/run.py)", "",
             "p99 of all requests, emulated ms, median over the rounds.", "",
             "| workload | req/s | " + " | ".join(PLANNERS) + " | best fixed | auto / best | "
             "A/A gauge | auto's choice per round | reading |",
             "|---" * (len(PLANNERS) + 7) + "|"]
    for name, w in workloads.items():
        verdict = ("met" if w["met"] else "not met") + ("" if w["resolved"] else
                                                        " (gauge > 10 %: not resolved)")
        lines.append(
            f"| {name} | {w['rate']} | "
            + " | ".join(f"{w['p99_us_median'][p] / 1e3:.1f}" for p in PLANNERS)
            + f" | {w['best_fixed']} | {w['auto_over_best']:.3f} ("
            + ", ".join(f"{r['auto_over_best']:.2f}" for r in w["per_round"])
            + f") | {w['aa_gauge']:.3f} ("
            + ", ".join(f"{r['aa']:.2f}" for r in w["per_round"])
            + f") | {', '.join(str(c) for c in w['auto_choice_per_round'])} | {verdict} |")
    lines.append("")
    for name, w in workloads.items():
        m = w["metadata"]
        lines.append(f"- {name}: {m['cpu_model']}, {m['cores']} cores, kernel {m['kernel']}, "
                     f"load average {m['load_average_start']} at the start, "
                     f"{m['load_average_end']} at the end, highest {m['load_average_max']}; "
                     f"achieved ≥ {w['achieved_min_share']:.3f} of the target, "
                     f"{w['behind_schedule']} of {len(w['per_round']) * len(PLANNERS)} runs under 95 %, "
                     f"{w['errors']} errors, send-lag p99 ≤ {w['send_lag_p99_us_max'] / 1e3:.1f} ms.")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(HERE, "results.md"), "w") as f:
        f.write(text)
    sys.stdout.write(text)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", help="the tailtrim binary")
    parser.add_argument("--workload", choices=sorted(RATES))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--summary", action="store_true", help="only summarize the kept runs")
    args = parser.parse_args()
    if args.summary:
        summary()
        return
    if not args.bin or not args.workload:
        parser.error("--bin and --workload are needed to run")
    run(args)


if __name__ == "__main__":
    main()
