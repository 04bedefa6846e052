#!/usr/bin/env python3
"""How busy each proxy's CPU was in the closed-loop cases of `run.py` results: CPU per request
times carried rate (1.0 = the proxy's pinned CPU fully used), the median over repetitions, for
this folder's run and the earlier ones it is compared with. Writes utilisation.json here.

  python3 experiments/proxy/quiet-twenty/utilisation.py
"""
import json
import os
import statistics

HERE = os.path.dirname(os.path.abspath(__file__))
RUNS = ["quiet-twenty", "future-size", "quiet-long"]
CASES = ["single-closed", "mget10-closed", "pipelined"]


def main():
    rows = []
    for run in RUNS:
        path = os.path.join(HERE, "..", run, "results.json")
        with open(path) as f:
            runs = json.load(f)["runs"]
        for case in CASES:
            for target in sorted({r["target"] for r in runs if r["case"] == case}):
                chosen = [r for r in runs if r["case"] == case and r["target"] == target]
                busy = [r["cpu_us_per_request"] * r["carried_rps"] / 1e6 for r in chosen]
                row = {"run": run, "case": case, "target": target,
                       "busy_median": round(statistics.median(busy), 3),
                       "busy_max": round(max(busy), 3), "repetitions": len(busy)}
                rows.append(row)
    # This folder's own rows are also listed under `cases` (one per case and target).
    own = [dict(r) for r in rows if r["run"] == "quiet-twenty"]
    out = {"rows": rows, "cases": own}
    with open(os.path.join(HERE, "utilisation.json"), "w") as f:
        f.write(json.dumps(out, indent=1) + "\n")
    for r in rows:
        print(f"{r['run']:13} {r['case']:14} {r['target']:11} busy {r['busy_median']:.3f} "
              f"(max {r['busy_max']:.3f}, {r['repetitions']} reps)")


if __name__ == "__main__":
    main()
