#!/usr/bin/env bash
# tailtrim serve vs memcached 1.6.18, same flags (-t 2 -m 256), ETC workload,
# interleaved A B A B over ROUNDS rounds at each rate; one JSON per run in
# side-by-side/, summary (medians) printed by summarize.py. The null-server
# floor of the bench's own path is measured next to each memcached run.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -n "${SKIP_BUILD:-}" ] || cargo build --release -p tailtrim-cli
BENCH=${BENCH:-target/release/tailtrim}
OUT=experiments/bench/side-by-side
ROUNDS=${ROUNDS:-3}
RATES=${RATES:-"40000 80000"}
mkdir -p "$OUT"
memcached -p 22122 -U 0 -t 2 -m 256 -u "$(id -un)" &
MEMCACHED=$!
"$BENCH" serve -p 22133 -U 0 -t 2 -m 256 &
TAILTRIM=$!
trap 'kill $MEMCACHED $TAILTRIM; wait 2>/dev/null || true' EXIT
sleep 1
for port in 22122 22133; do
    "$BENCH" bench -s "127.0.0.1:$port" --workload etc --preload-only -q
done
for round in $(seq 1 "$ROUNDS"); do
    for rate in $RATES; do
        for system in memcached:22122 tailtrim:22133; do
            name=${system%%:*}
            port=${system##*:}
            floor=()
            # The memcached arm also measures the floor (same load against a
            # null server in the same invocation), reported as "floor".
            [ "$name" = memcached ] && floor=(--floor)
            "$BENCH" bench -s "127.0.0.1:$port" --workload etc --no-preload -q \
                --rate "$rate" --duration 10 --seed "$round" "${floor[@]}" \
                --json "$OUT/$name-$rate-$round.json"
        done
    done
done
python3 experiments/bench/summarize.py "$OUT"
