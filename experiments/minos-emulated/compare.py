#!/usr/bin/env python3
"""Testbed (EMULATED) vs simulator, side by side, for experiments/minos-emulated.

Reads results.json (tailtrim experiment minos --emulate-service ...) and sim/results.json
(tailtrim sim minos --profile sim-profile.json ...), plus sim/late-binding-9-cores/results.json
(late binding with 8 workers and a dispatcher core, as the testbed runs it), and prints the
markdown tables and acceptance checks of README.md.

    python3 experiments/minos-emulated/compare.py > experiments/minos-emulated/comparison.md

An optional argument names another testbed file (e.g. a superseded run's results.json, relative
to this folder or absolute) to set beside the same simulator runs.
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
POLICIES = ["size-aware", "early-binding", "stealing", "late-binding"]


def load(*parts):
    with open(os.path.join(HERE, *parts)) as f:
        return json.load(f)


def ms(us):
    return "–" if us is None else f"{us / 1000:.1f}"


def main():
    testbed = load(sys.argv[1] if len(sys.argv) > 1 else "results.json")
    sim = load("sim", "results.json")["result"]
    late9 = load("sim", "late-binding-9-cores", "results.json")["result"]
    tb = {s["name"]: {p["target_rps"]: p for p in s["points"] if p["valid_repeats"] > 0}
          for s in testbed["systems"]}
    sm = {c["policy"]: {p["offered_rps"]: p for p in c["points"]} for c in sim["curves"]}
    sm["late-binding (9 cores)"] = {p["offered_rps"]: p for p in late9["curves"][0]["points"]}
    rates = testbed["settings"]["rates"]
    knee_us = testbed["settings"]["knee_us"]

    def table(title, cell, late9_cell=None):
        """One table: a row per offered rate, a column per policy (`cell(testbed, sim)` of a
        rate's points), and late binding on 9 cores last when `late9_cell` is given."""
        extra = [] if late9_cell is None else ["late-binding sim, 9 cores"]
        print(title)
        print("| offered rps | " + " | ".join(POLICIES + extra) + " |")
        print("|---:|" + "---:|" * (len(POLICIES) + len(extra)))
        for rate in rates:
            cells = [cell(tb.get(name, {}).get(rate), sm.get(name, {}).get(rate))
                     for name in POLICIES]
            if late9_cell is not None:
                cells.append(late9_cell(sm["late-binding (9 cores)"].get(rate)))
            print(f"| {rate:.0f} | " + " | ".join(cells) + " |")

    table("## Small-request p99 (ms): testbed end to end / testbed in-server / simulator\n",
          lambda t, s: f"{ms(t and t['small_p99_us'])} / {ms(t and t['server_small_p99_us'])}"
                       f" / {ms(s and s['small']['p99_us'])}",
          lambda s9: ms(s9 and s9["small"]["p99_us"]))
    table("\n## Large-request p99 (ms): testbed end to end / simulator\n",
          lambda t, s: f"{ms(t and t['large_p99_us'])} / {ms(s and s['large']['p99_us'])}")
    table("\n## Achieved throughput (rps): testbed / simulator\n",
          lambda t, s: (f"{t['achieved_rps']:.0f}" if t else "–")
                       + (f" / {s['achieved_rps']:.0f}" if s else " / –"))

    print(f"\n## Acceptance (knee: early binding's small p99 > {knee_us / 1000:.0f} ms)\n")
    for label, points, key in [
        ("testbed, end to end", tb, lambda p: p["small_p99_us"]),
        ("testbed, in-server", tb, lambda p: p["server_small_p99_us"]),
        ("simulator", sm, lambda p: p["small"]["p99_us"]),
    ]:
        early, size_aware = points.get("early-binding", {}), points.get("size-aware", {})
        knee = next((r for r in rates if r in early and key(early[r]) is not None
                     and key(early[r]) > knee_us), None)
        sat = {name: max((p["achieved_rps"] for p in points.get(name, {}).values()), default=0)
               for name in POLICIES}
        ratio_sat = sat["size-aware"] / sat["early-binding"] if sat["early-binding"] else None
        ratio_steal = sat["size-aware"] / sat["stealing"] if sat["stealing"] else None
        if knee is None or knee not in size_aware:
            print(f"- {label}: no knee in the sweep")
        else:
            e, s = key(early[knee]), key(size_aware[knee])
            ratio = e / s if s else float("inf")
            verdict = "met" if ratio >= 10 else "NOT met"
            print(f"- {label}: knee at {knee:.0f} rps; early binding {ms(e)} ms vs size-aware "
                  f"{ms(s)} ms small p99: **{ratio:.1f}x** (≥ 10x: {verdict})")
        sat_text = ", ".join(f"{n} {v:.0f}" for n, v in sat.items())
        verdict = "met" if ratio_sat is not None and ratio_sat >= 0.95 else "NOT met"
        print(f"  - saturation (highest achieved rps): {sat_text}; size-aware / early binding "
              f"**{ratio_sat:.2f}x** (≥ 0.95x: {verdict})")
        if ratio_steal is not None:
            verdict = "met" if ratio_steal >= 0.95 else "NOT met"
            print(f"  - size-aware / stealing **{ratio_steal:.2f}x** (≥ 0.95x: {verdict})")


if __name__ == "__main__":
    main()
