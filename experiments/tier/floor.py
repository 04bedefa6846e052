#!/usr/bin/env python3
"""The no-queueing floor of the EMULATED tier's mice p99: what no scheduler, dispatch or
planner can go below while the emulated service times stay as configured.

Reads an `experiment tier` results.json (EMULATED mode) and computes, by Monte Carlo with a
fixed seed, the p99 latency of the mice requests (1, 2, 5, 10 and 20-key gets and the 1-key
sets, weighted as the experiment's workload) if no request ever waited for another:

- each key goes to one of the servers, uniformly (ketama's split, its imbalance left out);
- each server's part of a request (an opset of c keys) takes an exponential time with the
  emulated mean `const + c × key` (the `byte` term, at most 60 µs for a small value, and the
  proxy's, the bench's and the database's time are left out, so the floor is low);
- the request ends when its slowest opset has, plus the emulated network time.

Every term left out only lowers the floor, so a measured p99 target below it is unreachable
on this testbed whatever the tier does. Writes floor.json beside the results.

    python3 experiments/tier/floor.py experiments/tier/emulated-16-quiet
"""

import json
import os
import random
import re
import sys

# The experiment's mice operations (crates/lab/src/experiments/tier.rs `workload`): keys per
# request and weight; the elephants (50 and 100 keys) are not mice.
MICE_OPERATIONS = ((1, 55.0), (2, 10.0), (5, 10.0), (10, 8.0), (20, 5.0), (1, 5.0))
SAMPLES = 400_000
SEED = 1

UNIT_US = {"ns": 0.001, "us": 1.0, "ms": 1000.0, "s": 1_000_000.0}


def term_us(spec, name):
    """The `name=VALUE` term of a cost spec in microseconds (0 if absent)."""
    found = re.search(r"(?:^|,)" + name + r"=([0-9.]+)(ns|us|ms|s)\b", spec)
    return float(found.group(1)) * UNIT_US[found.group(2)] if found else 0.0


def mice_p99_floor_us(servers, const_us, key_us, network_us, rng):
    keys = [k for k, _ in MICE_OPERATIONS]
    weights = [w for _, w in MICE_OPERATIONS]
    latencies = []
    for _ in range(SAMPLES):
        (k,) = rng.choices(keys, weights)
        per_server = {}
        for _ in range(k):
            server = rng.randrange(servers)
            per_server[server] = per_server.get(server, 0) + 1
        slowest = max(rng.expovariate(1.0 / (const_us + key_us * c)) for c in per_server.values())
        latencies.append(slowest + network_us)
    latencies.sort()
    return latencies[int(0.99 * len(latencies))]


def main(folder):
    with open(os.path.join(folder, "results.json")) as f:
        results = json.load(f)
    settings = results["settings"]
    service, network = settings["emulate_service"], settings["emulate_network"]
    if "dist=exp" not in service:
        sys.exit("floor.py models exponential service times only (dist=exp)")
    floor = mice_p99_floor_us(settings["servers"], term_us(service, "const"),
                              term_us(service, "key"), term_us(network, "const"),
                              random.Random(SEED))
    baseline = next(t for t in results["tiers"] if t["tier"] == "memcached-like")["classes"]
    out = {
        "what": "no-queueing floor of the mice p99 (floor.py): computed, not measured",
        "servers": settings["servers"],
        "emulate_service": service,
        "emulate_network": network,
        "samples": SAMPLES,
        "seed": SEED,
        "mice_p99_floor_us": round(floor, 1),
        "small_p99_target_us": round(0.2 * baseline["small"]["p99_us"], 1),
        "mice_p99_target_us": round(0.5 * baseline["mice"]["p99_us"], 1),
    }
    with open(os.path.join(folder, "floor.json"), "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "experiments/tier/emulated-16-quiet")
