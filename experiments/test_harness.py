"""Tests of the experiments' shared Python: the HDR histogram decoder against the percentiles the
Rust harness computed from the same histograms, and the floor-added p99 of
sim-validation/compare.py against a brute-force sum. Run by scripts/test.sh."""

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
