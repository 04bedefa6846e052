#!/usr/bin/env python3
"""Summarizes experiments/chisel/run.sh output: per scenario, the median over rounds of mean
and p95 (all requests, mice, elephants) for batch and chisel, and chisel's gain over batch
(1 - chisel/batch, in %). Writes results.json and results.md next to the runs.

Runs written by a `tailtrim bench` that keeps its histograms and metadata (`--json`) have
their p95s recomputed from the histograms (a mismatch with the report fails), and results.json
keeps each run's histograms and metadata and the run's metadata as a whole (`metadata`: the
first run's machine and build, the earliest start, the highest load average). Running it again
on the same folder is the replot."""
import json
import pathlib
import statistics
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from harness import hdr_percentile  # noqa: E402

CLASSES = (("all", ""), ("mice", "mice_"), ("elephant", "elephant_"))


def checked_p95(report, klass):
    """The class's p95 (µs) from the report, checked against its histogram when kept."""
    reported = report["classes"].get(klass, {}).get("p95_us", 0.0)
    encoded = report.get("histograms", {}).get(klass)
    if encoded is None:
        return reported
    recomputed = hdr_percentile(encoded, 95.0) / 1000.0
    if abs(recomputed - reported) > 1e-6:
        raise SystemExit(f"{klass} p95 {reported} µs but its histogram says {recomputed}")
    return recomputed


def merged_metadata(meta, runs):
    """The run as a whole: meta.json's command and each bench run's metadata merged."""
    kept = [r["metadata"] for rs in runs.values() for s in rs.values() for r in s
            if "metadata" in r]
    if not kept:
        return None
    kept.sort(key=lambda m: m["started_utc"])
    first = kept[0]
    return {
        "command": meta.get("command", ""),
        "commit": first["commit"],
        "dirty": any(m["dirty"] for m in kept),
        "build": sorted({m.get("build", "") for m in kept}),
        "cpu_model": first["cpu_model"],
        "cores": first["cores"],
        "kernel": first["kernel"],
        "started_utc": first["started_utc"],
        "last_run_started_utc": kept[-1]["started_utc"],
        "load_average_start": first["load_average_start"],
        "load_average_end": kept[-1]["load_average_end"],
        "load_average_max": max(m["load_average_max"] for m in kept),
        "steal_percent": statistics.mean(m["steal_percent"] for m in kept),
        "runs_with_metadata": len(kept),
    }


out = pathlib.Path(sys.argv[1])
meta = json.loads((out / "meta.json").read_text())
runs = {}
for path in sorted(out.glob("A*-*.json")):
    if path.name.endswith(".load.json"):
        continue
    name = path.stem
    scenario, system, _round = name.rsplit("-", 2)
    report = json.loads(path.read_text())
    report = report.get("report", report)
    classes = report["classes"]
    load = json.loads((out / f"{name}.load.json").read_text())["loadavg"]
    run = {}
    for klass, prefix in CLASSES:
        run[f"{prefix}mean_us"] = classes.get(klass, {}).get("mean_us", 0.0)
        run[f"{prefix}p95_us"] = checked_p95(report, klass)
    run.update(achieved_rps=report["achieved_rps"], errors=report["errors"])
    run["loadavg"] = load
    if "metadata" in report:
        run["metadata"] = report["metadata"]
        run["histograms"] = {k: v for k, v in report.get("histograms", {}).items()
                             if k in dict(CLASSES)}
    runs.setdefault(scenario, {}).setdefault(system, []).append(run)
rows = []
for scenario, systems in runs.items():
    if "batch" not in systems or "chisel" not in systems:
        continue
    med = {
        system: {key: statistics.median(r[key] for r in rs) for key in rs[0]
                 if key not in ("loadavg", "metadata", "histograms")}
        for system, rs in systems.items()
    }
    gain = lambda key: 100.0 * (1.0 - med["chisel"][key] / med["batch"][key]) if med["batch"][key] else 0.0
    rows.append(
        {
            "scenario": scenario,
            "batch": med["batch"],
            "chisel": med["chisel"],
            "gain_mean_pct": gain("mean_us"),
            "gain_p95_pct": gain("p95_us"),
            "runs": systems,
        }
    )
summary = {
    "scenarios": len(rows),
    "mean_gain_mean_pct": statistics.mean(r["gain_mean_pct"] for r in rows) if rows else 0.0,
    "mean_gain_p95_pct": statistics.mean(r["gain_p95_pct"] for r in rows) if rows else 0.0,
    "worst_gain_p95_pct": min((r["gain_p95_pct"] for r in rows), default=0.0),
}
document = {"meta": meta, "summary": summary, "rows": rows}
metadata = merged_metadata(meta, runs)
if metadata is not None:
    document["metadata"] = metadata
(out / "results.json").write_text(json.dumps(document, indent=1))
lines = [
    f"{summary['scenarios']} scenarios, mean gain on the mean {summary['mean_gain_mean_pct']:.1f} %, "
    f"on the p95 {summary['mean_gain_p95_pct']:.1f} %, worst p95 gain {summary['worst_gain_p95_pct']:.1f} %",
    "",
    "| scenario (A µs, mice keys, mice/elephant, overhead µs) | batch mean | chisel mean | gain | batch p95 | chisel p95 | gain | batch mice p95 | chisel mice p95 | batch eleph. p95 | chisel eleph. p95 |",
    "|---|---|---|---|---|---|---|---|---|---|---|",
]
for r in rows:
    b, c = r["batch"], r["chisel"]
    lines.append(
        f"| {r['scenario']} | {b['mean_us']:.0f} | {c['mean_us']:.0f} | {r['gain_mean_pct']:.1f} % "
        f"| {b['p95_us']:.0f} | {c['p95_us']:.0f} | {r['gain_p95_pct']:.1f} % "
        f"| {b['mice_p95_us']:.0f} | {c['mice_p95_us']:.0f} | {b['elephant_p95_us']:.0f} | {c['elephant_p95_us']:.0f} |"
    )
(out / "results.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
