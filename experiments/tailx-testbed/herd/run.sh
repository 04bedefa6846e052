#!/usr/bin/env bash
# EMULATED herd check (issue 30): does a Chisel proxy that sat idle serve the same open-loop
# load as one that did not? Four emulated backends (`tailtrim serve`, every key on each),
# three proxies over them (batch, Chisel "A", Chisel "B"), 1-key and 100-key gets at 9:1 at
# about 65 % of the backends' emulated capacity.
#
# Fair design (the default, into herd/fair/): in every round both Chisel proxies are warmed
# alike (30 s of the load each); one ("busy") is measured right after its warm-up, the other
# ("idle") after 110 s without load of its own (the batch proxy keeps the backends loaded
# meanwhile). The roles swap every round, and which of the two is measured first alternates
# every two rounds, so neither the proxy nor the position in the round favours one side:
#   order A: warm idle · warm busy · measure busy · batch 40 s · measure idle
#   order B: warm idle · batch 110 s · measure idle · warm busy · measure busy
# `--first-design` runs the first design instead (into herd/runs/): only the busy proxy is
# warmed, and the idle one is always measured last in its round. `--out DIR` keeps a run in
# DIR instead (e.g. herd/fair/quiet/ beside the kept run in herd/fair/).
# Every proxy's `stats` is sampled during the measured phases (outstanding queries per
# backend: a herd puts them all on one).
#
#   usage: experiments/tailx-testbed/herd/run.sh [--first-design] [--out DIR] [TAILTRIM_BINARY] [ROUNDS]
set -euo pipefail
design=fair
if [[ ${1:-} == --first-design ]]; then
    design=first
    shift
fi
out_dir=""
if [[ ${1:-} == --out ]]; then
    out_dir="$2"
    shift 2
fi
bin="${1:-target/suite/tailtrim}"
rounds="${2:-4}"
here="$(cd "$(dirname "$0")" && pwd)"
out="$here/fair"
[[ $design == first ]] && out="$here/runs"
[[ -n $out_dir ]] && out="$out_dir"
mkdir -p "$out"
dilation=500
service="const=3.3us,key=0.6us,dilation=$dilation"
network="const=85us,byte=45ns,dilation=$dilation"
workers=2
# Worker time per request: 0.9 × (3.3 + 0.6) + 0.1 × (4 × 3.3 + 100 × 0.6) = 10.83 µs × D;
# 4 backends × 2 workers at 65 %.
rate=$(python3 -c "print(round(0.65 * 4 * $workers / (10.83e-6 * $dilation)))")
warm_s=30
measure_s=40
# Ports the kernel hands out now (other programs on a shared host hold fixed ranges).
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; }
trap cleanup EXIT

servers=""
for i in 0 1 2 3; do
    port=$(free_port)
    "$bin" serve -l 127.0.0.1 -p "$port" -t "$workers" -m 64 \
        --emulate-service "$service" --emulate-network "$network" >"$out/backend$i.log" 2>&1 &
    pids+=($!)
    servers="${servers:+$servers,}127.0.0.1:$port"
done
declare -A proxy_port=([batch]=$(free_port) [chisel-a]=$(free_port) [chisel-b]=$(free_port))
for name in batch chisel-a chisel-b; do
    planner=batch
    [[ $name == chisel-* ]] && planner=chisel
    "$bin" proxy -l "127.0.0.1:${proxy_port[$name]}" --admin off -s "$servers" -r 4 \
        --planner "$planner" -t 1 --query-threads 0 --server-connections 64 \
        --timeout-ms 60000 --server-failure-limit 1000000000 >"$out/proxy-$name.log" 2>&1 &
    pids+=($!)
done
sleep 2
workload=(-w chisel --mice-keys 1 --elephant-keys 100 --mice-per-elephant 9 --keys 10000
    --key-size 24 --value-size 100 -c 512 --max-in-flight 1 --drain-ms 60000 -q)
"$bin" bench -s "127.0.0.1:${proxy_port[batch]}" "${workload[@]}" --preload-only --preload-connections 16

sample() { # proxy name, file: its stats every 2 s until killed
    while true; do
        printf 'stats\r\n' | timeout 2 nc -q 1 127.0.0.1 "${proxy_port[$1]}" | tr -d '\r' \
            | sed "s/^/$(date +%s) /" >>"$2" || true
        sleep 2
    done
}
load() { # proxy name, seconds, json file (empty: not kept)
    local json=()
    [[ -n $3 ]] && json=(--json "$3")
    "$bin" bench -s "127.0.0.1:${proxy_port[$1]}" "${workload[@]}" --no-preload -r "$rate" \
        -d "$2" --warmup 0 --seed $((RANDOM + 1)) "${json[@]}"
}
measure() { # proxy name, json file
    sample "$1" "${2%.json}.stats" &
    local sampler=$!
    load "$1" "$measure_s" "$2"
    kill "$sampler" 2>/dev/null || true
}

echo "EMULATED herd check ($design design): rate $rate req/s, service $service, network $network, binary $("$bin" --version)" | tee "$out/settings.txt"
echo "host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) CPUs, kernel $(uname -r)" | tee -a "$out/settings.txt"
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
for round in $(seq 0 $((rounds - 1))); do
    if ((round % 2 == 0)); then busy=chisel-a idle=chisel-b; else busy=chisel-b idle=chisel-a; fi
    order=A
    ((round / 2 % 2 == 1)) && order=B
    [[ $design == first ]] && order=first
    echo "round $round: busy $busy, idle $idle, order $order; load average $(loadavg)" | tee -a "$out/settings.txt"
    case $order in
    first)
        load "$busy" "$warm_s" ""
        measure "$busy" "$out/round$round-busy-$busy.json"
        load batch "$measure_s" "$out/round$round-batch.json"
        ;;
    A)
        load "$idle" "$warm_s" ""
        load "$busy" "$warm_s" ""
        measure "$busy" "$out/round$round-busy-$busy.json"
        load batch "$measure_s" "$out/round$round-batch.json"
        ;;
    B)
        load "$idle" "$warm_s" ""
        load batch $((warm_s + 2 * measure_s)) "$out/round$round-batch.json"
        ;;
    esac
    echo "  idle phase of $idle ends; load average $(loadavg)" | tee -a "$out/settings.txt"
    measure "$idle" "$out/round$round-idle-$idle.json"
    if [[ $order == B ]]; then
        echo "  busy phase of $busy starts; load average $(loadavg)" | tee -a "$out/settings.txt"
        load "$busy" "$warm_s" ""
        measure "$busy" "$out/round$round-busy-$busy.json"
    fi
done
echo "done; load average $(loadavg)" | tee -a "$out/settings.txt"
