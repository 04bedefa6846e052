"""Tests of the experiments' shared Python: the HDR histograms read through the hdrhistogram
package against the percentiles the Rust harness computed from the same histograms, the
floor-added p99 of sim-validation/compare.py against a brute-force sum, and that every
measurement kept under experiments/ carries its run records (metadata and latency histograms).
Run by scripts/test.sh."""

import fnmatch
import json
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "sim-validation"))

from harness import hdr_percentile, hdr_values  # noqa: E402
from compare import p99_of_sum  # noqa: E402


def recorded_samples():
    """(histogram, {percentile: µs}) of every repeat kept in the minos testbed run."""
    with open(os.path.join(HERE, "sim-validation", "testbed", "results.json")) as f:
        results = json.load(f)
    for system in results["systems"]:
        for point in system["points"]:
            for sample in point.get("samples", []):
                encoded = sample.get("histograms", {}).get("all")
                if encoded:
                    summary = sample["all"]
                    yield encoded, {50.0: summary["p50_us"], 99.0: summary["p99_us"],
                                    99.9: summary["p999_us"], 100.0: summary["max_us"]}


def test_percentiles_match_the_rust_harness():
    checked = 0
    for encoded, expected in recorded_samples():
        for percentile, micros in expected.items():
            assert abs(hdr_percentile(encoded, percentile) / 1000.0 - micros) < 1e-6
            checked += 1
    assert checked > 500


def test_bucket_values_count_every_sample():
    for encoded, _ in list(recorded_samples())[:20]:
        values = hdr_values(encoded)
        assert values == sorted(values)
        top = hdr_percentile(encoded, 100.0)
        assert values[-1][0] == top


def test_p99_of_a_sum_matches_every_pair():
    rng = random.Random(7)
    for _ in range(30):
        first = {rng.randrange(1, 5000): rng.randrange(1, 50) for _ in range(rng.randrange(1, 40))}
        second = {rng.randrange(1, 900): rng.randrange(1, 50) for _ in range(rng.randrange(1, 40))}
        pairs = sorted((a + b, ca * cb) for a, ca in first.items() for b, cb in second.items())
        total, running = sum(w for _, w in pairs), 0
        for value, weight in pairs:
            running += weight
            if running >= 0.99 * total:
                break
        assert p99_of_sum(first, second) == value / 1000.0


# The metadata every measurement file carries: the fields the Rust harness's `RunMetadata`
# (crates/lab/src/meta.rs), `tailtrim bench --json` and harness.py's `RunRecorder` all write.
RECORD_FIELDS = ("command", "commit", "dirty", "cpu_model", "cores", "kernel", "started_utc",
                 "load_average_start", "load_average_end", "load_average_max")

# JSON files under experiments/ that are not measurements, by path pattern (relative to
# experiments/, fnmatch syntax: `*` matches `/` too) with the reason. A superseded run without records does not go
# here: it leaves the tree and its README names the commit that holds it.
NOT_MEASUREMENTS = (
    ("model/*.json", "analytic model output (`tailtrim model ... --json`): computed, not "
     "measured; the commands are in model/README.md"),
    ("*sim-profile.json", "the simulator's cost-model input (what `tailtrim sim --profile` reads)"),
    ("chisel/*/meta.json", "chisel/run.sh's settings for summarize.py; each run's report "
     "beside it carries the metadata"),
    ("chisel/*/*.load.json", "chisel/run.sh's load-average note for summarize.py; the run's "
     "report beside it has the same reading in its metadata"),
    ("tier/*/floor.json", "the no-queueing floor tier/floor.py computes from a run's settings: "
     "computed, not measured"),
    ("soak/*/*/target.json", "scripts/soak.sh's target settings (rate, minutes, memory), "
     "written before the load"),
    ("proxy/unheld-fetches/profile.json", "callgrind and strace counts per request gathered by "
     "the folder's profile.sh and self-costs.py (counts, not a timed run); host and builds in "
     "the file, command in the README"),
    ("proxy/backend-kind/bench-cpu.json", "the proxy's CPU per request from /proc over the "
     "folder's cpu.sh rounds and its traced read counts (no latency recorded); host and command "
     "in the file"),
    ("proxy/unheld-fetches/ratios.json", "ratios derived from the folder's results.json"),
    ("tailx/sim-*/lines.json", "issue 30's lines as ratios, derived from the folder's "
     "results.json files by experiments/tailx/lines.py"),
    ("tailx/sim-*/closed.json", "closed-loop ratios, derived from the folder's "
     "results.json files by experiments/tailx/closed.py"),
    ("throughput/sampled-stamps/callgrind.json", "callgrind instruction counts per request "
     "(experiments/throughput/callgrind.sh), not a timed run; command and builds in the README"),
    ("throughput/sampled-stamps/strace.json", "strace -c system-call counts per request, not a "
     "timed run; command in the README"),
    ("throughput/syscall-costs/results.json", "per-call kernel costs from the folder's "
     "syscalls.c micro-benchmark (medians of rounds); command and host in the README"),
    ("proxy/connection-choice/avoid-slow/callgrind.json", "callgrind instruction counts per "
     "request by connection choice (the folder's callgrind.sh), not a timed run; command in the "
     "README"),
    ("proxy/connection-choice/avoid-slow/syscalls.json", "strace -c system-call counts per "
     "request by connection choice (the folder's syscalls.py), not a timed run"),
    ("proxy/connection-choice/avoid-slow/skips-debug.json", "the proxy's avoid-slow skip "
     "counters read from its stats (the folder's skips.py), a count, not a timed run"),
    ("proxy/one-connection/syscalls.json", "system-call counts per request by connection "
     "count (connection-choice/avoid-slow/syscalls.py), not a timed run; command in the README"),
    ("tier/loopback-bell-quiet-spell/threads.json", "wake-ups and per-thread CPU time per "
     "request of one server (the folder's threads.py; no latency recorded); host and command in "
     "the README"),
    ("tier/loopback-asleep-threads/threads.json", "wake-ups and per-thread CPU time per request "
     "of one server (loopback-bell-quiet-spell/threads.py; no latency recorded); command in the "
     "README"),
    ("tier/loopback-proxy-cost/*.json", "the proxy's CPU, context switches and system-call "
     "counts per request by setting (the folder's proxy.py; no latency recorded); host in the "
     "file, command in the README"),
    ("tier/loopback-proxy-cost/*/*.json", "the proxy's CPU and callgrind instruction counts per "
     "request by setting and build (the folder's proxy.py; no latency recorded); command in the "
     "README"),
    ("tier/loopback-bell-quiet-spell/ab/summary.json", "ratios derived from the A/B runs' "
     "results.json beside it (the folder's ab_summary.py)"),
    ("proxy/*/ratios.json", "per-repetition ratios and sign counts derived from the "
     "results.json beside it (proxy/ratios.py)"),
    ("proxy/quiet-twenty/utilisation.json", "each proxy's CPU busy share derived from the "
     "results.json of this and earlier runs (the folder's utilisation.py)"),
    ("proxy/future-size/callgrind-*.json", "callgrind instruction counts and simulated cache "
     "misses per request (proxy/callgrind.sh), not a timed run; command in the README"),
    ("tier/loopback-size-aware-edge/counts*.json", "strace -c counts and wake-ups per request "
     "of one server (the folder's count.py): counts, not a timed run; command in the README"),
    ("memory/fixed-overhead/idle.json", "an idle server's /proc/PID/smaps breakdown (no load, "
     "nothing timed); command in the file"),
    ("memory/frequency/results.json", "hit ratios of the store alone (hit_ratio.rs) under a "
     "frequency filter not kept; base commit and command in the file, the patch beside it"),
    ("memory/bound/window.json", "the store-shaped eviction choices replayed by the bound's "
     "deterministic calculator (src/bin/online.rs): computed, not measured; command in the README"),
    ("memory/evict/results.json", "hit ratios of the store alone (hit_ratio.rs) and callgrind "
     "instruction counts of eviction by reads per byte, not kept: counts, not a timed run; "
     "commits and commands in the file, the patch beside it"),
)

# Measurements of something other than latency, by path pattern with the reason: they carry the
# run records (RECORD_FIELDS) but no latency histogram.
NO_LATENCY = (
    ("memory/*.json", "items held and resident memory (experiments/memory/run.py): no request "
     "is timed"),
)

# A summary.json (scripts/soak.sh's, scripts/chaos.sh's) is the folder's table, not a
# measurement: it is exempt only while the folder holds the runs it summarizes, with records.
SUMMARY = "summary.json"


def _nodes(value):
    """`value` and every value nested in it."""
    yield value
    if isinstance(value, dict):
        value = value.values()
    if not isinstance(value, (str, bytes)) and hasattr(value, "__iter__"):
        for item in value:
            yield from _nodes(item)


def has_histogram(data):
    """An HDR V2 histogram (base64, so "HIST..."), or the closed-loop generator's `histogram_us`
    pairs (every latency at three significant digits, as an HDR histogram keeps it)."""
    return any((isinstance(v, str) and v.startswith("HIST"))
               or (isinstance(v, dict) and v.get("histogram_us")) for v in _nodes(data))


def missing_records(data, timed=True):
    """What `data` lacks of its run records, as a list of phrases (empty: complete); an
    untimed measurement (`timed=False`, see NO_LATENCY) needs no latency histogram."""
    missing = []
    metadata = data.get("metadata") if isinstance(data, dict) else None
    if not isinstance(metadata, dict):
        missing.append("no metadata")
    else:
        absent = [field for field in RECORD_FIELDS if field not in metadata]
        if absent:
            missing.append("metadata without " + ", ".join(absent))
    if timed and not has_histogram(data):
        missing.append("no latency histogram")
    return missing


def unrecorded_measurements(root=HERE):
    """[(path relative to root, what it lacks)] of every JSON under root that is a measurement
    without its records."""
    found, summaries, recorded_dirs = [], [], set()
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in ("__pycache__", "target"))
        for name in sorted(files):
            if not name.endswith(".json"):
                continue
            path = os.path.relpath(os.path.join(folder, name), root)
            if any(fnmatch.fnmatch(path, pattern) for pattern, _ in NOT_MEASUREMENTS):
                continue
            if name == SUMMARY:
                summaries.append(path)
                continue
            with open(os.path.join(root, path)) as f:
                timed = not any(fnmatch.fnmatch(path, pattern) for pattern, _ in NO_LATENCY)
                missing = missing_records(json.load(f), timed)
            if missing:
                found.append((path, "; ".join(missing)))
            else:
                recorded_dirs.add(os.path.dirname(path))
    for path in summaries:
        folder = os.path.dirname(path)
        if not any(d == folder or d.startswith(folder + os.sep) for d in recorded_dirs):
            found.append((path, "a summary beside no recorded runs"))
    return sorted(found)


def test_every_measurement_carries_its_records():
    found = unrecorded_measurements()
    by_folder = {}
    for path, what in found:
        by_folder.setdefault((os.path.dirname(path), what), []).append(os.path.basename(path))
    lines = [f"  {folder}/: {len(names)} file(s), {what} (e.g. {names[0]})"
             for (folder, what), names in sorted(by_folder.items())]
    if found:
        raise AssertionError(f"{len(found)} measurement files without their records:\n"
                             + "\n".join(lines))


def test_the_records_check_can_fail():
    assert missing_records({"runs": [{"p99_us": 1.0}]}) == ["no metadata", "no latency histogram"]
    absent = [field for field in RECORD_FIELDS if field != "commit"]
    assert missing_records({"metadata": {"commit": "abc"}, "histogram_us": "7:2"}) == [
        "metadata without " + ", ".join(absent)]
    complete = {"metadata": dict.fromkeys(RECORD_FIELDS, ""), "runs": [{"h": "HISTFAAAA"}]}
    assert missing_records(complete) == []
    # An untimed measurement (NO_LATENCY) needs its records but no histogram.
    assert missing_records({"runs": [{"rss_kib": 1}]}, timed=False) == ["no metadata"]
    assert missing_records({"metadata": dict.fromkeys(RECORD_FIELDS, "")}, timed=False) == []


def test_ratios_count_each_side_and_resolve_only_past_the_rule():
    from importlib import util
    spec = util.spec_from_file_location("ratios", os.path.join(HERE, "proxy", "ratios.py"))
    ratios = util.module_from_spec(spec)
    spec.loader.exec_module(ratios)
    line = ratios.sign_line([0.9, 0.95, 1.02, 0.97, 0.99, 0.98, 0.96, 0.94, 1.1, 0.93], True, 8)
    assert line["right_side"] == 8 and line["met"] and line["resolved"]
    line = ratios.sign_line([0.9, 1.05, 1.02, 0.97, 0.99, 0.98, 0.96, 0.94, 1.1, 0.93], True, 8)
    assert line["right_side"] == 7 and line["met"] and not line["resolved"]
    # A rate line: higher is the right side; seven below 1.0 is not yet resolved against it.
    line = ratios.sign_line([0.9, 0.95, 1.02, 0.97, 0.99, 0.98, 0.96, 1.04, 1.1, 1.03], False, 8)
    assert line["right_side"] == 4 and not line["met"] and not line["resolved"]
    line = ratios.sign_line([0.9, 0.95, 0.92, 0.97, 0.99, 0.98, 0.96, 0.94, 1.1, 1.03], False, 8)
    assert line["right_side"] == 2 and line["resolved"]
