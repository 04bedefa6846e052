#!/usr/bin/env python3
"""Counts what one server spends per request under the tier experiment's per-server load
(`../loopback-size-aware-cut/per-server.toml` at RATE requests/s over 4 connections, as
`../loopback-size-aware-cut/profile.py` drives it): wake-ups (voluntary context switches)
of its workers, `epoll_rearms` from `stats sizeaware` where the binary has it, and in a
second run of its own the system calls (`strace -c -f`, which slows the server, so nothing
else is read from that run). Counts, not times: the host's load does not enter them. The
server's CPU time per request (every thread's run time, /proc/PID/task/*/schedstat) is
read too, but it is a time: on a loaded host it is a hint, not a figure to judge by (this
machine's hypervisor offers no instruction counter to `perf stat`).

    python3 count.py OUT.json LABEL=BINARY ... [--kinds pinned,size-aware] [--reps 2]

Runs are interleaved: for each repetition, every binary, every kind. memcached is run once
per repetition as the reference. The bench is the last binary's.
"""
import argparse, glob, json, os, re, signal, socket, statistics, subprocess, time

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOAD = os.path.join(HERE, "..", "loopback-size-aware-cut", "per-server.toml")
RATE = float(os.environ.get("RATE", "250"))
WINDOW = float(os.environ.get("WINDOW", "5"))


def server_cmd(binary, kind, port):
    if kind == "memcached":
        return ["/usr/bin/memcached", "-U", "0", "-t", "4", "-m", "128", "-p", str(port),
                "-l", "127.0.0.1", "-u", "root"]
    return [binary, "serve", "-t", "4", "-m", "128", "-p", str(port), "-l", "127.0.0.1",
            "--dispatch", kind]


def wakeups_and_cpu(pid):
    """Voluntary context switches of the worker threads (memcached's and tailtrim's), and
    every thread's run time in ns."""
    woke, cpu_ns = 0, 0
    for task in glob.glob(f"/proc/{pid}/task/*"):
        try:
            comm = open(task + "/comm").read().strip()
            status = open(task + "/status").read()
            cpu_ns += int(open(task + "/schedstat").read().split()[0])
        except OSError:
            continue
        if comm.startswith(("worker", "mc-worker")):
            woke += int(re.search(r"^voluntary_ctxt_switches:\s+(\d+)", status, re.M).group(1))
    return woke, cpu_ns


def sizeaware_stat(port, name):
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"stats sizeaware\r\n")
        data = b""
        while not data.endswith(b"END\r\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    m = re.search(rb"STAT " + name.encode() + rb" (\d+)", data)
    return int(m.group(1)) if m else None


def one_run(binary, bench_binary, kind, port, trace):
    server = subprocess.Popen(server_cmd(binary, kind, port), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    bench = [bench_binary, "bench", "-s", f"127.0.0.1:{port}", "--workload-file", WORKLOAD, "-q"]
    subprocess.run(bench + ["--preload-only"], check=True, stdout=subprocess.DEVNULL)
    load = subprocess.Popen(bench + ["--no-preload", "-r", str(RATE), "-d", str(WINDOW + 3),
                                     "--warmup", "1", "-c", "4"], stdout=subprocess.DEVNULL)
    time.sleep(1.5)
    out = {"kind": kind}
    rearms0 = sizeaware_stat(port, "epoll_rearms") if kind != "memcached" else None
    woke0, cpu0 = wakeups_and_cpu(server.pid)
    t0 = time.time()
    if trace:
        tracer = subprocess.Popen(["strace", "-c", "-f", "-p", str(server.pid), "-o", trace],
                                  stderr=subprocess.DEVNULL)
        time.sleep(WINDOW)
        tracer.send_signal(signal.SIGINT)
        tracer.wait()
    else:
        time.sleep(WINDOW)
    t1 = time.time()
    woke1, cpu1 = wakeups_and_cpu(server.pid)
    rearms1 = sizeaware_stat(port, "epoll_rearms") if kind != "memcached" else None
    load.wait()
    server.terminate()
    server.wait()
    requests = RATE * (t1 - t0)
    out["requests"] = round(requests)
    if trace:
        calls = {}
        for line in open(trace):
            f = line.split()
            if len(f) >= 5 and f[-1] != "total" and f[3].isdigit():
                calls[f[-1]] = int(f[3])
        out["syscalls_per_request"] = {k: round(v / requests, 3) for k, v in sorted(calls.items())}
    else:
        out["wakeups_per_request"] = round((woke1 - woke0) / requests, 3)
        out["cpu_us_per_request_loaded_host"] = round((cpu1 - cpu0) / 1000 / requests, 1)
    if rearms0 is not None and rearms1 is not None:
        out["epoll_rearms_per_request"] = round((rearms1 - rearms0) / requests, 3)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("binaries", nargs="+", help="LABEL=PATH")
    ap.add_argument("--kinds", default="pinned,size-aware")
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args()
    binaries = [b.split("=", 1) for b in args.binaries]
    bench_binary = binaries[-1][1]
    port = 23400
    runs = []
    for rep in range(args.reps):
        plan = [("memcached", None, "memcached")] + [
            (label, path, kind) for label, path in binaries for kind in args.kinds.split(",")]
        for label, path, kind in plan:
            for trace in ([None, f"/tmp/strace-{label}-{kind}.txt"] if rep == 0 else [None]):
                port += 1
                run = one_run(path, bench_binary, kind, port, trace)
                run.update(binary=label, rep=rep + 1, strace=bool(trace))
                print(json.dumps(run), flush=True)
                runs.append(run)
    summary = []
    for label, kind in dict.fromkeys((r["binary"], r["kind"]) for r in runs):
        mine = [r for r in runs if (r["binary"], r["kind"]) == (label, kind)]
        counted = [r for r in mine if not r["strace"]]
        row = {"binary": label, "kind": kind, "runs": len(counted)}
        for key in ("wakeups_per_request", "cpu_us_per_request_loaded_host",
                    "epoll_rearms_per_request"):
            values = [r[key] for r in counted if r.get(key) is not None]
            if values:
                row[key] = statistics.median(values)
        traced = [r for r in mine if r["strace"]]
        if traced:
            row["syscalls_per_request"] = traced[0]["syscalls_per_request"]
        summary.append(row)
    meta = {"rate": RATE, "window_s": WINDOW, "load_average": os.getloadavg(),
            "host": "AMD EPYC, 2 cores, kernel " + os.uname().release}
    json.dump({"metadata": meta, "summary": summary, "runs": runs}, open(args.out, "w"), indent=1)


if __name__ == "__main__":
    main()
