#!/usr/bin/env bash
# User-space instructions per request of one proxy under callgrind (deterministic, unlike time):
# three memcached backends (every key preloaded on each, so only gets cross the proxy), the
# proxy under `valgrind --tool=callgrind`, 1 s of warm-up load, counters zeroed, then 8 s of
# `closedloop -c 8 -depth 1 -keys KEYS -set-every 0`; prints the program's total instructions
# divided by the requests completed.
#
#   experiments/proxy/callgrind.sh target/release/tailtrim 10     # a tailtrim build
#   experiments/proxy/callgrind.sh nutcracker 10                  # nutcracker, same ring
#
# Needs memcached, nutcracker, valgrind and closedloop (go build -o target/experiments/closedloop
# in experiments/proxy/closedloop). CG_OUT names the callgrind output (default a temp file);
# CG_BASE_PORT moves the ports (default 25000); CG_FLAGS adds valgrind options (e.g.
# --cache-sim=yes for simulated cache misses), CG_PROXY_ARGS adds tailtrim proxy arguments.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin="$1"
keys="$2"
source experiments/backends.sh
base="${CG_BASE_PORT:-25000}"
ports=($((base + 1)) $((base + 2)) $((base + 3)))
proxy_port=$((base + 4))
out="${CG_OUT:-$scratch/callgrind.out}"
start_backends "" "${ports[@]}"
preload_backends -value-size 32 -- "${ports[@]}"
if [ "$bin" = nutcracker ]; then
    nutcracker_pool "$proxy_port" "${ports[@]}" >"$scratch/nc.yml"
    valgrind --tool=callgrind ${CG_FLAGS:-} --callgrind-out-file="$out" nutcracker -c "$scratch/nc.yml" \
        -s $((base + 5)) 2>/dev/null &
else
    valgrind --tool=callgrind ${CG_FLAGS:-} --callgrind-out-file="$out" "$bin" proxy \
        -l "127.0.0.1:$proxy_port" --admin off \
        -s "127.0.0.1:${ports[0]}:1,127.0.0.1:${ports[1]}:1,127.0.0.1:${ports[2]}:1" \
        --hash fnv1a_64 --distribution ketama --timeout-ms 2000 -t 1 \
        --server-failure-limit 1000000000 ${CG_PROXY_ARGS:-} 2>/dev/null &
fi
proxy=$!
# Valgrind starts slowly on a loaded host: wait for the port (bounded).
for _ in $(seq 120); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$proxy_port") 2>/dev/null; then break; fi
    sleep 0.5
done
load=("$closedloop" -s "127.0.0.1:$proxy_port" -c 8 -depth 1 -keys "$keys" -set-every 0)
"${load[@]}" -d 1s >/dev/null
callgrind_control -z "$proxy" >/dev/null
result="$("${load[@]}" -d 8s | tail -n 1)"
kill -INT "$proxy"
wait "$proxy" 2>/dev/null || true
summary="$(callgrind_annotate "$out" 2>/dev/null | grep -E '^Events shown|PROGRAM TOTALS')"
python3 - "$summary" "$result" "$bin" "$keys" <<'PY'
import json, re, sys
summary, result, name, keys = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
events = summary.splitlines()[0].split(":", 1)[1].split()
counts = [int(n.replace(",", "")) for n in re.findall(r"([\d,]+) \(", summary.splitlines()[1])]
totals = dict(zip(events, counts))
done = result["completed"]
out = {"proxy": name, "keys": int(keys), "instructions": totals["Ir"], "completed": done,
       "instructions_per_request": round(totals["Ir"] / done), "errors": result["errors"]}
# With --cache-sim=yes (CG_FLAGS): simulated cache misses per request (I1mr: first-level
# instruction cache, D1mr / D1mw: first-level data cache reads / writes).
for event in ("I1mr", "D1mr", "D1mw", "ILmr", "DLmr", "DLmw"):
    if event in totals:
        out[f"{event}_per_request"] = round(totals[event] / done, 1)
print(json.dumps(out))
PY
