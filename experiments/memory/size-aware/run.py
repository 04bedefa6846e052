#!/usr/bin/env python3
"""Size-aware retention on the store alone: `crates/store/examples/hit_ratio.rs` for each
retention rule at each budget (the same seeded trace for all), and each rule's misses over
`every`'s (today's second chance).

    cargo build --profile suite -p tailtrim-store --example hit_ratio
    python3 experiments/memory/size-aware/run.py --bin target/suite/examples/hit_ratio

The rules are the example's words (`every`, `up-to:B`, `proportional:B`, `per-read:B`,
`decaying:B`); `every` is always run. Only the standard library.
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))
from harness import RunRecorder  # noqa: E402

RULES = ["up-to:256", "up-to:512", "up-to:1024", "proportional:256", "proportional:512",
         "proportional:1024", "per-read:256", "per-read:512", "per-read:1024",
         "decaying:18446744073709551615", "decaying:512"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin", required=True)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=5_000_000)
    parser.add_argument("--budgets", default="16,32,64")
    parser.add_argument("--rules", default=",".join(RULES))
    parser.add_argument("--out", default=os.path.join(HERE, "results.json"))
    args = parser.parse_args()
    recorder = RunRecorder()
    budgets = args.budgets.split(",")
    runs = {}
    for rule in ["every"] + [rule for rule in args.rules.split(",") if rule != "every"]:
        got = subprocess.run([args.bin, str(args.keys), str(args.requests), *budgets, rule],
                             check=True, capture_output=True, text=True).stdout
        for line in got.splitlines():
            fields = dict(field.split("=", 1) for field in line.split())
            runs.setdefault(rule, {})[fields["budget_mib"]] = {
                "hit_ratio": float(fields["hit_ratio"]), "items": int(fields["items"]),
                "evictions": int(fields["evictions"])}
        print(rule, runs[rule], flush=True)
    misses = {
        rule: {budget: round((1 - run["hit_ratio"]) / (1 - runs["every"][budget]["hit_ratio"]), 3)
               for budget, run in by_budget.items()}
        for rule, by_budget in runs.items() if rule != "every"}
    results = {"metadata": recorder.snapshot(),
               "trace": {"keys": args.keys, "requests": args.requests, "budgets_mib": budgets},
               "runs": runs, "summary": {"misses_over_every": misses}}
    with open(args.out, "w") as out:
        json.dump(results, out, indent=1)
        out.write("\n")


if __name__ == "__main__":
    main()
