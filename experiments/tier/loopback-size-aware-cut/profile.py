#!/usr/bin/env python3
"""Drives one server (memcached, or `tailtrim serve --dispatch KIND`) with the tier
experiment's per-server load (per-server.toml at RATE requests/s, 4 connections as the proxy
opens) and prints each thread's voluntary context switches (wake-ups) per request, and its
CPU (clock ticks: coarse). STRACE=1 also counts the server's syscalls (strace -c -f into
strace-KIND.txt; strace slows the server, so its wake-ups are not read from that run).

    python3 profile.py TAILTRIM_BINARY size-aware|pinned|memcached PORT
"""
import os, subprocess, sys, time, glob, signal
WORKLOAD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "per-server.toml")
binary, kind, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
rate = float(os.environ.get("RATE", "250")); dur = float(os.environ.get("DUR", "10"))
strace = os.environ.get("STRACE")
if kind == "memcached":
    cmd = ["/usr/bin/memcached", "-U", "0", "-t", "4", "-m", "128", "-p", str(port), "-l", "127.0.0.1", "-u", "root"]
else:
    cmd = [binary, "serve", "-t", "4", "-m", "128", "-p", str(port), "-l", "127.0.0.1", "--dispatch", kind] + os.environ.get("EXTRA", "").split()
server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
time.sleep(0.5)
bench = [binary, "bench", "-s", f"127.0.0.1:{port}", "--workload-file", WORKLOAD, "-q"]
subprocess.run(bench + ["--preload-only"], check=True, stdout=subprocess.DEVNULL)
def threads():
    out = {}
    for task in glob.glob(f"/proc/{server.pid}/task/*"):
        try:
            comm = open(task + "/comm").read().strip()
            st = open(task + "/stat").read().rsplit(")", 1)[1].split()
            cpu = (int(st[11]) + int(st[12])) / os.sysconf("SC_CLK_TCK")
            status = open(task + "/status").read()
            vol = int(status.split("voluntary_ctxt_switches:")[1].split()[0])
            inv = int(status.split("nonvoluntary_ctxt_switches:")[1].split()[0])
            out[task.rsplit("/", 1)[1]] = (comm, cpu, vol, inv)
        except Exception:
            pass
    return out
run = subprocess.Popen(bench + ["--no-preload", "-r", str(rate), "-d", str(dur), "--warmup", "1", "-c", "4"], stdout=subprocess.DEVNULL)
time.sleep(1.5)
before = threads(); t0 = time.time()
tracer = None
if strace:
    tracer = subprocess.Popen(["strace", "-c", "-f", "-p", str(server.pid), "-o", f"strace-{kind}.txt"], stderr=subprocess.DEVNULL)
time.sleep(dur - 3)
after = threads(); t1 = time.time()
if tracer:
    tracer.send_signal(signal.SIGINT); tracer.wait()
run.wait()
server.terminate(); server.wait()
reqs = rate * (t1 - t0)
tot = [0, 0, 0]
print(f"{kind}: ~{reqs:.0f} requests in {t1-t0:.1f}s")
for tid, (comm, cpu, vol, inv) in sorted(after.items()):
    b = before.get(tid, (comm, 0, 0, 0))
    d = (cpu - b[1], vol - b[2], inv - b[3])
    tot = [x + y for x, y in zip(tot, d)]
    if d[0] > 0 or d[1] > 0:
        print(f"  {comm:16s} cpu {d[0]*1e6/reqs:7.1f} us/req  vol {d[1]/reqs:6.3f}/req  invol {d[2]/reqs:6.3f}/req")
print(f"  TOTAL            cpu {tot[0]*1e6/reqs:7.1f} us/req  vol {tot[1]/reqs:6.3f}/req  invol {tot[2]/reqs:6.3f}/req")
