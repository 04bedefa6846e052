#!/usr/bin/env python3
"""One server (memcached, or `tailtrim serve --dispatch KIND [EXTRA...]`) under the tier
experiment's per-server load (`../loopback-size-aware-cut/per-server.toml` at RATE requests/s,
4 connections as the proxy opens them): each thread's CPU time (from /proc's schedstat, in ns)
and voluntary context switches (wake-ups) per request over the middle of the run. Prints one
line and, with OUT=FILE.json, adds the run to FILE.json (every run, and medians per label). CPU times are read on
whatever host runs it; the wake-ups are counts.

    python3 threads.py TAILTRIM_BINARY memcached|pinned|size-aware PORT [EXTRA...]
"""
import os, subprocess, sys, time, glob, collections, json
W = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "loopback-size-aware-cut", "per-server.toml")
binary, kind, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
extra = sys.argv[4:]
rate = float(os.environ.get("RATE", "250")); dur = float(os.environ.get("DUR", "12"))
if kind == "memcached":
    cmd = ["/usr/bin/memcached", "-U", "0", "-t", "4", "-m", "128", "-p", str(port), "-l", "127.0.0.1", "-u", "root"]
else:
    cmd = [binary, "serve", "-t", "4", "-m", "128", "-p", str(port), "-l", "127.0.0.1", "--dispatch", kind] + extra
server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
time.sleep(0.5)
bench = [binary, "bench", "-s", f"127.0.0.1:{port}", "--workload-file", W, "-q"]
subprocess.run(bench + ["--preload-only"], check=True, stdout=subprocess.DEVNULL)
def threads():
    out = {}
    for task in glob.glob(f"/proc/{server.pid}/task/*"):
        try:
            comm = open(task + "/comm").read().strip()
            ns = int(open(task + "/schedstat").read().split()[0])
            status = open(task + "/status").read()
            vol = int(status.split("voluntary_ctxt_switches:")[1].split()[0])
            out[task.rsplit("/", 1)[1]] = (comm, ns, vol)
        except Exception:
            pass
    return out
run = subprocess.Popen(bench + ["--no-preload", "-r", str(rate), "-d", str(dur), "--warmup", "1", "-c", "4"], stdout=subprocess.DEVNULL)
time.sleep(1.5)
before = threads(); t0 = time.time()
time.sleep(dur - 3)
after = threads(); t1 = time.time()
run.wait()
sizeaware = {}
if kind == "size-aware":
    import socket
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"stats sizeaware\r\n")
        text = b""
        while not text.endswith(b"END\r\n"):
            text += sock.recv(65536)
    for line in text.decode().splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in ("help_wakeups", "help_wakeups_idle", "large_worker_serves", "handoffs", "small_workers", "large_workers"):
            sizeaware[parts[1]] = int(parts[2])
server.terminate(); server.wait()
reqs = rate * (t1 - t0)
agg = collections.OrderedDict()
for tid, (comm, ns, vol) in sorted(after.items()):
    b = before.get(tid, (comm, 0, 0))
    a = agg.setdefault(comm, [0, 0]); a[0] += ns - b[1]; a[1] += vol - b[2]
tot = [sum(v[0] for v in agg.values()), sum(v[1] for v in agg.values())]
label = os.environ.get("LABEL", kind)
parts = " ".join(f"{c}={v[0]/1e3/reqs:.1f}/{v[1]/reqs:.2f}" for c, v in agg.items() if v[0] > 0)
print(f"{label:22s} TOTAL {tot[0]/1e3/reqs:6.1f} us/req wake {tot[1]/reqs:5.2f} | {parts}", flush=True)
if os.environ.get("OUT"):
    # OUT is a JSON file: every run, and per label the medians over its runs.
    path = os.environ["OUT"]
    kept = json.load(open(path)) if os.path.exists(path) else {"runs": []}
    kept["runs"].append({
        "label": label, "kind": kind, "extra": extra, "rate": rate,
        "requests": round(reqs), "cpu_us_per_request": round(tot[0] / 1e3 / reqs, 2),
        "wakeups_per_request": round(tot[1] / reqs, 3),
        "stats_sizeaware_whole_run": sizeaware,
        "threads": {c: {"cpu_us_per_request": round(v[0] / 1e3 / reqs, 2),
                        "wakeups_per_request": round(v[1] / reqs, 3)} for c, v in agg.items()},
    })
    import statistics
    kept["summary"] = [
        {"label": name, "runs": len(runs),
         "wakeups_per_request_median": statistics.median(r["wakeups_per_request"] for r in runs),
         "cpu_us_per_request_median": statistics.median(r["cpu_us_per_request"] for r in runs)}
        for name in dict.fromkeys(r["label"] for r in kept["runs"])
        for runs in [[r for r in kept["runs"] if r["label"] == name]]
    ]
    with open(path, "w") as out:
        json.dump(kept, out, indent=1)
