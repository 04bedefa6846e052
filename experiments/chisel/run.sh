#!/usr/bin/env bash
# Chisel vs batch through `tailtrim proxy`, real system at this machine's scale.
#
#   experiments/chisel/run.sh [OUT_DIR]            (default: experiments/chisel/real)
#
# Starts 4 backends (`tailtrim serve -t 1`, or stock memcached with BACKEND=memcached) as one
# replica pool (every key on every backend, reads to the cheapest replica: the paper's setup),
# then for every scenario starts two proxies over them, one `--planner batch` and one
# `--planner chisel` (online analyzer, 0.5 s epochs), both with 16 query threads and the
# scenario's injected client overhead, and runs the open-loop `chisel` workload (Poisson,
# mice of M keys, elephants of 100 keys, R mice per elephant) against each, interleaved
# batch, chisel, batch, chisel (REPEATS rounds). One JSON report per run; summarize.py
# turns them into results.json and results.md.
#
# Environment: SCENARIOS ("A:M:R:O ..." = inter-arrival µs, mice keys, mice per elephant,
# overhead µs), REPEATS (2), DURATION (5 s), WARMUP (3 s), BACKEND (tailtrim|memcached),
# SECOND (chisel; "batch" makes an A/A control: the second proxy also plans with batch, still
# labelled chisel in the file names), ALTERNATE (0; 1 puts the second system first in even
# rounds).
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
bin="${TAILTRIM:-$repo/target/release/tailtrim}"
out="${1:-$repo/experiments/chisel/real}"
scenarios="${SCENARIOS:-1000:10:9:0 1000:1:5:0 400:10:9:0 400:1:5:0 200:10:9:0 200:1:5:0 1000:10:9:120 400:10:9:120 200:10:9:120 1000:5:9:60 400:5:5:60 200:5:9:180}"
repeats="${REPEATS:-2}"
duration="${DURATION:-5}"
warmup="${WARMUP:-3}"
backend_kind="${BACKEND:-tailtrim}"
second="${SECOND:-chisel}"
alternate="${ALTERNATE:-0}"
mkdir -p "$out"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
source "$repo/scripts/lib.sh"
wait_port() { wait_listening 127.0.0.1 "$1"; }
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; }
trap cleanup EXIT

servers=()
for _ in 1 2 3 4; do
    port="$(free_port)"
    if [ "$backend_kind" = memcached ]; then
        user=()
        [ "$(id -u)" = 0 ] && user=(-u root)
        memcached -l 127.0.0.1 -p "$port" -U 0 -t 1 -m 256 "${user[@]}" &
    else
        "$bin" serve -l 127.0.0.1 -p "$port" -U 0 -t 1 -m 256 2>/dev/null &
    fi
    pids+=("$!")
    servers+=("127.0.0.1:$port:1")
    wait_port "$port"
done
pool="$(IFS=,; echo "${servers[*]}")"
{
    echo "{\"backend\": \"$backend_kind\", \"servers\": \"$pool\", \"scenarios\": \"$scenarios\","
    echo " \"repeats\": $repeats, \"duration_s\": $duration, \"warmup_s\": $warmup,"
    echo " \"commit\": \"$(git -C "$repo" rev-parse HEAD)\", \"dirty\": $([ -n "$(git -C "$repo" status --porcelain)" ] && echo true || echo false),"
    echo " \"cpu\": \"$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)\", \"cores\": $(nproc),"
    echo " \"second\": \"$second\", \"alternate\": $alternate,"
    echo " \"command\": \"SCENARIOS='$scenarios' REPEATS=$repeats DURATION=$duration WARMUP=$warmup BACKEND=$backend_kind SECOND=$second ALTERNATE=$alternate experiments/chisel/run.sh ${1:-}\"}"
} > "$out/meta.json"

start_proxy() { # planner overhead -> prints "pid port"
    local port
    port="$(free_port)"
    "$bin" proxy -l "127.0.0.1:$port" --admin off -s "$pool" --replicas 4 -t 1 \
        --planner "$1" --query-threads 16 --inject-overhead "$2" \
        --config "$repo/experiments/chisel/proxy.toml" 2>/dev/null &
    echo "$! $port"
}

preloaded=""
for scenario in $scenarios; do
    IFS=: read -r interarrival mice ratio overhead <<< "$scenario"
    rate=$(( 1000000 / interarrival ))
    read -r batch_pid batch_port < <(start_proxy batch "$overhead")
    read -r chisel_pid chisel_port < <(start_proxy "$second" "$overhead")
    pids+=("$batch_pid" "$chisel_pid")
    wait_port "$batch_port"
    wait_port "$chisel_port"
    workload=(--workload chisel --mice-keys "$mice" --elephant-keys 100 --mice-per-elephant "$ratio"
        --elephant-min-keys 21)
    if [ -z "$preloaded" ]; then
        "$bin" bench -s "127.0.0.1:$batch_port" "${workload[@]}" --preload-only -q
        preloaded=yes
    fi
    for round in $(seq "$repeats"); do
        order="batch chisel"
        [ "$alternate" = 1 ] && [ $((round % 2)) = 0 ] && order="chisel batch"
        for system in $order; do
            port=$batch_port
            [ "$system" = chisel ] && port=$chisel_port
            name="A${interarrival}-m${mice}-r${ratio}-o${overhead}-${system}-${round}"
            load="$(cut -d' ' -f1-3 /proc/loadavg)"
            "$bin" bench -s "127.0.0.1:$port" "${workload[@]}" --no-preload -r "$rate" \
                -d "$duration" --warmup "$warmup" -c 16 -t 1 --json "$out/$name.json" -q
            echo "{\"run\": \"$name\", \"loadavg\": \"$load\"}" > "$out/$name.load.json"
            echo "$name done (load $load)"
        done
    done
    printf 'stats\r\nquit\r\n' | timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$chisel_port; cat >&3; cat <&3" \
        > "$out/A${interarrival}-m${mice}-r${ratio}-o${overhead}-chisel-stats.txt" 2>/dev/null || true
    kill "$batch_pid" "$chisel_pid" 2>/dev/null || true
done
python3 "$repo/experiments/chisel/summarize.py" "$out"
