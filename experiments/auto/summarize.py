#!/usr/bin/env python3
"""Reads experiments/auto's runs (one `sim cluster --json` per workload, planner and seed) and
writes summary.json (the records check's name for a summary beside recorded runs) and
results.md: the p99 per planner (median of the seeds), auto's ratio to the best fixed
planner's, and auto's choice at the end of each run."""
import json
import statistics
import sys
from pathlib import Path

WORKLOADS = ["homogeneous", "etc", "mice-elephants", "heavy-values", "rare-elephants"]
CHOICES = ["batch", "chisel", "cost-rel"]
BOUND = 1.10


def main(directory: Path) -> None:
    runs = {}
    for path in sorted(directory.glob("*-seed*.json")):
        stem = path.stem
        name, seed = stem.rsplit("-seed", 1)
        workload = next(w for w in WORKLOADS if name.startswith(w + "-"))
        planner = name[len(workload) + 1:]
        result = json.loads(path.read_text())["results"][0]
        entry = {
            "p50_us": result["overall"]["summary"]["p50_us"],
            "p99_us": result["overall"]["summary"]["p99_us"],
            "p999_us": result["overall"]["summary"]["p999_us"],
        }
        gauges = result.get("planner_gauges")
        if gauges:
            entry["choice"] = CHOICES[int(gauges["auto_choice"])]
            entry["switches"] = int(gauges["auto_switches"])
            entry["fallbacks"] = int(gauges["auto_fallbacks"])
            entry["epochs"] = int(gauges["auto_epochs"])
            entry["costly_share"] = gauges["auto_costly_share"]
            entry["queue"] = gauges["auto_queue"]
        runs.setdefault(workload, {}).setdefault(planner, {})[int(seed)] = entry
    summary = {}
    lines = [
        "| workload | " + " | ".join(["batch", "chisel", "rein-sbf", "cost-rel", "auto"])
        + " | best fixed | auto / best | auto's choice (seeds) | met |",
        "|---" * 10 + "|",
    ]
    for workload in WORKLOADS:
        planners = runs.get(workload, {})
        if not planners:
            continue
        median = {
            planner: statistics.median(run["p99_us"] for run in seeds.values())
            for planner, seeds in planners.items()
        }
        fixed = {p: v for p, v in median.items() if p != "auto"}
        best = min(fixed, key=fixed.get)
        ratio = median["auto"] / fixed[best]
        per_seed = [
            planners["auto"][seed]["p99_us"]
            / min(planners[p][seed]["p99_us"] for p in fixed)
            for seed in sorted(planners["auto"])
        ]
        choices = [planners["auto"][seed]["choice"] for seed in sorted(planners["auto"])]
        summary[workload] = {
            "p99_us_median": median,
            "best_fixed": best,
            "auto_over_best": ratio,
            "auto_over_best_per_seed": per_seed,
            "met": ratio <= BOUND,
            "runs": planners,
        }
        cells = [f"{median.get(p, float('nan')):.1f}" for p in ["batch", "chisel", "rein-sbf", "cost-rel", "auto"]]
        lines.append(
            f"| {workload} | " + " | ".join(cells)
            + f" | {best} | {ratio:.3f} ({', '.join(f'{r:.3f}' for r in per_seed)}) | "
            + f"{', '.join(choices)} | {'met' if ratio <= BOUND else 'NOT met'} |"
        )
    (directory / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    (directory / "results.md").write_text(
        "p99 µs, median of the seeds (SIMULATED); auto / best: the medians' ratio, then per seed\n\n"
        + "\n".join(lines) + "\n"
    )
    print((directory / "results.md").read_text())


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "sim"))
