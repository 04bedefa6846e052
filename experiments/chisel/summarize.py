#!/usr/bin/env python3
"""Summarizes experiments/chisel/run.sh output: per scenario, the median over rounds of mean
and p95 (all requests, mice, elephants) for batch and chisel, and chisel's gain over batch
(1 - chisel/batch, in %). Writes results.json and results.md next to the runs."""
import json
import pathlib
import statistics
import sys

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
    runs.setdefault(scenario, {}).setdefault(system, []).append(
        {
            "mean_us": classes["all"]["mean_us"],
            "p95_us": classes["all"]["p95_us"],
            "mice_mean_us": classes.get("mice", {}).get("mean_us", 0.0),
            "mice_p95_us": classes.get("mice", {}).get("p95_us", 0.0),
            "elephant_mean_us": classes.get("elephant", {}).get("mean_us", 0.0),
            "elephant_p95_us": classes.get("elephant", {}).get("p95_us", 0.0),
            "achieved_rps": report["achieved_rps"],
            "errors": report["errors"],
            "loadavg": load,
        }
    )
rows = []
for scenario, systems in runs.items():
    if "batch" not in systems or "chisel" not in systems:
        continue
    med = {
        system: {key: statistics.median(r[key] for r in rs) for key in rs[0] if key != "loadavg"}
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
(out / "results.json").write_text(json.dumps({"meta": meta, "summary": summary, "rows": rows}, indent=1))
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
