#!/usr/bin/env python3
"""tailtrim serve vs stock memcached as a server: CPU per request and carried rate.

Starts memcached and one `tailtrim serve` per `--bin` (127.0.0.1, no UDP, 256 MB), once with
`-t 1` (pinned to CPU 0) and once with `-t 2` (not pinned), preloads their keys, and runs the
load generators pinned to CPU 1 (`--no-pin`: nothing pinned). For every repetition, every case
runs against every target in turn (the order rotates with the repetition); a server's CPU time
(utime + stime from /proc/PID/stat, all threads) over the run is divided by the requests it
completed, and each target's CPU per request and carried rate are divided by memcached's in the
same case and repetition before the median and range are taken.

Cases (20 B keys, 32 B values, get:set 10:1, single keys, 10k keys preloaded):
  closed-t1     -t 1 servers; 8 connections, one request in flight each (closed loop,
                ../proxy/closedloop/, unpipelined): carried rate, CPU/request
  pipelined-t1  -t 1 servers; 8 connections, 16 requests in flight each
  open-50       -t 1 servers; open loop (`tailtrim bench`, ../proxy/single.toml, 8 connections)
                at --open-fraction (50 %) of the rate the same target carried in closed-t1 in
                the same repetition (or a fixed --open-rate): p50/p99 of small requests
  closed-t2     closed-t1 against -t 2 servers (not pinned; reported only)
  pipelined-t2  pipelined-t1 against -t 2 servers

  python3 experiments/throughput/run.py --bin tailtrim=target/release/tailtrim --reps 5 \\
      --duration 3 --out experiments/throughput/results.json

Several `--bin "NAME=PATH [SERVE FLAGS...]"` compare builds (or serve flags) side by side, e.g.
today's build against a change for the open-50 p99. A plot (SVG, next to --out) is drawn only
when matplotlib is importable.
"""

import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
EXPERIMENTS = os.path.dirname(HERE)
sys.path.insert(0, EXPERIMENTS)
from harness import (shown, arg_parser, bench_cmd, bench_preload, build_closedloop,  # noqa: E402
                     closed_cmd, closed_preload, free_port, measure, memcached_cmd, parse_args,
                     print_summary, rotated, start, stop_all, summarize, write_results,
                     recorder_for, check_percentiles, read_results, shown_row)

WORKLOAD = os.path.join(EXPERIMENTS, "proxy", "single.toml")
REFERENCE = "memcached"
# Case: (load, server threads, connections, requests in flight per connection).
CASES = {
    "closed-t1": ("closed", 1, 8, 1),
    "pipelined-t1": ("closed", 1, 8, 16),
    "open-50": ("open", 1, 8, 16),
    "closed-t2": ("closed", 2, 8, 1),
    "pipelined-t2": ("closed", 2, 8, 16),
}
# The acceptance targets (issue 29), per tailtrim target: (case, summary key, comparison,
# bound). A bound that is REFERENCE compares with memcached's own figure in the same case.
ACCEPTANCE = [
    ("closed-t1", f"cpu_ratio_to_{REFERENCE}_median", "<=", 1.0),
    ("closed-t1", f"rate_ratio_to_{REFERENCE}_median", ">=", 1.05),
    ("pipelined-t1", f"rate_ratio_to_{REFERENCE}_median", ">=", 1.4),
    ("open-50", "p99_us", "<=", REFERENCE),
]


def main():
    parser = arg_parser(__doc__, "NAME=PATH [SERVE FLAGS...] of a tailtrim binary whose server "
                        "is a target, with extra serve flags if any (repeatable; default "
                        "tailtrim=target/release/tailtrim)",
                        "tailtrim binary running open-50's bench (default: the first --bin)")
    parser.add_argument("--cases", default=",".join(CASES),
                        help="comma-separated, run in the order above (default: all)")
    parser.add_argument("--open-fraction", type=float, default=0.5,
                        help="open-50's rate as a fraction of the target's closed-t1 rate")
    parser.add_argument("--open-rate", type=float, default=None,
                        help="fixed open-50 rate for every target instead")
    args, bins, bench_bin, pin = parse_args(parser, HERE)
    if args.replot:
        return replot(args.out)
    recorder = recorder_for(bins)
    chosen = args.cases.split(",")
    unknown = [c for c in chosen if c not in CASES]
    if unknown:
        parser.error(f"unknown cases {unknown}; known: {', '.join(CASES)}")
    chosen = [c for c in CASES if c in chosen]
    if "open-50" in chosen and args.open_rate is None and "closed-t1" not in chosen:
        parser.error("open-50 needs closed-t1 (its rate is a fraction of it) or --open-rate")
    threads = sorted({CASES[c][1] for c in chosen})

    procs = []
    tmp = tempfile.mkdtemp(prefix="throughput-exp-")
    commands = {}
    runs = []
    names = [REFERENCE] + [name for name, _ in bins]
    try:
        # servers[t][name] = (port, pid): -t 1 servers pinned to CPU 0, -t 2 ones not pinned.
        servers = {}
        for t in threads:
            prefix = pin(0) if t == 1 else []
            servers[t] = {}
            port = free_port()
            cmd = prefix + memcached_cmd(port, t)
            commands[f"{REFERENCE}-t{t}"] = shown(cmd, tmp)
            servers[t][REFERENCE] = (port, start(procs, cmd, port).pid)
            for name, spec in bins:
                path, *extra = spec.split()
                port = free_port()
                cmd = prefix + [path, "serve", "-l", "127.0.0.1", "-p", str(port), "-U", "0",
                                "-m", "256", "-t", str(t)] + extra
                commands[f"{name}-t{t}"] = shown(cmd, tmp)
                log = open(os.path.join(tmp, f"{name}-t{t}.log"), "w")
                p = start(procs, cmd, port, stdout=log, stderr=subprocess.STDOUT)
                servers[t][name] = (port, p.pid)

        closedloop = build_closedloop()
        commands["closedloop"] = shown(pin(1) + closed_cmd(closedloop, "PORT", "8", "DEPTH",
                                                              "1", args.duration), tmp)
        commands["bench"] = shown(pin(1) + bench_cmd(bench_bin, "PORT", WORKLOAD, "RATE", 16,
                                                        args.duration, "out.json"), tmp)
        for t in threads:
            for port, _ in servers[t].values():
                closed_preload(closedloop, port)
                if t == 1 and "open-50" in chosen:
                    # The bench's keys (named differently from closedloop's), so open-50 hits.
                    bench_preload(bench_bin, port, WORKLOAD)

        for rep in range(args.reps):
            for case in chosen:
                load, t, conns, depth = CASES[case]
                for name in rotated(names, rep):
                    port, pid = servers[t][name]
                    if load == "closed":
                        offered = None
                        m = measure(pin(1) + closed_cmd(closedloop, port, conns, depth, 1,
                                                        args.duration), pid, "server_cpu_s")
                    else:
                        offered = args.open_rate or round(args.open_fraction * [
                            r["carried_rps"] for r in runs if r["rep"] == rep
                            and r["case"] == "closed-t1" and r["target"] == name][0])
                        out = os.path.join(tmp, f"{rep}-{case}-{name}.json")
                        cmd = pin(1) + bench_cmd(bench_bin, port, WORKLOAD, offered, depth,
                                                 args.duration, out)
                        m = measure(cmd, pid, "server_cpu_s", bench_out=out,
                                    latency_class="small")
                    row = {"rep": rep, "case": case, "target": name, "threads": t,
                           "offered_rps": offered, "max_in_flight": depth, **m}
                    runs.append(row)
                    print(json.dumps(shown_row(row)), flush=True)
    finally:
        stop_all(procs)

    summary, acceptance = conclude(runs, chosen, names)
    write_results(args.out, commands, args.reps, args.duration, summary, runs,
                  recorder=recorder, pinned=not args.no_pin, open_fraction=args.open_fraction,
                  open_rate=args.open_rate, acceptance=acceptance)
    show(summary, acceptance, names, args.out)


def conclude(runs, chosen, names, rules=ACCEPTANCE):
    """The summary (medians and ratios to memcached) and the acceptance checks of `runs`
    against `rules`."""
    summary = summarize(runs, chosen, names, REFERENCE,
                        ratios=(("cpu", "cpu_us_per_request"), ("user", "user_us_per_request"),
                                ("sys", "sys_us_per_request"), ("rate", "carried_rps")))
    return summary, check_acceptance(summary, names[1:], rules)


def recorded_rules(acceptance):
    """The targets a results file was checked against (its `acceptance` entries), so a replot
    judges a run by the targets of its day; None when it recorded none."""
    rules = []
    for entry in acceptance or []:
        op, bound = entry["bound"].split(" ", 1)
        rule = (entry["case"], entry["metric"], op, bound if bound == REFERENCE else float(bound))
        if rule not in rules:
            rules.append(rule)
    return rules or None


def replot(path):
    """--replot: every run's p50/p99 checked against its histogram, then the summary, the
    acceptance checks and the plot of `path` recomputed from its runs."""
    results = read_results(path)
    runs = results["runs"]
    checked = check_percentiles(runs)
    print(f"{checked} of {len(runs)} runs kept a histogram; their p50 and p99 match it")
    chosen = [c for c in CASES if any(r["case"] == c for r in runs)]
    names = list(dict.fromkeys(r["target"] for r in runs if r["rep"] == 0))
    rules = recorded_rules(results.get("acceptance")) or ACCEPTANCE
    results["summary"], results["acceptance"] = conclude(runs, chosen, names, rules)
    with open(path, "w") as f:
        json.dump(results, f, indent=1)
    show(results["summary"], results["acceptance"], names, path)


def show(summary, acceptance, names, out):
    """The table, the acceptance lines and the plot next to `out`."""
    print_summary(summary, [(f"cpu_ratio_to_{REFERENCE}_median", "cpu x mc"),
                            (f"rate_ratio_to_{REFERENCE}_median", "rate x mc")])
    if acceptance:
        print()
    for a in acceptance:
        print(f"{a['target']}: {a['case']} {a['metric']} {a['value']:.2f} {a['bound']}"
              f" -> {'met' if a['met'] else 'NOT met'}")
    plot(summary, names, os.path.splitext(out)[0] + ".svg")


def check_acceptance(summary, targets, rules=ACCEPTANCE):
    """The targets of the acceptance item (`rules`), per tailtrim target, where measured."""
    def figure(case, target, key):
        entry = [e for e in summary if e["case"] == case and e["target"] == target]
        return entry[0].get(key) if entry else None

    out = []
    for name in targets:
        for case, key, op, bound in rules:
            value = figure(case, name, key)
            limit = figure(case, REFERENCE, key) if bound == REFERENCE else bound
            if value is None or limit is None:
                continue
            out.append({"target": name, "case": case, "metric": key, "value": value,
                        "bound": f"{op} {bound}",
                        "met": value <= limit if op == "<=" else value >= limit})
    return out


def plot(summary, names, path):
    """Carried rate and CPU per request per case and target (medians), if matplotlib exists."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not importable: no plot")
        return
    cases = [c for c in CASES if any(e["case"] == c for e in summary)]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        for ax, key, scale in ((axes[0], "carried_rps", 1e-3), (axes[1], "cpu_us_per_request", 1)):
            values = []
            for case in cases:
                entry = [e for e in summary if e["case"] == case and e["target"] == name]
                values.append(entry[0].get(key, 0) * scale if entry else 0)
            ax.bar([x + i * width for x in range(len(cases))], values, width, label=name)
    for ax, label in ((axes[0], "carried rate (k requests/s, median)"),
                      (axes[1], "server CPU per request (µs, median)")):
        ax.set_xticks([x + 0.4 - width / 2 for x in range(len(cases))])
        ax.set_xticklabels(cases, rotation=20)
        ax.set_ylabel(label)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path)
    print(f"plot: {path}")


if __name__ == "__main__":
    sys.exit(main())
