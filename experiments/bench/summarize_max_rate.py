"""Per rate and thread count: median achieved/target, p50/p99 and bench CPU
over the repeats of max-rate.sh, and the highest rate R such that every swept
rate up to R has a median achieved rate within 1% of its target.
Usage: summarize_max_rate.py DIR [NAME...] (file prefixes, default max-rate)."""
import glob
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import check_bench_report, metadata_line  # noqa: E402

points = {}
metadata = []
checked = 0
names = sys.argv[2:] or ["max-rate"]
paths = [p for name in names for p in glob.glob(os.path.join(sys.argv[1], f"{name}-t*-r*.json"))]
for path in sorted(paths):
    threads = int(os.path.basename(path).rsplit("-", 2)[1][1:])
    document = json.load(open(path))
    if "metadata" in document:
        metadata.append(document["metadata"])
    for point in document["points"]:
        checked += check_bench_report(point, f"{path} {point['target_rps']}")
        points.setdefault((threads, int(point["target_rps"])), []).append(point)
print(f"{'threads':>7} {'target':>7} {'runs':>4} {'achieved/target':>15} {'worst':>7} "
      f"{'p50_us':>9} {'p99_us':>10} {'disp_lag_p99':>12} {'bench_cpu%':>10}")
best = {}
broken = set()
for (threads, target), runs in sorted(points.items()):
    ratios = [run["achieved_rps"] / target for run in runs]
    median = lambda pick: statistics.median(pick(run) for run in runs)
    ratio = statistics.median(ratios)
    print(f"{threads:>7} {target:>7} {len(runs):>4} {ratio:>15.4f} {min(ratios):>7.4f} "
          f"{median(lambda r: r['classes']['all']['p50_us']):>9.1f} "
          f"{median(lambda r: r['classes']['all']['p99_us']):>10.1f} "
          f"{median(lambda r: r.get('dispatch_lag', {}).get('p99_us', 0.0)):>12.1f} "
          f"{median(lambda r: r['bench_cpu_percent']):>10.0f}")
    if abs(ratio - 1.0) <= 0.01 and threads not in broken:
        best[threads] = target
    else:
        broken.add(threads)
for threads, target in sorted(best.items()):
    print(f"highest rate with median achieved within 1% of target at it and every lower "
          f"swept rate, {threads} thread(s): {target}")
print(f"p50/p99 of {checked} points recomputed from their histograms; {metadata_line(metadata)}")
