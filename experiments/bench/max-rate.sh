#!/usr/bin/env bash
# Highest rate one `tailtrim bench` process sustains against Debian's memcached
# (-t 2) on the ETC workload: a sweep with 1 I/O thread and one with 2.
# Writes max-rate-t1.json / max-rate-t2.json and their sweep plots.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -n "${SKIP_BUILD:-}" ] || cargo build --release -p tailtrim-cli
BENCH=${BENCH:-target/release/tailtrim}
PORT=${PORT:-22122}
OUT=experiments/bench
memcached -p "$PORT" -U 0 -t 2 -m 256 -u "$(id -un)" &
SERVER=$!
trap 'kill $SERVER' EXIT
sleep 0.5
"$BENCH" bench -s "127.0.0.1:$PORT" --workload etc --preload-only
"$BENCH" bench -s "127.0.0.1:$PORT" --workload etc --no-preload --threads 1 \
    --rates 20000:100000:10000 --duration 10 \
    --json "$OUT/max-rate-t1.json" --plot "$OUT/max-rate-t1"
"$BENCH" bench -s "127.0.0.1:$PORT" --workload etc --no-preload --threads 2 \
    --rates 70000:110000:10000 --duration 10 \
    --json "$OUT/max-rate-t2.json" --plot "$OUT/max-rate-t2"
