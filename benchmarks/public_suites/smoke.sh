#!/usr/bin/env bash
# Smoke run of the public-suite tooling on the CPU (benchmarks/smoke.py runs it):
# judged-at-defaults.sh on a made-up project tree in the layout run-on-device.sh expects
# (out/public/ml4gw, one pytest-benchmark test of plain Python, so that none of its processes
# imports torch): pytest-benchmark's own run,
# `cudaperf record` (MODE=record, one run), a judged run (MODE=cudaperf, the fixture served by
# pytest-cudaperf) that must write its JSON files, and one with plant.py loaded
# (CUDAPERF_PLANT=3x); then the table of those runs (defaults_table.py), the tally of their waits
# (tally_waits.py), their replay against a budget (wait_budget.py) and against a second
# process's reading (second_reading.py). ground_truth.py
# (MODE=groundtruth) times with CUDA events and has no CPU path: mypy checks it, a GPU runs it.
#
#   bash benchmarks/public_suites/smoke.sh OUTDIR
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
OUT=${1:?OUTDIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
ROOT="$OUT/root"
mkdir -p "$ROOT/out/public/ml4gw/benchmarks"
cat > "$ROOT/out/public/ml4gw/benchmarks/test_tiny.py" <<'PYEOF'
def add(a, b):
    return [x + y for x, y in zip(a, b)]


def test_add(benchmark):
    x = list(range(64))
    benchmark(add, x, x)
PYEOF
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
cd "$ROOT"  # run-on-device.sh takes the folder it runs in as the root holding out/public
RECORD_RUNS=1 CUDAPERF_PLANT=3x CUDAPERF_PLANT_TESTS=test_add \
  bash "$HERE/judged-at-defaults.sh" ml4gw "$OUT/defaults" --benchmark-max-time=0.05 > /dev/null
test "$(grep -c "^record: exit 0\|^unchanged-1: exit 0\|^planted: exit [01]" "$OUT/defaults/steps.txt")" = 3 \
  || { cat "$OUT/defaults/steps.txt" >&2; exit 1; }
for made in unchanged-1/report.json unchanged-1/ml4gw-cudaperf.json planted/report.json; do
  test -s "$OUT/defaults/$made" || { echo "no $made" >&2; exit 1; }
done
# a later call runs some steps only, against the baselines the first one recorded, its unchanged
# run numbered on (unchanged-2)
STEPS=unchanged bash "$HERE/judged-at-defaults.sh" ml4gw "$OUT/defaults" \
  --benchmark-max-time=0.05 > /dev/null
test "$(grep -c "^unchanged-[12]: exit 0" "$OUT/defaults/steps.txt")" = 2 \
  && test -s "$OUT/defaults/unchanged-2/report.json" \
  && test "$(grep -c "^record: " "$OUT/defaults/steps.txt")" = 1 \
  || { cat "$OUT/defaults/steps.txt" >&2; exit 1; }
# the folder's table: every step a row, the planted test named, the rows an acceptance reads
python "$HERE/defaults_table.py" "$OUT/defaults" --planted-tests test_add > /dev/null
for row in "| pytest-benchmark | 0 |" "| record | 0 |" "| unchanged-1 | 0 |" "| unchanged-2 | 0 |" \
    "| planted | " "planted tests with a time REGRESSION: " "- unchanged runs: 2 finished, 0 cut; median wall " \
    "- test-runs with a time series INCONCLUSIVE: " "- INCONCLUSIVE time verdicts by why, runs pooled: " \
    "- the tests' pytest times summed: " \
    "- most over pytest-benchmark's time (pytest-benchmark → median of the runs): \`test_" \
    "- planted: wall "; do
  grep -qF -- "$row" "$OUT/defaults/defaults.md" || { cat "$OUT/defaults/defaults.md" >&2; exit 1; }
done
# the waits across the judged runs' reports: the three reports read (unchanged-1, unchanged-2,
# planted), pytest-benchmark's JSON files passed over
python "$HERE/tally_waits.py" "$OUT/defaults" > "$OUT/waits.txt"
for row in "reports: 3 (" "waits that met the host back: " "waits that ran out: " \
    "single looks in a spell: "; do
  grep -qF -- "$row" "$OUT/waits.txt" || { cat "$OUT/waits.txt" >&2; exit 1; }
done
# those waits replayed against a budget for them: the three judged runs, each with its JUnit
python "$HERE/wait_budget.py" "$OUT/defaults" > "$OUT/budget.txt"
grep -q "^3 runs: .* waits (" "$OUT/budget.txt" || { cat "$OUT/budget.txt" >&2; exit 1; }
# and cut at a few seconds, each longer one leaving its test to the fresh process
python "$HERE/wait_budget.py" "$OUT/defaults" --defer-after 5 > "$OUT/deferred.txt"
grep -q "^3 runs: .* waits (.*s saved; " "$OUT/deferred.txt" || { cat "$OUT/deferred.txt" >&2; exit 1; }
# a rule the plugin does not have, replayed over the same reports: a row for each kind of run
python "$HERE/second_reading.py" "$OUT/defaults" > "$OUT/second.txt"
for row in "| defaults, unchanged | 2 | " "| defaults, planted | 1 | "; do
  grep -qF -- "$row" "$OUT/second.txt" || { cat "$OUT/second.txt" >&2; exit 1; }
done
