#!/usr/bin/env bash
# User-space instructions per request of one server under callgrind (deterministic, unlike
# time): `serve -t 1` under `valgrind --tool=callgrind`, its keys preloaded, 1 s of warm-up load, counters zeroed, then 8 s of `closedloop -c 8 -depth
# DEPTH -keys 1 -set-every SET_EVERY`; prints the program's total instructions divided by the
# requests completed.
#
#   experiments/throughput/callgrind.sh target/release/tailtrim [DEPTH] [SET_EVERY]
#
# DEPTH defaults to 1 (unpipelined), SET_EVERY to 0 (gets only; 11: get:set 10:1). Needs
# valgrind and closedloop (go build -o target/experiments/closedloop in
# experiments/proxy/closedloop). CG_OUT names the callgrind output (default a temp file);
# CG_BASE_PORT moves the port (default 25100).
set -euo pipefail
cd "$(dirname "$0")/../.."
bin="$1"
depth="${2:-1}"
set_every="${3:-0}"
source experiments/backends.sh
port="${CG_BASE_PORT:-25100}"
out="${CG_OUT:-$scratch/callgrind.out}"
valgrind --tool=callgrind --callgrind-out-file="$out" "$bin" serve -p "$port" \
    -l 127.0.0.1 -t 1 -U 0 -m 256 2>/dev/null &
server=$!
pids+=("$server")
# Valgrind starts slowly on a loaded host: wait for the port (bounded).
for _ in $(seq 120); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
    sleep 0.5
done
"$closedloop" -s "127.0.0.1:$port" -preload >/dev/null
load=("$closedloop" -s "127.0.0.1:$port" -c 8 -depth "$depth" -keys 1 -set-every "$set_every")
"${load[@]}" -d 1s >/dev/null
callgrind_control -z "$server" >/dev/null
result="$("${load[@]}" -d 8s | tail -n 1)"
kill -INT "$server"
wait "$server" 2>/dev/null || true
total="$(callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')"
python3 - "$total" "$result" "$bin" "$depth" <<'PY'
import json, sys
total, result, name, depth = int(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
done = result["completed"]
print(json.dumps({"server": name, "depth": int(depth), "instructions": total, "completed": done,
                  "instructions_per_request": round(total / done), "errors": result["errors"]}))
PY
