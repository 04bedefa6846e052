#!/usr/bin/env python3
"""Emulation accuracy through the real server: `tailtrim serve -t N --emulate-service const=S`
driven by `tailtrim bench` (open loop, Poisson, GETs of 100-byte values), at N = 1, 8, 16
emulated workers, requested S = 250 us, 1 ms, 4 ms, at a low and a medium utilisation.

Per run it records the server's own measure of every hold (`stats sizeaware`: overshoot past
the instant each hold should end), the server-side latency from the kernel's receipt of the
request to its reply being queued (includes the wait for a busy worker), and the bench's
end-to-end latency. Writes results.json next to this file, with the run's metadata (the
experiments' RunRecorder: commit, machine, load average, steal) and each run's bench histograms
(`bench_histograms`: hdrhistogram V2, base64, nanoseconds) from which the bench's percentiles
are recomputed (summarize.py checks them). The server's hold overshoot and in-server latency
are its own `stats sizeaware` percentiles.

    python3 experiments/emulation-accuracy/run.py [--duration 8] [--repeats 2]
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TAILTRIM = os.path.join(ROOT, "target", "release", "tailtrim")
sys.path.insert(0, os.path.dirname(HERE))
from harness import RunRecorder, hdr_percentile  # noqa: E402

# The server's histograms kept per run (`stats histograms`).
SERVER_HISTOGRAMS = ("emulate_overshoot_ns", "small_latency_us")


def server_figures(histograms):
    """The hold overshoot (µs) and in-server small latency (µs) percentiles of a run, from the
    server's own histograms (what `stats sizeaware` reports, recomputable from the file)."""
    overshoot, latency = (histograms[name] for name in SERVER_HISTOGRAMS)
    return {
        "overshoot_us": {label: hdr_percentile(overshoot, q) / 1000.0
                         for label, q in (("p50", 50.0), ("p99", 99.0), ("p999", 99.9),
                                          ("max", 100.0))},
        "server_latency_us": {label: float(hdr_percentile(latency, q))
                              for label, q in (("p50", 50.0), ("p99", 99.0))},
    }


def stat_steal():
    with open("/proc/stat") as f:
        fields = f.readline().split()
    return int(fields[8])


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def stats(port, group):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(f"stats {group}\r\n".encode())
        data = b""
        while not data.endswith(b"END\r\n") and not data.endswith(b"RESET\r\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    out = {}
    for line in data.decode().splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3 and parts[0] == "STAT":
            out[parts[1]] = parts[2]
    return out


def wait_ready(port):
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("server did not start")


def one_run(workers, requested_us, util, duration, port):
    rate = util * workers * 1e6 / requested_us
    server = subprocess.Popen(
        [TAILTRIM, "serve", "-p", str(port), "-l", "127.0.0.1", "-t", str(workers),
         "--emulate-service", f"const={requested_us}us"],
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_ready(port)
        bench = [TAILTRIM, "bench", "-s", f"127.0.0.1:{port}", "--workload", "uniform",
                 "--set-share", "0", "--keys", "1000", "--value-size", "100", "-q"]
        subprocess.run(bench + ["--preload-only"], check=True, stdout=subprocess.DEVNULL)
        stats(port, "reset")
        out = os.path.join("/tmp", f"emulation-accuracy-{os.getpid()}.json")
        load_before, steal_before = loadavg(), stat_steal()
        subprocess.run(bench + ["--no-preload", "--rate", f"{rate:.0f}", "-d", str(duration),
                                "--warmup", "0.5", "--json", out],
                       check=True, stdout=subprocess.DEVNULL)
        load_after, steal_after = loadavg(), stat_steal()
        # The histograms first: they then hold the bench's requests and not the stats requests.
        histograms = stats(port, "histograms")
        server_stats = stats(port, "sizeaware")
        with open(out) as f:
            result = json.load(f)
        os.remove(out)
    finally:
        server.terminate()
        server.wait()
    every = result["classes"]["all"]
    return {
        "workers": workers,
        "requested_us": requested_us,
        "utilisation": util,
        "rate": round(rate),
        "achieved_rps": result["achieved_rps"],
        "holds": int(server_stats["emulate_holds"]),
        "late_holds": int(server_stats["emulate_late_holds"]),
        **server_figures(histograms),
        "server_histograms": {name: histograms[name] for name in SERVER_HISTOGRAMS},
        "bench_latency_us": {q: every[f"{q}_us"] for q in ("p50", "p99", "p999")},
        "bench_send_lag_us": {q: result["send_lag"][f"{q}_us"] for q in ("p50", "p99")},
        "bench_histograms": {k: v for k, v in result.get("histograms", {}).items()
                             if k == "all"},
        "loadavg_before": load_before,
        "loadavg_after": load_after,
        "steal_ticks": steal_after - steal_before,
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=float, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--port", type=int, default=23411)
    parser.add_argument("--out", default=os.path.join(HERE, "results.json"))
    parser.add_argument("--bin", default=None,
                        help="the tailtrim binary to run (default target/release/tailtrim)")
    args = parser.parse_args()
    global TAILTRIM
    TAILTRIM = args.bin or TAILTRIM
    recorder = RunRecorder()
    recorder.tool("tailtrim", [TAILTRIM, "--version"])
    runs = []
    points = [(w, s, u) for u in (0.1, 0.5) for s in (250, 1000, 4000) for w in (1, 8, 16)]
    for repeat in range(args.repeats):
        # Rotate the order each repeat so drift in the machine's load does not follow a point.
        order = points[repeat % len(points):] + points[:repeat % len(points)]
        for workers, requested, util in order:
            run = one_run(workers, requested, util, args.duration, args.port)
            run["repeat"] = repeat
            runs.append(run)
            print(json.dumps(run), file=sys.stderr)
    meta = recorder.snapshot()
    meta["what"] = "EMULATED service time through the real server: requested vs achieved"
    meta["command"] = "python3 experiments/emulation-accuracy/run.py " + " ".join(sys.argv[1:])
    with open(args.out, "w") as f:
        json.dump({"metadata": meta, "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
