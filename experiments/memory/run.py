#!/usr/bin/env python3
"""Items held and resident memory at `-m 64`: tailtrim serve vs Debian's memcached.

Each scenario starts a fresh server (`-m 64 -t 1`), fills it with `set`s of 16-byte keys and
values of the scenario's sizes until twice the limit (in memcached's accounted item bytes)
has been written, and records `curr_items`, `bytes` and VmRSS after every phase. The
`shift` scenario fills with 32 B values and then with 100 B values, and counts how many of
the 100 B keys are held afterwards (a `get` of every key): a store whose memory stays with
the old size (slab calcification) holds few of them.

    python3 experiments/memory/run.py --bin tailtrim=target/suite/tailtrim \
        --out experiments/memory/results.json

Only the standard library; needs `memcached` on PATH or at /usr/bin/memcached.
"""

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import RunRecorder  # noqa: E402

LIMIT_MIB = 64
KEY_WIDTH = 16
HEADER = 59
BATCH_SETS = 100
BATCH_BYTES = 256 * 1024

# Scenarios whose phases after the first each start with a `flush_all`.
FLUSHED = {"flush"}
# Scenarios that count how many of the last phase's keys are held.
COUNTED = {"shift", "flush"}

SCENARIOS = {
    "8B": [[8]],
    "32B": [[32]],
    "100B": [[100]],
    "1KB": [[1000]],
    "100KB": [[100_000]],
    "1MB": [[1_000_000]],
    "shift": [[32], [100]],
    "flush": [[32], [100]],
    "mix": [[8, 32, 100], [32, 100, 1000, 8], [1000, 100_000, 32], [8, 32]],
}


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def read_until(sock, terminator, expected_len=None):
    data = b""
    while not data.endswith(terminator) or (expected_len and len(data) < expected_len):
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise RuntimeError("server closed the connection")
        data += chunk
    return data


def stats(sock):
    sock.sendall(b"stats\r\n")
    reply = read_until(sock, b"END\r\n").decode()
    out = {}
    for line in reply.splitlines():
        parts = line.split(" ")
        if len(parts) == 3 and parts[0] == "STAT":
            out[parts[1]] = parts[2]
    return out


def key(phase, index):
    text = f"{phase}:{index}"
    return text.rjust(KEY_WIDTH, "k").encode()


def fill(sock, phase, sizes, limit):
    written = 0
    index = 0
    refused = 0
    values = {size: b"v" * size for size in sizes}
    while written < 2 * limit:
        request = bytearray()
        count = 0
        while count < BATCH_SETS and len(request) < BATCH_BYTES:
            size = sizes[index % len(sizes)]
            k = key(phase, index)
            request += b"set %s 0 0 %d\r\n" % (k, size) + values[size] + b"\r\n"
            written += HEADER + len(k) + size
            index += 1
            count += 1
        sock.sendall(request)
        reply = b""
        while reply.count(b"\r\n") < count:
            chunk = sock.recv(1 << 20)
            if not chunk:
                raise RuntimeError("server closed the connection")
            reply += chunk
        for line in reply.split(b"\r\n")[:count]:
            if line != b"STORED":
                # memcached answers some pipelined sets with an out-of-memory error while
                # it moves pages between classes; those are counted, not fatal.
                if not line.startswith(b"SERVER_ERROR out of memory"):
                    raise RuntimeError(f"a set failed in phase {phase}: {line!r}")
                refused += 1
    return index, refused


def count_held(sock, phase, total):
    held = 0
    for start in range(0, total, 100):
        keys = [key(phase, i) for i in range(start, min(total, start + 100))]
        sock.sendall(b"".join(b"mg %s k\r\n" % k for k in keys) + b"mn\r\n")
        reply = read_until(sock, b"MN\r\n")
        held += reply.count(b"HD ")
    return held


def start(command, limit_mib=LIMIT_MIB):
    port = free_port()
    argv = command + ["-p", str(port), "-U", "0", "-l", "127.0.0.1", "-m", str(limit_mib), "-t", "1"]
    if os.geteuid() == 0 and "serve" not in command:
        argv += ["-u", "root"]  # memcached refuses to run as root otherwise
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=60)
            return process, sock
        except OSError:
            time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"{argv} did not start")


def run_scenario(command, name, phases, limit_mib=LIMIT_MIB):
    process, sock = start(command, limit_mib)
    limit = limit_mib * 1024 * 1024
    try:
        record = {"scenario": name, "limit_mib": limit_mib, "start_rss_kib": rss_kib(process.pid),
                  "phases": []}
        for number, sizes in enumerate(phases):
            phase = f"p{number}"
            if name in FLUSHED and number > 0:
                sock.sendall(b"flush_all\r\n")
                if read_until(sock, b"\r\n") != b"OK\r\n":
                    raise RuntimeError("flush_all failed")
            total, refused = fill(sock, phase, sizes, limit)
            figures = stats(sock)
            entry = {
                "sizes": sizes,
                "sets": total,
                "refused": refused,
                "rss_kib": rss_kib(process.pid),
                "curr_items": int(figures["curr_items"]),
                "bytes": int(figures["bytes"]),
            }
            if name in COUNTED and number > 0:
                entry["flushed_before"] = name in FLUSHED
            if name in COUNTED and number == len(phases) - 1:
                entry["held_of_this_phase"] = count_held(sock, phase, total)
            record["phases"].append(entry)
        record["max_rss_kib"] = max(p["rss_kib"] for p in record["phases"])
        return record
    finally:
        sock.close()
        process.kill()
        process.wait()


def metadata(recorder):
    """The run records every experiment keeps (harness.RunRecorder: command, commit, dirty
    flag, CPU model, cores, kernel, start time, load averages), and memcached's version."""
    out = recorder.snapshot()
    out["memcached"] = subprocess.run(
        [memcached_path(), "-V"], capture_output=True, text=True
    ).stdout.strip()
    return out


def memcached_path():
    return shutil.which("memcached") or "/usr/bin/memcached"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", action="append", default=[],
                        help="name=path of a tailtrim binary (repeatable)")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--out", default="experiments/memory/results.json")
    parser.add_argument("--limit", action="append", default=[],
                        help="name=MiB: that target's -m instead of 64 (repeatable)")
    args = parser.parse_args()
    limits = {name: int(mib) for name, mib in (spec.split("=", 1) for spec in args.limit)}
    targets = [("memcached", [memcached_path()])]
    for spec in args.bin or ["tailtrim=target/suite/tailtrim"]:
        name, path = spec.split("=", 1)
        targets.append((name, [path, "serve"]))
    recorder = RunRecorder()
    results = {"limit_mib": LIMIT_MIB, "runs": []}
    bound = LIMIT_MIB * 1024 * 11 // 10 + 16 * 1024
    for scenario in args.scenarios.split(","):
        for name, command in targets:
            limit_mib = limits.get(name, LIMIT_MIB)
            record = run_scenario(command, scenario, SCENARIOS[scenario], limit_mib)
            record["target"] = name
            results["runs"].append(record)
            last = record["phases"][-1]
            held = last.get("held_of_this_phase", "")
            print(f"{scenario:6} {name:10} items {last['curr_items']:>8} "
                  f"max RSS {record['max_rss_kib'] / 1024:7.1f} MiB "
                  f"(bound {bound / 1024:.1f}) {held}", flush=True)
    results = {"metadata": metadata(recorder), **results}
    with open(args.out, "w") as out:
        json.dump(results, out, indent=1)


if __name__ == "__main__":
    main()
