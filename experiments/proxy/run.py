#!/usr/bin/env python3
"""tailtrim proxy vs nutcracker over the same memcached backends: CPU per request and rate.

Starts 3 memcached backends (`-t 1`), nutcracker and one `tailtrim proxy -t 1` per `--bin`
over them, all on the same ring (ketama, fnv1a_64, so every key lands on the same backend
through either proxy). The proxies are pinned to CPU 0, the backends and the load generator
(`tailtrim bench`) to CPU 1. For every repetition, every case runs against every target in
turn (the order rotates with the repetition), and the proxy's CPU time (utime + stime from
/proc/PID/stat, all threads) over the run is divided by the requests it carried.

Cases (workloads in this folder; 20 B keys, 32 B values, 10k keys preloaded):
  single-open   get:set 10:1 at a fixed rate (open loop): CPU/request, added p50/p99
  mget10-open   10-key gets at a fixed rate
  mget100-open  100-key gets at a fixed rate
  single-closed 8 connections, one request in flight each (closed loop, closedloop/: a small
                Go load generator, get:set 10:1 on its own 10k keys): carried rate
  mget10-closed the same with 10-key gets
  pipelined     8 connections, 16 requests in flight each (pipelined single-key load)
  direct-*      (with --direct) the open-loop cases against one memcached, for added latency

  python3 experiments/proxy/run.py --bin tailtrim=target/release/tailtrim --reps 5 \
      --duration 3 --out experiments/proxy/results.json

Several `--bin NAME=PATH` compare builds side by side (e.g. before/after a change).
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TICK = os.sysconf("SC_CLK_TCK")
os.environ["PATH"] += os.pathsep + "/usr/local/go/bin"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"port {port} never opened")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[0] is the state (3rd field of stat); utime and stime are the 14th and 15th.
    return (int(fields[11]) + int(fields[12])) / TICK


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", action="append", default=[],
                        help="NAME=PATH [PROXY FLAGS...] of a tailtrim binary whose proxy is a "
                        "target, with extra proxy flags if any (repeatable)")
    parser.add_argument("--bench-bin", default=None, help="tailtrim binary running the bench "
                        "(default: the first --bin)")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--duration", type=int, default=3)
    parser.add_argument("--cases", default="single-open,mget10-open,mget100-open,"
                        "single-closed,mget10-closed,pipelined")
    parser.add_argument("--single-rate", type=int, default=8000)
    parser.add_argument("--mget10-rate", type=int, default=3000)
    parser.add_argument("--mget100-rate", type=int, default=500)
    parser.add_argument("--server-connections", type=int, default=None,
                        help="tailtrim proxy --server-connections (default: its own default)")
    parser.add_argument("--direct", action="store_true",
                        help="also run the open-loop cases against one memcached directly")
    parser.add_argument("--no-pin", action="store_true")
    parser.add_argument("--out", default=os.path.join(HERE, "results.json"))
    args = parser.parse_args()
    bins = [b.split("=", 1) for b in (args.bin or ["tailtrim=target/release/tailtrim"])]
    bench_bin = args.bench_bin or bins[0][1].split()[0]

    def pin(cpu):
        return [] if args.no_pin else ["taskset", "-c", str(cpu)]

    cases = {
        "single-open": ("single.toml", args.single_rate, 16),
        "mget10-open": ("mget10.toml", args.mget10_rate, 16),
        "mget100-open": ("mget100.toml", args.mget100_rate, 16),
        # Closed loop (closedloop/): connections, requests in flight each, keys per get.
        "single-closed": ("closed", 8, 1, 1),
        "mget10-closed": ("closed", 8, 1, 10),
        "pipelined": ("closed", 8, 16, 1),
    }
    chosen = args.cases.split(",")
    procs = []
    user = ["-u", "root"] if os.geteuid() == 0 else []
    tmp = tempfile.mkdtemp(prefix="proxy-exp-")

    def memcached():
        port = free_port()
        procs.append(subprocess.Popen(pin(1) + ["memcached", "-l", "127.0.0.1", "-p", str(port),
                                                "-U", "0", "-m", "256", "-t", "1"] + user))
        wait_port(port)
        return port

    commands = {}
    try:
        ports = [memcached() for _ in range(3)]
        servers = [f"127.0.0.1:{p}:1" for p in ports]
        targets = {}  # name -> (port, pid)
        nc_port, nc_stats = free_port(), free_port()
        with open(os.path.join(tmp, "nc.yml"), "w") as f:
            f.write(f"pool:\n  listen: 127.0.0.1:{nc_port}\n  hash: fnv1a_64\n"
                    f"  distribution: ketama\n  timeout: 2000\n  auto_eject_hosts: false\n"
                    f"  servers:\n")
            for s in servers:
                f.write(f"   - {s}\n")
        nc_cmd = pin(0) + ["nutcracker", "-c", os.path.join(tmp, "nc.yml"), "-s", str(nc_stats),
                           "-a", "127.0.0.1", "-o", os.path.join(tmp, "nc.log")]
        commands["nutcracker"] = " ".join(nc_cmd)
        nc = subprocess.Popen(nc_cmd)
        procs.append(nc)
        wait_port(nc_port)
        targets["nutcracker"] = (nc_port, nc.pid)
        for name, spec in bins:
            path, *extra = spec.split()
            port = free_port()
            cmd = pin(0) + [path, "proxy", "-l", f"127.0.0.1:{port}", "--admin", "off",
                            "-s", ",".join(servers), "--hash", "fnv1a_64",
                            "--distribution", "ketama", "--timeout-ms", "2000", "-t", "1",
                            "--server-failure-limit", "1000000000"]
            if args.server_connections:
                cmd += ["--server-connections", str(args.server_connections)]
            cmd += extra
            commands[name] = " ".join(cmd)
            p = subprocess.Popen(cmd, stderr=subprocess.DEVNULL)
            procs.append(p)
            wait_port(port)
            targets[name] = (port, p.pid)
        if args.direct:
            direct = memcached()
            targets["direct"] = (direct, None)

        closedloop = os.path.join(tmp, "closedloop")
        subprocess.run(["go", "build", "-o", closedloop, "."], check=True,
                       cwd=os.path.join(HERE, "closedloop"))

        def closed_cmd(port, conns, depth, keys):
            return pin(1) + [closedloop, "-s", f"127.0.0.1:{port}", "-c", str(conns),
                             "-depth", str(depth), "-keys", str(keys), "-d", f"{args.duration}s"]

        commands["closedloop"] = " ".join(closed_cmd("PORT", "8", "DEPTH", "KEYS"))

        def bench_cmd(port, workload, rate, in_flight, out):
            return pin(1) + [bench_bin, "bench", "-s", f"127.0.0.1:{port}", "--workload-file",
                             os.path.join(HERE, workload), "-r", str(rate), "-c", "8",
                             "--max-in-flight", str(in_flight), "-d", str(args.duration),
                             "--warmup", "0", "--no-preload", "-q", "--json", out]

        commands["bench"] = " ".join(bench_cmd("PORT", "WORKLOAD.toml", "RATE", "IN_FLIGHT",
                                               "out.json"))
        # One preload through nutcracker fills the shared backends for every proxy.
        preload = [nc_port] + ([targets["direct"][0]] if "direct" in targets else [])
        for port in preload:
            subprocess.run([bench_bin, "bench", "-s", f"127.0.0.1:{port}", "--workload-file",
                            os.path.join(HERE, "single.toml"), "--preload-only", "-q"],
                           check=True, stdout=subprocess.DEVNULL)
        # Its own keys through the first tailtrim proxy (same ring; a burst of 10k noreply
        # sets through nutcracker has stalled on a loaded host).
        first = targets[bins[0][0]][0]
        subprocess.run([closedloop, "-s", f"127.0.0.1:{first}", "-preload"], check=True,
                        timeout=120)

        runs = []
        names = list(targets)
        for rep in range(args.reps):
            order = names[rep % len(names):] + names[:rep % len(names)]
            for case in chosen:
                for name in order:
                    port, pid = targets[name]
                    closed = cases[case][0] == "closed"
                    if name == "direct" and closed:
                        continue
                    out = os.path.join(tmp, f"{rep}-{case}-{name}.json")
                    load_before = loadavg()
                    cpu_before = cpu_seconds(pid) if pid else 0.0
                    if closed:
                        _, conns, depth, keys = cases[case]
                        got = subprocess.run(closed_cmd(port, conns, depth, keys), check=True,
                                             stdout=subprocess.PIPE, text=True)
                        cpu = (cpu_seconds(pid) - cpu_before) if pid else None
                        result = json.loads(got.stdout)
                        done, carried, errors = result["completed"], result["rps"], result["errors"]
                        p50, p99 = result["p50_us"], result["p99_us"]
                        offered, in_flight, timeouts, hit_ratio = None, depth, 0, None
                    else:
                        workload, offered, in_flight = cases[case]
                        subprocess.run(bench_cmd(port, workload, offered, in_flight, out),
                                       check=True, stdout=subprocess.DEVNULL)
                        cpu = (cpu_seconds(pid) - cpu_before) if pid else None
                        with open(out) as f:
                            result = json.load(f)
                        done, carried, errors = (result["completed"], result["achieved_rps"],
                                                 result["errors"])
                        p50 = result["classes"]["all"]["p50_us"]
                        p99 = result["classes"]["all"]["p99_us"]
                        timeouts, hit_ratio = result["timeouts"], result["hit_ratio"]
                    row = {
                        "rep": rep, "case": case, "target": name, "offered_rps": offered,
                        "max_in_flight": in_flight, "carried_rps": carried, "completed": done,
                        "errors": errors, "timeouts": timeouts, "hit_ratio": hit_ratio,
                        "p50_us": p50, "p99_us": p99, "proxy_cpu_s": cpu,
                        "cpu_us_per_request": (cpu * 1e6 / done) if (cpu is not None and done)
                        else None,
                        "loadavg_before": load_before, "loadavg_after": loadavg(),
                    }
                    runs.append(row)
                    print(json.dumps(row), flush=True)
    finally:
        for p in procs:
            p.kill()
            p.wait()

    summary = summarize(runs, chosen, names)
    with open(args.out, "w") as f:
        json.dump({"command": " ".join([sys.argv[0]] + sys.argv[1:]), "commands": commands,
                   "reps": args.reps, "duration_s": args.duration, "cpus": os.cpu_count(),
                   "summary": summary, "runs": runs}, f, indent=1)
    print_summary(summary)


def summarize(runs, cases, names):
    out = []
    for case in cases:
        for name in names:
            rows = [r for r in runs if r["case"] == case and r["target"] == name]
            if not rows:
                continue
            med = lambda k: statistics.median(r[k] for r in rows)
            entry = {"case": case, "target": name, "runs": len(rows),
                     "carried_rps": med("carried_rps"), "p50_us": med("p50_us"),
                     "p99_us": med("p99_us"), "errors": sum(r["errors"] for r in rows),
                     "loadavg_median": statistics.median(r["loadavg_before"] for r in rows)}
            if rows[0]["cpu_us_per_request"] is not None:
                entry["cpu_us_per_request"] = med("cpu_us_per_request")
                # Per-repetition ratio to nutcracker, then the median of the ratios.
                ratios = []
                for r in rows:
                    nc = [x for x in runs if x["case"] == case and x["rep"] == r["rep"]
                          and x["target"] == "nutcracker"]
                    if nc and nc[0]["cpu_us_per_request"]:
                        ratios.append(r["cpu_us_per_request"] / nc[0]["cpu_us_per_request"])
                if ratios:
                    entry["cpu_ratio_to_nutcracker_median"] = statistics.median(ratios)
                    entry["cpu_ratio_to_nutcracker_range"] = [min(ratios), max(ratios)]
            out.append(entry)
    return out


def print_summary(summary):
    print(f"\n{'case':<15}{'target':<16}{'carried':>10}{'cpu_us/req':>12}{'x nc':>7}"
          f"{'p50_us':>9}{'p99_us':>9}{'errors':>8}{'load':>6}")
    for e in summary:
        cpu = e.get("cpu_us_per_request")
        ratio = e.get("cpu_ratio_to_nutcracker_median")
        print(f"{e['case']:<15}{e['target']:<16}{e['carried_rps']:>10.0f}"
              f"{(f'{cpu:.1f}' if cpu is not None else '-'):>12}"
              f"{(f'{ratio:.2f}' if ratio is not None else '-'):>7}"
              f"{e['p50_us']:>9.0f}{e['p99_us']:>9.0f}{e['errors']:>8}{e['loadavg_median']:>6.1f}")


if __name__ == "__main__":
    sys.exit(main())
