#!/usr/bin/env python3
"""summary.json of the stall hunt's run folders: per run, the latency maximum and the number
of requests over 20 and 100 ms (decoded from the experiment's histograms); per folder, the
probes' late answers, the zero-window probe timers seen, the allocator trims timed and the
kernel's TCP counters.

    summarize.py FOLDER...   (run from this folder; writes summary.json)
"""

import glob
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from harness import hdr_values  # noqa: E402

COUNTERS = ["TcpRetransSegs", "TcpExtTCPLossProbes", "TcpExtTCPToZeroWindowAdv",
            "TcpExtTCPFromZeroWindowAdv", "TcpExtTCPWantZeroWindowAdv", "TcpExtTCPZeroWindowDrop",
            "TcpExtTCPBacklogDrop", "TcpExtTCPRcvQDrop", "TcpExtPruneCalled"]


def runs_of(results):
    out = []
    for run in json.load(open(results))["runs"]:
        values = hdr_values(run["histograms"]["all"])
        out.append({
            "tier": run["tier"],
            "round": run["round"],
            "requests": run["requests"],
            "max_ms": round(values[-1][0] / 1e6, 2),
            "over_20ms": sum(n for v, n in values if v > 20e6),
            "over_100ms": sum(n for v, n in values if v > 100e6),
        })
    return out


def hiccups(path, name):
    """The late wake-ups (ms) in the folder's hiccup logs called `name`, and the steal ticks
    at the last one logged (or at the meter's end)."""
    gaps, steal = [], 0
    for log in glob.glob(os.path.join(path, "**", name), recursive=True):
        for line in open(log):
            words = line.split()
            if words[0] == "gap":
                gaps.append(float(words[2]))
                steal = max(steal, int(words[4]))
            elif words[0] == "done":
                steal = max(steal, int(words[4]))
    return gaps, steal


def folder(path):
    runs, probes, slow, persist, counters = [], 0, [], set(), {}
    for results in sorted(glob.glob(os.path.join(path, "**", "results.json"), recursive=True)):
        runs += runs_of(results)
    for log in glob.glob(os.path.join(path, "**", "probe.log"), recursive=True):
        for line in open(log):
            words = line.split()
            if words[0] == "probe":
                probes += 1
            elif words[0] == "slow":
                slow.append(float(words[3]))
    for log in glob.glob(os.path.join(path, "**", "persist.log"), recursive=True):
        for line in open(log):
            if "persist" in line:
                words = line.split()
                persist.add((log, words[2], words[3]))
    for stat in glob.glob(os.path.join(path, "**", "nstat.txt"), recursive=True):
        for line in open(stat):
            words = line.split()
            if words and words[0] in COUNTERS:
                counters[words[0]] = counters.get(words[0], 0) + int(words[1])
    gaps, steal = hiccups(path, "hiccup.log")
    rt_gaps, _ = hiccups(path, "hiccup-rt.log")
    trims = []
    for log in glob.glob(os.path.join(path, "**", "trim", "*.log"), recursive=True):
        trims += [float(line.split()[2]) for line in open(log)]
    tailtrim = [run for run in runs if run["tier"] != "memcached+nutcracker"]
    return {
        "folder": os.path.basename(path.rstrip("/")),
        "runs": runs,
        "tailtrim_runs": len(tailtrim),
        "tailtrim_runs_over_100ms": sum(1 for run in tailtrim if run["over_100ms"]),
        "runs_total": len(runs),
        "runs_over_50ms": sum(1 for run in runs if run["max_ms"] > 50),
        "tailtrim_runs_over_20ms": sum(1 for run in tailtrim if run["over_20ms"]),
        "max_ms": max(run["max_ms"] for run in runs),
        "server_probe_connections": probes,
        "probe_answers_over_15ms": len(slow),
        "probe_slowest_ms": max(slow, default=0.0),
        "persist_timer_connections": len(persist),
        "host_hiccups_over_20ms": len(gaps),
        "host_hiccups_over_50ms": sum(1 for gap in gaps if gap > 50),
        "host_hiccup_max_ms": max(gaps, default=0.0),
        "host_steal_ticks": steal,
        "rt_meter": bool(glob.glob(os.path.join(path, "**", "hiccup-rt.log"), recursive=True)),
        "rt_hiccups_over_20ms": len(rt_gaps),
        "rt_hiccup_max_ms": max(rt_gaps, default=0.0),
        "tcp_counters": counters,
        "allocator_trims": len(trims),
        "allocator_trim_max_ms": max(trims, default=0.0),
    }


def main():
    summary = {"folders": [folder(path) for path in sys.argv[1:]]}
    with open("summary.json", "w") as out:
        json.dump(summary, out, indent=1)
        out.write("\n")
    for entry in summary["folders"]:
        print({k: v for k, v in entry.items() if k != "runs"})


if __name__ == "__main__":
    main()
