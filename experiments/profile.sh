#!/usr/bin/env bash
# Where a program's CPU time goes under closed-loop load: a sampled profile (`perf record -e
# cpu-clock -g`), summarised as the share of samples per object (kernel, tailtrim, libc, …)
# and the hottest symbols. A profile, not a benchmark: the shares are meaningful, the times
# are not.
#
#   experiments/profile.sh proxy BIN [KEYS] [DEPTH]   # `BIN proxy -t 1` over three memcached
#   experiments/profile.sh serve BIN [KEYS] [DEPTH]   # `BIN serve -t 1`
#
# The program is pinned to CPU 0, the backends and the load to CPU 1; the load is `closedloop
# -c 8 -depth DEPTH -keys KEYS -set-every 0` (defaults 1 and 1) for PROF_SECONDS + 3 seconds
# (default 5 + 3), sampled for PROF_SECONDS at PROF_HZ (default 4999) from its second second.
# PROF_OUT keeps perf.data (default: a temporary file); PROF_BASE_PORT moves the ports
# (default 26400). Needs memcached, perf, taskset and closedloop (go build -o
# target/experiments/closedloop in experiments/proxy/closedloop).
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:?usage: experiments/profile.sh proxy|serve BIN [KEYS] [DEPTH]}"
bin="${2:?usage: experiments/profile.sh proxy|serve BIN [KEYS] [DEPTH]}"
keys="${3:-1}"
depth="${4:-1}"
seconds="${PROF_SECONDS:-5}"
hz="${PROF_HZ:-4999}"
base="${PROF_BASE_PORT:-26400}"
source experiments/backends.sh
out="${PROF_OUT:-$scratch/perf.data}"

case "$mode" in
proxy)
    ports=($((base + 1)) $((base + 2)) $((base + 3)))
    start_backends 1 "${ports[@]}"
    preload_backends -value-size 32 -- "${ports[@]}"
    port=$((base + 10))
    servers="127.0.0.1:${ports[0]}:1,127.0.0.1:${ports[1]}:1,127.0.0.1:${ports[2]}:1"
    taskset -c 0 "$bin" proxy -l "127.0.0.1:$port" --admin off -s "$servers" \
        --hash fnv1a_64 --distribution ketama --timeout-ms 2000 -t 1 \
        --server-failure-limit 1000000000 2>/dev/null &
    ;;
serve)
    port=$((base + 10))
    taskset -c 0 "$bin" serve -p "$port" -l 127.0.0.1 -t 1 -U 0 -m 256 2>/dev/null &
    ;;
*)
    echo "experiments/profile.sh: mode is proxy or serve, not $mode" >&2
    exit 2
    ;;
esac
pid=$!
pids+=("$pid")
sleep 1
[ "$mode" = serve ] && "$closedloop" -s "127.0.0.1:$port" -preload >/dev/null
taskset -c 1 "$closedloop" -s "127.0.0.1:$port" -c 8 -depth "$depth" -keys "$keys" \
    -d "$((seconds + 3))s" -set-every 0 >"$scratch/load.json" &
load=$!
sleep 1
perf record -e cpu-clock -F "$hz" -g -p "$pid" -o "$out" -- sleep "$seconds" >/dev/null 2>&1
wait "$load"
rate="$(python3 -c "import json, sys; print(round(json.load(open(sys.argv[1]))['rps']))" \
    "$scratch/load.json")"
echo "$mode ($bin) on CPU 0 under closedloop -c 8 -depth $depth -keys $keys on CPU 1: $rate requests/s"
echo
echo "Samples by object:"
perf report -i "$out" --no-children --sort dso --stdio -g none 2>/dev/null | grep '%' | head -6
echo
echo "Top symbols (flat, >= 0.7 %):"
perf report -i "$out" --no-children --sort dso,symbol --stdio -g none --percent-limit 0.7 \
    2>/dev/null | grep '%' | sed 's/ *- *- *$//'
