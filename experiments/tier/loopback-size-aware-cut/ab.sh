#!/bin/sh
# base, new, base, new: the tier's loopback mode with the baseline, its A/A copy and everything.
set -e
cd "$(git rev-parse --show-toplevel)"
for r in ${RUNS:-base-1 new-1 base-2 new-2}; do
  case $r in base-*) BIN=target/ab/base-suite/tailtrim;; new-*) BIN=target/ab/new-suite/tailtrim;; esac
  $BIN experiment tier --mode loopback --quiet --rounds 1 \
    --tiers memcached+nutcracker,memcached+nutcracker-aa,everything \
    --out experiments/tier/loopback-size-aware-cut/$r
done
