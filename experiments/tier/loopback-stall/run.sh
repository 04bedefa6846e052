#!/bin/bash
# One timed set of tier runs with the stall probes beside it (take the measurement lock):
#   run.sh TAILTRIM OUT_DIR TIERS ROUNDS SEED PROBE_SECONDS
# OUT_DIR gets the experiment's results.json, the probe's log (probe.py), the host's
# hiccups (hiccup.py, at the set's priority and at real-time priority), the TCP connections
# seen with a zero-window probe timer armed (persist.log, sampled each 50 ms by
# ss) and the kernel's TCP counters over the set (nstat.txt).
set -u
BIN=$1; OUT=$2; TIERS=$3; ROUNDS=$4; SEED=$5; PROBE_SECONDS=$6
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
nstat -n >/dev/null
(while true; do
   echo "T $(date +%s.%N)"
   ss -tnoiH state established '( sport >= :1024 )' 2>/dev/null | grep persist
   sleep 0.05
 done) > "$OUT/persist.log" 2>&1 &
SAMPLER=$!
python3 "$HERE/probe.py" "$OUT/probe.log" "$PROBE_SECONDS" &
PROBE=$!
python3 "$HERE/hiccup.py" "$OUT/hiccup.log" "$PROBE_SECONDS" &
HICCUP=$!
chrt -f 50 python3 "$HERE/hiccup.py" "$OUT/hiccup-rt.log" "$PROBE_SECONDS" &
HICCUP_RT=$!
date +%s.%N > "$OUT/start"
"$BIN" experiment tier --mode loopback --tiers "$TIERS" --rounds "$ROUNDS" --seed "$SEED" \
    --out "$OUT" > "$OUT/stdout" 2>&1
kill "$SAMPLER" "$PROBE" "$HICCUP" "$HICCUP_RT" 2>/dev/null
nstat > "$OUT/nstat.txt"
