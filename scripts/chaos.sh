#!/usr/bin/env bash
# Chaos behind the proxy: backends in their own network namespaces, faults injected one at a
# time under checked cache-aside load through `tailtrim proxy`.
#
#   scripts/chaos.sh [fault ...]      (default: every fault; needs root for `ip netns`)
#
# Faults (each on backend 2 of 3, from second 5 to second 10 of a 25 s run, in a fresh setup):
#   kill       SIGKILL, restarted empty after 5 s
#   stop       SIGSTOP, SIGCONT after 5 s (its backlog of replies arrives late)
#   partition  its veth link down for 5 s (packets dropped, nothing closed)
#   slow       100 ms added to every reply (toxiproxy latency toxic, user space)
#   slower     400 ms added: more than the proxy's backend timeout
#   none       no fault (the baseline)
# Topology: backend i runs in namespace ttchaos<i> (10.231.<i>.2), a veth pair to the host;
# `tailtrim proxy` on the host reaches each backend over its veth pair, except for the delay
# faults, where backend 2 is reached through toxiproxy on the host (the user-space delay
# injector: netem is not available here). The checker is
# `tailtrim bench --cache-aside`: every value is a function of its key and version, so a value
# that belongs to no version of its key (wrong) or is older than an acknowledged write (stale)
# is seen. Results: CHAOS_OUT (default experiments/chaos/results)/<fault>.json (the bench's
# report, per-second series), summary.json and summary.md: errors, worst per-second p99 during
# the fault, wrong and stale values, recovery time (first second after the heal from which every
# second has no error and a hit ratio within 0.05 of the baseline before the fault).
# Backends: CHAOS_BACKEND=tailtrim (default) or memcached. Proxy flags: CHAOS_PROXY_ARGS.
# CHAOS_BIN: the tailtrim program to test (default target/release/tailtrim, built first).
set -euo pipefail

source "$(dirname "$0")/lib.sh"
enter_repository
faults=("$@")
if [ ${#faults[@]} -eq 0 ]; then
    faults=(none kill stop partition slow slower)
fi
out="${CHAOS_OUT:-$root/experiments/chaos/results}"
backend_kind="${CHAOS_BACKEND:-tailtrim}"
rate="${CHAOS_RATE:-2000}"
# Enough checker threads for 100 ms replies from a third of the keys at this rate (67 waiting).
workers="${CHAOS_WORKERS:-128}"
timeout_ms="${CHAOS_TIMEOUT_MS:-200}"
proxy_port=23500
api_port=23580
relay_base=23510

if [ "$(id -u)" != 0 ]; then
    echo "chaos.sh: network namespaces need root" >&2
    exit 1
fi
cargo build --release -q -p tailtrim-cli
tools="$root/target/tools"
toxiproxy="$tools/toxiproxy-server"
if [ ! -x "$toxiproxy" ]; then
    echo "chaos.sh: installing toxiproxy from the Go module proxy" >&2
    mkdir -p "$tools"
    GOBIN="$tools" go install github.com/Shopify/toxiproxy/v2/cmd/server@v2.9.0
    mv "$tools/server" "$toxiproxy"
fi
scratch="$(mktemp -d)"
bin="$scratch/tailtrim"
cp "${CHAOS_BIN:-$root/target/release/tailtrim}" "$bin"
mkdir -p "$out"

pids=()
backend_pids=(0 0 0 0)
teardown() {
    for pid in "${pids[@]}" "${backend_pids[@]}"; do
        [ "$pid" != 0 ] && kill -CONT "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
    done
    pids=()
    backend_pids=(0 0 0 0)
    for i in 1 2 3; do
        ip link del "tthost$i" 2>/dev/null || true
        ip netns del "ttchaos$i" 2>/dev/null || true
    done
}
trap 'teardown; rm -rf "$scratch"' EXIT

wait_port() { wait_listening "$1" "$2" chaos.sh; }

start_backend() {
    local i="$1"
    if [ "$backend_kind" = memcached ]; then
        ip netns exec "ttchaos$i" memcached -l "10.231.$i.2" -p 11211 -U 0 -m 64 -t 2 -u root &
    else
        ip netns exec "ttchaos$i" "$bin" serve -l "10.231.$i.2" -p 11211 -m 64 -t 2 &
    fi
    backend_pids[i]=$!
    disown "$!"
    wait_port "10.231.$i.2" 11211
}

api() {
    curl -sS -f -X "$1" "http://127.0.0.1:$api_port$2" ${3:+-d "$3"} >/dev/null
}

setup() {
    for i in 1 2 3; do
        ip netns add "ttchaos$i"
        ip link add "tthost$i" type veth peer name "ttns$i"
        ip link set "ttns$i" netns "ttchaos$i"
        ip addr add "10.231.$i.1/24" dev "tthost$i"
        ip link set "tthost$i" up
        ip netns exec "ttchaos$i" ip addr add "10.231.$i.2/24" dev "ttns$i"
        ip netns exec "ttchaos$i" ip link set "ttns$i" up
        ip netns exec "ttchaos$i" ip link set lo up
        start_backend "$i"
    done
    "$toxiproxy" -host 127.0.0.1 -port "$api_port" >"$scratch/toxiproxy.log" 2>&1 &
    pids+=($!)
    disown "$!"
    wait_port 127.0.0.1 "$api_port"
    # Backend 2 goes through the relay only for the faults that need it (the delay): a relay in
    # the path would hide how the proxy's own connections behave when killed or partitioned.
    local servers="10.231.1.2:11211"
    if [ "$1" = slow ] || [ "$1" = slower ]; then
        api POST /proxies "{\"name\":\"b2\",\"listen\":\"127.0.0.1:$((relay_base + 2))\",\"upstream\":\"10.231.2.2:11211\"}"
        servers="$servers,127.0.0.1:$((relay_base + 2))"
    else
        servers="$servers,10.231.2.2:11211"
    fi
    servers="$servers,10.231.3.2:11211"
    # shellcheck disable=SC2086
    "$bin" proxy -l "127.0.0.1:$proxy_port" --admin off -s "$servers" --timeout-ms "$timeout_ms" \
        --server-failure-limit 2 --server-retry-timeout-ms 1000 ${CHAOS_PROXY_ARGS:-} \
        >"$scratch/proxy.log" 2>&1 &
    pids+=($!)
    disown "$!"
    wait_port 127.0.0.1 "$proxy_port"
}

inject() {
    case "$1" in
        none) ;;
        kill) kill -9 "${backend_pids[2]}"; backend_pids[2]=0 ;;
        stop) kill -STOP "${backend_pids[2]}" ;;
        partition) ip link set tthost2 down ;;
        slow) api POST /proxies/b2/toxics '{"name":"slow","type":"latency","stream":"downstream","attributes":{"latency":100}}' ;;
        slower) api POST /proxies/b2/toxics '{"name":"slow","type":"latency","stream":"downstream","attributes":{"latency":400}}' ;;
    esac
}

heal() {
    case "$1" in
        none) ;;
        kill) start_backend 2 ;;
        stop) kill -CONT "${backend_pids[2]}" ;;
        partition) ip link set tthost2 up ;;
        slow | slower) api DELETE /proxies/b2/toxics/slow ;;
    esac
}

for fault in "${faults[@]}"; do
    case "$fault" in
        none | kill | stop | partition | slow | slower) ;;
        *) echo "chaos.sh: unknown fault $fault" >&2; exit 2 ;;
    esac
    teardown
    setup "$fault"
    # Fill (not measured), then 25 s measured: the fault from second 5 to second 10.
    "$bin" bench -s "127.0.0.1:$proxy_port" --cache-aside --db-latency 1ms --workload uniform \
        --popularity zipf --keys 20000 --value-size 400 --set-share 0.1 --workers "$workers" \
        --rate "$rate" --duration 5 --warmup 0 --seed 1 --quiet --json "$scratch/fill.json" >/dev/null
    "$bin" bench -s "127.0.0.1:$proxy_port" --cache-aside --db-latency 1ms --workload uniform \
        --popularity zipf --keys 20000 --value-size 400 --set-share 0.1 --workers "$workers" \
        --rate "$rate" --duration 25 --warmup 0 --seed 2 --first-version 4000000 --quiet \
        --json "$out/$fault.json" >/dev/null &
    load=$!
    sleep 5
    inject "$fault"
    sleep 5
    heal "$fault"
    wait "$load" || true
    echo "chaos.sh: $fault done" >&2
done
teardown

python3 - "$out" "$timeout_ms" "$backend_kind" "${faults[@]}" <<'PY'
import json, pathlib, sys
out, timeout_ms, backend = pathlib.Path(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
rows = []
for fault in sys.argv[4:]:
    r = json.loads((out / f"{fault}.json").read_text())
    sec = r["per_second"]
    before = [s for s in sec if s["time_s"] < 5]
    during = [s for s in sec if 5 <= s["time_s"] < 10]
    after = [s for s in sec if s["time_s"] >= 10]
    base_hit = sum(s["hits"] for s in before) / max(1, sum(s["hits"] + s["misses"] for s in before))
    recovery = None
    for k in range(len(after)):
        if all(s["errors"] == 0 and s["hit_ratio"] >= base_hit - 0.05 for s in after[k:]):
            recovery = after[k]["time_s"] - 10
            break
    rows.append({
        "fault": fault, "backend": backend, "timeout_ms": timeout_ms,
        "requests": r["requests"], "errors": r["errors"], "error_kinds": r["error_kinds"],
        "errors_during_fault": sum(s["errors"] for s in during),
        "errors_after_heal": sum(s["errors"] for s in after),
        "p99_us_before": max((s["p99_us"] for s in before), default=0),
        "p99_us_worst_second_during": max((s["p99_us"] for s in during), default=0),
        "p99_us_worst_second_after": max((s["p99_us"] for s in after), default=0),
        "wrong_values": r["wrong_values"], "stale_values": r["stale_values"],
        "hit_ratio_before": base_hit,
        "recovery_s": recovery,
        # The run's own record (the bench's metadata; its latency histogram stays in the
        # fault's JSON as latency_ns).
        "build": r.get("metadata", {}).get("build"),
        "started_utc": r.get("metadata", {}).get("started_utc"),
        "load_average_max": r.get("metadata", {}).get("load_average_max"),
    })
(out / "summary.json").write_text(json.dumps(rows, indent=2) + "\n")
lines = ["| fault | requests | errors (during / after heal) | p99 before, worst second during, worst after (ms) "
         "| wrong | stale | recovery after heal (s) |", "|---|---|---|---|---|---|---|"]
for r in rows:
    rec = "never (in 15 s)" if r["recovery_s"] is None else f"{r['recovery_s']:.0f}"
    lines.append(f"| {r['fault']} | {r['requests']} | {r['errors']} ({r['errors_during_fault']} / {r['errors_after_heal']}) "
                 f"| {r['p99_us_before']/1e3:.1f}, {r['p99_us_worst_second_during']/1e3:.1f}, {r['p99_us_worst_second_after']/1e3:.1f} "
                 f"| {r['wrong_values']} | {r['stale_values']} | {rec} |")
(out / "summary.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
sys.exit(1 if any(r["wrong_values"] for r in rows) else 0)
PY
