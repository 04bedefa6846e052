#!/usr/bin/env python3
"""What the proxy of the loopback tier costs per request, by setting: 8 memcached (Debian's,
`-t 4`) behind one proxy (nutcracker, or `tailtrim proxy -t 1` with the setting's flags), the
tier experiment's whole workload (`tier.toml`: `experiment tier`'s request mix and pools) sent
open loop through it at RATE requests/s over 128 connections. Per setting and repetition: the
proxy's CPU (ns, from /proc's schedstat, every thread) and its context switches per request
over the middle of the run, and the backends' CPU per request. Settings alternate inside each
repetition, the order rotating. With STRACE=1 each run instead counts the proxy's system calls
by name (`strace -c -f`; counts only, the times strace reports are not used). With
CALLGRIND=1 the proxy runs under `valgrind --tool=callgrind` (counters zeroed after the preload;
use a low RATE) and each run reports the proxy's user-space instructions per request, the
callgrind output kept beside OUT. Prints a table; OUT=FILE.json writes every run and the
medians per setting (with each run's proxy CPU divided by the backends' CPU of the same run: a
host that runs slower for a while slows both, so the ratio compares settings across runs).
REPLOT=FILE.json recomputes FILE's medians from its runs and rewrites it. BUILDS=A=PATH,B=PATH
runs every tailtrim setting once per build (named SETTING@A, SETTING@B), alternated with the rest.
BACKENDS=memcached,size-aware,pinned runs every setting over each kind of backend (memcached:
Debian's, the default; size-aware or pinned: `tailtrim serve -t 4 --dispatch KIND` of the
binary under test, as the loopback tier runs its servers), named SETTING~KIND past the first.

    python3 proxy.py TAILTRIM_BINARY [REPS]
"""
import collections, glob, json, os, shutil, statistics, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", ".."))
from harness import free_port, wait_port  # noqa: E402  (experiments/harness.py)
WORKLOAD = os.path.join(HERE, "tier.toml")
COMMON = ["-t", "1", "--timeout-ms", "20000", "--server-failure-limit", "1000000000"]
CONNECTIONS = "4"  # per backend, as the tier runs the proxy (a setting may give its own)
SETTINGS = collections.OrderedDict([
    ("nutcracker", None),
    ("batch", ["--planner", "batch"]),
    ("batch+avoid-slow", ["--planner", "batch", "--connection-choice", "avoid-slow"]),
    # batch over as many connections per backend as a priority planner reserves (one per class)
    ("batch+5conn", ["--planner", "batch", "--server-connections", "5"]),
    ("auto", ["--planner", "auto"]),
    ("auto+strict", ["--planner", "auto", "--priority-order", "strict"]),
    ("everything", ["--planner", "auto", "--priority-order", "strict",
                    "--connection-choice", "avoid-slow"]),
])

binary = sys.argv[1] if len(sys.argv) > 1 else None
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
rate = float(os.environ.get("RATE", "800"))
duration = float(os.environ.get("DUR", "14"))
strace = os.environ.get("STRACE") == "1"
callgrind = os.environ.get("CALLGRIND") == "1"
only = os.environ.get("SETTINGS")
names = [name for name in SETTINGS if not only or name in only.split(",")]
builds = dict(pair.split("=", 1) for pair in os.environ["BUILDS"].split(",")) if os.environ.get(
    "BUILDS") else {}
if builds:
    names = [f"{name}@{build}" if SETTINGS[name] else name for name in names
             for build in (builds if SETTINGS[name] else [None])]
BACKEND_KINDS = ("memcached", "size-aware", "pinned")
backend_kinds = os.environ.get("BACKENDS", "memcached").split(",")
if any(kind not in BACKEND_KINDS for kind in backend_kinds):
    sys.exit(f"BACKENDS: each of {', '.join(BACKEND_KINDS)}")
names = [name if kind == backend_kinds[0] else f"{name}~{kind}"
         for name in names for kind in backend_kinds]


def parse_name(name):
    """(setting, build, backend kind) of a run's name: SETTING[@BUILD][~KIND]."""
    rest, _, kind = name.partition("~")
    setting, _, build = rest.partition("@")
    return setting, build, kind or backend_kinds[0]


def tasks(pid):
    """(CPU ns, context switches) summed over every thread of pid."""
    ns = switches = 0
    for task in glob.glob(f"/proc/{pid}/task/*"):
        try:
            ns += int(open(task + "/schedstat").read().split()[0])
            status = open(task + "/status").read()
            for field in ("voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:"):
                switches += int(status.split(field)[1].split()[0])
        except (OSError, IndexError, ValueError):
            pass
    return ns, switches


def start_backends(kind):
    ports = [free_port() for _ in range(8)]
    shape = ["-t", "4", "-m", "256", "-l", "127.0.0.1"]
    if kind == "memcached":
        commands = [["/usr/bin/memcached", "-U", "0", "-u", "root", "-p", str(port)] + shape
                    for port in ports]
    else:
        commands = [[binary, "serve", "--dispatch", kind, "-p", str(port)] + shape
                    for port in ports]
    procs = [subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for command in commands]
    for port in ports:
        wait_port(port)
    return ports, procs


def start_proxy(name, ports, scratch):
    port = free_port()
    backends = [f"127.0.0.1:{p}" for p in ports]
    setting, build, _ = parse_name(name)
    program = builds.get(build, binary)
    if SETTINGS[setting] is None:
        config = os.path.join(scratch, f"{name}.yml")
        with open(config, "w") as out:
            out.write(f"lab:\n  listen: 127.0.0.1:{port}\n  hash: fnv1a_64\n"
                      "  distribution: ketama\n  timeout: 20000\n  server_connections: 4\n"
                      "  servers:\n" + "".join(f"   - {b}:1\n" for b in backends))
        cmd = ["nutcracker", "-c", config, "-s", str(free_port()), "-a", "127.0.0.1"]
    else:
        cmd = [program, "proxy", "-l", f"127.0.0.1:{port}", "-s", ",".join(backends)]
        cmd += COMMON + SETTINGS[setting]
        if "--server-connections" not in SETTINGS[setting]:
            cmd += ["--server-connections", CONNECTIONS]
    if callgrind:
        out = os.path.splitext(os.environ.get("OUT", "proxy"))[0] + f".{name}.callgrind"
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"] + cmd
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port)
    return port, proc


def syscalls(path):
    """{name: calls} from an `strace -c` summary."""
    counts = {}
    for line in open(path):
        parts = line.split()
        if len(parts) >= 5 and parts[0][0].isdigit() and not line.startswith("100"):
            counts[parts[-1]] = int(parts[3])
    return counts


def one_run(name, scratch):
    ports, backends = start_backends(parse_name(name)[2])
    port, proxy = start_proxy(name, ports, scratch)
    bench = [binary, "bench", "-s", f"127.0.0.1:{port}", "--workload-file", WORKLOAD, "-q"]
    subprocess.run(bench + ["--preload-only"], check=True, stdout=subprocess.DEVNULL)
    if callgrind:
        subprocess.run(["callgrind_control", "--zero", str(proxy.pid)], check=True,
                       stdout=subprocess.DEVNULL)
    run = subprocess.Popen(bench + ["--no-preload", "-r", str(rate), "-d", str(duration),
                                    "--warmup", "1", "-c", "128"], stdout=subprocess.DEVNULL)
    time.sleep(2)
    tracer = None
    if strace:
        summary = os.path.join(scratch, f"{name}.strace")
        tracer = subprocess.Popen(["strace", "-c", "-f", "-o", summary, "-p", str(proxy.pid)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)
    before = tasks(proxy.pid), [tasks(b.pid) for b in backends]
    t0 = time.time()
    time.sleep(duration - 4)
    after = tasks(proxy.pid), [tasks(b.pid) for b in backends]
    t1 = time.time()
    if tracer:
        tracer.send_signal(2)
        tracer.wait()
    run.wait()
    proxy.terminate(); proxy.wait()
    for b in backends:
        b.terminate(); b.wait()
    requests = rate * (t1 - t0)
    row = {"setting": name}
    if callgrind:
        out = os.path.splitext(os.environ.get("OUT", "proxy"))[0] + f".{name}.callgrind"
        totals = next(line for line in open(out) if line.startswith("totals:")
                      or line.startswith("summary:"))
        # every request of the bench's run (warm-up included) crossed the zeroed counters
        row["instructions_per_request"] = int(totals.split()[1]) / (rate * (duration + 1))
    row.update({
        "proxy_cpu_us_per_request": (after[0][0] - before[0][0]) / 1e3 / requests,
        "proxy_switches_per_request": (after[0][1] - before[0][1]) / requests,
        "backends_cpu_us_per_request":
            sum(a[0] - b[0] for a, b in zip(after[1], before[1])) / 1e3 / requests,
    })
    if tracer:
        row["syscalls_per_request"] = {k: v / requests for k, v in
                                       sorted(syscalls(summary).items(), key=lambda kv: -kv[1])}
    return row


MEDIAN_KEYS = ("proxy_cpu_us_per_request", "proxy_switches_per_request",
               "backends_cpu_us_per_request", "proxy_over_backends")


def summarize(rows, order):
    """Medians per setting, in `order`."""
    for row in rows:
        row["proxy_over_backends"] = (row["proxy_cpu_us_per_request"]
                                      / row["backends_cpu_us_per_request"])
    medians = {}
    for name in order:
        mine = [r for r in rows if r["setting"] == name]
        if mine:
            keys = MEDIAN_KEYS + (("instructions_per_request",)
                                  if "instructions_per_request" in mine[0] else ())
            medians[name] = {key: statistics.median(r[key] for r in mine) for key in keys}
    return medians


def replot(path):
    with open(path) as source:
        result = json.load(source)
    order = sorted({r["setting"] for r in result["runs"]},
                   key=lambda name: (list(SETTINGS).index(parse_name(name)[0]), name))
    result["medians"] = summarize(result["runs"], order)
    with open(path, "w") as out:
        json.dump(result, out, indent=1)


def main():
    scratch = tempfile.mkdtemp(prefix="proxy-cost-")
    rows = []
    try:
        for rep in range(reps):
            order = names[rep % len(names):] + names[:rep % len(names)]
            for name in order:
                row = one_run(name, scratch)
                row["repetition"] = rep
                rows.append(row)
                calls = row.get("syscalls_per_request")
                print(f"rep {rep} {name:18} proxy {row['proxy_cpu_us_per_request']:7.1f} us"
                      f"  switches {row['proxy_switches_per_request']:5.2f}"
                      f"  backends {row['backends_cpu_us_per_request']:7.1f} us"
                      + (" | " + " ".join(f"{k} {v:.2f}" for k, v in list(calls.items())[:8])
                         if calls else "")
                      + (f" | {row['instructions_per_request']:.0f} instructions"
                         if callgrind else ""), flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    medians = summarize(rows, names)
    print("\nmedians")
    for name, m in medians.items():
        print(f"{name:18} proxy {m['proxy_cpu_us_per_request']:7.1f} us  switches "
              f"{m['proxy_switches_per_request']:5.2f}  backends "
              f"{m['backends_cpu_us_per_request']:7.1f} us  proxy/backends "
              f"{m['proxy_over_backends']:.3f}")
    if os.environ.get("OUT"):
        host = {"cpu_model": next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                                   if l.startswith("model name")), ""),
                "kernel": os.uname().release, "cores": os.cpu_count()}
        with open(os.environ["OUT"], "w") as out:
            json.dump({"host": host, "rate": rate, "duration_s": duration, "strace": strace,
                       "runs": rows, "medians": medians}, out, indent=1)


if os.environ.get("REPLOT"):
    replot(os.environ["REPLOT"])
else:
    main()
