#!/usr/bin/env python3
"""The simulator run with the testbed's measurement window (SIMULATED).

    python3 experiments/sim-validation/window.py TESTBED_RESULTS SIM_RESULTS --out FILE
        [--policies early-binding] [--seeds 21] [--bin target/release/tailtrim]

A testbed point starts from an empty server (the previous point drained), warms up for
`warmup_s` and measures `max(duration_s, min_requests / rate)` seconds. The simulator's
curves (SIM_RESULTS) are steady state: 200 000 requests per point, the first 10 % left out.
Near a bottleneck's capacity a queue takes longer than the testbed's few seconds to reach its
steady state (at utilisation ρ its relaxation time is of the order of S / (1 − √ρ)², about
2 s for 5 ms of service at ρ = 0.9), so the two measure different things there. This runs
`tailtrim sim minos --json` once per seed and rate with the testbed's window (requests =
rate × (warm-up + measured seconds), warm-up share = warm-up / total), the rest of its command
taken from SIM_RESULTS's recorded command, and keeps each run's small-request p99, its
histogram and its metadata. `compare.py --window FILE` compares the testbed with the median
of these runs.
"""

import argparse
import json
import os
import re
import shlex
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import RunRecorder  # noqa: E402

# Options of the steady-state command that this script sets itself.
REPLACED = {"--rates", "-n", "--requests", "--warmup", "--seed", "--out", "--policies", "--json",
            "-q", "--quiet"}
FLAGS = {"--serialize-connections", "--large-workers-help", "--service-dispersion", "-q",
         "--quiet", "--json"}


def sim_arguments(command):
    """The arguments of a recorded `tailtrim sim minos ...` command without the ones in
    REPLACED (and their values)."""
    words = shlex.split(command)
    start = words.index("minos") + 1
    out, i = [], start
    while i < len(words):
        word = words[i]
        name = word.split("=", 1)[0]
        takes_value = name not in FLAGS and "=" not in word and word.startswith("-")
        if name in REPLACED:
            i += 2 if takes_value else 1
            continue
        out.append(word)
        if takes_value and i + 1 < len(words):
            out.append(words[i + 1])
            i += 1
        i += 1
    return out


def window(settings, rate):
    """(warm-up seconds, measured seconds) of a testbed point at `rate`."""
    measured = max(settings["duration_s"], settings.get("min_requests", 0) / rate)
    return settings["warmup_s"], measured


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("testbed")
    parser.add_argument("sim")
    parser.add_argument("--out", required=True)
    parser.add_argument("--policies", default="early-binding")
    parser.add_argument("--seeds", type=int, default=21)
    parser.add_argument("--rates", help="comma separated (default: the testbed's)")
    parser.add_argument("--bin", default="target/release/tailtrim")
    args = parser.parse_args()
    recorder = RunRecorder()
    recorder.tool("tailtrim", [args.bin, "--version"])
    testbed = json.load(open(args.testbed))
    sim = json.load(open(args.sim))
    settings = testbed["settings"]
    rates = ([float(r) for r in args.rates.split(",")] if args.rates else settings["rates"])
    base = sim_arguments(sim["metadata"]["command"])
    runs = []
    for rate in rates:
        warmup_s, measured_s = window(settings, rate)
        requests = round(rate * (warmup_s + measured_s))
        share = warmup_s / (warmup_s + measured_s)
        for seed in range(1, args.seeds + 1):
            command = [args.bin, "sim", "minos", *base, "--policies", args.policies,
                       "--rates", f"{rate:g}", "-n", str(requests), "--warmup", f"{share:.6f}",
                       "--seed", str(seed), "--json", "-q"]
            got = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                 text=True, check=True)
            result = json.loads(got.stdout)
            histograms = {h["policy"]: h["points"][0] for h in result["histograms"]}
            for curve in result["result"]["curves"]:
                point = curve["points"][0]
                runs.append({
                    "policy": curve["policy"],
                    "offered_rps": rate,
                    "seed": seed,
                    "requests": requests,
                    "warmup_share": share,
                    "achieved_rps": point["achieved_rps"],
                    "small_p99_us": point["small"]["p99_us"],
                    "small_histogram": histograms[curve["policy"]]["small"],
                    "command": re.sub(r"^\S*/", "", shlex.join(command)),
                    "build": result["metadata"].get("build", ""),
                })
        print(f"{rate:g} rps: {args.seeds} seeds, {requests} requests, warm-up share "
              f"{share:.3f}", file=sys.stderr)
    out = {
        "experiment": "sim-validation-window",
        "metadata": recorder.snapshot(),
        "settings": {"testbed": args.testbed, "sim": args.sim, "policies": args.policies,
                     "seeds": args.seeds, "rates": rates, "base_arguments": base},
        "runs": runs,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
