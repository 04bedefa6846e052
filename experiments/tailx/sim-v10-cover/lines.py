#!/usr/bin/env python3
"""Issue 30's lines read from the sim-v10-cover runs: each planner's figures over batch's (same
model, seed and mix) and over strict Rein-SBF's on every class, and the fixed work saved.
Writes lines.json beside this script and prints a table.

    python3 experiments/tailx/sim-v10-cover/lines.py
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
# hidden-work: the paper-like model with the planners blind to the work in flight
# (`--hide-work`); keys-work: seeing keys in flight plus 3 per fetch, the client's and proxy's
# own estimate (`--work-from-keys 3`); no Rein-SBF run in either.
MODELS = ("paper-like", "default", "hidden-work", "keys-work")
SEEDS = (1, 2, 3)
OURS = "size-rel+cover"
# Every class the results report: overall, requests without / with a large value, and (in the
# rare-elephant mix) mice and elephants.
CLASSES = ("p50_us", "p99_us", "small_p50_us", "small_p99_us", "large_p99_us",
           "mice_p50_us", "mice_p99_us", "elephant_p50_us", "elephant_p99_us")


def ratio(a, b):
    return round(a / b, 4) if a and b else None


def read(model, seed):
    with open(os.path.join(HERE, model, f"seed{seed}", "results.json")) as f:
        return json.load(f)


def lines():
    rows = []
    for model in MODELS:
        for seed in SEEDS:
            for experiment in read(model, seed)["experiments"]:
                mix = experiment["experiment"]["name"]
                by = {o["planner"]: o for o in experiment["outcomes"]}
                batch, rein = by["batch"], by.get("rein-sbf", {})
                for name, o in by.items():
                    rows.append({
                        "model": model, "seed": seed, "mix": mix, "planner": name,
                        "small_p99_x_batch": ratio(o["small_p99_us"], batch["small_p99_us"]),
                        "p50_x_batch": ratio(o["p50_us"], batch["p50_us"]),
                        "p99_x_batch": ratio(o["p99_us"], batch["p99_us"]),
                        "fetches_per_request": round(o["fetches_per_request"], 3),
                        "mean_utilization": round(o["mean_utilization"], 4),
                        "max_utilization": round(o["max_utilization"], 4),
                        "x_rein_sbf": {c: ratio(o.get(c), rein.get(c)) for c in CLASSES
                                       if ratio(o.get(c), rein.get(c)) is not None},
                    })
    return rows


def main():
    rows = lines()
    with open(os.path.join(HERE, "lines.json"), "w") as f:
        json.dump({"ours": OURS, "rows": rows}, f, indent=1)
        f.write("\n")
    print("model       seed mix               planner          small p99  p50   p99  "
          "fetches  worst class × rein-sbf")
    for r in rows:
        worst = max(r["x_rein_sbf"].items(), key=lambda kv: kv[1]) if r["x_rein_sbf"] else ("", 0)
        print(f"{r['model']:<11} {r['seed']:>4} {r['mix']:<17} {r['planner']:<16} "
              f"{r['small_p99_x_batch'] or float('nan'):>8.2f} {r['p50_x_batch']:>5.2f} "
              f"{r['p99_x_batch']:>5.2f} {r['fetches_per_request']:>7.2f}  "
              f"{worst[1]:.2f} ({worst[0]})")


if __name__ == "__main__":
    main()
