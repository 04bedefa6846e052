#!/usr/bin/env python3
"""Issue 30's lines read from a run folder of `experiment tailx` (`sim-v10-cover`,
`sim-v11-split`): each planner's figures over batch's (same model, seed and mix) and over
strict Rein-SBF's on every class, and the fixed work saved. Writes <folder>/lines.json and
prints a table. With --same-as OTHER, also checks that the planners named by --unchanged
reproduce OTHER's figures exactly (the runs are void otherwise) and exits 1 if not.

    python3 experiments/tailx/lines.py experiments/tailx/sim-v10-cover
    python3 experiments/tailx/lines.py experiments/tailx/sim-v11-split \
        --same-as experiments/tailx/sim-v10-cover --unchanged batch,rein-sbf,...
"""
import argparse
import json
import os
import sys

# The models a folder may hold, in this order: paper-like and default (`--workers 1
# --service ...` or the defaults); hidden-work: the paper-like model with the planners blind to
# the work in flight (`--hide-work`); keys-work: seeing keys in flight plus 3 per fetch, the
# client's and proxy's own estimate (`--work-from-keys 3`); no Rein-SBF run in either.
# keys-weighed: as keys-work, a large value counted as T_L / T_S keys (`sim-v11-split`).
MODELS = ("paper-like", "default", "hidden-work", "keys-work", "keys-weighed")
SEEDS = (1, 2, 3)
OURS = "size-rel+cover"
# Every class the results report: overall, requests without / with a large value, and (in the
# rare-elephant mix) mice and elephants.
CLASSES = ("p50_us", "p99_us", "small_p50_us", "small_p99_us", "large_p99_us",
           "mice_p50_us", "mice_p99_us", "elephant_p50_us", "elephant_p99_us")


def ratio(a, b):
    return round(a / b, 4) if a and b else None


def read(folder, model, seed):
    with open(os.path.join(folder, model, f"seed{seed}", "results.json")) as f:
        return json.load(f)


def models(folder):
    return [m for m in MODELS if os.path.isdir(os.path.join(folder, m))]


def lines(folder):
    rows = []
    for model in models(folder):
        for seed in SEEDS:
            for experiment in read(folder, model, seed)["experiments"]:
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


# The figures that must not move for a planner whose code did not change.
SAME = ("p50_us", "p99_us", "small_p99_us", "large_p99_us", "mice_p99_us", "elephant_p99_us")


def differences(folder, other, unchanged, unchanged_mixes, model_map):
    """(model, seed, mix, planner, figure, ours, theirs) wherever a planner that should have
    reproduced `other`'s run did not; `unchanged_mixes` maps a changed planner to the mixes in
    which it too must reproduce (none of the change reaches them); `model_map` maps a model
    of `folder` to the model of `other` it must reproduce (default: the same name)."""
    found, compared = [], 0
    for model in models(folder):
        theirs_model = model_map.get(model, model)
        if not os.path.isdir(os.path.join(other, theirs_model)):
            continue
        for seed in SEEDS:
            theirs = {e["experiment"]["name"]: {o["planner"]: o for o in e["outcomes"]}
                      for e in read(other, theirs_model, seed)["experiments"]}
            for experiment in read(folder, model, seed)["experiments"]:
                mix = experiment["experiment"]["name"]
                for o in experiment["outcomes"]:
                    name = o["planner"]
                    if name not in unchanged and mix not in unchanged_mixes.get(name, ()):
                        continue
                    t = theirs.get(mix, {}).get(name)
                    if t is None:
                        continue
                    for figure in SAME:
                        compared += 1
                        if o.get(figure) != t.get(figure):
                            found.append((model, seed, mix, name, figure, o.get(figure),
                                          t.get(figure)))
    return found, compared


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder")
    parser.add_argument("--same-as", help="an earlier run folder to reproduce")
    parser.add_argument("--unchanged", default="",
                        help="planners that must reproduce it (comma-separated)")
    parser.add_argument("--unchanged-in", default="",
                        help="planner:mix pairs that must reproduce it too (comma-separated)")
    parser.add_argument("--models", default="",
                        help="model:other-model pairs: a model of the folder checked against "
                        "another model of the earlier run (comma-separated; with --only-models "
                        "the others are not checked)")
    parser.add_argument("--only-models", action="store_true",
                        help="check only the models named by --models")
    args = parser.parse_args()
    folder = os.path.abspath(args.folder)
    rows = lines(folder)
    if args.same_as:
        pairs = {}
        for pair in filter(None, args.unchanged_in.split(",")):
            planner, mix = pair.split(":")
            pairs.setdefault(planner, set()).add(mix)
        model_map = dict(pair.split(":") for pair in filter(None, args.models.split(",")))
        if args.only_models:
            model_map.update({m: "-" for m in MODELS if m not in model_map})
        found, compared = differences(folder, os.path.abspath(args.same_as),
                                      set(filter(None, args.unchanged.split(","))), pairs,
                                      model_map)
        print(f"reproduced {compared - len(found)} of {compared} figures of {args.same_as}")
        for difference in found:
            print("  differs:", *difference)
        if found or not compared:
            sys.exit(1)
    with open(os.path.join(folder, "lines.json"), "w") as f:
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
