#!/usr/bin/env bash
# Where the proxy's CPU goes under an open-loop `tailtrim bench` workload (the tier's: large
# values and 1–100-key gets, `tier.toml`; or any workload file): a sampled profile of `BIN proxy
# -t 1` over three memcached backends (`perf record -e cpu-clock -g`), its report by symbol, and
# the proxy's CPU seconds per request. A profile, not a benchmark: the shares are meaningful,
# the rate is whatever was asked for.
#
#   experiments/proxy/profile-bench.sh BIN [WORKLOAD.toml] [RATE]   # defaults tier.toml, 2000
#
# The proxy is pinned to CPU 0, the backends and the bench to CPU 1. PROF_SECONDS (default 8)
# of load after the preload, sampled at PROF_HZ (default 2999); PROF_OUT keeps perf.data
# (default: a temporary file), PROF_REPORT the report (default: stdout); PROF_BASE_PORT moves
# the ports (default 26500). Needs memcached, perf and taskset.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin="${1:?usage: experiments/proxy/profile-bench.sh BIN [WORKLOAD.toml] [RATE]}"
workload="${2:-experiments/proxy/tier.toml}"
rate="${3:-2000}"
seconds="${PROF_SECONDS:-8}"
hz="${PROF_HZ:-2999}"
base="${PROF_BASE_PORT:-26500}"
source experiments/backends.sh
out="${PROF_OUT:-$scratch/perf.data}"
ports=($((base + 1)) $((base + 2)) $((base + 3)))
for port in "${ports[@]}"; do
    taskset -c 1 memcached -p "$port" -l 127.0.0.1 -t 1 -U 0 -m 512 -I 1m "${memcached_user[@]}" &
    pids+=($!)
done
port=$((base + 10))
servers="127.0.0.1:${ports[0]}:1,127.0.0.1:${ports[1]}:1,127.0.0.1:${ports[2]}:1"
taskset -c 0 "$bin" proxy -l "127.0.0.1:$port" --admin off -s "$servers" \
    --hash fnv1a_64 --distribution ketama --timeout-ms 2000 -t 1 \
    --server-failure-limit 1000000000 2>/dev/null &
pid=$!
pids+=("$pid")
sleep 1
bench=(taskset -c 1 "$bin" bench -s "127.0.0.1:$port" --workload-file "$workload" -q)
"${bench[@]}" --preload-only >/dev/null
cpu_ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
before="$(cpu_ticks)"
"${bench[@]}" --no-preload -r "$rate" -d "$((seconds + 2))" --warmup 0 \
    --json "$scratch/bench.json" >/dev/null &
load=$!
sleep 1
perf record -e cpu-clock -F "$hz" -g -p "$pid" -o "$out" -- sleep "$seconds" >/dev/null 2>&1
wait "$load"
after="$(cpu_ticks)"
python3 - "$scratch/bench.json" "$before" "$after" "$(getconf CLK_TCK)" <<'PY'
import json, sys
result = json.load(open(sys.argv[1]))
run = result["runs"][0] if "runs" in result else result
done = run.get("completed") or run.get("requests") or 0
ticks = int(sys.argv[3]) - int(sys.argv[2])
cpu_us = ticks / int(sys.argv[4]) * 1e6
print(json.dumps({"completed": done, "proxy_cpu_us_per_request":
                  round(cpu_us / done, 2) if done else None}))
PY
report=(perf report -i "$out" --no-children -g none --sort dso,symbol --percent-limit 0.5 --stdio)
if [ -n "${PROF_REPORT:-}" ]; then "${report[@]}" >"$PROF_REPORT" 2>/dev/null; else "${report[@]}" 2>/dev/null; fi
