#!/usr/bin/env bash
# Smoke run of the public-suite tooling on the CPU (benchmarks/smoke.py runs it):
# run-on-device.sh on a made-up project tree in the layout it expects (out/public/ml4gw, one
# pytest-benchmark test of a CPU tensor), once under pytest-benchmark and once with the fixture
# served by pytest-cudaperf with plant.py loaded (CUDAPERF_PLANT=3x); each run must pass and write
# its JSON. ground_truth.py times with CUDA events and has no CPU path: mypy checks it, a GPU runs it.
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
bash "$HERE/run-on-device.sh" ml4gw pytest-benchmark "$OUT/results" \
  --benchmark-min-rounds=1 --benchmark-max-time=0.01
PYTHONPATH="$HERE:$PYTHONPATH" CUDAPERF_PLANT=3x \
  bash "$HERE/run-on-device.sh" ml4gw cudaperf "$OUT/results" -p plant \
  --cudaperf-baseline-dir="$OUT/baselines" --cudaperf-max-time=0.05
for mode in pytest-benchmark cudaperf; do
  test -s "$OUT/results/ml4gw-$mode.json" || { echo "no ml4gw-$mode.json" >&2; exit 1; }
done
