#!/usr/bin/env bash
# The tailtrim proxy (-t 1, batch, the tier's flags) over 3 memcached or 3 tailtrim serve
# (pinned or size-aware), 4 threads each, the tier's workload (../tier.toml) at a fixed rate
# through the proxy; strace -c of the proxy and of one backend, and every read size of the
# proxy, over the same window.
#   bash experiments/proxy/backend-kind/profile.sh BIN KIND OUT_DIR [RATE] [SECONDS]
# KIND: memcached | pinned | size-aware; TRACE=0: no strace (CPU ticks only, cpu.txt)
set -euo pipefail
BIN=$1 KIND=$2 OUT=$3 RATE=${4:-800} SECS=${5:-10}
HERE=$(cd "$(dirname "$0")" && pwd)
WL=$HERE/../tier.toml
mkdir -p "$OUT"
port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$1) 2>/dev/null && return; sleep 0.05; done; echo "port $1 not up" >&2; exit 1; }
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
BACKENDS=()
for _ in 1 2 3; do
  p=$(port)
  if [ "$KIND" = memcached ]; then
    memcached -p "$p" -l 127.0.0.1 -t 4 -m 128 -U 0 -u root & PIDS+=($!)
  else
    "$BIN" serve -p "$p" -l 127.0.0.1 -t 4 -m 128 --dispatch "$KIND" >/dev/null 2>&1 & PIDS+=($!)
  fi
  BACKENDS+=("127.0.0.1:$p:1")
  wait_port "$p"
done
PP=$(port)
"$BIN" proxy -l 127.0.0.1:$PP -s "$(IFS=,; echo "${BACKENDS[*]}")" --timeout-ms 20000 \
  --server-failure-limit 1000000000 --server-connections 4 --planner batch -t 1 >/dev/null 2>&1 &
PROXY=$!; PIDS+=($PROXY)
wait_port "$PP"
"$BIN" bench -s 127.0.0.1:$PP --workload-file "$WL" --preload-only -q >/dev/null
cpu() { awk '{print $14+$15}' /proc/$1/stat; }
c0=$(cpu $PROXY)
STRACES=()
if [ "${TRACE:-1}" = 1 ]; then
  strace -f -qq -e signal=none -p "$PROXY" -o "$OUT/proxy-trace.txt" & STRACES+=($!)
  for i in 0 1 2; do
    strace -c -f -p "${PIDS[$i]}" -o "$OUT/server$i-strace-c.txt" & STRACES+=($!)
  done
  sleep 0.5
fi
s0=$(for i in 0 1 2; do cpu "${PIDS[$i]}"; done | paste -sd+ | bc)
"$BIN" bench -s 127.0.0.1:$PP --workload-file "$WL" -r "$RATE" -c 8 --max-in-flight 16 \
  -d "$SECS" --warmup 0 --no-preload -q --json "$OUT/bench.json" >/dev/null
c1=$(cpu $PROXY)
s1=$(for i in 0 1 2; do cpu "${PIDS[$i]}"; done | paste -sd+ | bc)
if [ ${#STRACES[@]} -gt 0 ]; then
  for s in "${STRACES[@]}"; do kill -INT "$s"; done
  wait "${STRACES[@]}" 2>/dev/null || true
fi
echo "proxy_cpu_ticks $((c1-c0)) servers_cpu_ticks $((s1-s0))" > "$OUT/cpu.txt"
