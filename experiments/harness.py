"""Shared pieces of the experiments that load a server or proxy and count its CPU per request.

Used by experiments/proxy/run.py and experiments/throughput/run.py (each inserts this folder
into sys.path): ports, processes, CPU time from /proc/PID/stat, the load commands (the Go
closed-loop generator in proxy/closedloop/ and the open-loop `tailtrim bench`), one measured
run, and the per-repetition ratios to a reference target with their median and range. The
latency histograms runs keep (hdrhistogram's V2, base64) are read with the hdrhistogram
package (`hdr_values`, `hdr_percentile`), percentiles as the Rust harness reads them.
"""

import argparse
import base64
import json
import math
import os
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
import zlib

EXPERIMENTS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(EXPERIMENTS)
CLOSEDLOOP_SRC = os.path.join(EXPERIMENTS, "proxy", "closedloop")
TICK = os.sysconf("SC_CLK_TCK")
os.environ["PATH"] += os.pathsep + "/usr/local/go/bin"


def arg_parser(doc, bin_help, bench_bin_help):
    """A parser with the options every experiment takes first: --bin, --bench-bin, --reps and
    --duration (seconds per run)."""
    parser = argparse.ArgumentParser(description=doc,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", action="append", default=[], help=bin_help)
    parser.add_argument("--bench-bin", default=None, help=bench_bin_help)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--duration", type=int, default=3)
    return parser


def parse_args(parser, here):
    """Adds --no-pin and --out (default: results.json in `here`) last and parses. Returns the
    arguments, the --bin pairs [NAME, "PATH [FLAGS...]"] (default tailtrim=target/release/
    tailtrim), the bench binary (default: the first --bin's) and pin(cpu), the taskset prefix
    of a command (none with --no-pin)."""
    parser.add_argument("--no-pin", action="store_true")
    parser.add_argument("--out", default=os.path.join(here, "results.json"))
    parser.add_argument("--replot", action="store_true",
                        help="do not run: recompute every run's p50/p99 from its histogram "
                        "(fail on a mismatch), then the summary and the plot of --out")
    args = parser.parse_args()
    bins = [b.split("=", 1) for b in (args.bin or ["tailtrim=target/release/tailtrim"])]
    bench_bin = args.bench_bin or bins[0][1].split()[0]

    def pin(cpu):
        return [] if args.no_pin else ["taskset", "-c", str(cpu)]

    return args, bins, bench_bin, pin


class RunRecorder:
    """The run's metadata, with the field names of the Rust harness's `RunMetadata`
    (crates/lab/src/meta.rs): command, commit and dirty flag, CPU model, cores, kernel, start
    time, wall seconds, load average at the start and end and its highest 1-minute value
    (sampled every second), the hypervisor's steal share, and the external tools' versions."""

    def __init__(self):
        self.started = time.monotonic()
        self.metadata = {
            "command": " ".join(sys.argv),
            "commit": _git(["rev-parse", "HEAD"]) or "unknown",
            "dirty": bool(_git(["status", "--porcelain", "--untracked-files=no"])),
            "cpu_model": _cpu_model(),
            "cores": os.cpu_count(),
            "kernel": _read("/proc/sys/kernel/osrelease").strip(),
            "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "load_average_start": loadavg_fields(),
        }
        self.jiffies = _cpu_jiffies()
        self.highest = _one_minute(self.metadata["load_average_start"])
        self.tools = {}
        self.stopping = threading.Event()
        self.sampler = threading.Thread(target=self._sample, daemon=True)
        self.sampler.start()

    def _sample(self):
        while not self.stopping.wait(1.0):
            self.highest = max(self.highest, _one_minute(loadavg_fields()))

    def tool(self, name, command):
        """Records the first line `command` prints (e.g. `memcached -V`)."""
        try:
            got = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True, timeout=10)
            self.tools[name] = (got.stdout.strip().splitlines() or [""])[0]
        except (OSError, subprocess.SubprocessError):
            self.tools[name] = "unknown"

    def snapshot(self):
        """The metadata so far."""
        out = dict(self.metadata)
        out["wall_seconds"] = time.monotonic() - self.started
        out["load_average_end"] = loadavg_fields()
        out["load_average_max"] = max(self.highest, _one_minute(out["load_average_end"]))
        end = _cpu_jiffies()
        if self.jiffies and end:
            total = max(end[0] - self.jiffies[0], 1)
            out["steal_percent"] = (end[1] - self.jiffies[1]) / total * 100.0
        if self.tools:
            out["tools"] = dict(self.tools)
        return out


def recorder_for(bins, extra_tools=()):
    """A started `RunRecorder` with the versions of memcached, every `--bin` target and
    `extra_tools` ((name, command) pairs)."""
    recorder = RunRecorder()
    recorder.tool("memcached", ["memcached", "-V"])
    for name, spec in bins:
        recorder.tool(name, [spec.split()[0], "--version"])
    for name, command in extra_tools:
        recorder.tool(name, command)
    return recorder


def _git(args):
    try:
        got = subprocess.run(["git", *args], cwd=REPO, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
    except OSError:
        return None
    return got.stdout.strip() if got.returncode == 0 else None


def _read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _cpu_model():
    for line in _read("/proc/cpuinfo").splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name":
            return value.strip()
    return ""


def _cpu_jiffies():
    """(total of the first eight fields, steal) of /proc/stat's `cpu` line."""
    fields = _read("/proc/stat").split("\n", 1)[0].split()[1:]
    values = [int(f) for f in fields if f.isdigit()]
    return (sum(values[:8]), values[7]) if len(values) >= 8 else None


def loadavg_fields():
    """/proc/loadavg's 1, 5 and 15-minute load as one string."""
    return " ".join(_read("/proc/loadavg").split()[:3])


def _one_minute(fields):
    try:
        return float(fields.split()[0])
    except (IndexError, ValueError):
        return 0.0


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


def user_sys_seconds(pid):
    """The user and the system CPU time of `pid` so far (utime, stime of /proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / TICK, int(fields[12]) / TICK


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[0] is the state (3rd field of stat); utime and stime are the 14th and 15th.
    return (int(fields[11]) + int(fields[12])) / TICK


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def rotated(names, rep):
    """The targets in the order of repetition `rep` (the order rotates with the repetition)."""
    k = rep % len(names)
    return names[k:] + names[:k]


def start(procs, cmd, port, **popen_args):
    """Starts `cmd`, appends it to `procs` (stopped by stop_all) and waits for `port`."""
    p = subprocess.Popen(cmd, **popen_args)
    procs.append(p)
    wait_port(port)
    return p


def stop_all(procs):
    for p in procs:
        p.kill()
        p.wait()


def memcached_cmd(port, threads):
    """Stock memcached on 127.0.0.1:port, no UDP, 256 MB (`-u root` when running as root)."""
    user = ["-u", "root"] if os.geteuid() == 0 else []
    return ["memcached", "-l", "127.0.0.1", "-p", str(port), "-U", "0", "-m", "256",
            "-t", str(threads)] + user


def build_closedloop(tmp=None):
    """`go build` of proxy/closedloop/ into target/experiments/ of the repository (`tmp` is
    not used: the binary's path is recorded in results); returns the binary's path."""
    del tmp
    out = os.path.join(REPO, "target", "experiments")
    os.makedirs(out, exist_ok=True)
    closedloop = os.path.join(out, "closedloop")
    subprocess.run(["go", "build", "-o", closedloop, "."], check=True, cwd=CLOSEDLOOP_SRC)
    return closedloop


def shown(cmd, tmp=None):
    """A command as results record it: paths inside the repository made relative to its root,
    the run's scratch folder `tmp` written as TMP."""
    text = " ".join(str(part) for part in cmd)
    if tmp:
        text = text.replace(tmp, "TMP")
    return text.replace(REPO + os.sep, "")


def closed_cmd(closedloop, port, conns, depth, keys, duration):
    return [closedloop, "-s", f"127.0.0.1:{port}", "-c", str(conns), "-depth", str(depth),
            "-keys", str(keys), "-d", f"{duration}s"]


def closed_preload(closedloop, port):
    """Sets every key of the closed-loop generator once."""
    subprocess.run([closedloop, "-s", f"127.0.0.1:{port}", "-preload"], check=True, timeout=120)


def bench_cmd(bench_bin, port, workload, rate, in_flight, duration, out):
    """Open-loop `tailtrim bench` of the workload file at `rate`, 8 connections, JSON to `out`."""
    return [bench_bin, "bench", "-s", f"127.0.0.1:{port}", "--workload-file", workload,
            "-r", str(rate), "-c", "8", "--max-in-flight", str(in_flight), "-d", str(duration),
            "--warmup", "0", "--no-preload", "-q", "--json", out]


def bench_preload(bench_bin, port, workload):
    """Sets the keys of the workload file once (`tailtrim bench --preload-only`)."""
    subprocess.run([bench_bin, "bench", "-s", f"127.0.0.1:{port}", "--workload-file", workload,
                    "--preload-only", "-q"], check=True, stdout=subprocess.DEVNULL)


def measure(cmd, pid, cpu_key, bench_out=None, latency_class="all"):
    """Runs one load and returns its figures with the CPU time `pid` used meanwhile.

    `cmd` is a closedloop command (its JSON on stdout) or, with `bench_out`, a `tailtrim bench`
    command writing its JSON there (latencies of `latency_class`). The CPU time (None without a
    pid) is reported under `cpu_key` and divided by the requests completed.
    """
    load_before = loadavg()
    cpu_before = cpu_seconds(pid) if pid else 0.0
    split_before = user_sys_seconds(pid) if pid else None
    if bench_out is None:
        got = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True)
        cpu = (cpu_seconds(pid) - cpu_before) if pid else None
        result = json.loads(got.stdout)
        carried, timeouts, hit_ratio = result["rps"], 0, None
        p50, p99 = result["p50_us"], result["p99_us"]
        histogram = ({"histogram_us": compact_pairs(result["histogram_us"])}
                     if "histogram_us" in result else {})
    else:
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        cpu = (cpu_seconds(pid) - cpu_before) if pid else None
        with open(bench_out) as f:
            result = json.load(f)
        carried, timeouts = result["achieved_rps"], result["timeouts"]
        hit_ratio = result["hit_ratio"]
        p50 = result["classes"][latency_class]["p50_us"]
        p99 = result["classes"][latency_class]["p99_us"]
        encoded = result.get("histograms", {}).get(latency_class)
        histogram = {"histogram_hdr_ns": encoded} if encoded else {}
    done = result["completed"]
    # The same CPU time split into user space and kernel (tick-sampled by the kernel, so only
    # medians over repetitions mean much).
    split = {}
    if split_before is not None:
        for key, before, after in zip(("user_us_per_request", "sys_us_per_request"),
                                      split_before, user_sys_seconds(pid)):
            split[key] = (after - before) * 1e6 / done if done else None
    return {
        "carried_rps": carried, "completed": done, "errors": result["errors"],
        "timeouts": timeouts, "hit_ratio": hit_ratio, "p50_us": p50, "p99_us": p99,
        cpu_key: cpu,
        "cpu_us_per_request": (cpu * 1e6 / done) if (cpu is not None and done) else None,
        **split, "loadavg_before": load_before, "loadavg_after": loadavg(), **histogram,
    }


# The compressed V2 cookie the hdrhistogram package reads (the Rust harness and `tailtrim
# bench --json` keep the uncompressed V2 form, cookie 0x1c849313, which deflated behind this
# header is the same histogram).
V2_DEFLATED_COOKIE = 0x1C849314


def hdr_histogram(encoded):
    """A histogram kept in hdrhistogram's V2 serialization, base64 (what `tailtrim bench
    --json` and the Rust harness keep), decoded by the hdrhistogram package."""
    from hdrh.histogram import HdrHistogram  # only the scripts that decode need the package

    deflated = zlib.compress(base64.b64decode(encoded))
    header = struct.pack(">II", V2_DEFLATED_COOKIE, len(deflated))
    return HdrHistogram.decode(base64.b64encode(header + deflated))


def hdr_values(encoded):
    """[(value, count)] of a V2 histogram's non-empty buckets, each at the bucket's highest
    equivalent value (what `hdr_percentile` reports)."""
    histogram = hdr_histogram(encoded)
    if not histogram.get_total_count():
        return []
    first = histogram.get_counts_array_index(histogram.get_min_value())
    last = histogram.get_counts_array_index(histogram.get_max_value())
    counts = ((index, histogram.get_count_at_index(index)) for index in range(first, last + 1))
    return [(histogram.get_highest_equivalent_value(histogram.get_value_from_index(index)), count)
            for index, count in counts if count]


def hdr_percentile(encoded, percentile):
    """The value at `percentile` (0-100) of a V2 histogram as the Rust harness reads it
    (hdrhistogram's `value_at_quantile`: the highest value equivalent to the bucket holding
    rank ceil(q * count); the package's own `get_value_at_percentile` rounds the rank to the
    nearest instead); None when empty."""
    values = hdr_values(encoded)
    total = sum(count for _, count in values)
    if not total:
        return None
    quantile = min(percentile / 100.0, 1.0)
    rank, running = max(math.ceil(quantile * total), 1), 0
    for value, count in values:
        running += count
        if running >= rank:
            if quantile == 0.0:
                return hdr_histogram(encoded).get_lowest_equivalent_value(value)
            return value
    return None


def check_bench_report(report, what):
    """Recomputes the p50 and p99 of every class of a `tailtrim bench --json` run (or sweep
    point) from the histograms it kept; raises on a mismatch. True when it kept them."""
    histograms = report.get("histograms")
    if not histograms:
        return False
    for name, summary in report["classes"].items():
        encoded = histograms.get(name)
        if encoded is None:
            if summary.get("count", 0):
                raise ValueError(f"{what}: class {name} has requests but no histogram")
            continue
        for key, percentile in (("p50_us", 50.0), ("p99_us", 99.0)):
            value = hdr_percentile(encoded, percentile) / 1000.0
            if abs(value - summary[key]) > 1e-6:
                raise ValueError(f"{what}: class {name} {key} {summary[key]} but its "
                                 f"histogram says {value}")
    return True


def metadata_line(metadata_list):
    """One line on the runs' metadata: builds, commits, start, highest load average."""
    if not metadata_list:
        return "no run kept metadata"
    builds = sorted({m.get("build", "unknown") for m in metadata_list})
    commits = sorted({m["commit"][:7] + ("-dirty" if m["dirty"] else "")
                      for m in metadata_list})
    starts = sorted(m["started_utc"] for m in metadata_list)
    return (f"{len(metadata_list)} runs with metadata, build {', '.join(b[:7] for b in builds)}, "
            f"tree {', '.join(commits)}, {starts[0]} to {starts[-1]}, highest 1-minute load "
            f"average {max(m['load_average_max'] for m in metadata_list):.2f}")


def compact_pairs(pairs):
    """closedloop's [µs, count] pairs as one string, `µs:count,...` (kept per run)."""
    return ",".join(f"{value}:{count}" for value, count in pairs)


def run_percentile(run, percentile):
    """A run's latency percentile (µs) from the histogram it kept: closedloop's
    `µs:count,...` pairs (the value at rank floor(p * (n - 1))) or the bench's V2 histogram in
    nanoseconds. None when the run kept no histogram."""
    if "histogram_us" in run:
        pairs = [[int(x) for x in pair.split(":")] for pair in run["histogram_us"].split(",")
                 if pair]
        total = sum(count for _, count in pairs)
        if not total:
            return 0
        rank, seen = int(percentile / 100.0 * (total - 1)), 0
        for value, count in pairs:
            seen += count
            if seen > rank:
                return value
    if "histogram_hdr_ns" in run:
        value = hdr_percentile(run["histogram_hdr_ns"], percentile)
        return None if value is None else value / 1000.0
    return None


def check_percentiles(runs):
    """Recomputes every run's p50 and p99 from its histogram; raises on a mismatch. Returns
    how many runs had one."""
    checked = 0
    for run in runs:
        for key, percentile in (("p50_us", 50.0), ("p99_us", 99.0)):
            value = run_percentile(run, percentile)
            if value is None:
                continue
            if abs(value - run[key]) > 1e-6:
                raise ValueError(f"{run['case']} {run['target']} rep {run['rep']}: {key} "
                                 f"{run[key]} but its histogram says {value}")
        checked += any(k in run for k in ("histogram_us", "histogram_hdr_ns"))
    return checked


def shown_row(row):
    """A run's row as printed while the experiment goes on: without its histogram."""
    return {k: v for k, v in row.items() if not k.startswith("histogram_")}


def read_results(path):
    """A results.json written by `write_results`."""
    with open(path) as f:
        return json.load(f)


def summarize(runs, cases, names, reference, ratios=(("cpu", "cpu_us_per_request"),)):
    """Medians per case and target; for every (prefix, metric) of `ratios`, the ratio of the
    metric to the `reference` target's in the same case and repetition, then the median and
    range of those ratios (`<prefix>_ratio_to_<reference>_median` and `_range`)."""
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
            for key in ("cpu_us_per_request", "user_us_per_request", "sys_us_per_request"):
                if rows[0].get(key) is not None:
                    entry[key] = med(key)
            for prefix, metric in ratios:
                if rows[0].get(metric) is None:
                    continue
                # Per-repetition ratio to the reference, then the median of the ratios.
                values = []
                for r in rows:
                    ref = [x for x in runs if x["case"] == case and x["rep"] == r["rep"]
                           and x["target"] == reference]
                    if ref and ref[0].get(metric) and r.get(metric) is not None:
                        values.append(r[metric] / ref[0][metric])
                if values:
                    entry[f"{prefix}_ratio_to_{reference}_median"] = statistics.median(values)
                    entry[f"{prefix}_ratio_to_{reference}_range"] = [min(values), max(values)]
            out.append(entry)
    return out


def print_summary(summary, ratio_columns):
    """The summary as a table; `ratio_columns` lists (summary key, column header)."""
    widths = [max(7, len(header) + 1) for _, header in ratio_columns]
    print(f"\n{'case':<15}{'target':<16}{'carried':>10}{'cpu_us/req':>12}"
          + "".join(f"{header:>{w}}" for (_, header), w in zip(ratio_columns, widths))
          + f"{'p50_us':>9}{'p99_us':>9}{'errors':>8}{'load':>6}")
    for e in summary:
        cpu = e.get("cpu_us_per_request")
        ratios = ""
        for (key, _), w in zip(ratio_columns, widths):
            ratio = e.get(key)
            ratios += f"{(f'{ratio:.2f}' if ratio is not None else '-'):>{w}}"
        print(f"{e['case']:<15}{e['target']:<16}{e['carried_rps']:>10.0f}"
              f"{(f'{cpu:.1f}' if cpu is not None else '-'):>12}" + ratios
              + f"{e['p50_us']:>9.0f}{e['p99_us']:>9.0f}{e['errors']:>8}"
              f"{e['loadavg_median']:>6.1f}")


def write_results(path, commands, reps, duration, summary, runs, recorder=None, **extra):
    """The JSON results: the run's metadata (a `RunRecorder`'s), the command line, the exact
    commands run, settings, summary, runs."""
    metadata = {"metadata": recorder.snapshot()} if recorder else {}
    with open(path, "w") as f:
        json.dump({**metadata, "command": " ".join(sys.argv), "commands": commands, "reps": reps,
                   "duration_s": duration, "cpus": os.cpu_count(), **extra,
                   "summary": summary, "runs": runs}, f, indent=1)
