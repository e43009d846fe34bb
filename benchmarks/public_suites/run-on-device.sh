#!/usr/bin/env bash
# Run one public project's pytest-benchmark suite, unchanged, on the device machine.
#
#   bash benchmarks/public_suites/run-on-device.sh PROJECT MODE OUTDIR [extra pytest args]
#
# PROJECT: kornia | ml4gw | tensordict   (see benchmarks/public_suites/<PROJECT>.md), or a part of
#          one, to stay under the 10-minute call: kornia-color, kornia-augmentation,
#          tensordict-eager (transfers, rollout writes, vmap), tensordict-compile (torch.compile)
# MODE:    pytest-benchmark  (the project's own measurement: pytest-benchmark 5.x)
#          groundtruth       (CUDA events around each call: ground_truth.py)
#          cudaperf          (the same tests, the `benchmark` fixture served by pytest-cudaperf)
#          record            (`cudaperf record --runs ${RECORD_RUNS:-5}` of the same tests into
#                             OUTDIR/baselines, the fixture served by pytest-cudaperf)
# OUTDIR:  where the JSON, the JUnit XML, the log and the environment go (created; absolute or
#          relative to the repository root)
#
# Run it from the repository root (the working directory on the device). It needs, carried as
# ignored paths: out/public/PROJECT (the project's source tree at the pinned commit) and
# out/wheels/PROJECT (its extra wheels, cp312 / py3-none-any), and out/wheels/_compat for the
# pytest-benchmark fallback below. Nothing in the project's tree is edited: the wheels go into
# /tmp/public-PROJECT, found through PYTHONPATH, and only the command line differs.
# Extra arguments after OUTDIR go to pytest as they are (e.g. --benchmark-max-time=0.2, -k ...).
set -u -o pipefail

PROJECT=${1:?PROJECT: kornia, ml4gw or tensordict}
MODE=${2:?MODE: pytest-benchmark, cudaperf, record or groundtruth}
OUTDIR=${3:?OUTDIR}
shift 3

ROOT=$(pwd)
case "$OUTDIR" in /*) ;; *) OUTDIR="$ROOT/$OUTDIR" ;; esac
mkdir -p "$OUTDIR"
BASE=${PROJECT%%-*}  # kornia-color -> kornia: one tree and one set of wheels per project
TREE="$ROOT/out/public/$BASE"
WHEELS="$ROOT/out/wheels/$BASE"
SITE="/tmp/public-$BASE"
[ -d "$TREE" ] || { echo "no $TREE: carry out/public/$BASE" >&2; exit 2; }

PY=${PYTHON:-python3}

# --- the project's extra packages, into /tmp, never into the interpreter's site-packages -------
rm -rf "$SITE"
mkdir -p "$SITE"
if compgen -G "$WHEELS/*.whl" > /dev/null; then
  "$PY" -m pip install --quiet --no-deps --no-index --target "$SITE" "$WHEELS"/*.whl || exit 3
fi

# pytest-benchmark 5.2.x reads Node._nodeid, which pytest 9.2 no longer sets: every benchmark test
# would error in its fixture ("'Function' object has no attribute '_nodeid'"). Where that pair is
# installed, a pytest-benchmark 5.3.1 wheel (out/wheels/_compat) goes into /tmp ahead of it on
# sys.path; env.txt says so.
BENCH_COMPAT=none
if ! "$PY" - <<'PYEOF'
import inspect, sys
import _pytest.nodes as nodes
import pytest_benchmark
old = tuple(int(p) for p in pytest_benchmark.__version__.split(".")[:2]) < (5, 3)
sys.exit(1 if old and "_nodeid" not in inspect.getsource(nodes.Node.__init__) else 0)
PYEOF
then
  if compgen -G "$ROOT/out/wheels/_compat/pytest_benchmark-*.whl" > /dev/null; then
    "$PY" -m pip install --quiet --no-deps --no-index --target "$SITE" \
      "$ROOT"/out/wheels/_compat/pytest_benchmark-*.whl || exit 3
    BENCH_COMPAT="pytest-benchmark 5.3.1 from out/wheels/_compat (the installed one needs Node._nodeid)"
  else
    BENCH_COMPAT="WARNING: this pytest sets no Node._nodeid; pytest-benchmark 5.2 will error"
  fi
fi

# torchaudio (ml4gw) from PyPI is a CUDA 13.0 build and refuses a torch of another CUDA version at
# import. Where torch's CUDA differs, its compiled extension is taken out of the /tmp copy (not the
# project's tree): torchaudio then runs its pure-Python paths (lfilter/filtfilt as a Python loop,
# so ml4gw's test_iirfilter measures that, not the C++ kernel). Said in env.txt.
TORCHAUDIO_NOTE=none
if [ -d "$SITE/torchaudio/lib" ]; then
  TORCH_CUDA=$("$PY" -c "import torch; print(torch.version.cuda or '')")
  case "$TORCH_CUDA" in
    13.0*) TORCHAUDIO_NOTE="torchaudio with its CUDA 13.0 extension (torch CUDA $TORCH_CUDA)" ;;
    *) rm -f "$SITE"/torchaudio/lib/*.so
       TORCHAUDIO_NOTE="torchaudio WITHOUT its extension: torch CUDA '$TORCH_CUDA' is not 13.0" ;;
  esac
fi

export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"

# --- the project's command line (only options; see PROJECT.md) ----------------------------------
ENVVARS=()
# kornia: --optimizer= is eager (the conftest's default wraps every op in torch.compile(backend=
# "inductor")); --device cuda is the conftest's own option.
KORNIA_OPTS=(--device cuda --dtype float32 --optimizer=)
# tensordict: upstream's GPU benchmark job sets these two; the collector tests are parametrized
# over cpu and cuda, and only their cuda half is wanted.
TD_ENV=(TORCHDYNAMO_INLINE_INBUILT_NN_MODULES=1 TD_GET_DEFAULTS_TO_NONE=1)
TD_EAGER=(benchmarks/common/h2d_test.py
          benchmarks/common/cpu_transfer_sync_test.py
          benchmarks/common/collector_write_benchmarks_test.py
          benchmarks/common/common_ops_test.py::test_to
          benchmarks/common/common_ops_test.py::test_to_nonblocking
          benchmarks/nn/functional_benchmarks_test.py::test_vmap_mlp_speed_decorator
          benchmarks/nn/functional_benchmarks_test.py::test_vmap_transformer_speed_decorator)
case "$PROJECT" in
  kornia)              ARGS=(benchmarks/augmentation benchmarks/color "${KORNIA_OPTS[@]}") ;;
  kornia-color)        ARGS=(benchmarks/color "${KORNIA_OPTS[@]}") ;;
  kornia-augmentation) ARGS=(benchmarks/augmentation "${KORNIA_OPTS[@]}") ;;
  # the conftest picks the GPU itself; every callable is wrapped in torch.cuda.synchronize()
  ml4gw)               ARGS=(benchmarks) ;;
  tensordict)          ENVVARS=("${TD_ENV[@]}")
                       ARGS=("${TD_EAGER[@]}" benchmarks/compile -k "not (collector and cpu)") ;;
  tensordict-eager)    ENVVARS=("${TD_ENV[@]}")
                       ARGS=("${TD_EAGER[@]}" -k "not (collector and cpu)") ;;
  tensordict-compile)  ENVVARS=("${TD_ENV[@]}")
                       ARGS=(benchmarks/compile) ;;
  *) echo "unknown PROJECT $PROJECT" >&2; exit 2 ;;
esac

COMMON=(-p no:cacheprovider -rfEs --junitxml="$OUTDIR/$PROJECT-$MODE-junit.xml")
LAUNCH=(-m pytest)
plugin_from_checkout() {  # pytest-cudaperf from this checkout, loaded by name where not installed
  export PYTHONPATH="$ROOT:$PYTHONPATH"
  if ! "$PY" -c "import importlib.metadata as m, sys; sys.exit(0 if any(e.name == 'cudaperf' for e in m.entry_points(group='pytest11')) else 1)"; then
    export PYTEST_PLUGINS=pytest_cudaperf.plugin
  fi
}
case "$MODE" in
  pytest-benchmark)
    MODE_ARGS=(--benchmark-json="$OUTDIR/$PROJECT-$MODE.json") ;;
  cudaperf)
    # The same tests with pytest-cudaperf serving the `benchmark` fixture: the plugin is loaded
    # from this checkout, --cudaperf-benchmark switches pytest-benchmark off for the run and the
    # fixture, the marker and the --benchmark-* options (--benchmark-json included) are served by
    # pytest-cudaperf; pytest-cudaperf's own options (baseline folder, report) come after OUTDIR.
    plugin_from_checkout
    MODE_ARGS=(--cudaperf-benchmark --benchmark-json="$OUTDIR/$PROJECT-$MODE.json") ;;
  record)
    # as cudaperf, each of record's runs a pytest process of its own (they start together and
    # measure in turns); the baselines go to OUTDIR/baselines
    plugin_from_checkout
    LAUNCH=(-m pytest_cudaperf.cli record --runs "${RECORD_RUNS:-5}" --baseline-dir "$OUTDIR/baselines" --)
    COMMON=(-p no:cacheprovider)
    MODE_ARGS=(--cudaperf-benchmark) ;;
  groundtruth)
    # CUDA events around each call (benchmarks/public_suites/ground_truth.py serves the fixture
    # and switches pytest-benchmark off, whose options and hooks a suite's config may name;
    # pytest-cudaperf is not loaded)
    export PYTHONPATH="$ROOT/benchmarks/public_suites:$PYTHONPATH"
    export GROUND_TRUTH_OUT="$OUTDIR/$PROJECT-$MODE.jsonl"
    rm -f "$GROUND_TRUTH_OUT"
    unset PYTEST_PLUGINS
    MODE_ARGS=(-p no:cudaperf -p ground_truth) ;;
  *) echo "unknown MODE $MODE" >&2; exit 2 ;;
esac

{
  date -u +"%Y-%m-%dT%H:%M:%SZ"
  echo "project $PROJECT mode $MODE tree $TREE"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null
  "$PY" -c "import sys, torch, pytest; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'pytest', pytest.__version__)"
  "$PY" -c "import pytest_benchmark, os; print('pytest-benchmark', pytest_benchmark.__version__, os.path.dirname(pytest_benchmark.__file__))"
  echo "pytest-benchmark compat: $BENCH_COMPAT"
  echo "torchaudio: $TORCHAUDIO_NOTE"
  echo "extra wheels: $(cd "$WHEELS" 2>/dev/null && ls *.whl 2>/dev/null | tr '\n' ' ')"
  echo "command (in $TREE): $(printf '%q ' "${ENVVARS[@]}" "$PY" "${LAUNCH[@]}" "${ARGS[@]}" "${COMMON[@]}" "${MODE_ARGS[@]}" "$@")"
} | tee "$OUTDIR/$PROJECT-$MODE-env.txt"

cd "$TREE" || exit 2
start=$(date +%s)
env "${ENVVARS[@]}" "$PY" "${LAUNCH[@]}" "${ARGS[@]}" "${COMMON[@]}" "${MODE_ARGS[@]}" "$@" \
  > "$OUTDIR/$PROJECT-$MODE.log" 2>&1
rc=$?
echo "exit $rc after $(( $(date +%s) - start )) s" | tee -a "$OUTDIR/$PROJECT-$MODE-env.txt"
tail -25 "$OUTDIR/$PROJECT-$MODE.log"
exit $rc
