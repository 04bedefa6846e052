#!/usr/bin/env python3
"""Early binding before and after 13864d5 (one turn of the job queue per wait), real server:
per offered rate, each round's small p99 (end to end and in the server) and the median over
rounds of after / before. Reads before-N/results.json and after-N/results.json beside it.

    python3 experiments/minos/early-binding-wake/summarize.py > experiments/minos/early-binding-wake/summary.md
"""

import json
import os
import statistics

HERE = os.path.dirname(os.path.abspath(__file__))


def points(side, round_):
    with open(os.path.join(HERE, f"{side}-{round_}", "results.json")) as f:
        data = json.load(f)
    system = next(s for s in data["systems"] if s["name"] == "early-binding")
    return {p["target_rps"]: p for p in system["points"]}


def main():
    rounds = sorted(int(name.split("-")[1]) for name in os.listdir(HERE) if name.startswith("before-"))
    before = [points("before", r) for r in rounds]
    after = [points("after", r) for r in rounds]
    print("| offered rps | small p99 before (µs, rounds) | after | after / before (median; rounds) "
          "| in the server: after / before (median) |")
    print("|---:|---|---|---|---:|")
    for rate in sorted(before[0]):
        b = [p[rate] for p in before]
        a = [p[rate] for p in after]
        ratios = [y["small_p99_us"] / x["small_p99_us"] for x, y in zip(b, a)]
        server = [y["server_small_p99_us"] / x["server_small_p99_us"] for x, y in zip(b, a)
                  if x.get("server_small_p99_us") and y.get("server_small_p99_us")]
        fmt = lambda ps: ", ".join(f"{p['small_p99_us']:.0f}" for p in ps)
        print(f"| {rate:.0f} | {fmt(b)} | {fmt(a)} | {statistics.median(ratios):.2f}; "
              f"{', '.join(f'{r:.2f}' for r in ratios)} | "
              f"{statistics.median(server):.2f} |")


if __name__ == "__main__":
    main()
