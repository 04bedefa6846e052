#!/usr/bin/env bash
# `auto` against each fixed planner, SIMULATED (`tailtrim sim cluster`), in the four workloads
# of the tier issue and the rare-elephant workload where a priority scheduler wins.
#
#   experiments/auto/run.sh [OUT_DIR]            (default: experiments/auto/sim)
#
# 16 servers × 4 workers, service const=20us,key=5us,byte=0.5ns,dist=exp, one replica, uniform
# popularity, open-loop Poisson arrivals at a rate that keeps the busiest server's workers
# ~75-85 % busy; REQUESTS requests (300000), the first 10 % unmeasured; seeds SEEDS (1 2 3).
# One JSON per (workload, planner, seed); summarize.py writes summary.json and results.md.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
out="${1:-$repo/experiments/auto/sim}"
: "${TAILTRIM:=$repo/target/suite/tailtrim}" "${REQUESTS:=300000}" "${SEEDS:=1 2 3}"
: "${PLANNERS:=batch chisel rein-sbf cost-rel auto}"
mkdir -p "$out"
# name | keys per request | value bytes | offered requests/s
workloads=(
    "homogeneous|8|100|300000"
    "etc|table:1@0.7/2@0.1/5@0.1/10@0.1|table:10@0.4/100@0.3/500@0.2/1000@0.08/10000@0.02|900000"
    "mice-elephants|table:2@0.9/100@0.1|100|380000"
    "heavy-values|20|table:500@0.99/100000@0.01|140000"
    "rare-elephants|table:2@0.995/500@0.005|100|680000"
)
for workload in "${workloads[@]}"; do
    IFS='|' read -r name keys values rate <<<"$workload"
    for seed in $SEEDS; do
        for planner in $PLANNERS; do
            "$TAILTRIM" sim cluster --servers 16 --workers 4 \
                --service const=20us,key=5us,byte=0.5ns,dist=exp \
                --keys "$keys" --value-bytes "$values" --rates "$rate" -n "$REQUESTS" \
                --planner "$planner" --seed "$seed" --json \
                >"$out/$name-$planner-seed$seed.json"
        done
    done
done
python3 "$repo/experiments/auto/summarize.py" "$out"
