#!/usr/bin/env python3
"""Miss ratio at equal RSS: tailtrim serve vs Debian's memcached on a zipf(0.99) trace with
ETC-like sizes, replayed as cache-aside traffic (get, on a miss set).

Every tailtrim build (--bin) at each `-m` of --limits and memcached at each `-m` of
--reference-limits runs as a fresh server (`-m M -t 1`) and gets the trace from
`tailtrim-trace-replay` (crates/bench, modules `replay` and `trace`): a warm-up pass, then
a measured pass whose miss ratio is the figure. After the replay the server's peak RSS
(VmHWM) and `stats` (items, evictions) are recorded. The comparison at equal RSS
interpolates memcached's miss ratio linearly in RSS between its two runs around each
tailtrim run's RSS (no extrapolation: a tailtrim run outside memcached's RSS range gets no
ratio).

    python3 experiments/memory/missratio/run.py \
        --bin tailtrim=target/release/tailtrim --bin fifo=/path/to/other/tailtrim \
        --replay target/suite/tailtrim-trace-replay

Only the standard library; needs `memcached` on PATH or at /usr/bin/memcached.
"""

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))
from harness import RunRecorder, free_port, wait_port  # noqa: E402


def vm_kib(pid, field):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} for {pid}")


def stats(port):
    """The general `stats` of the server on `port` as a name → value text map."""
    figures = {}
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(b"stats\r\n")
        with sock.makefile("rb") as reply:
            for line in reply:
                if line.rstrip() == b"END":
                    break
                _, name, value = line.decode().rstrip().split(" ", 2)
                figures[name] = value
    return figures


def server_argv(command, port, limit_mib):
    argv = command + ["-p", str(port), "-U", "0", "-l", "127.0.0.1", "-m", str(limit_mib),
                      "-t", "1"]
    if os.geteuid() == 0 and "serve" not in command:
        argv += ["-u", "root"]  # memcached refuses to run as root otherwise
    return argv


def replay_argv(args, port):
    return [args.replay, "-s", f"127.0.0.1:{port}", "--keys", str(args.keys),
            "--exponent", str(args.exponent), "--seed", str(args.seed),
            "--warmup", str(args.warmup), "--requests", str(args.requests),
            "--batch", str(args.batch), "--max-value-bytes", str(args.max_value_bytes)]


def run_one(args, name, command, limit_mib):
    port = free_port()
    process = subprocess.Popen(server_argv(command, port, limit_mib),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port)
        replay = subprocess.run(replay_argv(args, port), check=True, capture_output=True,
                                text=True)
        report = json.loads(replay.stdout)
        figures = stats(port)
        return {
            "target": name,
            "limit_mib": limit_mib,
            "miss_ratio": report["miss_ratio"],
            "replay": report,
            "max_rss_kib": vm_kib(process.pid, "VmHWM"),
            "rss_kib": vm_kib(process.pid, "VmRSS"),
            "curr_items": int(figures.get("curr_items", 0)),
            "bytes": int(figures.get("bytes", 0)),
            "evictions": int(figures.get("evictions", 0)),
        }
    finally:
        process.kill()
        process.wait()


def interpolate(points, rss):
    """memcached's miss ratio at `rss` (KiB), linear between the two runs around it; None
    outside their range."""
    points = sorted(points)
    for (low_rss, low_miss), (high_rss, high_miss) in zip(points, points[1:]):
        if low_rss <= rss <= high_rss:
            if high_rss == low_rss:
                return low_miss
            share = (rss - low_rss) / (high_rss - low_rss)
            return low_miss + share * (high_miss - low_miss)
    return None


def compare(runs, reference="memcached"):
    """Each non-reference run with the reference's miss ratio at its RSS and the ratio."""
    points = [(r["max_rss_kib"], r["miss_ratio"]) for r in runs if r["target"] == reference]
    rows = []
    for run in runs:
        if run["target"] == reference:
            continue
        at_rss = interpolate(points, run["max_rss_kib"])
        rows.append({
            "target": run["target"],
            "limit_mib": run["limit_mib"],
            "max_rss_mib": round(run["max_rss_kib"] / 1024, 1),
            "miss_ratio": round(run["miss_ratio"], 4),
            "memcached_miss_ratio_at_rss": None if at_rss is None else round(at_rss, 4),
            "ratio": None if at_rss is None else round(run["miss_ratio"] / at_rss, 3),
        })
    return rows


def memcached_path():
    return shutil.which("memcached") or "/usr/bin/memcached"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", action="append", default=[],
                        help="NAME=PATH of a tailtrim binary (repeatable)")
    parser.add_argument("--replay", default="target/suite/tailtrim-trace-replay",
                        help="the trace replay program (crates/bench)")
    parser.add_argument("--limits", default="32,64,128",
                        help="-m values (MiB) of the tailtrim builds, comma-separated")
    parser.add_argument("--reference-limits", default="24,32,48,64,96,128,160",
                        help="-m values (MiB) of memcached: a range wide enough to hold the "
                        "tailtrim runs' RSS")
    parser.add_argument("--keys", type=int, default=2_000_000)
    parser.add_argument("--exponent", type=float, default=0.99)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=3_000_000)
    parser.add_argument("--requests", type=int, default=2_000_000)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--max-value-bytes", type=int, default=100_000)
    parser.add_argument("--reference-from", default=None, metavar="RESULTS",
                        help="take memcached's runs from an earlier results file (same trace) "
                        "instead of running memcached again")
    parser.add_argument("--out", default=os.path.join(HERE, "results.json"))
    args = parser.parse_args()
    targets = [("memcached", [memcached_path()])]
    for spec in args.bin or ["tailtrim=target/release/tailtrim"]:
        name, path = spec.split("=", 1)
        targets.append((name, [path, "serve"]))
    recorder = RunRecorder()
    recorder.tool("memcached", [memcached_path(), "-V"])
    for name, command in targets[1:]:
        recorder.tool(name, [command[0], "--version"])
    limits = {int(m) for m in args.limits.split(",")}
    reference_limits = {int(m) for m in args.reference_limits.split(",")}
    runs = []
    if args.reference_from:
        with open(args.reference_from) as earlier:
            earlier = json.load(earlier)
        trace = {key: getattr(args, key) for key in earlier["trace"]}
        if trace != earlier["trace"]:
            sys.exit(f"{args.reference_from} replayed another trace: {earlier['trace']}")
        runs = [run for run in earlier["runs"] if run["target"] == "memcached"]
        reference_limits = set()
    for limit in sorted(limits | reference_limits):
        for name, command in targets:
            if limit not in (reference_limits if name == "memcached" else limits):
                continue
            run = run_one(args, name, command, limit)
            runs.append(run)
            print(f"-m {limit:4} {name:12} miss ratio {run['miss_ratio']:.4f} "
                  f"max RSS {run['max_rss_kib'] / 1024:7.1f} MiB items {run['curr_items']:>8} "
                  f"evictions {run['evictions']:>8} ({run['replay']['seconds']:.0f} s)",
                  flush=True)
    rows = compare(runs)
    for row in rows:
        print(json.dumps(row), flush=True)
    trace = {key: getattr(args, key) for key in
             ("keys", "exponent", "seed", "warmup", "requests", "batch", "max_value_bytes")}
    results = {"metadata": recorder.snapshot(), "trace": trace, "runs": runs,
               "at_equal_rss": rows}
    with open(args.out, "w") as out:
        json.dump(results, out, indent=1)


if __name__ == "__main__":
    main()
