#!/usr/bin/env bash
# Soak: hours of checked load against `tailtrim serve` under each dispatch policy and through
# the proxy, with the server's memory and descriptors sampled all along.
#
#   scripts/soak.sh [minutes-per-target] [target[:minutes] ...]   (default 30 min, every target)
#
# Targets: pinned size-aware early-binding stealing late-binding (one `serve`, that policy)
# and proxy (`tailtrim proxy` over three `serve` backends). Per target:
#   1. start the processes (memory limit SOAK_MEMORY_MB, default 32, smaller than the
#      workload's data, so the store fills, evicts and refills for the whole run);
#   2. fill the cache (every key written, coldest first, then 5 s at 2000 rps, not counted:
#      the stores are full before the soak starts, so RSS growth after warm-up is not the
#      store filling up), then probe capacity: cache-aside load at
#      rising rates, 3 s each; capacity is the highest rate
#      whose p99 stays under 20 ms (requests not queueing behind the bench's workers); if
#      none does (a loaded host), 2000 rps stands for it;
#   3. run cache-aside load at SOAK_LOAD (default 0.7) of that capacity, in one-minute bench
#      runs back to back (so the bench's own records stay bounded), 10 % writes, zipf keys:
#      every value read is checked against its key and version (wrong, stale), every reply
#      against the protocol (errors);
#   4. sample every process's RSS and open descriptors every 10 s (samples.csv);
#   5. verdict: no wrong or stale value, no client error, RSS after warm-up (the first fifth
#      of the run, at least 60 s) grows by at most 5 %, descriptors do not grow (the most
#      open in the last fifth of the run against the most open in the first fifth after
#      warm-up).
# Results: SOAK_OUT (default experiments/soak/results)/<target>/{samples.csv,chunk-*.json,
# stats.txt} and summary.json, summary.md for all targets. Exit status 1 if any target fails.
# Not part of CI (it runs for hours); SOAK_RATE fixes the rate instead of probing.
set -euo pipefail

source "$(dirname "$0")/lib.sh"
enter_repository
read_budget_and_targets minutes 30 "pinned size-aware early-binding stealing late-binding proxy" "$@"
out="${SOAK_OUT:-$root/experiments/soak/results}"
memory_mb="${SOAK_MEMORY_MB:-32}"
load="${SOAK_LOAD:-0.7}"
port_base="${SOAK_PORT_BASE:-23400}"
keys="${SOAK_KEYS:-200000}"
chunk_seconds=60
sample_seconds=10

cargo build --release -q -p tailtrim-cli
mkdir -p "$out"
# A copy, so a rebuild of the tree during a soak of hours does not swap the program under it.
scratch="$(mktemp -d)"
bin="$scratch/tailtrim"
cp "$root/target/release/tailtrim" "$bin"

pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    pids=()
}
trap 'cleanup; rm -rf "$scratch"' EXIT

# Waits until HOST:PORT answers `version`.
wait_ready() {
    local port="$1" line
    for _ in $(seq 1 100); do
        # A subshell: a failed `exec` redirection would end the script itself.
        line=$( (exec 3<>"/dev/tcp/127.0.0.1/$port" && printf 'version\r\n' >&3 \
            && read -r -t 1 reply <&3 && echo "$reply") 2>/dev/null || true)
        if [[ "$line" == VERSION* ]]; then
            return 0
        fi
        sleep 0.1
    done
    echo "soak.sh: nothing answers on port $port" >&2
    return 1
}

# Prints the reply to `stats` (up to END) from PORT.
stats_of() {
    local port="$1" line
    exec 3<>"/dev/tcp/127.0.0.1/$port"
    printf 'stats\r\n' >&3
    while read -r -t 2 line <&3; do
        line="${line%$'\r'}"
        [ "$line" = END ] && break
        echo "$line"
    done
    exec 3>&-
}

# One cache-aside run: bench_run PORT RATE SECONDS SEED JSON [extra ...]. Each run's database
# starts its versions above every version the runs before it can have written (far fewer than
# 4M writes of one key per run), so what earlier runs left in the cache checks as old versions.
runs=0
bench_run() {
    local port="$1" rate="$2" seconds="$3" seed="$4" json="$5"
    shift 5
    runs=$((runs + 1))
    "$bin" bench -s "127.0.0.1:$port" --cache-aside --db-latency 0ms --workload uniform \
        --popularity zipf --keys "$keys" --value-size 400 --set-share 0.1 --workers 32 \
        --rate "$rate" --duration "$seconds" --warmup 0 --seed "$seed" --quiet \
        --first-version $((runs * 4000000)) --json "$json" "$@" >/dev/null
}

sample_loop() {
    local csv="$1"
    shift
    local start
    start=$(date +%s)
    echo "elapsed_s,process,pid,rss_kb,fds" >"$csv"
    while true; do
        local now
        now=$(( $(date +%s) - start ))
        for entry in "$@"; do
            local name="${entry%%=*}" pid="${entry#*=}" rss fds
            rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
            fds=$(find "/proc/$pid/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
            echo "$now,$name,$pid,${rss:-0},$fds" >>"$csv"
        done
        sleep "$sample_seconds"
    done
}

names=()
for spec in "${targets[@]}"; do
    target="${spec%%:*}"
    target_minutes="$minutes"
    if [ "$spec" != "$target" ]; then
        target_minutes="${spec#*:}"
    fi
    names+=("$target")
    dir="$out/$target"
    rm -rf "$dir"
    mkdir -p "$dir"
    runs=0
    processes=()
    case "$target" in
        proxy)
            servers=""
            for i in 1 2 3; do
                port=$((port_base + i))
                "$bin" serve -p "$port" -l 127.0.0.1 -m "$memory_mb" -t 2 &
                pids+=($!)
                processes+=("serve$i=$!")
                wait_ready "$port"
                servers="${servers:+$servers,}127.0.0.1:$port"
            done
            port=$port_base
            "$bin" proxy -l "127.0.0.1:$port" --admin off -s "$servers" -t 2 &
            pids+=($!)
            processes+=("proxy=$!")
            ;;
        pinned | size-aware | early-binding | stealing | late-binding)
            port=$port_base
            "$bin" serve -p "$port" -l 127.0.0.1 -m "$memory_mb" -t 4 --dispatch "$target" &
            pids+=($!)
            processes+=("serve=$!")
            ;;
        *)
            echo "soak.sh: unknown target $target" >&2
            exit 2
            ;;
    esac
    wait_ready "$port"

    # Capacity probe (also fills the cache).
    capacity=0
    bench_run "$port" 2000 5 1 "$dir/fill.json" --prefill
    if [ -n "${SOAK_RATE:-}" ]; then
        rate="$SOAK_RATE"
    else
        for probe in 2000 4000 6000 8000 11000 15000 20000 27000 36000 48000; do
            bench_run "$port" "$probe" 3 1 "$dir/probe-$probe.json" || true
            p99=$(jq '.p99_us' "$dir/probe-$probe.json")
            echo "soak.sh: $target probe $probe rps: p99 ${p99} µs" >&2
            if jq -e '.p99_us > 20000 or .errors > 0' "$dir/probe-$probe.json" >/dev/null; then
                break
            fi
            capacity=$probe
        done
        rate=$(awk -v c="$capacity" -v l="$load" 'BEGIN { printf "%d", c * l }')
    fi
    if [ "$rate" -le 0 ]; then
        # Even the lowest probe queued (a loaded host): soak at 70 % of it all the same.
        rate=$(awk -v l="$load" 'BEGIN { printf "%d", 2000 * l }')
        echo "soak.sh: $target: no probe rate kept p99 under 20 ms; soaking at $rate rps" >&2
    fi
    echo "soak.sh: $target: capacity $capacity rps, soak at $rate rps for $target_minutes min" >&2

    sample_loop "$dir/samples.csv" "${processes[@]}" &
    sampler=$!
    chunks=$(( (target_minutes * 60 + chunk_seconds - 1) / chunk_seconds ))
    for chunk in $(seq 1 "$chunks"); do
        # A minute with failures (the bench exits non-zero) is recorded and the soak goes on:
        # the verdict counts it.
        bench_run "$port" "$rate" "$chunk_seconds" "$((chunk + 1))" \
            "$dir/chunk-$(printf %03d "$chunk").json" || true
        jq -r --arg t "$target" --arg c "$chunk" \
            '"soak.sh: \($t) minute \($c): \(.requests) requests, p99 \(.p99_us|floor) µs, wrong \(.wrong_values), stale \(.stale_values), errors \(.errors)"' \
            "$dir/chunk-$(printf %03d "$chunk").json" >&2
    done
    sleep "$sample_seconds"
    kill "$sampler" 2>/dev/null || true
    wait "$sampler" 2>/dev/null || true
    for entry in "${processes[@]}"; do
        name="${entry%%=*}"
        case "$name" in
            proxy) echo "# $name" >>"$dir/stats.txt"; stats_of "$port_base" >>"$dir/stats.txt" ;;
            serve) echo "# $name" >>"$dir/stats.txt"; stats_of "$port_base" >>"$dir/stats.txt" ;;
            serve*) echo "# $name" >>"$dir/stats.txt"; stats_of "$((port_base + ${name#serve}))" >>"$dir/stats.txt" ;;
        esac
    done
    jq -n --arg target "$target" --argjson capacity "$capacity" --argjson rate "$rate" \
        --argjson minutes "$target_minutes" --argjson memory_mb "$memory_mb" \
        '{target: $target, capacity_rps: $capacity, rate_rps: $rate, minutes: $minutes, memory_mb: $memory_mb}' \
        >"$dir/target.json"
    cleanup
done

# The summary covers every target in the output folder (earlier invocations included).
python3 - "$out" <<'PY'
import csv, json, pathlib, statistics, sys
out = pathlib.Path(sys.argv[1])
rows, failed = [], False
for target in sorted(p.parent.name for p in out.glob("*/target.json")):
    d = out / target
    meta = json.loads((d / "target.json").read_text())
    chunks = [json.loads(p.read_text()) for p in sorted(d.glob("chunk-*.json"))]
    total = lambda f: sum(c[f] for c in chunks)
    samples = list(csv.DictReader((d / "samples.csv").open()))
    end = max(int(s["elapsed_s"]) for s in samples)
    warm = max(60, end // 5)
    growth, fd_growth = {}, {}
    for name in sorted({s["process"] for s in samples}):
        after = [s for s in samples if s["process"] == name and int(s["elapsed_s"]) >= warm]
        if not after:
            continue
        rss0 = int(after[0]["rss_kb"])
        growth[name] = {
            "rss_after_warmup_kb": rss0,
            "rss_max_kb": max(int(s["rss_kb"]) for s in after),
            "rss_last_kb": int(after[-1]["rss_kb"]),
            "growth": max(int(s["rss_kb"]) for s in after) / rss0 - 1 if rss0 else 0.0,
        }
        # Descriptors: the most open in the last fifth of the run against the most open in
        # the first fifth after warm-up (the bench reconnects every minute, so one sample can
        # fall between two runs; a leak shows as a rising maximum).
        fds = [int(s["fds"]) for s in after]
        fifth = max(1, len(fds) // 5)
        fd_growth[name] = max(fds[-fifth:]) - max(fds[:fifth])
    row = dict(meta)
    row.update({
        "requests": total("requests"), "reads": total("reads"), "writes": total("writes"),
        "hit_ratio": total("hits") / max(1, total("hits") + total("misses")),
        "wrong_values": total("wrong_values"), "stale_values": total("stale_values"),
        "errors": total("errors"),
        "p99_us_median_of_minutes": statistics.median(c["p99_us"] for c in chunks),
        "p99_us_worst_minute": max(c["p99_us"] for c in chunks),
        "warmup_s": warm, "rss": growth, "fd_growth": fd_growth,
    })
    ok = (row["wrong_values"] == 0 and row["stale_values"] == 0 and row["errors"] == 0
          and all(g["growth"] <= 0.05 for g in growth.values())
          and all(v <= 0 for v in fd_growth.values()))
    row["pass"] = ok
    failed |= not ok
    rows.append(row)
(out / "summary.json").write_text(json.dumps(rows, indent=2) + "\n")
lines = ["| target | minutes | rate (rps) | requests | hit ratio | wrong | stale | errors "
         "| p99 median / worst minute (µs) | RSS growth after warm-up (max process) | fd growth | pass |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|"]
for r in rows:
    worst = max(r["rss"].items(), key=lambda kv: kv[1]["growth"])
    lines.append(
        f"| {r['target']} | {r['minutes']} | {r['rate_rps']} | {r['requests']} | {r['hit_ratio']:.3f} "
        f"| {r['wrong_values']} | {r['stale_values']} | {r['errors']} "
        f"| {r['p99_us_median_of_minutes']:.0f} / {r['p99_us_worst_minute']:.0f} "
        f"| {worst[1]['growth'] * 100:+.2f} % ({worst[0]}: {worst[1]['rss_after_warmup_kb']} → max {worst[1]['rss_max_kb']} kB) "
        f"| {max(r['fd_growth'].values())} | {'yes' if r['pass'] else 'NO'} |")
(out / "summary.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
sys.exit(1 if failed else 0)
PY
