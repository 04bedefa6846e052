#!/usr/bin/env bash
# Redraws every figure under experiments/ from the results kept beside it, and regenerates the
# tables derived from those results. Nothing is measured or simulated: no server, load or
# simulator runs (the model's figure is recomputed: it is analytic and has no data file).
# Afterwards `git status --short experiments` and `git diff --stat experiments` show what a
# replot changes.
#
#   experiments/replot-all.sh          (TAILTRIM=binary to use, default target/release/tailtrim;
#                                        PYTHON=interpreter with the hdrhistogram package,
#                                        default .venv/bin/python, scripts/setup-deps.sh's)
#
# Which command redraws a folder follows from the command its results recorded
# (`metadata.command`):
#   tailtrim experiment minos ...                  tailtrim experiment minos --replot --out DIR
#   tailtrim sim minos ...                         tailtrim sim minos --replot DIR
#   tailtrim experiment chisel|tailx [--testbed]   the same with --replot --out DIR
#   tailtrim experiment tailx-testbed ...          the same with --replot --out DIR
#   tailtrim experiment warmup ...                 tailtrim experiment warmup --replot --out DIR
#   tailtrim experiment tier ...                   tailtrim experiment tier --replot --out DIR
#   experiments/{proxy,throughput}/run.py ...      python3 experiments/X/run.py --replot --out FILE
#   experiments/chisel/run.sh ...                  python3 experiments/chisel/summarize.py DIR
# The bench's sweep plots, the bench summaries, the model's files and the comparison tables
# have their commands below (as in their READMEs). Every `--replot` also checks the recorded
# percentiles against the histograms and fails on a mismatch. Folders named `superseded/` or
# `failed/` hold records kept as they were written and drawn by the code of their day: they are
# neither redrawn nor listed below.
#
# At the end it lists every figure (.svg, .png) that no command wrote: figures without a
# replot path. Exit status 1 if a command failed or such a figure exists.
set -uo pipefail
cd "$(dirname "$0")/.."
T="${TAILTRIM:-target/release/tailtrim}"
PY="${PYTHON:-.venv/bin/python}"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
touch "$scratch/start"
failed=0

# Runs a command quietly (its output kept in $scratch/out); prints it, and its error output if
# it fails.
run() {
    if "$@" >"$scratch/out" 2>"$scratch/err"; then
        echo "ok      $*${to:-}"
        return 0
    fi
    echo "FAILED  $*${to:-}"
    sed 's/^/        /' "$scratch/err" | tail -n 20
    failed=$((failed + 1))
    return 1
}

# Runs a command whose standard output is the file $1.
run_to() {
    local file="$1"
    shift
    to=" > $file" run "$@" && mv "$scratch/out" "$file"
}

# "KIND PATH" for every results file, from its recorded command.
python3 - >"$scratch/kinds" <<'EOF'
import json, os, re

RULES = (
    (r"\bexperiment minos\b", "experiment-minos"),
    (r"\bsim minos\b", "sim-minos"),
    (r"\bexperiment chisel\b.*--testbed", "chisel-testbed"),
    (r"\bexperiment chisel\b", "chisel"),
    (r"\bexperiment tailx-testbed\b", "tailx-testbed-served"),
    (r"\bexperiment tailx\b.*--testbed", "tailx-testbed"),
    (r"\bexperiment tailx\b", "tailx"),
    (r"\bexperiment warmup\b", "warmup"),
    (r"\bexperiment tier\b", "tier"),
    (r"\bproxy/run\.py\b", "proxy-run"),
    (r"\bthroughput/run\.py\b", "throughput-run"),
    (r"\bchisel/run\.sh\b", "chisel-real"),
)
for folder, dirs, files in os.walk("experiments"):
    # Superseded and failed runs are records kept as they were written and drawn.
    dirs[:] = sorted(d for d in dirs if d not in ("superseded", "failed"))
    for name in sorted(files):
        if not name.endswith(".json"):
            continue
        path = os.path.join(folder, name)
        try:
            with open(path) as f:
                data = json.load(f)
        except ValueError:
            continue
        metadata = data.get("metadata") if isinstance(data, dict) else None
        command = metadata.get("command", "") if isinstance(metadata, dict) else ""
        for pattern, kind in RULES:
            if re.search(pattern, command):
                print(kind, path)
                break
EOF

while read -r kind path; do
    dir="$(dirname "$path")"
    case "$kind" in
        experiment-minos) run "$T" experiment minos --replot --out "$dir" -q ;;
        sim-minos) run "$T" sim minos --replot "$dir" ;;
        chisel) run "$T" experiment chisel --replot --out "$dir" ;;
        chisel-testbed) run "$T" experiment chisel --testbed --replot --out "$dir" ;;
        tailx) run "$T" experiment tailx --replot --out "$dir" ;;
        tailx-testbed) run "$T" experiment tailx --testbed --replot --out "$dir" ;;
        tailx-testbed-served) run "$T" experiment tailx-testbed --replot --out "$dir" ;;
        warmup) run "$T" experiment warmup --replot --out "$dir" ;;
        tier) run "$T" experiment tier --replot --out "$dir" ;;
        proxy-run) run "$PY" experiments/proxy/run.py --replot --out "$path" ;;
        throughput-run) run "$PY" experiments/throughput/run.py --replot --out "$path" ;;
        chisel-real) run "$PY" experiments/chisel/summarize.py "$dir" ;;
    esac
done <"$scratch/kinds"

# The bench: sweep plots of repeat 1 (as max-rate.sh draws them) and the summaries.
for threads in 1 2; do
    run "$T" bench --from-json "experiments/bench/max-rate-t$threads-r1.json" \
        --plot "experiments/bench/max-rate-t$threads"
done
run_to experiments/bench/max-rate-summary.txt \
    "$PY" experiments/bench/summarize_max_rate.py experiments/bench max-rate
run_to experiments/bench/side-by-side-summary.txt \
    "$PY" experiments/bench/summarize.py experiments/bench/side-by-side
run "$PY" experiments/emulation-accuracy/summarize.py
# The proxy's sign-test readings (experiments/proxy/future-size/, quiet-twenty/).
run "$PY" experiments/proxy/ratios.py experiments/proxy/future-size/results.json \
    --pair new/base --out experiments/proxy/future-size/ratios.json
run "$PY" experiments/proxy/ratios.py experiments/proxy/quiet-twenty/results.json --resolve 15 \
    --out experiments/proxy/quiet-twenty/ratios.json
run "$PY" experiments/proxy/quiet-twenty/utilisation.py
# Issue 30's lines read from the covering replica choice's runs (experiments/tailx/sim-v10-cover/)
# and from the split of large values (sim-v11-split/, which must reproduce the planners it did
# not change).
run "$PY" experiments/tailx/lines.py experiments/tailx/sim-v10-cover
run "$PY" experiments/tailx/lines.py experiments/tailx/sim-v11-split \
    --same-as experiments/tailx/sim-v10-cover \
    --unchanged batch,rein-sbf,cost-rel,batch+cover,rein-sbf+cover,cost-rel+cover \
    --unchanged-in size-rel:rare-elephant,size-rel+cover:rare-elephant
# keys-weighed/ (large values weighed in the client's estimate) against keys-work/ (counted as
# one key): batch and batch+cover do not weigh, and rare-elephant has no large value.
run "$PY" experiments/tailx/lines.py experiments/tailx/sim-v11-split \
    --same-as experiments/tailx/sim-v11-split --models keys-weighed:keys-work --only-models \
    --unchanged batch,batch+cover \
    --unchanged-in size-rel:rare-elephant,size-rel+cover:rare-elephant,cost-rel+cover:rare-elephant
# sim-v12-join/ (size-rel's opsets with slack join their large value's class) against
# sim-v11-split/: only size-rel's figures outside rare-elephant may move.
run "$PY" experiments/tailx/lines.py experiments/tailx/sim-v12-join \
    --same-as experiments/tailx/sim-v11-split \
    --unchanged batch,rein-sbf,cost-rel,batch+cover,rein-sbf+cover,cost-rel+cover \
    --unchanged-in size-rel:rare-elephant,size-rel+cover:rare-elephant
# The closed loop with size-rel+cover (sim-v12-closed/): ratios and the table of ranges.
run_to experiments/tailx/sim-v12-closed/closed.txt \
    "$PY" experiments/tailx/closed.py experiments/tailx/sim-v12-closed
# The same scheduler with a tighter ageing (sim-v12-ageing/): batch and Rein-SBF must reproduce.
run "$PY" experiments/tailx/lines.py experiments/tailx/sim-v12-ageing \
    --same-as experiments/tailx/sim-v12-join --unchanged batch,rein-sbf
run_to experiments/tailx/sim-v12-ageing/closed/closed.txt \
    "$PY" experiments/tailx/closed.py experiments/tailx/sim-v12-ageing/closed \
    --same-as experiments/tailx/sim-v12-closed --unchanged batch,rein-sbf

# The model (experiments/model/README.md): analytic, recomputed.
m=experiments/model
sweep=(--sweep-lambda 10000:75000:2500 --sweep-xi 0,0.15,0.6,0.8)
run_to "$m/table3.txt" "$T" model cheng
run_to "$m/table3.json" "$T" model cheng --json
run_to "$m/cliff.txt" "$T" model cliff
run_to "$m/cliff.json" "$T" model cliff --json
run_to "$m/ts_vs_lambda.txt" "$T" model cheng "${sweep[@]}" --plot "$m/ts_vs_lambda.svg"
run "$T" model cheng "${sweep[@]}" --plot "$m/ts_vs_lambda.png"
p1_sweep() {
    for p in 0.25 0.3 0.4 0.5 0.6 0.7 0.75 0.8 0.85 0.9; do
        printf "p1=%s  " "$p"
        "$T" model cheng --total-rate 80000 --p1 "$p" | grep "E\[T_S"
    done
}
chisel_grid() {
    for a in 50 60 70 90 120 200 400 700 1100; do
        for o in 0 60; do
            echo "== A=$a µs overhead=$o µs"
            "$T" model chisel --interarrival-us "$a" --overhead-us "$o" | tail -n +6
        done
    done
}
run_to "$m/p1_sweep.txt" p1_sweep
run_to "$m/chisel_grid.txt" chisel_grid

# Comparison tables (commands of minos-emulated/README.md and sim-validation/README.md).
run_to experiments/minos-emulated/comparison.md "$PY" experiments/minos-emulated/compare.py
v=experiments/sim-validation
run_to "$v/comparison.md" "$PY" "$v/compare.py" --window "$v/sim/testbed-window/results.json" \
    "$v/testbed/results.json" "$v/sim/results.json" "$v/sim/late-binding-9-cores/results.json"
run_to "$v/batch-comparison.md" "$PY" "$v/batch_compare.py" "$v/batch-4/results.json" \
    "$v/batch-16/results.json"
run_to "$v/batch-window4-comparison.md" "$PY" "$v/batch_compare.py" \
    "$v/batch-4-window4/results.json" "$v/batch-16-window4/results.json"

echo
stale="$(find experiments \( -name superseded -o -name failed \) -prune -o \
    \( -name '*.svg' -o -name '*.png' \) ! -newer "$scratch/start" -print | sort)"
if [ -n "$stale" ]; then
    echo "figures not redrawn (no replot path, or its command failed above):"
    echo "$stale" | sed 's/^/  /'
fi
echo "$failed command(s) failed"
[ "$failed" -eq 0 ] && [ -z "$stale" ]
