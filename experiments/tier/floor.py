#!/usr/bin/env python3
"""The no-waiting floor of every class of the EMULATED tier: the p99 a request of each class
would have if no request ever waited for another, while the emulated times stay as configured.
Computed, not measured: no scheduler, dispatch, planner or connection choice goes below it.

Reads an `experiment tier` results.json (EMULATED mode) and draws, by Monte Carlo with a fixed
seed, the experiment's own workload (crates/lab/src/experiments/tier.rs `workload`: the minos
preset with gets of 1, 2, 5, 10, 20, 50 and 100 keys weighted 55/10/10/8/5/1/1 and 5 % sets;
0.5 % of the keys from a pool of `large_keys` values sized uniform 100–500 KB, the others from
`keys` ETC-sized values truncated at 1 499 B; zipf 0.99 in each pool; each key's value size the
bench's own, `WorkloadSpec::value_len`, reproduced here bit for bit). Each request's time with
no waiting:

- a get: its keys go to the servers uniformly (ketama's split; the server joining half way
  counted: half the requests over one server more). Each server's part is an opset whose
  emulated service is `const + keys × key + bytes × byte` (bytes: the values it returns) and
  whose reply is held the emulated network time `const + key + bytes × byte`; the request ends
  with its slowest opset. Two floors:
  * `planned`: one opset per server (what `batch` plans, and every planner for the mice);
  * `split`: whatever a planner does, a server's part may run as at most `workers` opsets in
    parallel (one per worker), so it takes at least `const + max(largest key's term, sum of
    its key terms / min(keys, workers))` plus the network time. This is the bound of the
    verdict: no tier goes below it.
- a set: the cache-aside write first waits the database (`db_latency`), then one set of its
  value to one server (service `const + key + value bytes × byte`, then the network time).

With `dist=fixed` every term is exact; with `dist=exp` each opset's service is the mean times
an exponential draw (`planned` only: a split's draws have no simple bound, so `split` is null).

Left out, each only lowering the floor: the proxy's and the bench's own time and the real
loopback legs (bench ↔ proxy, proxy ↔ server); the bytes of the reply's headers (`VALUE`
lines, keys, `END`) and of a set's command line; every miss (a get that misses waits the
database and stores the value: the warm-up tiers have almost none); the sleeps' overshoot;
ketama's unequal shares (a busiest server holds more keys, not fewer, on average).

Writes floor.json beside the results (or `--out PATH`): per class the two floors' p99; for the
classes of issue 33's lines the target (the factor times `memcached-like`'s measured p99), the
bound's ratio to it and the share of the class whose no-waiting time alone exceeds it, by kind
(sets, gets holding a large value, other gets; over 1 % and the line is out of reach); the
bound over every tier's measured p99 (one minus it: the most of that p99 that is waiting); and
the room between the best single mechanism's overall p99 and the bound, beside the A/A gauge.

    python3 experiments/tier/floor.py experiments/tier/emulated-16-fixed
"""

import bisect
import itertools
import json
import math
import os
import random
import re
import sys

SAMPLES = 1_000_000
SEED = 1

# crates/bench/src/workload.rs and crates/lab/src/experiments/tier.rs, as they stand.
KEY_SEED = 0x7A11_7A11
MAX_VALUE_BYTES = 1_000_000
MIN_VALUE_BYTES = 24  # crates/bench/src/cacheaside.rs: shorter values are stretched
LARGE_SHARE = 0.005
LARGE_VALUE = (100_000.0, 500_000.0)
ZIPF_EXPONENT = 0.99
GETS = ((1, 55.0), (2, 10.0), (5, 10.0), (10, 8.0), (20, 5.0), (50, 1.0), (100, 1.0))
SET_WEIGHT = 5.0
# Facebook ETC value sizes as mutilate models them (crates/bench/src/dist.rs etc_value_size).
ETC_TABLE = (0.00536, 0.00047, 0.17820, 0.09239, 0.00018, 0.02740, 0.00065, 0.00606, 0.00023,
             0.00837, 0.00837, 0.08989, 0.00092, 0.00326, 0.01980)
ETC_TAIL = (15.0, 214.476, 0.348238)  # generalized Pareto: location, scale, shape

# The acceptance lines' factors against the memcached-like tier (issue 33).
TARGETS = {"all": 0.7, "small": 0.2, "mice": 0.5, "elephant": 1.1}
CLASSES = ("all", "small", "large", "mice", "elephant")
BASELINE = "memcached-like"
EVERYTHING = "everything"

UNIT_US = {"ns": 0.001, "us": 1.0, "ms": 1000.0, "s": 1_000_000.0}
MASK = (1 << 64) - 1


def duration_us(text):
    found = re.fullmatch(r"([0-9.]+)(ns|us|ms|s)", text.strip())
    if not found:
        sys.exit(f"floor.py: cannot read the duration {text!r}")
    return float(found.group(1)) * UNIT_US[found.group(2)]


def cost_spec(spec):
    """A cost spec's terms in µs (const, key, byte) and its dispersion."""
    terms = dict(part.split("=", 1) for part in spec.replace(" ", "").split(",") if part)
    known = {"const", "key", "byte", "dist", "dilation"}
    if set(terms) - known:
        sys.exit(f"floor.py models only {sorted(known)}, not {sorted(set(terms) - known)}")
    dilation = float(terms.get("dilation", "1"))
    return {
        "const": duration_us(terms.get("const", "0ns")) * dilation,
        "key": duration_us(terms.get("key", "0ns")) * dilation,
        "byte": duration_us(terms.get("byte", "0ns")) * dilation,
        "dist": terms.get("dist", "fixed"),
    }


# --- each key's value size, as the bench gives it ---------------------------------------------

def splitmix64(state):
    state = (state + 0x9E37_79B9_7F4A_7C15) & MASK
    mixed = state
    mixed = ((mixed ^ (mixed >> 30)) * 0xBF58_476D_1CE4_E5B9) & MASK
    mixed = ((mixed ^ (mixed >> 27)) * 0x94D0_49BB_1331_11EB) & MASK
    return state, mixed ^ (mixed >> 31)


def hash_unit(seed, a, b, c):
    state = seed ^ ((a * 0xD6E8_FEB8_6659_FD93) & MASK)
    state, _ = splitmix64(state)
    state ^= (b * 0xA076_1D64_78BD_642F) & MASK
    state, _ = splitmix64(state)
    state ^= (c * 0xE703_7ED1_A0B4_28DB) & MASK
    _, bits = splitmix64(state)
    return (bits >> 11) * (1.0 / (1 << 53))


def gpd_quantile(u):
    location, scale, shape = ETC_TAIL
    return location + scale * ((1.0 - u) ** -shape - 1.0) / shape


def gpd_cdf(x):
    location, scale, shape = ETC_TAIL
    if x <= location:
        return 0.0
    base = 1.0 + shape * (x - location) / scale
    return 1.0 - base ** (-1.0 / shape)


def etc_quantile(u):
    mass = sum(ETC_TABLE)
    if u >= mass:
        return gpd_quantile(min((u - mass) / (1.0 - mass), 1.0 - 1e-12))
    cumulative = 0.0
    for size, weight in enumerate(ETC_TABLE):
        cumulative += weight
        if u < cumulative:
            return float(size)
    return float(len(ETC_TABLE) - 1)


def etc_cdf(x):
    below = sum(w for size, w in enumerate(ETC_TABLE) if size <= x)
    return below + (1.0 - sum(ETC_TABLE)) * gpd_cdf(x)


def round_half_away(x):
    return math.floor(x + 0.5) if x >= 0 else -math.floor(-x + 0.5)


def value_len(pool, key_id, threshold):
    """`WorkloadSpec::value_len`: pool 0 ETC truncated at the threshold, pool 1 uniform."""
    u = hash_unit(KEY_SEED, pool, key_id, 1)
    if pool == 0:
        drawn = min(etc_quantile(u * etc_cdf(threshold)), float(threshold))
    else:
        drawn = LARGE_VALUE[0] + (LARGE_VALUE[1] - LARGE_VALUE[0]) * u
    return min(int(max(round_half_away(drawn), 0.0)), MAX_VALUE_BYTES)


# --- the workload ------------------------------------------------------------------------------

class Workload:
    def __init__(self, settings):
        threshold = settings["large_threshold_bytes"]
        self.threshold = threshold
        self.elephant_min_keys = settings["elephant_min_keys"]
        self.pools = []
        for pool, keys in enumerate((settings["keys"], settings["large_keys"])):
            weights = [k ** -ZIPF_EXPONENT for k in range(1, keys + 1)]
            self.pools.append({
                "cumulative": list(itertools.accumulate(weights)),
                "sizes": [value_len(pool, i, threshold) for i in range(keys)],
            })
        self.operations = [("get", k, w) for k, w in GETS] + [("set", 1, SET_WEIGHT)]
        self.op_cumulative = list(itertools.accumulate(w for _, _, w in self.operations))

    def draw_key(self, rng):
        pool = 1 if rng.random() < LARGE_SHARE else 0
        cumulative = self.pools[pool]["cumulative"]
        return pool, bisect.bisect_right(cumulative, rng.random() * cumulative[-1])

    def draw(self, rng):
        """(kind, value sizes of its distinct keys), as `RequestGenerator::next_operation`."""
        index = bisect.bisect_right(self.op_cumulative, rng.random() * self.op_cumulative[-1])
        kind, wanted, _ = self.operations[index]
        keys, attempts = [], 0
        while len(keys) < wanted:
            key = self.draw_key(rng)
            attempts += 1
            if key not in keys or attempts > wanted * 20:
                keys.append(key)
        return kind, [self.pools[p]["sizes"][i] for p, i in keys]

    def classes(self, keys, largest):
        size = "large" if largest > self.threshold else "small"
        count = "elephant" if keys >= self.elephant_min_keys else "mice"
        return ("all", size, count)


# --- one request's time with no waiting --------------------------------------------------------

def request_times(kind, sizes, servers, workers, service, network, db_us, rng):
    """(planned, split) no-waiting times of one request, µs (split None with dispersion)."""
    exp = service["dist"] == "exp"
    net_fixed = network["const"] + network["key"]
    if kind == "set":
        (size,) = sizes
        work = service["const"] + service["key"] + size * service["byte"]
        if exp:
            work *= rng.expovariate(1.0)
        total = db_us + work + net_fixed + size * network["byte"]
        return total, None if exp else total
    parts = {}
    for size in sizes:
        parts.setdefault(rng.randrange(servers), []).append(max(size, MIN_VALUE_BYTES))
    planned, split = 0.0, 0.0
    for part in parts.values():
        data = sum(part)
        work = service["const"] + len(part) * service["key"] + data * service["byte"]
        if exp:
            work *= rng.expovariate(1.0)
        planned = max(planned, work + net_fixed + data * network["byte"])
        if not exp:
            terms = [service["key"] + b * (service["byte"] + network["byte"]) for b in part]
            spread = max(max(terms), sum(terms) / min(len(part), workers))
            split = max(split, service["const"] + net_fixed + spread)
    return planned, None if exp else split


def p99(values):
    values.sort()
    return values[int(0.99 * len(values))] if values else None


def floors(results, samples, seed):
    settings = results["settings"]
    service = cost_spec(settings["emulate_service"])
    network = cost_spec(settings["emulate_network"])
    if network["dist"] != "fixed":
        sys.exit("floor.py models a fixed network time only")
    if service["dist"] not in ("fixed", "exp"):
        sys.exit("floor.py models fixed or exponential service times only (dist=fixed|exp)")
    workload = Workload(settings)
    servers, workers = settings["servers"], settings["workers"]
    joins = all(t.get("join_warmup") for t in settings["tiers"])
    db_us = duration_us(settings["db_latency"])
    rng = random.Random(seed)
    planned = {c: [] for c in CLASSES}
    split = {c: [] for c in CLASSES}
    # (the bound's time, what the request is) per class, for the shares over a target
    kinds = {c: [] for c in CLASSES}
    counts = {c: 0 for c in CLASSES}
    counts["set"] = 0
    for sample in range(samples):
        kind, sizes = workload.draw(rng)
        over = servers + 1 if joins and sample >= samples // 2 else servers
        time, bound = request_times(kind, sizes, over, workers, service, network, db_us, rng)
        counts["set"] += kind == "set"
        largest = max(sizes)
        what = "set" if kind == "set" else (
            "get_large" if largest > workload.threshold else "get_small")
        for c in workload.classes(len(sizes), largest):
            counts[c] += 1
            planned[c].append(time)
            kinds[c].append((time if bound is None else bound, what))
            if bound is not None:
                split[c].append(bound)
    return {
        "service": service,
        "network": network,
        "db_us": db_us,
        "joins": joins,
        "shares": {c: counts[c] / samples for c in ("large", "elephant", "set")},
        "planned": {c: p99(planned[c]) for c in CLASSES},
        "split": {c: p99(split[c]) for c in CLASSES} if service["dist"] == "fixed" else None,
        "kinds": kinds,
    }


def over(kinds, target):
    """Shares of a class's requests whose no-waiting time exceeds `target`, by kind."""
    shares = {"set": 0, "get_large": 0, "get_small": 0}
    for time, what in kinds:
        if time > target:
            shares[what] += 1
    out = {what: round(n / len(kinds), 4) for what, n in shares.items()}
    out["total"] = round(sum(shares.values()) / len(kinds), 4)
    return out


def rounded(value, digits=1):
    return None if value is None else round(value, digits)


def main(folder, out_path=None, samples=SAMPLES):
    with open(os.path.join(folder, "results.json")) as f:
        results = json.load(f)
    settings = results["settings"]
    computed = floors(results, samples, SEED)
    tiers = {t["tier"]: t["classes"] for t in results["tiers"]}
    baseline = tiers[BASELINE]
    total = baseline["all"]["requests"]
    bound = computed["split"] or computed["planned"]
    classes = {}
    for c in CLASSES:
        entry = {
            "floor_planned_p99_us": rounded(computed["planned"][c]),
            "floor_split_p99_us": rounded(computed["split"][c]) if computed["split"] else None,
        }
        if c in TARGETS:
            target = TARGETS[c] * baseline[c]["p99_us"]
            entry["target_factor"] = TARGETS[c]
            entry["target_p99_us"] = rounded(target)
            entry["floor_over_target"] = round(bound[c] / target, 3)
            entry["reachable_by_bound"] = bound[c] <= target
            entry["over_target_share"] = over(computed["kinds"][c], target)
        entry["floor_over_measured"] = {
            name: round(bound[c] / tier[c]["p99_us"], 3) for name, tier in tiers.items()
        }
        classes[c] = entry
    singles = {name: t["all"]["p99_us"] for name, t in tiers.items()
               if name != EVERYTHING and not name.startswith(BASELINE)}
    best = min(singles, key=singles.get)
    room = 1.0 - bound["all"] / singles[best]
    gauge = results["aa_gauge"]
    out = {
        "what": "no-waiting floor of each class's p99 (floor.py): computed, not measured",
        "servers": settings["servers"],
        "workers": settings["workers"],
        "server_joins_half_way": computed["joins"],
        "emulate_service": settings["emulate_service"],
        "emulate_network": settings["emulate_network"],
        "db_latency": settings["db_latency"],
        "samples": samples,
        "seed": SEED,
        "bound": "split" if computed["split"] else "planned",
        "workload_check": {
            "large_share_drawn": round(computed["shares"]["large"], 4),
            "large_share_measured": round(baseline["large"]["requests"] / total, 4),
            "elephant_share_drawn": round(computed["shares"]["elephant"], 4),
            "elephant_share_measured": round(baseline["elephant"]["requests"] / total, 4),
            "set_share_drawn": round(computed["shares"]["set"], 4),
        },
        "classes": classes,
        "best_single": {
            "tier": best,
            "all_p99_us": round(singles[best], 1),
            "floor_all_p99_us": rounded(bound["all"]),
            "room": round(room, 3),
            "aa_gauge": round(gauge, 3),
            "resolvable": room > gauge,
        },
    }
    out_path = out_path or os.path.join(folder, "floor.json")
    with open(out_path, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    args = sys.argv[1:]
    out = None
    if "--out" in args:
        at = args.index("--out")
        out = args[at + 1]
        del args[at:at + 2]
    main(args[0] if args else "experiments/tier/emulated-16-fixed", out)
