#!/usr/bin/env bash
# Highest rate one `tailtrim bench` process sustains against Debian's memcached
# (-t 2) on the ETC workload: rate sweeps with 1 and with 2 I/O threads,
# repeated REPEATS times (the machine is shared and noisy; quote medians).
# Writes max-rate-t{1,2}-r{N}.json, the plots of repeat 1, and a summary.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -n "${SKIP_BUILD:-}" ] || cargo build --release -p tailtrim-cli
BENCH=${BENCH:-target/release/tailtrim}
PORT=${PORT:-22122}
REPEATS=${REPEATS:-3}
RATES_T1=${RATES_T1:-40000:130000:10000}
RATES_T2=${RATES_T2:-70000:140000:10000}
NAME=${NAME:-max-rate}
OUT=experiments/bench
memcached -p "$PORT" -U 0 -t 2 -m 256 -u "$(id -un)" &
SERVER=$!
trap 'kill $SERVER; wait $SERVER 2>/dev/null || true' EXIT
sleep 0.5
"$BENCH" bench -s "127.0.0.1:$PORT" --workload etc --preload-only
for repeat in $(seq 1 "$REPEATS"); do
    plot=()
    [ "$repeat" = 1 ] && plot=(--plot "$OUT/$NAME-t1")
    "$BENCH" bench -s "127.0.0.1:$PORT" --workload etc --no-preload --threads 1 -q \
        --rates "$RATES_T1" --duration 10 --seed "$repeat" \
        --json "$OUT/$NAME-t1-r$repeat.json" "${plot[@]}"
    [ "$repeat" = 1 ] && plot=(--plot "$OUT/$NAME-t2")
    "$BENCH" bench -s "127.0.0.1:$PORT" --workload etc --no-preload --threads 2 -q \
        --rates "$RATES_T2" --duration 10 --seed "$repeat" \
        --json "$OUT/$NAME-t2-r$repeat.json" "${plot[@]}"
done
python3 "$OUT/summarize_max_rate.py" "$OUT" "$NAME"
