"""Medians of the interleaved side-by-side runs: summarize.py DIR."""
import glob
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import check_bench_report, metadata_line  # noqa: E402

runs = {}
metadata = []
checked = 0
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    name, rate, _round = os.path.basename(path)[:-5].split("-")
    report = json.load(open(path))
    checked += check_bench_report(report, path)
    if "metadata" in report:
        metadata.append(report["metadata"])
    runs.setdefault((int(rate), name), []).append(report)
    if report.get("floor"):
        runs.setdefault((int(rate), "floor"), []).append(report["floor"])
print(f"{'rate':>7} {'system':<10} {'runs':>4} {'achieved':>9} {'p50_us':>8} {'p99_us':>9} {'p999_us':>9} {'errors':>6}")
for (rate, name), reports in sorted(runs.items()):
    median = lambda key: statistics.median(r["classes"]["all"][key] for r in reports)
    achieved = statistics.median(r["achieved_rps"] for r in reports)
    errors = sum(r["errors"] for r in reports)
    print(f"{rate:>7} {name:<10} {len(reports):>4} {achieved:>9.0f} {median('p50_us'):>8.1f} "
          f"{median('p99_us'):>9.1f} {median('p999_us'):>9.1f} {errors:>6}")
print(f"p50/p99 of {checked} runs recomputed from their histograms; {metadata_line(metadata)}")
