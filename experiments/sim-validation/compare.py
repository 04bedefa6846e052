#!/usr/bin/env python3
"""Simulator vs testbed (EMULATED) on one cost model: the issue's three checks.

    python3 experiments/sim-validation/compare.py [--window WINDOW_RESULTS] \
        TESTBED_RESULTS[,TESTBED_RESULTS...] SIM_RESULTS [SIM_RESULTS ...]

TESTBED_RESULTS: results.json of `tailtrim experiment minos --emulate-service ...` (later
files, after commas, override a system's points, e.g. one policy rerun on a newer server; the
floor and the settings are the first file's);
SIM_RESULTS: results.json of `tailtrim sim minos --profile ...` (later files override a
policy's curve, e.g. late binding simulated with a ninth core for its dispatcher thread).

Checks, per policy, on the small requests:
  - order: policies ranked by saturation (highest achieved rps) and by small p99 at every
    offered rate up to 80 % of the simulator's estimated capacity, the same in both;
  - knee: first offered rate where small p99 exceeds the knee latency, within 10 %;
  - p99: small p99 within 25 % of the simulator's at every offered rate ≤ 80 % of capacity,
    end to end, end to end with the testbed's measured floor added to the simulator's latency
    (the distribution of their sum, assuming the two independent), and in the server; then
    the same counts over the rates ≤ 80 % of each policy's own simulated saturation;
  - with --window (window.py's results): the testbed against the simulator run with the
    testbed's measurement window (from empty, its warm-up and measured seconds), median of
    the seeds.
"""

import bisect
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import hdr_values  # noqa: E402

# Small p99s within this share of each other count as equal in the simulator.
TIE = 0.10
# Saturation rates within this share of each other count as equal in the simulator.
SATURATION_TIE = 0.05
# A point is carried when the achieved rate is at least this share of the offered one.
CARRIED = 0.97


def ms(us):
    return "–" if us is None else f"{us / 1000:.2f}"


def merged_values(encoded_histograms):
    """{value_ns: count} of several V2 histograms pooled."""
    pooled = {}
    for encoded in encoded_histograms:
        for value, count in hdr_values(encoded):
            pooled[value] = pooled.get(value, 0) + count
    return pooled


def p99_of_sum(first, second):
    """p99 (µs) of X + Y for independent X and Y given as {value_ns: count}: the least bucket
    sum t with P(X + Y <= t) >= 0.99, found by bisection over the candidate sums (P computed
    from Y's buckets and X's cumulative distribution)."""
    xs = sorted(first)
    cumulative, running = [], 0
    for value in xs:
        running += first[value]
        cumulative.append(running)
    x_total, y_total = running, sum(second.values())
    ys = sorted(second.items())

    def share_at_most(t):
        mass = 0
        for y, count in ys:
            at = bisect.bisect_right(xs, t - y)
            if at:
                mass += count * cumulative[at - 1]
        return mass / (x_total * y_total)

    low, high = xs[0] + ys[0][0], xs[-1] + ys[-1][0]
    while low < high:
        middle = (low + high) // 2
        if share_at_most(middle) >= 0.99:
            high = middle
        else:
            low = middle + 1
    return low / 1000.0


def with_floor(sim_files, floor):
    """{policy: {rate: p99 µs of simulated small latency + the testbed's floor}}, from the
    simulator's kept histograms and the floor's per-repeat histograms pooled by rate."""
    floor_values = {rate: merged_values(sample["histograms"]["small"]
                                        for sample in point.get("samples", [])
                                        if "small" in sample.get("histograms", {}))
                    for rate, point in floor.items()}
    out = {}
    for sim in sim_files:
        for curve in sim.get("histograms", []):
            for point in curve["points"]:
                rate = point["offered_rps"]
                if floor_values.get(rate):
                    out.setdefault(curve["policy"], {})[rate] = p99_of_sum(
                        merged_values([point["small"]]), floor_values[rate])
    return out


def print_window(window, tb, low):
    """The testbed's small p99 against the windowed simulations' (window.py) median."""
    by_point = {}
    for run in window["runs"]:
        by_point.setdefault((run["policy"], run["offered_rps"]), []).append(run["small_p99_us"])
    seeds = window["settings"]["seeds"]
    print(f"\n### Simulated with the testbed's window (`{window['metadata']['command']}`)\n")
    print(f"Each simulated run starts from empty and measures what one testbed repeat measures "
          f"(its warm-up, then its measured seconds); {seeds} seeds per point. Cells: testbed "
          "small p99 / the seeds' median (their range), ms.\n")
    for name in sorted({policy for policy, _ in by_point}):
        cells, within, count = [], 0, 0
        for rate in sorted(rate for policy, rate in by_point if policy == name):
            t = tb.get(name, {}).get(rate)
            if not t:
                continue
            values = by_point[(name, rate)]
            mid = statistics.median(values)
            err = (t["small_p99_us"] - mid) / mid
            if rate in low:
                count += 1
                within += abs(err) <= 0.25
            cells.append(f"{rate:.0f}: {ms(t['small_p99_us'])} / {ms(mid)} "
                         f"({ms(min(values))}–{ms(max(values))}) {err:+.0%}")
        print(f"- {name}: {within} of {count} rates ≤ 80 % within 25 %; " + "; ".join(cells))


def main():
    argv = sys.argv[1:]
    window = None
    if argv and argv[0] == "--window":
        window = json.load(open(argv[1]))
        argv = argv[2:]
    testbeds = [json.load(open(path)) for path in argv[0].split(",")]
    testbed = testbeds[0]
    sim_files = [json.load(open(path)) for path in argv[1:]]
    sims = [sim["result"] for sim in sim_files]
    capacity = sims[0]["estimated_capacity_rps"]
    knee_us = testbed["settings"]["knee_us"]
    tb = {}
    for run in testbeds:
        tb.update({s["name"]: {p["target_rps"]: p for p in s["points"] if p["valid_repeats"] > 0}
                   for s in run["systems"] if s["name"] != "floor"})
    floor = {p["target_rps"]: p for s in testbed["systems"] if s["name"] == "floor"
             for p in s["points"] if p["valid_repeats"] > 0}
    sm = {}
    for sim in sims:
        for curve in sim["curves"]:
            sm[curve["policy"]] = {p["offered_rps"]: p for p in curve["points"]}
    policies = [name for name in tb if name in sm]
    rates = testbed["settings"]["rates"]
    low = [r for r in rates if r <= 0.8 * capacity]
    print(f"Simulator's estimated capacity: {capacity:.0f} rps; rates ≤ 80 %: "
          f"{', '.join(f'{r:.0f}' for r in low)}; knee latency {knee_us / 1000:.0f} ms.\n")

    print("| offered rps | " + " | ".join(policies) + " |")
    print("|---:|" + "---:|" * len(policies))
    errors = {name: [] for name in policies}
    for rate in rates:
        cells = []
        for name in policies:
            t, s = tb[name].get(rate), sm[name].get(rate)
            if not t or not s:
                cells.append("–")
                continue
            tv, sv = t["small_p99_us"], s["small"]["p99_us"]
            err = (tv - sv) / sv
            if rate in low:
                carried = (t["achieved_rps"] >= CARRIED * rate
                           and s["achieved_rps"] >= CARRIED * rate)
                errors[name].append((rate, err, carried))
            cells.append(f"{ms(tv)} / {ms(sv)} ({err:+.0%})")
        print(f"| {rate:.0f} | " + " | ".join(cells) + " |")
    print("\nCells: testbed small p99 / simulator small p99 in ms (testbed − sim, relative).\n")

    def saturation(points):
        return max((p["achieved_rps"] for p in points.values()), default=0.0)

    tb_sat = {n: saturation(tb[n]) for n in policies}
    sm_sat = {n: saturation(sm[n]) for n in policies}
    tb_order = sorted(policies, key=lambda n: -tb_sat[n])
    sm_order = sorted(policies, key=lambda n: -sm_sat[n])
    print("### Order\n")
    print(f"- by saturation: testbed {' > '.join(f'{n} {tb_sat[n]:.0f}' for n in tb_order)}; "
          f"simulator {' > '.join(f'{n} {sm_sat[n]:.0f}' for n in sm_order)}: "
          f"**{'same' if tb_order == sm_order else 'different'}**")
    sat_agree = sat_total = 0
    for i, a in enumerate(policies):
        for b in policies[i + 1:]:
            if abs(sm_sat[a] - sm_sat[b]) <= SATURATION_TIE * min(sm_sat[a], sm_sat[b]):
                continue
            sat_total += 1
            sat_agree += (sm_sat[a] < sm_sat[b]) == (tb_sat[a] < tb_sat[b])
    print(f"- pairs of policies whose saturation the simulator separates by more than "
          f"{SATURATION_TIE:.0%}: the testbed orders **{sat_agree} of {sat_total}** the same way")
    agree = total = 0
    for rate in low:
        have = [n for n in policies if rate in tb[n] and rate in sm[n]]
        if len(have) < 2:
            continue
        for i, a in enumerate(have):
            for b in have[i + 1:]:
                sa, sb = sm[a][rate]["small"]["p99_us"], sm[b][rate]["small"]["p99_us"]
                if abs(sa - sb) <= TIE * min(sa, sb):
                    continue  # the simulator calls them equal: no order to check
                ta, tb_ = tb[a][rate]["small_p99_us"], tb[b][rate]["small_p99_us"]
                total += 1
                agree += (sa < sb) == (ta < tb_)
        t = sorted(have, key=lambda n: tb[n][rate]["small_p99_us"])
        s_ = sorted(have, key=lambda n: sm[n][rate]["small"]["p99_us"])
        print(f"- small p99 at {rate:.0f} rps: testbed {' < '.join(t)}; simulator "
              f"{' < '.join(s_)}")
    print(f"- pairs of policies the simulator orders (small p99 more than {TIE:.0%} apart) at "
          f"rates ≤ 80 %: the testbed orders **{agree} of {total}** the same way\n")

    print("### Knee (first offered rate with small p99 > knee latency)\n")
    for name in policies:
        def knee(points, key):
            return next((r for r in rates if r in points and key(points[r]) > knee_us), None)
        kt = knee(tb[name], lambda p: p["small_p99_us"])
        ks = knee(sm[name], lambda p: p["small"]["p99_us"])
        if kt is None or ks is None:
            verdict = "n/a (no knee in the sweep on one side)" if kt != ks else "no knee in either"
        else:
            verdict = f"{(kt - ks) / ks:+.0%}: {'within' if abs(kt - ks) <= 0.1 * ks else 'NOT within'} 10 %"
        fmt = lambda r: "none" if r is None else f"{r:.0f}"
        # The same from the repeats' histograms pooled (steadier near a knee than the median
        # of the repeats' p99s).
        kp = knee(tb[name], lambda p: (p.get("pooled_small") or {}).get("p99_us", 0.0))
        pooled = "" if kp is None or ks is None else (
            f"; by the pooled histograms testbed {fmt(kp)}: "
            f"{'within' if abs(kp - ks) <= 0.1 * ks else 'NOT within'} 10 %")
        print(f"- {name}: testbed {fmt(kt)}, simulator {fmt(ks)}: {verdict}{pooled}")

    print("\n### Small p99 within 25 % at ≤ 80 % load\n")
    print("End to end (the bench's latency vs the simulator's arrival → delivery; the simulator "
          "has no loopback and no bench):\n")
    for name in policies:
        within = sum(abs(e) <= 0.25 for _, e, _ in errors[name])
        worst = max(errors[name], key=lambda x: abs(x[1]), default=None)
        worst_text = f"; worst {worst[1]:+.0%} at {worst[0]:.0f} rps" if worst else ""
        carried = [(r, e) for r, e, c in errors[name] if c]
        past = len(errors[name]) - len(carried)
        past_text = ""
        if past:
            within_carried = sum(abs(e) <= 0.25 for _, e in carried)
            past_text = (f" ({past} of them past this policy's saturation, carried below "
                         f"{CARRIED:.0%} of the offered rate on one side or both; of the "
                         f"{len(carried)} carried on both, {within_carried} within 25 %)")
        print(f"- {name}: {within} of {len(errors[name])} rates within 25 %{worst_text}"
              f"{past_text}")
    readings = {"end to end": errors}
    floored = with_floor(sim_files, floor)
    if floored:
        print("\nEnd to end, with the testbed's floor added to the simulator (p99 of the "
              "simulated latency plus the floor's, drawn independently from the floor's "
              "histogram at the same offered rate, all its repeats pooled):\n")
        for name in policies:
            points = []
            for rate in low:
                t, f = tb[name].get(rate), floored.get(name, {}).get(rate)
                if not t or not f:
                    continue
                carried = (t["achieved_rps"] >= CARRIED * rate
                           and sm[name][rate]["achieved_rps"] >= CARRIED * rate)
                points.append((rate, (t["small_p99_us"] - f) / f, carried))
            readings.setdefault("end to end with the floor", {})[name] = points
            within = sum(abs(e) <= 0.25 for _, e, _ in points)
            cells = ", ".join(f"{r:.0f} {e:+.0%}{'' if c else ' (past saturation)'}"
                              for r, e, c in points)
            print(f"- {name}: {within} of {len(points)} rates within 25 % ({cells})")
    print("\nIn the server (the server's own measure, `stats sizeaware`: kernel receipt of the "
          "request → reply queued, against the simulator's arrival → delivery; neither has the "
          "loopback nor the bench):\n")
    for name in policies:
        server = []
        for rate in low:
            t, s = tb[name].get(rate), sm[name].get(rate)
            if not t or not s or not t.get("server_small_p99_us"):
                continue
            err = (t["server_small_p99_us"] - s["small"]["p99_us"]) / s["small"]["p99_us"]
            carried = (t["achieved_rps"] >= CARRIED * rate
                       and s["achieved_rps"] >= CARRIED * rate)
            server.append((rate, err, carried))
        readings.setdefault("in the server", {})[name] = server
        within = sum(abs(e) <= 0.25 for _, e, _ in server)
        cells = ", ".join(f"{r:.0f} {e:+.0%}{'' if c else ' (past saturation)'}"
                          for r, e, c in server)
        print(f"- {name}: {within} of {len(server)} rates within 25 % ({cells})")
    if floor:
        print("\nThe testbed's floor outside the server (the same bench against an in-process stub "
              "that answers every GET with a miss, measured in the same rounds), small p99 in ms: "
              + ", ".join(f"{r:.0f} rps {ms(floor[r]['small_p99_us'])}" for r in low if r in floor)
              + ".")

    print("\n### The same at ≤ 80 % of each policy's own load\n")
    print("The rates above count as ≤ 80 % of the 8 workers' capacity. A policy whose bottleneck "
          "is one worker (early binding: the hottest key's) saturates below that; its load is the "
          "offered rate over its own simulated saturation:\n")
    for name in policies:
        own = [r for r in low if r <= 0.8 * sm_sat[name]]
        counts = []
        for label, reading in readings.items():
            points = [(r, e) for r, e, _ in reading.get(name, []) if r in own]
            if points:
                counts.append(f"{label} {sum(abs(e) <= 0.25 for _, e in points)} of {len(points)}")
        print(f"- {name} (saturation {sm_sat[name]:.0f} rps; rates {', '.join(f'{r:.0f}' for r in own)}): "
              + ", ".join(counts))
    if window:
        print_window(window, tb, low)


if __name__ == "__main__":
    main()
