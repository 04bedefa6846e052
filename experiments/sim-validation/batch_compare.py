#!/usr/bin/env python3
"""Simulator vs testbed (EMULATED) for `batch` over N servers: the issue's checks.

    python3 experiments/sim-validation/batch_compare.py RESULTS [RESULTS ...]

RESULTS: results.json of `tailtrim experiment tailx --testbed --planners batch --loads ...`
(one file per server count). Each load is one testbed measurement (its rounds' histograms
pooled) beside the cluster simulator's run of the same cost model at the same rate.

Checks, per file:
  - p99: the testbed's p99 within 25 % of the simulator's at every load <= 0.8;
  - knee: the first load at which p99 exceeds KNEE_FACTOR x the p99 at the lowest load,
    the same load (or within 10 %) on both;
  - carried: every load up to the knee carried (achieved >= 95 % of offered) on the testbed.
"""

import json
import sys

KNEE_FACTOR = 5.0


def knee(loads, p99s):
    base = p99s[0]
    for load, value in zip(loads, p99s):
        if value > KNEE_FACTOR * base:
            return load
    return None


def main():
    for path in sys.argv[1:]:
        report = json.load(open(path))
        setup = report["settings"]["setup"]
        dilation = report["settings"]["dilation"]
        rows = []
        for result in report["experiments"]:
            emulated = next(p for p in result["emulated"] if p["planner"] == "batch")
            simulated = next(p for p in result["simulated"] if p["planner"] == "batch")
            runs = [r for r in result["runs"] if r["planner"] == "batch"]
            carried = sum(r["achieved_rps"] for r in runs) / max(1, len(runs))
            rows.append({
                "experiment": result["experiment"]["name"],
                "load": result["load"],
                "offered": result["calibration"]["rate_rps"],
                "carried": carried,
                "tb_p50": emulated["p50_us"], "tb_p99": emulated["p99_us"],
                "sim_p50": simulated["p50_us"], "sim_p99": simulated["p99_us"],
            })
        meta = report["metadata"]
        print(f"## {setup['servers']} servers × {setup['workers_per_server']} workers "
              f"(`{path}`)\n")
        print(f"Dilation {dilation:g}; latencies in emulated ms. Load average "
              f"{meta['load_average_start']} at the start, {meta['load_average_end']} at the end "
              f"(highest {meta['load_average_max']:.1f}); commit {meta['commit'][:7]}"
              f"{' (dirty)' if meta['dirty'] else ''}.\n")
        print("| experiment | load | offered rps | carried rps | p50 testbed / sim | "
              "p99 testbed / sim | p99 error |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for row in rows:
            err = (row["tb_p99"] - row["sim_p99"]) / row["sim_p99"]
            row["err"] = err
            print(f"| {row['experiment']} | {row['load']:.2f} | {row['offered']:.0f} | "
                  f"{row['carried']:.0f} | {row['tb_p50'] / 1e3:.2f} / {row['sim_p50'] / 1e3:.2f} | "
                  f"{row['tb_p99'] / 1e3:.2f} / {row['sim_p99'] / 1e3:.2f} | {err:+.0%} |")
        for experiment in sorted({r["experiment"] for r in rows}):
            mine = sorted((r for r in rows if r["experiment"] == experiment),
                          key=lambda r: r["load"])
            loads = [r["load"] for r in mine]
            low = [r for r in mine if r["load"] <= 0.8 + 1e-9]
            within = sum(abs(r["err"]) <= 0.25 for r in low)
            tb_knee = knee(loads, [r["tb_p99"] for r in mine])
            sim_knee = knee(loads, [r["sim_p99"] for r in mine])
            if tb_knee is None or sim_knee is None:
                knee_ok = tb_knee == sim_knee
            else:
                knee_ok = abs(tb_knee - sim_knee) <= 0.1 * sim_knee + 1e-9
            short = [r["load"] for r in mine
                     if (sim_knee is None or r["load"] < sim_knee)
                     and r["carried"] < 0.95 * r["offered"]]
            print(f"\n{experiment}: p99 within 25 % at {within} of {len(low)} loads ≤ 0.8; "
                  f"knee (p99 > {KNEE_FACTOR:g}× the lowest load's) testbed "
                  f"{tb_knee if tb_knee is not None else 'none'}, simulator "
                  f"{sim_knee if sim_knee is not None else 'none'}: "
                  f"{'within 10 %' if knee_ok else 'NOT within 10 %'}; loads below the "
                  f"simulator's knee not carried on the testbed: "
                  f"{', '.join(f'{l:g}' for l in short) if short else 'none'}.")
        print()


if __name__ == "__main__":
    main()
