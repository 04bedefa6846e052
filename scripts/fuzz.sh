#!/usr/bin/env bash
# Runs every cargo-fuzz target in fuzz/ for a time budget each, one after the other.
#
#   scripts/fuzz.sh [seconds-per-target] [target ...]     (default 60 s, all targets)
#
# Needs a nightly toolchain (rustup toolchain install nightly); installs cargo-fuzz from
# crates.io when it is missing. Corpora are seeded from the differential cases (requests)
# and their golden replies (responses, UDP payloads) and kept in fuzz/corpus/<target>.
# Crashes land in fuzz/artifacts/<target>; each must become a regression test in its crate.
# The sanitizer is off by default (safe Rust: panics are the findings, and runs are several
# times faster); FUZZ_SANITIZER=address turns AddressSanitizer on.
# FUZZ_RUNS=N also stops each target after N executions (libFuzzer's -runs), whichever of
# the two bounds comes first: `FUZZ_RUNS=10000000 scripts/fuzz.sh 3600 request` runs 10M.
# Per target, the last line of libFuzzer's output (executions, rate) is appended to
# fuzz/fuzz-runs.log.
set -euo pipefail

source "$(dirname "$0")/lib.sh"
enter_repository
read_budget_and_targets seconds 60 "request response udp config auth" "$@"
sanitizer="${FUZZ_SANITIZER:-none}"
runs=()
if [ -n "${FUZZ_RUNS:-}" ]; then
    runs=(-runs="$FUZZ_RUNS")
fi

if ! rustup toolchain list | grep -q '^nightly'; then
    echo "fuzz.sh: a nightly toolchain is needed (rustup toolchain install nightly)" >&2
    exit 1
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "fuzz.sh: installing cargo-fuzz from crates.io" >&2
    cargo +nightly install cargo-fuzz --locked
fi

# Seeds: every `> ` line of the differential cases is a client stream (with \r\n escapes),
# every `< ` line of the goldens a server reply; configs come from config/*.toml and the
# nutcracker examples of the twemproxy tests.
python3 - "$root" <<'PY'
import hashlib, pathlib, sys
root = pathlib.Path(sys.argv[1])
corpus = root / "fuzz" / "corpus"
def unescape(text):
    return text.replace("\\r", "\r").replace("\\n", "\n").replace("\\t", "\t").encode("latin-1", "replace")
def put(target, data):
    directory = corpus / target
    directory.mkdir(parents=True, exist_ok=True)
    (directory / hashlib.sha1(data).hexdigest()).write_bytes(data)
for path in sorted((root / "tests" / "differential" / "cases").glob("*.txt")):
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("> "):
            data = unescape(line[2:].removeprefix("[pipelined] "))
            put("request", b"\0" + data)
            put("request", b"\1" + data)
            put("udp", b"\0\1\0\0\0\1\0\0" + data)
for path in sorted((root / "tests" / "differential" / "golden").glob("*.txt")):
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("< "):
            put("response", unescape(line[2:]))
for path in sorted((root / "config").glob("*.toml")):
    put("config", path.read_bytes())
for seed in (b"set k 0 0 12\r\nalice secret\r\n", b"get k\r\nset k 0 0 11\r\nalice wrong\r\n",
             b"set k 0 0 4294967308\r\nalice secret\r\n", b"set k 0 0 5\r\nalice\r\n"):
    put("auth", b"\x03" + seed)
put("config", b"main:\n  listen: 127.0.0.1:22121\n  hash: fnv1a_64\n  distribution: ketama\n"
    b"  servers:\n   - 127.0.0.1:11211:1 one\n   - 127.0.0.1:11212:1 two\n")
PY

for target in "${targets[@]}"; do
    echo "== fuzz target $target: ${seconds} s" >&2
    log="$(mktemp)"
    set +e
    (cd fuzz && cargo +nightly fuzz run --release --sanitizer "$sanitizer" "$target" \
        "corpus/$target" -- -max_total_time="$seconds" "${runs[@]}" -print_final_stats=1) >"$log" 2>&1
    status=$?
    set -e
    grep -E '(DONE|panicked|SUMMARY|^stat::|^Done)' "$log" | tail -12 >&2 || true
    execs="$(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}' | tail -1)"
    echo "$(date -u +%FT%TZ) $target seconds=$seconds runs=${FUZZ_RUNS:-unbounded} sanitizer=$sanitizer executions=${execs:-?} status=$status" \
        | tee -a fuzz/fuzz-runs.log
    rm -f "$log"
    if [ "$status" -ne 0 ]; then
        echo "fuzz.sh: $target found a crash (see fuzz/artifacts/$target)" >&2
        exit "$status"
    fi
done
