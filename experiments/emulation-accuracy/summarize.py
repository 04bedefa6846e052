#!/usr/bin/env python3
"""Markdown table of experiments/emulation-accuracy/results.json (median over repeats)."""

import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from harness import hdr_percentile  # noqa: E402
from run import server_figures  # noqa: E402


def check_bench_percentiles(runs):
    """Recomputes each run's bench p50/p99/p99.9 and the server's overshoot and latency
    percentiles from the kept histograms; exits on a mismatch. Returns how many runs kept
    them."""
    checked = 0
    for run in runs:
        encoded = run.get("bench_histograms", {}).get("all")
        if not encoded:
            continue
        for label, percentile in (("p50", 50.0), ("p99", 99.0), ("p999", 99.9)):
            value = hdr_percentile(encoded, percentile) / 1000.0
            if abs(value - run["bench_latency_us"][label]) > 1e-6:
                sys.exit(f"run {run['workers']}/{run['requested_us']}/{run['utilisation']}: bench "
                         f"{label} {run['bench_latency_us'][label]} but its histogram says {value}")
        if "server_histograms" in run and server_figures(run["server_histograms"]) != {
                key: run[key] for key in ("overshoot_us", "server_latency_us")}:
            sys.exit(f"run {run['workers']}/{run['requested_us']}/{run['utilisation']}: the "
                     "server's figures differ from its histograms")
        checked += 1
    return checked


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "results.json")
    with open(path) as f:
        data = json.load(f)
    runs = data["runs"]
    keys = sorted({(r["utilisation"], r["requested_us"], r["workers"]) for r in runs})
    print("| utilisation | requested | workers | rate (rps) | holds | hold overshoot p50 | p99 "
          "| server latency p50 (p50 − requested) | bench p50 | bench p99 | load avg (1 min) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    med = statistics.median
    for util, requested, workers in keys:
        group = [r for r in runs if (r["utilisation"], r["requested_us"], r["workers"])
                 == (util, requested, workers)]
        server_p50 = med(r["server_latency_us"]["p50"] for r in group)
        loads = [x for r in group for x in (r["loadavg_before"][0], r["loadavg_after"][0])]
        print(f"| {util:.0%} | {requested} µs | {workers} | {med(r['rate'] for r in group):.0f} "
              f"| {sum(r['holds'] for r in group)} "
              f"| {med(r['overshoot_us']['p50'] for r in group):.1f} µs "
              f"| {med(r['overshoot_us']['p99'] for r in group):.1f} µs "
              f"| {server_p50:.0f} µs (+{server_p50 - requested:.0f}) "
              f"| {med(r['bench_latency_us']['p50'] for r in group):.0f} µs "
              f"| {med(r['bench_latency_us']['p99'] for r in group):.0f} µs "
              f"| {min(loads):.1f}–{max(loads):.1f} |")
    n = len({r["repeat"] for r in runs})
    checked = check_bench_percentiles(runs)
    print(f"\n{len(runs)} runs, median of {n} repeat(s) per row; holds summed over repeats; "
          f"the percentiles of {checked} runs recomputed from their histograms.")


if __name__ == "__main__":
    main()
