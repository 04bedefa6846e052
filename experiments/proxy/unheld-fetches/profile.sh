#!/usr/bin/env bash
# One proxy over three memcached backends, closedloop -c 8 -depth 1 -keys KEYS on CPU 1, the proxy
# pinned to CPU 0; prints per request: system calls (strace -c -f) or user-space instructions
# (callgrind; CG_OUT keeps its output for self-costs.py). BASE_PORT moves the ports (26000).
#
#   experiments/proxy/unheld-fetches/profile.sh strace|cg BIN KEYS [proxy flags...]
#   experiments/proxy/unheld-fetches/profile.sh cg nutcracker 10
set -euo pipefail
cd "$(dirname "$0")/../../.."
mode="$1"; bin="$2"; keys="$3"; shift 3
source experiments/backends.sh
base="${BASE_PORT:-26000}"
ports=($((base + 1)) $((base + 2)) $((base + 3)))
pp=$((base + 4))
start_backends 1 "${ports[@]}"
preload_backends -value-size 32 -- "${ports[@]}"
pre=()
[ "$mode" = cg ] && pre=(valgrind --tool=callgrind --callgrind-out-file="${CG_OUT:-$scratch/cg.out}")
if [ "$bin" = nutcracker ]; then
  nutcracker_pool "$pp" "${ports[@]}" >"$scratch/nc.yml"
  taskset -c 0 "${pre[@]}" nutcracker -c "$scratch/nc.yml" -s $((base + 5)) 2>/dev/null &
else
  taskset -c 0 "${pre[@]}" "$bin" proxy -l "127.0.0.1:$pp" --admin off \
    -s "127.0.0.1:${ports[0]}:1,127.0.0.1:${ports[1]}:1,127.0.0.1:${ports[2]}:1" \
    --hash fnv1a_64 --distribution ketama --timeout-ms 2000 -t 1 \
    --server-failure-limit 1000000000 "$@" 2>/dev/null &
fi
proxy=$!; pids+=($proxy)
for _ in $(seq 120); do (exec 3<>"/dev/tcp/127.0.0.1/$pp") 2>/dev/null && break; sleep 0.5; done
load=(taskset -c 1 "$closedloop" -s "127.0.0.1:$pp" -c 8 -depth 1 -keys "$keys" -set-every 0)
"${load[@]}" -d 1s >/dev/null
case "$mode" in
strace)
  strace -c -f -p "$proxy" -o "$scratch/st.txt" &
  ps=$!; sleep 0.5
  result="$("${load[@]}" -d 3s | tail -n 1)"; kill -INT $ps; wait $ps || true
  d=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["completed"])' "$result")
  echo "completed $d"; awk -v d="$d" 'NR>2 && $NF!="total" && $4 ~ /^[0-9]+$/ {printf "%-16s %.3f\n", $NF, $4/d}' "$scratch/st.txt"
  ;;
cg)
  callgrind_control -z "$proxy" >/dev/null
  result="$("${load[@]}" -d 6s | tail -n 1)"
  kill -INT "$proxy"; wait "$proxy" 2>/dev/null || true
  total="$(callgrind_annotate "${CG_OUT:-$scratch/cg.out}" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')"
  python3 -c 'import json,sys; r=json.loads(sys.argv[2]); print(sys.argv[3], r["completed"], round(int(sys.argv[1])/r["completed"]))' "$total" "$result" "$bin $*"
  ;;
esac
