#!/usr/bin/env bash
# The project's one test command (README, .ci/run). Runs, in order:
#   setup-deps -> cargo fmt --check -> clippy -D warnings -> cargo test (profile suite)
#   -> cargo doc (-D warnings) -> pytest experiments/test_harness.py -> README figures
#   (scripts/check-figures.py and its pytest) -> import cycles (scripts/check-cycles.py and its
#   pytest) -> experiments/replot-all.sh
#   (figures and tables redrawn as committed) -> pytest tests/python
#   -> go test tests/go
# against the suite profile's binary target/suite/tailtrim (the same code as the LTO release
# build that `serve` and the experiments run, without the ~4 minutes of a fat-LTO link), then prints `N passed, M failed`
# (tests of all suites; a failed check step such as fmt or clippy counts as one failure)
# and exits non-zero on any failure.
#
# Environment: TAILTRIM_SERVE_ARGS is passed to every server the suites start
# (e.g. "--dispatch size-aware"); CI=true turns "memcached missing" skips into failures.
set -uo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"

passed=0
failed=0
failures=()
logdir="$(mktemp -d)"
trap 'rm -rf "$logdir"' EXIT

step() { printf '\n==> %s  (at %ds)\n' "$*" "$SECONDS"; }
note_failure() {
    failed=$((failed + 1))
    failures+=("$1")
}
# Adds a suite's counts to the totals: $1 its label, $2 its exit status, $3 passed, $4 failed
# (a failing status with no failed test counts as one failure).
tally() {
    passed=$((passed + $3))
    failed=$((failed + $4))
    [ "$4" -gt 0 ] && failures+=("$1: $4 failed")
    if [ "$2" -ne 0 ] && [ "$4" -eq 0 ]; then note_failure "$1 (status $2)"; fi
}
# Runs a check step whose success counts as nothing and whose failure counts as one failure.
check() {
    local name="$1"
    shift
    step "$name"
    if ! "$@"; then note_failure "$name"; fi
}

step "setup-deps"
if ! bash scripts/setup-deps.sh; then
    echo "setup-deps failed; continuing so that the other suites still report" >&2
    note_failure "setup-deps"
fi
export PATH="$PATH:/usr/local/go/bin"
export CARGO_TERM_COLOR=never

check "cargo fmt --check" cargo fmt --all -- --check
check "cargo clippy" cargo clippy --workspace --all-targets -- -D warnings

step "cargo test --profile suite"
cargo test --profile suite --workspace --no-fail-fast 2>&1 | tee "$logdir/cargo-test.log"
cargo_status=${PIPESTATUS[0]}
read -r cargo_passed cargo_failed < <(awk '/^test result:/ {
        for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i }
    } END { print p + 0, f + 0 }' "$logdir/cargo-test.log")
passed=$((passed + cargo_passed))
failed=$((failed + cargo_failed))
if [ "$cargo_status" -ne 0 ] && [ "$cargo_failed" -eq 0 ]; then note_failure "cargo test (status $cargo_status)"; fi
[ "$cargo_failed" -gt 0 ] && failures+=("cargo test: $cargo_failed failed")

step "cargo doc"
check_doc() { RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet; }
if ! check_doc; then note_failure "cargo doc"; fi

export TAILTRIM_BIN="${TAILTRIM_BIN:-$repo/target/suite/tailtrim}"

# Runs the Python client suite (or the tests at $2); $1 labels the run in the summary.
run_pytest() {
    local label="$1" tests="${2:-tests/python}"
    step "pytest $tests ($label)"
    if [ ! -x .venv/bin/python ]; then
        note_failure "pytest $label (no .venv)"
        return
    fi
    .venv/bin/python -m pytest -q -p no:cacheprovider "$tests" 2>&1 | tee "$logdir/pytest.log"
    local py_status=${PIPESTATUS[0]} py_passed py_failed
    read -r py_passed py_failed < <(tail -n 1 "$logdir/pytest.log" | awk '{
            for (i = 2; i <= NF; i++) { w = $i; sub(/[,;]$/, "", w)
                if (w == "passed") p += $(i-1); if (w == "failed" || w == "error" || w == "errors") f += $(i-1) }
        } END { print p + 0, f + 0 }')
    tally "pytest $label" "$py_status" "$py_passed" "$py_failed"
}

# Runs the Go client suite; $1 labels the run in the summary.
run_go() {
    local label="$1"
    step "go test tests/go ($label)"
    (cd tests/go && go test -count=1 -v ./...) 2>&1 | tee "$logdir/go.log"
    local go_status=${PIPESTATUS[0]} go_passed go_failed
    go_passed="$(grep -cE '^--- PASS' "$logdir/go.log" || true)"
    go_failed="$(grep -cE '^--- FAIL' "$logdir/go.log" || true)"
    tally "go test $label" "$go_status" "$go_passed" "$go_failed"
}

# Runs the conformance tests that boot the binary (differential vs memcached,
# bad input); $1 labels the run. `--workspace`, as the suite's own run: with `-p` cargo
# resolves features for one package and rebuilds the dependency tree (~3 minutes).
run_conformance() {
    local label="$1"
    step "conformance: differential + bad input ($label)"
    cargo test --profile suite --workspace --test differential --test bad_input 2>&1 | tee "$logdir/conf.log"
    local status=${PIPESTATUS[0]} c_passed c_failed
    read -r c_passed c_failed < <(awk '/^test result:/ {
            for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i }
        } END { print p + 0, f + 0 }' "$logdir/conf.log")
    tally "conformance $label" "$status" "$c_passed" "$c_failed"
}

# The experiments' shared Python: histogram decoding, the simulator-vs-testbed checks.
run_pytest "experiments" experiments/test_harness.py

# Every figure a README marks as a claim (`<!-- fig FILE:PATH -->NUMBER`) is in the result file
# it names (scripts/check-figures.py); its tests plant mismatches.
run_pytest "README figure check" experiments/test_check_figures.py
check "README figures" python3 scripts/check-figures.py

# No import cycle between the module files of a crate, unless the crate root's `//!` doc allows
# it with a reason (scripts/check-cycles.py); its tests plant cycles.
run_pytest "import cycle check" scripts/test_check_cycles.py
check "import cycles" python3 scripts/check-cycles.py

# Every figure, table and results file under experiments/ redrawn from the results kept
# beside it (experiments/replot-all.sh, in a scratch copy so no kept file is touched) must come
# out byte for byte as committed: the summaries a replot recomputes from the kept samples and
# histograms are the ones committed, and every figure is drawn from them.
check_replot() {
    local scratch differ
    scratch="$(mktemp -d)"
    cp -r experiments "$scratch/"
    if ! (cd "$scratch" && TAILTRIM="$TAILTRIM_BIN" PYTHON="$repo/.venv/bin/python" \
        bash experiments/replot-all.sh) \
        >"$logdir/replot.log" 2>&1; then
        tail -n 30 "$logdir/replot.log"
        rm -rf "$scratch"
        return 1
    fi
    differ="$(cd experiments && find . -type f ! -path '*/__pycache__/*' | sort |
        while read -r file; do
            cmp -s "$file" "$scratch/experiments/$file" || echo "  experiments/${file#./}"
        done)"
    rm -rf "$scratch"
    if [ -n "$differ" ]; then
        echo "redrawn differently from the committed files:"
        echo "$differ"
        return 1
    fi
    echo "every figure, table and results file redrawn as committed"
}
check "experiments/replot-all.sh" check_replot
run_pytest "default dispatch"
run_go "default dispatch"

# Every dispatch policy must pass the same suites as the default (issue 4).
for policy in size-aware early-binding stealing late-binding; do
    export TAILTRIM_SERVE_ARGS="--dispatch $policy"
    run_conformance "$policy"
    run_pytest "$policy"
    run_go "$policy"
done
unset TAILTRIM_SERVE_ARGS

# The same client suites through `tailtrim proxy` in front of stock memcached (issue 5).
server_bin="$TAILTRIM_BIN"
export TAILTRIM_PROXY_BIN="$server_bin"
export TAILTRIM_BIN="$repo/crates/proxy/scripts/proxy-as-server.sh"
run_pytest "through the proxy"
run_go "through the proxy"
# ... and with the chisel planner, which merges mice across connections (issue 12).
export TAILTRIM_PROXY_ARGS="--planner chisel"
run_pytest "through the proxy, chisel"
run_go "through the proxy, chisel"
# ... and with the Rein (priorities queued in the proxy) and TailX (delay queue) planners (issue 13).
for planner in rein-sbf tailx; do
    export TAILTRIM_PROXY_ARGS="--planner $planner"
    run_pytest "through the proxy, $planner"
    run_go "through the proxy, $planner"
done
unset TAILTRIM_PROXY_ARGS
# ... and while one more backend joins the pool (at 0.2 s) and leaves it (1 s later), fallback
# warm-up, while the suites run (each lasts more than 2 s). One join and one removal only: a
# key written to a server that leaves is lost if another change comes before it is read (the
# removal's fallback ends), which a cache may legitimately do (issue 14; docs/scaleout.md).
# A run counts only if the pool really changed: one join and one removal, none refused.
export TAILTRIM_PROXY_CHURN=1 TAILTRIM_PROXY_CHURN_CHANGES=2 TAILTRIM_PROXY_CHURN_WARMUP=fallback
for suite in pytest go; do
    export TAILTRIM_PROXY_CHURN_LOG="$logdir/churn-$suite.log"
    rm -f "$TAILTRIM_PROXY_CHURN_LOG"
    "run_$suite" "through the proxy, backend joining and leaving"
    joins="$(grep -c '^POST' "$TAILTRIM_PROXY_CHURN_LOG" 2>/dev/null || true)"
    leaves="$(grep -c '^DELETE' "$TAILTRIM_PROXY_CHURN_LOG" 2>/dev/null || true)"
    if [ "${joins:-0}" -lt 1 ] || [ "${leaves:-0}" -lt 1 ] || grep -q FAILED "$TAILTRIM_PROXY_CHURN_LOG"; then
        note_failure "$suite under churn: ${joins:-0} joins, ${leaves:-0} removals ($(grep FAILED "$TAILTRIM_PROXY_CHURN_LOG" 2>/dev/null | head -1))"
    fi
done
unset TAILTRIM_PROXY_CHURN TAILTRIM_PROXY_CHURN_CHANGES TAILTRIM_PROXY_CHURN_WARMUP TAILTRIM_PROXY_CHURN_LOG
export TAILTRIM_BIN="$server_bin"

echo
if [ "${#failures[@]}" -gt 0 ]; then
    echo "failures:"
    printf '  %s\n' "${failures[@]}"
fi
echo "test.sh took ${SECONDS}s"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "${#failures[@]}" -eq 0 ]
