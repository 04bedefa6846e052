#!/usr/bin/env bash
# System calls per request, counted by the kernel's tracepoints (`perf stat -e
# syscalls:sys_enter_*`): exact counts at almost no cost to the program, unlike `strace -c`,
# which slows it several times and so changes how many requests share a call.
#
#   experiments/syscalls.sh proxy BIN [KEYS] [DEPTH]   # nutcracker, then `BIN proxy`, over the
#                                                      # same three memcached backends
#   experiments/syscalls.sh serve BIN [KEYS] [DEPTH]   # memcached -t 1, then `BIN serve -t 1`
#
# The program measured is pinned to CPU 0, the backends and the load to CPU 1; the load is
# `closedloop -c 8 -depth DEPTH -keys KEYS -set-every 0` (defaults 1 and 1: eight clients, one
# single-key get in flight each) for SC_SECONDS (default 3) seconds, every key preloaded.
# Prints, per program, the calls of each kind divided by the requests closedloop completed.
# SC_BASE_PORT (default 26300) moves the ports. Needs memcached, nutcracker (proxy mode),
# perf with tracepoint access, taskset and closedloop (go build -o target/experiments/closedloop
# in experiments/proxy/closedloop).
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:?usage: experiments/syscalls.sh proxy|serve BIN [KEYS] [DEPTH]}"
bin="${2:?usage: experiments/syscalls.sh proxy|serve BIN [KEYS] [DEPTH]}"
keys="${3:-1}"
depth="${4:-1}"
seconds="${SC_SECONDS:-3}"
base="${SC_BASE_PORT:-26300}"
events=syscalls:sys_enter_read,syscalls:sys_enter_recvfrom,syscalls:sys_enter_recvmsg
events+=,syscalls:sys_enter_write,syscalls:sys_enter_writev,syscalls:sys_enter_sendto
events+=,syscalls:sys_enter_sendmsg,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_epoll_ctl
source experiments/backends.sh

# count NAME PORT PID: runs the load against PORT while counting PID's system calls.
count() {
    local name="$1" port="$2" pid="$3"
    perf stat -x, -e "$events" -p "$pid" -o "$scratch/$name.stat" -- sleep "$((seconds + 1))" &
    local stat=$!
    sleep 0.3
    taskset -c 1 "$closedloop" -s "127.0.0.1:$port" -c 8 -depth "$depth" -keys "$keys" \
        -d "${seconds}s" -set-every 0 >"$scratch/$name.json"
    wait "$stat"
    python3 - "$name" "$scratch/$name.json" "$scratch/$name.stat" <<'EOF'
import json, sys
name, load, stat = sys.argv[1:]
done = json.load(open(load))["completed"]
print(f"== {name}: {done} requests")
for line in open(stat):
    fields = line.strip().split(",")
    if len(fields) < 3 or not fields[0].replace(".", "").isdigit():
        continue
    calls = float(fields[0])
    if calls:
        print(f"  {fields[2].split(':')[-1].removeprefix('sys_enter_'):<12} {calls / done:7.3f} per request")
EOF
}

case "$mode" in
proxy)
    ports=($((base + 1)) $((base + 2)) $((base + 3)))
    start_backends 1 "${ports[@]}"
    preload_backends -- "${ports[@]}"
    nutcracker_pool "$((base + 10))" "${ports[@]}" >"$scratch/nc.yml"
    taskset -c 0 nutcracker -c "$scratch/nc.yml" -s "$((base + 11))" -a 127.0.0.1 \
        -o "$scratch/nc.log" &
    pids+=($!)
    nc_pid=$!
    servers="127.0.0.1:${ports[0]}:1,127.0.0.1:${ports[1]}:1,127.0.0.1:${ports[2]}:1"
    taskset -c 0 "$bin" proxy -l "127.0.0.1:$((base + 20))" --admin off -s "$servers" \
        --hash fnv1a_64 --distribution ketama --timeout-ms 2000 -t 1 \
        --server-failure-limit 1000000000 2>/dev/null &
    pids+=($!)
    tt_pid=$!
    sleep 1
    count nutcracker "$((base + 10))" "$nc_pid"
    count tailtrim "$((base + 20))" "$tt_pid"
    ;;
serve)
    taskset -c 0 memcached -p "$((base + 1))" -l 127.0.0.1 -t 1 -U 0 -m 256 "${memcached_user[@]}" &
    pids+=($!)
    mc_pid=$!
    taskset -c 0 "$bin" serve -p "$((base + 2))" -l 127.0.0.1 -t 1 -U 0 -m 256 2>/dev/null &
    pids+=($!)
    tt_pid=$!
    sleep 1
    "$closedloop" -s "127.0.0.1:$((base + 1))" -preload >/dev/null
    "$closedloop" -s "127.0.0.1:$((base + 2))" -preload >/dev/null
    count memcached "$((base + 1))" "$mc_pid"
    count tailtrim "$((base + 2))" "$tt_pid"
    ;;
*)
    echo "experiments/syscalls.sh: mode is proxy or serve, not $mode" >&2
    exit 2
    ;;
esac
