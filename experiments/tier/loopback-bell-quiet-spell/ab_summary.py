#!/usr/bin/env python3
"""Summarises the A/B runs in ab/<build>-<n>/results.json into ab/summary.json: per round,
`everything`'s overall p99 and CPU per request over the baseline's (memcached + nutcracker) in
the same round, and per build the medians and spreads of those ratios.

    python3 ab_summary.py   (from this folder; needs the experiments' harness: hdrh)
"""
import json, os, statistics, sys
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", ".."))
from harness import hdr_percentile  # noqa: E402

runs = sorted(d for d in os.listdir(os.path.join(HERE, "ab")) if os.path.isdir(os.path.join(HERE, "ab", d)))
rounds, builds = [], {}
for name in runs:
    build = name.rsplit("-", 1)[0]
    data = json.load(open(os.path.join(HERE, "ab", name, "results.json")))
    by_round = {}
    for run in data["runs"]:
        by_round.setdefault(run["round"], {})[run["tier"]] = run
    for number, tiers in sorted(by_round.items()):
        everything, baseline = tiers["everything"], tiers["memcached+nutcracker"]
        p99 = [hdr_percentile(t["histograms"]["all"], 99) / 1e3 for t in (everything, baseline)]
        row = {"run": name, "build": build, "round": number,
               "everything_p99_us": round(p99[0], 1), "baseline_p99_us": round(p99[1], 1),
               "p99_ratio": round(p99[0] / p99[1], 3),
               "cpu_ratio": round(everything["cpu_us_per_request"] / baseline["cpu_us_per_request"], 3),
               "disturbed": bool(everything.get("disturbed") or baseline.get("disturbed"))}
        rounds.append(row)
        builds.setdefault(build, []).append(row)
summary = {}
for build, rows in builds.items():
    p99s, cpus = [r["p99_ratio"] for r in rows], [r["cpu_ratio"] for r in rows]
    summary[build] = {"rounds": len(rows),
                      "p99_ratio_median": round(statistics.median(p99s), 3),
                      "p99_ratio_spread": round(max(p99s) - min(p99s), 3),
                      "cpu_ratio_median": round(statistics.median(cpus), 3),
                      "cpu_ratio_spread": round(max(cpus) - min(cpus), 3)}
json.dump({"rounds": rounds, "builds": summary}, open(os.path.join(HERE, "ab", "summary.json"), "w"), indent=1)
print(json.dumps(summary, indent=1))
