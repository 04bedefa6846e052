#!/usr/bin/env python3
"""Per-repetition ratios of a `run.py` result, with sign counts (the sign-test readings).

For every case: each target's CPU per request over nutcracker's in the same repetition (and,
closed loop, its carried rate over nutcracker's), and with `--pair NEW/BASE` the CPU per
request of NEW over BASE; the median of each ratio and how many repetitions fall at or below
1.0 (CPU) or at or above 1.0 (rate). A line is "resolved" when `--resolve` (default 8) or more
repetitions fall on one side of 1.0.

  python3 experiments/proxy/ratios.py experiments/proxy/future-size/results.json \\
      --pair new/base --out experiments/proxy/future-size/ratios.json
"""
import argparse
import json
import statistics
import sys

CLOSED = {"single-closed", "mget10-closed", "pipelined"}


def sign_line(ratios, good_below, resolve):
    """Median, per-repetition values and sign counts of one list of ratios."""
    below = sum(1 for r in ratios if r <= 1.0)
    above = sum(1 for r in ratios if r >= 1.0)
    right = below if good_below else above
    wrong = len(ratios) - right
    return {
        "median": round(statistics.median(ratios), 4),
        "ratios": [round(r, 4) for r in ratios],
        "right_side": right,
        "met": (statistics.median(ratios) <= 1.0) if good_below else (statistics.median(ratios) >= 1.0),
        "resolved": right >= resolve or wrong >= resolve,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results")
    parser.add_argument("--pair", help="NEW/BASE: CPU per request of NEW over BASE")
    parser.add_argument("--resolve", type=int, default=8)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    runs = json.load(open(args.results))["runs"]
    by = {}
    for run in runs:
        by.setdefault(run["case"], {}).setdefault(run["rep"], {})[run["target"]] = run
    cases = []
    for case, reps in by.items():
        targets = sorted({t for rep in reps.values() for t in rep if t != "nutcracker"})
        entry = {"case": case}
        for target in targets:
            both = [r for r in reps.values() if target in r and "nutcracker" in r]
            cpu = [r[target]["cpu_us_per_request"] / r["nutcracker"]["cpu_us_per_request"] for r in both]
            entry[f"{target}_cpu_over_nutcracker"] = sign_line(cpu, True, args.resolve)
            if case in CLOSED:
                rate = [r[target]["carried_rps"] / r["nutcracker"]["carried_rps"] for r in both]
                entry[f"{target}_rate_over_nutcracker"] = sign_line(rate, False, args.resolve)
        if args.pair:
            new, base = args.pair.split("/")
            both = [r for r in reps.values() if new in r and base in r]
            cpu = [r[new]["cpu_us_per_request"] / r[base]["cpu_us_per_request"] for r in both]
            entry[f"{new}_cpu_over_{base}"] = sign_line(cpu, True, args.resolve)
            if case in CLOSED:
                rate = [r[new]["carried_rps"] / r[base]["carried_rps"] for r in both]
                entry[f"{new}_rate_over_{base}"] = sign_line(rate, False, args.resolve)
        cases.append(entry)
    out = {"source": args.results.rsplit("/", 1)[-1], "resolve": args.resolve, "cases": cases}
    text = json.dumps(out, indent=1)
    if args.out:
        open(args.out, "w").write(text + "\n")
    for entry in cases:
        for key, line in entry.items():
            if key == "case":
                continue
            print(f"{entry['case']:14} {key:32} median {line['median']:.3f}  right side {line['right_side']}/{len(line['ratios'])}"
                  f"  {'met' if line['met'] else 'not met'}{', resolved' if line['resolved'] else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
