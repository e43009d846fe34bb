#!/usr/bin/env bash
# What a judged run of a public suite costs against pytest-benchmark, both at their defaults.
#
#   bash benchmarks/public_suites/judged-at-defaults.sh PROJECT OUTDIR [pytest selection args]
#
# On the device machine, from the folder run-on-device.sh runs in (the repository root, holding
# out/public/PROJECT), with what run-on-device.sh needs carried. In order: the suite under
# pytest-benchmark; `cudaperf record --runs 5` of it with pytest-cudaperf serving `benchmark`
# (RECORD_RUNS sets 5); UNCHANGED (default 1) judged runs against those baselines; one judged
# run with CUDAPERF_PLANT (default 0.25) planted in the tests whose ids contain one of the
# comma-separated CUDAPERF_PLANT_TESTS (about a tenth of them: plant.py). No time option on
# either side unless the selection args add one (both honour --benchmark-max-time). Each step's
# end, in seconds from the start, goes to OUTDIR/steps.txt; each run's files to OUTDIR/<step>/
# (run-on-device.sh's); the baselines to OUTDIR/record/baselines. RECORD_S (default 300) and
# RUN_S (default 150) cut a step that runs longer; a cut step is marked so in steps.txt (a cut
# recording still writes the series of its ended runs where three or more had ended: its log says;
# a cut judged run writes the report of the tests that finished, marked interrupted).
# STEPS (default "pytest-benchmark record unchanged planted") runs some of them, so that a suite
# too long for one device call runs over several into the same OUTDIR (carried back to the device
# between calls): the recording of a part (say -k "not batch_512") keeps the series that other
# parts recorded there before it (their env files and logs move to OUTDIR/record/part-N as the
# next part begins), and unchanged runs are numbered on from those already there.
# The parts are recorded one after another, each alone on the machine: parts recorded side by
# side (one GPU each) share the host's CPU, and `cudaperf record` flags the series recorded so.
#
#   CUDAPERF_PLANT_TESTS=test_resnet1d_forward,test_whiten_forward,test_compute_ifo_snr \
#   bash benchmarks/public_suites/judged-at-defaults.sh ml4gw "$OUT" \
#     -k "batch_32 and (test_gw or test_spectral or whitening or resnet or qtransform)" -p no:randomly
set -u -o pipefail

PROJECT=${1:?PROJECT: kornia or ml4gw}
OUTDIR=${2:?OUTDIR}
shift 2
HERE=$(cd "$(dirname "$0")" && pwd)
case "$OUTDIR" in /*) ;; *) OUTDIR="$(pwd)/$OUTDIR" ;; esac
mkdir -p "$OUTDIR"
RUN="$HERE/run-on-device.sh"
BASELINES="$OUTDIR/record/baselines"
start=$(date +%s)
step() {  # step NAME RC: its end, seconds from the start, and whether a timeout cut it
  local cut=""
  [ "$2" = 124 ] && cut=" (cut by its time limit)"
  echo "$1: exit $2 at $(( $(date +%s) - start )) s$cut" | tee -a "$OUTDIR/steps.txt"
}

# a step cut by its time limit: the wrapper ends at once while what it ran still writes what
# had finished; wait (a minute at most) until no process whose command line holds $1 is left
outlived() { for _ in $(seq 60); do pgrep -f "$1" > /dev/null || break; sleep 1; done; }

STEPS=" ${STEPS:-pytest-benchmark record unchanged planted} "
wants() { [[ "$STEPS" == *" $1 "* ]]; }

if wants pytest-benchmark; then
  bash "$RUN" "$PROJECT" pytest-benchmark "$OUTDIR/pytest-benchmark" "$@" > /dev/null 2>&1
  step pytest-benchmark $?
fi
if wants record; then
  # a part recorded into this OUTDIR before: its env file and log move to record/part-N, so
  # that every part's wall stays (defaults_table.py sums them)
  if [ -f "$OUTDIR/record/$PROJECT-record-env.txt" ]; then
    part=1
    while [ -d "$OUTDIR/record/part-$part" ]; do part=$((part + 1)); done
    mkdir -p "$OUTDIR/record/part-$part"
    mv "$OUTDIR/record/$PROJECT-record-env.txt" "$OUTDIR/record/part-$part/"
    [ -f "$OUTDIR/record/$PROJECT-record.log" ] && mv "$OUTDIR/record/$PROJECT-record.log" "$OUTDIR/record/part-$part/"
  fi
  timeout "${RECORD_S:-300}" bash "$RUN" "$PROJECT" record "$OUTDIR/record" "$@" > /dev/null 2>&1
  rc=$?
  outlived "pytest_cudaperf.cli record"  # it stops its runs and writes what had ended
  step record $rc
fi

export PYTHONPATH="$HERE${PYTHONPATH:+:$PYTHONPATH}"  # plant.py, for the planted run
judged() {  # judged NAME [env...]: one judged run against the recorded baselines
  local name=$1 rc
  shift
  env "$@" timeout "${RUN_S:-150}" bash "$RUN" "$PROJECT" cudaperf "$OUTDIR/$name" "${SEL[@]}" \
    --cudaperf-baseline-dir="$BASELINES" --cudaperf-json="$OUTDIR/$name/report.json" \
    > /dev/null 2>&1
  rc=$?
  outlived "cudaperf-json=$OUTDIR/$name/"  # it ends as on Ctrl-C: the finished tests' report
  step "$name" $rc
}
SEL=("$@")
if wants unchanged; then
  done_before=0  # a later call into the same OUTDIR numbers its runs on from the earlier ones
  while [ -d "$OUTDIR/unchanged-$((done_before + 1))" ]; do done_before=$((done_before + 1)); done
  for i in $(seq 1 "${UNCHANGED:-1}"); do
    judged "unchanged-$((done_before + i))"
  done
fi
SEL=("$@" -p plant)
if wants planted; then
  judged planted CUDAPERF_PLANT="${CUDAPERF_PLANT:-0.25}" CUDAPERF_PLANT_TESTS="${CUDAPERF_PLANT_TESTS:-}"
fi
