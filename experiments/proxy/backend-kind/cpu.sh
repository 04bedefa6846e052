#!/usr/bin/env bash
# Untraced CPU per request of the proxy over each backend kind, interleaved, REPS rounds.
#   bash experiments/proxy/backend-kind/cpu.sh OUT_DIR REPS NAME=BIN... (KINDS env: kinds)
set -euo pipefail
OUT=$1 REPS=$2; shift 2
HERE=$(cd "$(dirname "$0")" && pwd)
for r in $(seq "$REPS"); do
  for k in ${KINDS:-memcached pinned}; do
    for nb in "$@"; do
      name=${nb%%=*} bin=${nb#*=}
      d=$OUT/r$r-$k-$name
      TRACE=0 bash "$HERE/profile.sh" "$bin" "$k" "$d" "${RATE:-800}" "${SECS:-10}" 2>/dev/null
      python3 -c "import json,sys;d=json.load(open('$d/bench.json'));t=open('$d/cpu.txt').read().split();print('$r $k $name', d['completed'], round(int(t[1])*1e4/d['completed'],1), round(int(t[3])*1e4/d['completed'],1))" | tee -a "$OUT/cpu-lines.txt"
    done
  done
done
