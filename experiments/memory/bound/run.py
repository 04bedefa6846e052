#!/usr/bin/env python3
"""The miss-ratio line's bound: the expected miss ratio of the best static caches under the
independent reference model for the trace of `../missratio/`, at the byte budgets of its
tailtrim runs, against memcached's measured miss ratio at the same RSS.

For every tailtrim run of --results (peak RSS R, items n, memcached's `bytes` b):
  * held:   the bytes the store's items really took, (b - 59 n) of keys and values plus
            --item-overhead (28: 20-byte record header, 8 bytes of index) per item;
  * rss:    R less the idle server's RSS (--idle-kib), all of it for items;
and the budget each order needs to miss 0.8x memcached's miss ratio at R. The calculator
(`src/main.rs`) draws the keys' sizes and probabilities from `tailtrim_bench::trace` and
`tailtrim_bench::dist::Zipf`, the replay's own generator.

    (cd experiments/memory/bound && cargo build --release)
    python3 experiments/memory/bound/run.py

Only the standard library.
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))
from harness import RunRecorder  # noqa: E402

# memcached's accounted header (`ITEM_HEADER_BYTES`, flags 0): `bytes` less this per item is
# the keys' and values' bytes.
ACCOUNTED_HEADER = 59
MIB = 1024 * 1024


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", default=os.path.join(HERE, "..", "missratio",
                                                          "results-lean.json"))
    parser.add_argument("--bin", default=os.path.join(HERE, "target", "release",
                                                      "tailtrim-missratio-bound"))
    parser.add_argument("--online-bin", default=os.path.join(HERE, "target", "release",
                                                             "online"))
    parser.add_argument("--no-online", action="store_true",
                        help="skip the online-policy replay (src/bin/online.rs)")
    parser.add_argument("--item-overhead", type=int, default=28)
    parser.add_argument("--idle-kib", type=int, default=12268,
                        help="the idle server's RSS (../fixed-overhead/idle.json, suite build)")
    parser.add_argument("--out", default=os.path.join(HERE, "results.json"))
    args = parser.parse_args()
    recorder = RunRecorder()
    with open(args.results) as source:
        measured = json.load(source)
    trace = measured["trace"]
    equal = {(row["target"], row["limit_mib"]): row for row in measured["at_equal_rss"]}
    points = []
    for run in measured["runs"]:
        row = equal.get((run["target"], run["limit_mib"]))
        if row is None:
            continue
        items = run["curr_items"]
        payload = run["bytes"] - ACCOUNTED_HEADER * items
        rss = run["max_rss_kib"] * 1024
        points.append({
            "target": run["target"], "limit_mib": run["limit_mib"], "max_rss_bytes": rss,
            "items": items, "payload_bytes": payload,
            "held_bytes": payload + args.item_overhead * items,
            "rss_less_idle_bytes": rss - args.idle_kib * 1024,
            "miss_ratio": run["miss_ratio"],
            "memcached_miss_ratio_at_rss": row["memcached_miss_ratio_at_rss"],
            "goal_miss_ratio": round(0.8 * row["memcached_miss_ratio_at_rss"], 6),
        })
    command = [args.bin, "--keys", str(trace["keys"]), "--exponent", str(trace["exponent"]),
               "--seed", str(trace["seed"]), "--max-value-bytes", str(trace["max_value_bytes"]),
               "--overhead", "0", "--overhead", str(args.item_overhead)]
    for point in points:
        command += ["--budget", str(point["held_bytes"]),
                    "--budget", str(point["rss_less_idle_bytes"]),
                    "--target", str(point["goal_miss_ratio"])]
    bound = json.loads(subprocess.run(command, check=True, capture_output=True,
                                      text=True).stdout)
    summary = {}
    for at, point in enumerate(points):
        figures = {}
        for overhead, orders in bound["overheads"].items():
            for order, result in orders.items():
                held, rss = result["at_budget"][2 * at], result["at_budget"][2 * at + 1]
                need = result["for_target"][at]["budget_bytes"]
                figures[f"{order}_{overhead}"] = {
                    "miss_at_held": round(held["miss_ratio"], 4),
                    "miss_at_rss": round(rss["miss_ratio"], 4),
                    "over_memcached_at_rss": round(
                        rss["miss_ratio"] / point["memcached_miss_ratio_at_rss"], 3),
                    "keys_at_rss": rss["keys_held"],
                    "rss_mib_for_goal": None if need is None else round(
                        (need + args.idle_kib * 1024) / MIB, 1),
                }
        summary[str(point["limit_mib"])] = {
            "rss_mib": round(point["max_rss_bytes"] / MIB, 1),
            "held_mib": round(point["held_bytes"] / MIB, 1),
            "rss_less_idle_mib": round(point["rss_less_idle_bytes"] / MIB, 1),
            "measured": round(point["miss_ratio"], 4),
            "memcached_at_rss": round(point["memcached_miss_ratio_at_rss"], 4),
            "goal": round(point["goal_miss_ratio"], 4),
            "measured_over_memcached": round(
                point["miss_ratio"] / point["memcached_miss_ratio_at_rss"], 3),
            "bounds": figures,
        }
    online = None if args.no_online else replay_online(args, measured, points, summary)
    results = {"metadata": recorder.snapshot(), "source": os.path.relpath(args.results, HERE),
               "item_overhead": args.item_overhead, "idle_kib": args.idle_kib,
               "points": points, "bound": bound, "summary": summary, "online": online}
    with open(args.out, "w") as out:
        json.dump(results, out, indent=1)
        out.write("\n")
    print(json.dumps(summary, indent=1))


def replay_online(args, measured, points, summary):
    """Whole policies replayed on the trace's own requests (`src/bin/online.rs`): at the
    store's held bytes and its RSS less the idle server's (28 bytes an item), and, for
    calibration, at memcached's accounted bytes (59 bytes an item) at each of its `-m`."""
    trace = measured["trace"]
    base = [args.online_bin, "--keys", str(trace["keys"]), "--exponent", str(trace["exponent"]),
            "--seed", str(trace["seed"]), "--max-value-bytes", str(trace["max_value_bytes"]),
            "--warmup", str(trace["warmup"]), "--requests", str(trace["requests"])]

    def run(overhead, budgets, policies=(), draws=64):
        command = base + ["--overhead", str(overhead), "--draws", str(draws)]
        for budget in budgets:
            command += ["--budget", str(budget)]
        for policy in policies:
            command += ["--policy", policy]
        return json.loads(subprocess.run(command, check=True, capture_output=True,
                                         text=True).stdout)

    budgets = []
    for point in points:
        budgets += [point["held_bytes"], point["rss_less_idle_bytes"]]
    store = run(args.item_overhead, budgets)
    memcached_runs = [r for r in measured["runs"] if r["target"] == "memcached"]
    memcached = run(ACCOUNTED_HEADER, [r["bytes"] for r in memcached_runs], ("lru", "clock"))
    for at, point in enumerate(points):
        figures = {}
        clock = store["policies"].get("clock")
        for policy, results in store["policies"].items():
            held, rss = results[2 * at], results[2 * at + 1]
            if clock is not None:
                # Read relative to the simulated store (one queue, a second chance), the
                # policy's misses applied to the store's measured ratio, over memcached's.
                relative = held["miss_ratio"] / clock[2 * at]["miss_ratio"]
                figures.setdefault("relative", {})[policy] = {
                    "over_clock_at_held": round(relative, 3),
                    "store_scaled_over_memcached": round(
                        relative * point["miss_ratio"] / point["memcached_miss_ratio_at_rss"],
                        3),
                }
            figures[policy] = {
                "miss_at_held": round(held["miss_ratio"], 4),
                "over_memcached_at_held": round(
                    held["miss_ratio"] / point["memcached_miss_ratio_at_rss"], 3),
                "over_measured_at_held": round(held["miss_ratio"] / point["miss_ratio"], 3),
                "miss_at_rss": round(rss["miss_ratio"], 4),
                "over_memcached_at_rss": round(
                    rss["miss_ratio"] / point["memcached_miss_ratio_at_rss"], 3),
            }
        summary[str(point["limit_mib"])]["online"] = figures
        summary[str(point["limit_mib"])]["cold_miss_ratio"] = round(
            store["policies"]["lru"][2 * at]["cold_miss_ratio"], 4)
    calibration = {}
    for at, run_ in enumerate(memcached_runs):
        calibration[str(run_["limit_mib"])] = {
            "measured": round(run_["miss_ratio"], 4),
            **{policy: round(results[at]["miss_ratio"], 4)
               for policy, results in memcached["policies"].items()},
            **{f"{policy}_over_measured": round(results[at]["miss_ratio"] / run_["miss_ratio"], 3)
               for policy, results in memcached["policies"].items()},
        }
    summary["memcached_calibration"] = calibration
    # Fewer held items drawn per eviction (a store would look at a few, not 64).
    held = [point["held_bytes"] for point in points]
    fewer = {draws: run(args.item_overhead, held, ("sketch_per_byte",), draws)
             for draws in (4, 16)}
    for at, point in enumerate(points):
        summary[str(point["limit_mib"])]["sketch_per_byte_draws"] = {
            str(draws): round(result["policies"]["sketch_per_byte"][at]["miss_ratio"]
                              / point["memcached_miss_ratio_at_rss"], 3)
            for draws, result in fewer.items()}
    return {"store": store, "memcached": memcached,
            "fewer_draws": {str(draws): result for draws, result in fewer.items()}}


if __name__ == "__main__":
    main()
