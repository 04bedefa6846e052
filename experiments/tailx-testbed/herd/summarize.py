#!/usr/bin/env python3
"""Summarises the EMULATED herd check kept in herd/runs/ (the first design) into herd/results.md,
or with an argument, the run kept in herd/<ARG>/ (e.g. `fair`) into herd/<ARG>/results.md.

For each round: p95 (and p50, p99, achieved rate) of the busy Chisel proxy, the batch proxy
and the idle Chisel proxy, the idle/busy p95 ratio, and from the proxies' `stats` samples the
most outstanding queries on one backend and the samples in which one backend held every
outstanding query while another had none (a herd)."""
import glob
import json
import os
import re
import statistics
import sys

here = os.path.dirname(os.path.abspath(__file__))
runs = os.path.join(here, sys.argv[1] if len(sys.argv) > 1 else "runs")
results = os.path.join(runs if len(sys.argv) > 1 else here, "results.md")


def bench(path):
    with open(path) as f:
        data = json.load(f)
    every = data["classes"]["all"]
    return {
        "p50": every["p50_us"] / 1e3,
        "p95": every["p95_us"] / 1e3,
        "p99": every["p99_us"] / 1e3,
        "rate": data["achieved_rps"],
        "errors": data["errors"],
    }


def outstanding(path):
    """Per sample (time stamp), outstanding queries per backend."""
    samples = {}
    if not os.path.exists(path):
        return samples
    with open(path) as f:
        for line in f:
            m = re.match(r"(\d+) STAT backend_outstanding:(\S+) (\d+)", line)
            if m:
                samples.setdefault(m.group(1), []).append(int(m.group(3)))
    return samples


def herd(samples):
    most = max((max(v) for v in samples.values() if v), default=0)
    herded = sum(1 for v in samples.values() if sum(v) > 0 and max(v) == sum(v) and min(v) == 0)
    return most, herded, len(samples)


rows = []
ratios = []
for busy_path in sorted(glob.glob(os.path.join(runs, "round*-busy-*.json"))):
    round_no = re.search(r"round(\d+)", busy_path).group(1)
    idle_paths = glob.glob(os.path.join(runs, f"round{round_no}-idle-*.json"))
    batch_path = os.path.join(runs, f"round{round_no}-batch.json")
    if not idle_paths or not os.path.exists(batch_path):
        continue
    busy, idle, batch = bench(busy_path), bench(idle_paths[0]), bench(batch_path)
    ratio = idle["p95"] / busy["p95"]
    ratios.append(ratio)
    busy_herd = herd(outstanding(busy_path[:-5] + ".stats"))
    idle_herd = herd(outstanding(idle_paths[0][:-5] + ".stats"))
    name = lambda p: re.search(r"-(chisel-[ab])\.json", p).group(1)
    rows.append(
        f"| {round_no} | {name(busy_path)} | {busy['p50']:.0f} / {busy['p95']:.0f} / {busy['p99']:.0f} "
        f"| {batch['p50']:.0f} / {batch['p95']:.0f} / {batch['p99']:.0f} "
        f"| {name(idle_paths[0])} | {idle['p50']:.0f} / {idle['p95']:.0f} / {idle['p99']:.0f} "
        f"| {ratio:.2f} | {busy['rate']:.0f} / {batch['rate']:.0f} / {idle['rate']:.0f} "
        f"| {busy['errors']} / {batch['errors']} / {idle['errors']} "
        f"| {busy_herd[0]} / {idle_herd[0]} | {busy_herd[1]} of {busy_herd[2]} / {idle_herd[1]} of {idle_herd[2]} |"
    )

with open(os.path.join(runs, "settings.txt")) as f:
    settings = f.read().strip()
out = [
    "# EMULATED: Chisel herd check (experiments/tailx-testbed/herd/run.sh)",
    "",
    "```text",
    settings,
    "```",
    "",
    "Latencies in emulated ms (p50 / p95 / p99 of all requests, `tailtrim bench`); rates in req/s;",
    "outstanding: the most queries one backend had outstanding in any 2 s sample of the proxy's",
    "`stats`; herd samples: samples with every outstanding query on one backend and none on another.",
    "",
    "| round | busy proxy | busy p50 / p95 / p99 | batch p50 / p95 / p99 | idle proxy | idle p50 / p95 / p99 | p95 idle / busy | rates busy / batch / idle | errors | most outstanding busy / idle | herd samples busy / idle |",
    "|---|---|---|---|---|---|---|---|---|---|---|",
    *rows,
    "",
]
if ratios:
    median = statistics.median(ratios)
    verdict = "met" if 0.8 <= median <= 1.2 else "not met"
    out.append(
        f"Median over the rounds of p95(idle) / p95(busy): **{median:.2f}** "
        f"(tolerance 0.8–1.2: {verdict}); per round {', '.join(f'{r:.2f}' for r in ratios)}."
    )
text = "\n".join(out) + "\n"
with open(results, "w") as f:
    f.write(text)
sys.stdout.write(text)
