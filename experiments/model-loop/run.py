#!/usr/bin/env python3
"""The model in the loop, EMULATED: the tier model's predicted p99 against the p99 measured
through the real proxy over emulated servers, and `tailtrim model plan`'s server count
checked by runs at n and n - 1 servers.

Testbed: M x `tailtrim serve -t 4 --dispatch late-binding --emulate-service key=2500us,dist=exp`
(a worker sleeps an exponential time of mean 2.5 ms per key of the query, so the 4 workers of a
server are one M/M/4 queue), one
`tailtrim proxy` (batch planner, 16 connections per backend, `[model] threads = 4`), and
`tailtrim bench` through the proxy: Poisson arrivals of 4-key multigets over 2 000 keys.

Part A (prediction): 4 servers at three loads (server utilisation about 0.3, 0.5, 0.7).
  predicted  = `tailtrim model plan --rate <achieved> --keys 4 --service-us 0 --per-key-us 2500
               --threads 4 --servers 4 --network-us <floor> --client-connections 64
               --imbalance <measured>` (the model from the load alone; the imbalance is the
               most loaded backend's key share over the mean, from the queries each got)
  balanced   = the same with --imbalance 1
  live       = the proxy's own `pool_model_p99_predicted_us` at the end of the run
  measured   = the bench's p99 over the run
  floor      = the bench's p50 through the same proxy over servers without emulation, the
               constant the model adds for the proxy, the bench and the loopback.
Part B (plan): `model plan --slo-p99 SLO` for a rate; runs at n and n - 1 servers (or the
counts of --b-servers). With --base-port the backends listen at fixed ports (base, base + 1,
...), so their ketama ring is the one `model plan --ring-servers 127.0.0.1:<base>` plans on;
each run then also carries `predicted_ring`, the model with that ring's imbalance.

Writes results.json (every run, the model's outputs, the host's metadata) next to this file.

    python3 experiments/model-loop/run.py --bin target/suite/tailtrim [--duration 20] [--repeats 2]
        [--parts A,B] [--base-port 21211] [--b-servers 2,3,4]
"""

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from harness import RunRecorder, free_port, loadavg, start, stop_all, wait_port  # noqa: E402

PER_KEY_US = 2500.0
THREADS = 4
KEYS_PER_REQUEST = 4
KEYS = 2000
# The bench's connections to the proxy; the proxy reads each in rounds, in order.
CONNECTIONS = 64
WORKLOAD = f"""name = "model-loop"
key_seed = 1
large_threshold_bytes = 1499
elephant_min_keys = 50
max_value_bytes = 1000000

[arrival]
type = "poisson"

[[pools]]
name = "small"
keys = {KEYS}
share = 1.0

[pools.key_size]
type = "fixed"
value = 32.0

[pools.value_size]
type = "fixed"
value = 100.0

[pools.popularity]
type = "uniform"

[[operations]]
kind = "get"
keys = {KEYS_PER_REQUEST}
weight = 1.0
"""


def proxy_stats(port):
    """The proxy's `stats` as a name -> text map."""
    conn = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        conn.sendall(b"stats\r\n")
        data = conn.recv(1 << 20)
        while not data.endswith(b"END\r\n"):
            # A closed connection ends the reply too.
            data += conn.recv(1 << 20) or b"END\r\n"
    finally:
        conn.close()
    return dict(re.findall(r"^STAT (\S+) (\S+)\r?$", data.decode(), re.M))


def port_is_free(port):
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def tier(binary, servers, emulate, directory, base_port=None):
    """Starts `servers` backends (at base_port, base_port + 1, ... when given) and a proxy;
    returns (processes, proxy port)."""
    procs = []
    ports = []
    for index in range(servers):
        if base_port is None:
            port = free_port()
        else:
            port = base_port + index
            if not port_is_free(port):
                stop_all(procs)
                raise SystemExit(f"port {port} is taken: give another --base-port")
        command = [binary, "serve", "-p", str(port), "-l", "127.0.0.1", "-U", "0",
                   "-t", str(THREADS), "--dispatch", "late-binding"]
        if emulate:
            command += ["--emulate-service", f"key={PER_KEY_US:.0f}us,dist=exp"]
        start(procs, command, port, stderr=subprocess.DEVNULL)
        ports.append(port)
    proxy_port = free_port()
    config = os.path.join(directory, "proxy.toml")
    backends = ", ".join(f'"127.0.0.1:{port}:1"' for port in ports)
    with open(config, "w") as f:
        f.write(f'[proxy]\nlisten = "127.0.0.1:{proxy_port}"\nadmin_listen = ""\n\n'
                f'[pool]\nservers = [{backends}]\nserver_connections = 16\n\n'
                f'[model]\nthreads = {THREADS}\ninterval_ms = 1000\n')
    start(procs, [binary, "proxy", "-c", config], proxy_port, stderr=subprocess.DEVNULL)
    wait_port(proxy_port)
    return procs, proxy_port


def bench(binary, port, rate, duration, workload, out, preload):
    command = [binary, "bench", "-s", f"127.0.0.1:{port}", "--workload-file", workload,
               "-r", f"{rate:.0f}", "-d", str(duration), "--warmup", "2", "-c", str(CONNECTIONS),
               "-q",
               "--json", out]
    if not preload:
        command.append("--no-preload")
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        return json.load(f)


def one_run(binary, servers, rate, duration, directory, emulate=True, base_port=None):
    workload = os.path.join(directory, "workload.toml")
    with open(workload, "w") as f:
        f.write(WORKLOAD)
    procs, port = tier(binary, servers, emulate, directory, base_port)
    try:
        load_before = loadavg()
        result = bench(binary, port, rate, duration, workload,
                       os.path.join(directory, "bench.json"), preload=True)
        stats = proxy_stats(port)
        load_after = loadavg()
    finally:
        stop_all(procs)
    every = result["classes"]["all"]
    return {
        "servers": servers,
        "emulated": emulate,
        "target_rps": rate,
        "achieved_rps": result["achieved_rps"],
        "completed": result["completed"],
        "errors": result["errors"],
        "measured_us": {q: every[f"{q}_us"] for q in ("p50", "p90", "p99", "p999")},
        "send_lag_p99_us": result["send_lag"]["p99_us"],
        "proxy_live": {name: float(stats.get(name, "0")) for name in (
            "pool_model_p99_predicted_us", "pool_model_service_us",
            "pool_model_utilization_permille", "pool_latency_us_p99")},
        # Queries each backend received (preload and warm-up included): the ring's split.
        "backend_queries": {name.split(":", 1)[1]: int(value) for name, value in stats.items()
                            if name.startswith("backend_requests:")},
        "bench_histogram_all": result.get("histograms", {}).get("all"),
        "loadavg_before": load_before,
        "loadavg_after": load_after,
    }


def model(binary, args):
    got = subprocess.run([binary, "model", "plan", "--json"] + args, check=True,
                         stdout=subprocess.PIPE, text=True)
    return json.loads(got.stdout)


def imbalance(backend_queries, keys_per_request=KEYS_PER_REQUEST):
    """The most loaded backend's key share over the mean share, from the queries each got:
    a backend holding share p is in a request of N keys with probability 1 - (1 - p)^N."""
    counts = list(backend_queries.values())
    if len(counts) < 2 or not any(counts):
        return 1.0
    # Requests: a backend's queries are R * (1 - (1 - p)^N); solve the shares up to a scale by
    # taking the rate that makes them sum to 1 (bisection on the request count).
    low, high = max(counts), sum(counts)
    for _ in range(100):
        requests = 0.5 * (low + high)
        shares = [1 - (1 - min(c / requests, 1.0)) ** (1 / keys_per_request) for c in counts]
        if sum(shares) > 1:
            low = requests
        else:
            high = requests
    return max(1.0, max(shares) * len(counts) / sum(shares))


def predicted(binary, rate, servers, network_us, imbalance_ratio=1.0, connections=CONNECTIONS,
              ring_servers=None):
    """The model at `servers` servers: with `imbalance_ratio`, or on the ketama ring of
    `ring_servers` (`model plan --ring-servers`) when given."""
    split = (["--ring-servers", ring_servers] if ring_servers
             else ["--imbalance", f"{imbalance_ratio}"])
    out = model(binary, ["--rate", f"{rate}", "--keys", str(KEYS_PER_REQUEST),
                         "--service-us", "0", "--per-key-us", f"{PER_KEY_US}",
                         "--threads", str(THREADS),
                         "--servers", str(servers), "--network-us", f"{network_us}",
                         "--client-connections", str(connections),
                         "--slo-p99", "1000000"] + split)
    return out["current"]


def median(values):
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True, help="the tailtrim binary")
    parser.add_argument("--duration", type=float, default=20)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--slo-p99-us", type=float, default=30000)
    parser.add_argument("--plan-rate", type=float, default=720)
    parser.add_argument("--out", default=os.path.join(HERE, "results.json"))
    parser.add_argument("--parts", default="A,B", help="which parts to run: A, B or A,B")
    parser.add_argument("--base-port", type=int, default=None,
                        help="backends at fixed ports from this one; the plan is made on "
                             "their ketama ring (`model plan --ring-servers`)")
    parser.add_argument("--b-servers", default=None,
                        help="server counts of part B, comma separated (default: n - 1, n)")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    ring_servers = None if args.base_port is None else f"127.0.0.1:{args.base_port}"
    recorder = RunRecorder()
    recorder.tool("tailtrim", [args.bin, "--version"])
    # Request rate at server utilisation u on 4 servers: every key costs 2.5 ms of a thread,
    # so u = R · N · S_key / (M · c).
    loads = {u: u * 4 * THREADS / (KEYS_PER_REQUEST * PER_KEY_US * 1e-6) for u in (0.3, 0.5, 0.7)}
    plan = model(args.bin, ["--rate", f"{args.plan_rate}", "--keys", str(KEYS_PER_REQUEST),
                            "--service-us", "0", "--per-key-us", f"{PER_KEY_US}",
                            "--threads", str(THREADS),
                            "--client-connections", str(CONNECTIONS),
                            "--slo-p99", f"{args.slo_p99_us}"]
                 + (["--ring-servers", ring_servers] if ring_servers else []))
    n = plan["plan"]["recommended"]["servers"]
    b_servers = ([int(count) for count in args.b_servers.split(",")] if args.b_servers
                 else [n, n - 1])
    runs = []
    with tempfile.TemporaryDirectory() as directory:
        for repeat in range(args.repeats):
            floor = one_run(args.bin, 4, loads[0.3], args.duration / 2, directory, emulate=False,
                            base_port=args.base_port)
            floor.update({"part": "floor", "repeat": repeat})
            runs.append(floor)
            print(json.dumps({k: v for k, v in floor.items() if k != "bench_histogram_all"}),
                  file=sys.stderr)
            points = [("A", 4, loads[u], u) for u in (0.3, 0.5, 0.7)] if "A" in parts else []
            if "B" in parts:
                points += [("B", servers, args.plan_rate, None) for servers in b_servers]
            # Rotate the order each repeat so drift in the host's load does not follow a point.
            k = repeat % len(points)
            for part, servers, rate, utilisation in points[k:] + points[:k]:
                run = one_run(args.bin, servers, rate, args.duration, directory,
                              base_port=args.base_port)
                run.update({"part": part, "repeat": repeat, "utilisation": utilisation,
                            "floor_p50_us": floor["measured_us"]["p50"]})
                run["imbalance"] = imbalance(run["backend_queries"])
                run["predicted"] = predicted(args.bin, run["achieved_rps"], servers,
                                             floor["measured_us"]["p50"], run["imbalance"])
                run["predicted_balanced"] = predicted(args.bin, run["achieved_rps"], servers,
                                                      floor["measured_us"]["p50"])
                if ring_servers:
                    run["predicted_ring"] = predicted(args.bin, run["achieved_rps"], servers,
                                                      floor["measured_us"]["p50"],
                                                      ring_servers=ring_servers)
                runs.append(run)
                print(json.dumps({k: v for k, v in run.items() if k != "bench_histogram_all"}),
                      file=sys.stderr)
    meta = recorder.snapshot()
    meta["what"] = ("EMULATED: tier model's predicted p99 vs measured through the real proxy; "
                    "model plan's n checked at n and n-1 servers")
    meta["command"] = "python3 experiments/model-loop/run.py " + " ".join(sys.argv[1:])
    with open(args.out, "w") as f:
        json.dump({"metadata": meta, "plan": plan, "slo_p99_us": args.slo_p99_us,
                   "plan_rate": args.plan_rate, "base_port": args.base_port,
                   "runs": runs}, f, indent=1)
    summary(args.out)


# A run whose bench fell behind its schedule measured the host's stalls, not the tier: its
# send-lag p99 above this, or its achieved rate 5 % under the target, leaves it out.
MAX_SEND_LAG_P99_US = 5000.0


def valid(run):
    return (run["send_lag_p99_us"] <= MAX_SEND_LAG_P99_US
            and run["achieved_rps"] >= 0.95 * run["target_rps"])


def summary(path):
    with open(path) as f:
        data = json.load(f)
    runs = data["runs"]
    print("part servers target_rps valid/runs  p99 predicted  p99 live  p99 measured  ratio "
          "(medians of the valid runs, µs)")
    keys = sorted({(r["part"], r["servers"], round(r["target_rps"])) for r in runs
                   if r["part"] != "floor"})
    for part, servers, rate in keys:
        same = [r for r in runs if (r["part"], r["servers"], round(r["target_rps"])) ==
                (part, servers, rate)]
        good = [r for r in same if valid(r)]
        if not good:
            print(f"{part} {servers:>3} {rate:>8} 0/{len(same)}")
            continue
        pred = median([r["predicted"]["p99"] * 1e6 for r in good])
        live = median([r["proxy_live"]["pool_model_p99_predicted_us"] for r in good])
        meas = median([r["measured_us"]["p99"] for r in good])
        extra = ""
        if all("predicted_balanced" in r for r in good):
            balanced = median([r["predicted_balanced"]["p99"] * 1e6 for r in good])
            extra = (f"   balanced {balanced:.0f} ({balanced / meas:.2f}), imbalance "
                     + ", ".join(f"{r['imbalance']:.3f}" for r in good))
        if all("predicted_ring" in r for r in good):
            ring = median([r["predicted_ring"]["p99"] * 1e6 for r in good])
            extra += f"   ring {ring:.0f} ({ring / meas:.2f})"
        print(f"{part} {servers:>3} {rate:>8} {len(good)}/{len(same)} {pred:>10.0f} {live:>10.0f}"
              f" {meas:>10.0f}  {pred / meas:.2f}   measured: "
              + ", ".join(f"{r['measured_us']['p99']:.0f}" for r in good) + extra)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--summary":
        summary(sys.argv[2])
    else:
        main()
