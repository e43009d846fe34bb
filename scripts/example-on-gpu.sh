#!/usr/bin/env bash
# On a CUDA machine: record the example project's baselines, then show a green run, a run with the
# planted regression and one with the planted leak. Outputs go to $OUT/example/.
#   bash scripts/example-on-gpu.sh            # compare against the committed baselines
#   UPDATE=1 bash scripts/example-on-gpu.sh   # re-record them first (pytest --cudaperf-update)
set -u
OUT=${OUT:-out}
mkdir -p "$OUT/example"
export PYTHONPATH=$PWD:$PWD/example_project${PYTHONPATH:+:$PYTHONPATH}
if ! python3 -c "import importlib.metadata as m, sys; sys.exit(0 if any(e.name == 'cudaperf' for e in m.entry_points(group='pytest11')) else 1)"; then
  export PYTEST_PLUGINS=pytest_cudaperf.plugin
fi
run() {  # run NAME "VAR=value ..." [pytest args]
  local name=$1 vars=$2
  shift 2
  # shellcheck disable=SC2086 # the variables are meant to split
  env $vars python3 -m pytest example_project -p no:cacheprovider -p no:randomly \
    --cudaperf-json="$OUT/example/$name.json" "$@" >"$OUT/example/$name.txt" 2>&1
  echo "$name: exit $?"
}
if [ "${UPDATE:-0}" = 1 ]; then
  run update "" --cudaperf-update
fi
run green "" --cudaperf-html="$OUT/example/report.html"
run regression "TINYFORMER_PLANT_REGRESSION=1"
run leak "TINYFORMER_PLANT_LEAK=1"
cp -r example_project/.cudaperf "$OUT/example/baselines" 2>/dev/null || true
