#!/usr/bin/env bash
# Run the project's GPU suite on a CUDA machine from a source checkout (no install needed):
#   bash scripts/gpu-suite.sh [extra pytest args]
# Results go to $OUT (default: ./out): gpu-suite.log and gpu-junit.xml.
set -u
OUT=${OUT:-out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
# Load the plugin from the checkout when it is not installed (its entry point is absent).
if ! python3 -c "import importlib.metadata as m, sys; sys.exit(0 if any(e.name == 'cudaperf' for e in m.entry_points(group='pytest11')) else 1)"; then
  export PYTEST_PLUGINS=pytest_cudaperf.plugin
fi
{
  date -u +"%Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch, pytest, xdist; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'pytest', pytest.__version__, 'xdist', xdist.__version__)"
  python3 -c "import triton; print('triton', triton.__version__)" 2>/dev/null || echo "triton: not installed"
} | tee "$OUT/gpu-env.txt"
# A test still running after 300 s writes every thread's stack; an inner run's tests write theirs
# after 150 s, and an inner run still going after 240 s is killed, its test failing with them.
python3 -m pytest tests -m gpu --cudaperf-require-gpu -p no:cacheprovider -rA -v --durations=25 -o faulthandler_timeout=300 \
  --junitxml="$OUT/gpu-junit.xml" "$@" 2>&1 | tee "$OUT/gpu-suite.log" | tail -150
exit "${PIPESTATUS[0]}"
