#!/usr/bin/env python3
"""Closed-loop runs of `experiment tailx --clients N` read as ratios: each planner's p50, p99
and class p99 (the elephants' in rare-elephant, the small class's in the 20-key mixes) over
batch's of the same seed and client count, and the planner with the lowest p99 per mix, client
count and seed. Reads <folder>/clients<N>-seed<S>/results.json, writes <folder>/closed.json and
prints a table of ranges over the seeds. With --same-as OTHER --unchanged a,b: also checks
that those planners reproduce OTHER's figures exactly, and exits 1 if not.

    python3 experiments/tailx/closed.py experiments/tailx/sim-v12-closed
"""
import argparse
import json
import os
import re
import sys

CLASS = {"rare-elephant": "elephant_p99_us"}  # else small_p99_us


def ratio(a, b):
    return round(a / b, 4) if a and b else None


def read(folder):
    rows, lowest = [], []
    for name in sorted(os.listdir(folder)):
        match = re.fullmatch(r"clients(\d+)-seed(\d+)", name)
        if not match:
            continue
        clients, seed = int(match[1]), int(match[2])
        with open(os.path.join(folder, name, "results.json")) as f:
            results = json.load(f)
        for experiment in results["experiments"]:
            mix = experiment["experiment"]["name"]
            by = {o["planner"]: o for o in experiment["outcomes"]}
            batch = by["batch"]
            figure = CLASS.get(mix, "small_p99_us")
            for planner, o in by.items():
                rows.append({
                    "clients": clients, "seed": seed, "mix": mix, "planner": planner,
                    "p50_us": o["p50_us"], "p99_us": o["p99_us"],
                    "p50_x_batch": ratio(o["p50_us"], batch["p50_us"]),
                    "p99_x_batch": ratio(o["p99_us"], batch["p99_us"]),
                    "class": figure.replace("_p99_us", ""),
                    "class_p99_x_batch": ratio(o.get(figure), batch.get(figure)),
                })
            best = min(by.values(), key=lambda o: o["p99_us"])
            lowest.append({"clients": clients, "seed": seed, "mix": mix,
                           "planner": best["planner"]})
    return rows, lowest


def span(values):
    values = [v for v in values if v is not None]
    lo, hi = min(values), max(values)
    return f"{lo:.2f}" if round(hi - lo, 2) == 0 else f"{lo:.2f}–{hi:.2f}"


def check(rows, other, unchanged):
    """Prints how many figures of `unchanged` planners match `other`'s run; False if any
    differs or none was compared."""
    theirs = {(r["clients"], r["seed"], r["mix"], r["planner"]): r for r in read(other)[0]}
    compared, differing = 0, 0
    for row in rows:
        if row["planner"] not in unchanged:
            continue
        them = theirs.get((row["clients"], row["seed"], row["mix"], row["planner"]))
        if them is None:
            continue
        for figure in ("p50_us", "p99_us"):
            compared += 1
            if row[figure] != them[figure]:
                differing += 1
                print("  differs:", row["clients"], row["seed"], row["mix"], row["planner"],
                      figure, row[figure], them[figure])
    print(f"reproduced {compared - differing} of {compared} figures of {other}",
          file=sys.stderr)
    return compared > 0 and differing == 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder")
    parser.add_argument("--same-as", help="an earlier closed-loop run folder to reproduce")
    parser.add_argument("--unchanged", default="", help="planners that must reproduce it")
    args = parser.parse_args()
    folder = os.path.abspath(args.folder)
    rows, lowest = read(folder)
    if args.same_as and not check(rows, os.path.abspath(args.same_as),
                                  set(filter(None, args.unchanged.split(",")))):
        sys.exit(1)
    with open(os.path.join(folder, "closed.json"), "w") as f:
        json.dump({"rows": rows, "lowest_p99": lowest}, f, indent=1)
        f.write("\n")
    planners = sorted({r["planner"] for r in rows} - {"batch"})
    print("mix                clients  " + "  ".join(f"{p:>26}" for p in planners)
          + "  lowest p99 (seeds)")
    for mix in sorted({r["mix"] for r in rows}):
        for clients in sorted({r["clients"] for r in rows}):
            cells = []
            for planner in planners:
                mine = [r for r in rows if (r["mix"], r["clients"], r["planner"])
                        == (mix, clients, planner)]
                cells.append(f"{span([r['p50_x_batch'] for r in mine])} / "
                             f"{span([r['p99_x_batch'] for r in mine])} / "
                             f"{span([r['class_p99_x_batch'] for r in mine])}")
            best = [x["planner"] for x in sorted(lowest, key=lambda x: x["seed"])
                    if (x["mix"], x["clients"]) == (mix, clients)]
            print(f"{mix:<18} {clients:>7}  " + "  ".join(f"{c:>26}" for c in cells)
                  + "  " + ", ".join(best))


if __name__ == "__main__":
    main()
