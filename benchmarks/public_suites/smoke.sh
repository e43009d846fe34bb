#!/usr/bin/env bash
# Smoke run of the public-suite tooling on the CPU (benchmarks/smoke.py runs it):
# run-on-device.sh on a made-up project tree in the layout it expects (out/public/ml4gw, one
# pytest-benchmark test of a CPU tensor) in MODE=cudaperf, the fixture served by pytest-cudaperf,
# with plant.py loaded (CUDAPERF_PLANT=3x); the run must pass and write its JSON. MODE=
# pytest-benchmark is pytest-benchmark's own run; ground_truth.py (MODE=groundtruth) times with
# CUDA events and has no CPU path: mypy checks it, a GPU runs it. Then judged-at-defaults.sh's
# steps on the same tree.
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
import torch


def test_add(benchmark):
    x = torch.ones(64)
    benchmark(torch.add, x, x)
PYEOF
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
cd "$ROOT"  # run-on-device.sh takes the folder it runs in as the root holding out/public
PYTHONPATH="$HERE:$PYTHONPATH" CUDAPERF_PLANT=3x \
  bash "$HERE/run-on-device.sh" ml4gw cudaperf "$OUT/results" -p plant \
  --cudaperf-baseline-dir="$OUT/baselines" --cudaperf-max-time=0.05
test -s "$OUT/results/ml4gw-cudaperf.json" || { echo "no ml4gw-cudaperf.json" >&2; exit 1; }
# judged-at-defaults.sh's four steps on the same tree, one recording run, a short budget
RECORD_RUNS=1 CUDAPERF_PLANT=3x CUDAPERF_PLANT_TESTS=test_add \
  bash "$HERE/judged-at-defaults.sh" ml4gw "$OUT/defaults" --benchmark-max-time=0.05 > /dev/null
test "$(grep -c "^record: exit 0\|^unchanged-1: exit 0\|^planted: exit [01]" "$OUT/defaults/steps.txt")" = 3 \
  || { cat "$OUT/defaults/steps.txt" >&2; exit 1; }
test -s "$OUT/defaults/unchanged-1/report.json" || { echo "no judged report" >&2; exit 1; }
