#!/usr/bin/env bash
# judged-at-defaults.sh's steps for a suite too long for one device call, on a machine of several
# GPUs: one step a GPU, side by side (each its own CUDA_VISIBLE_DEVICES and PUBLIC_SITE).
#
#   SHARDS="EXPR1;EXPR2;..." bash benchmarks/public_suites/sharded-at-defaults.sh \
#     PROJECT OUTDIR [pytest selection args, without -k]
#
# Phase 1: pytest-benchmark of the whole selection on GPU 0, and `cudaperf record --runs 5` of
# each shard (SHARDS: ';'-separated -k expressions) on GPUs 1..N,
# into OUTDIR/record-1..N; then `cudaperf merge` of their baseline files into
# OUTDIR/record/baselines (the shards must not share a test). Phase 2: UNCHANGED (default 2)
# judged runs of the whole selection against the merged baselines, the planted run
# (CUDAPERF_PLANT, CUDAPERF_PLANT_TESTS as in judged-at-defaults.sh) and a second
# pytest-benchmark run, one a GPU. So phase 1 takes 1 + shards GPUs, phase 2 UNCHANGED + 2.
# LIMIT_S (default 560) ends the whole; RECORD_S (default 280) cuts a recording, phase 2's runs
# get what is left. Each step's end, in seconds from the start, goes to OUTDIR/steps.txt; its
# files to OUTDIR/<step>/ (run-on-device.sh's). defaults_table.py OUTDIR reads the folder: the
# recording's wall is then the sum of the record-N rows, what one GPU would have taken.
#
#   SHARDS="not test_aug;test_aug and [1-;test_aug and [5-" \
#   CUDAPERF_PLANT_TESTS=test_aug_2d_rotation,test_aug_2d_gamma,512-512 \
#   bash benchmarks/public_suites/sharded-at-defaults.sh kornia "$OUT/kornia" -p no:randomly
set -u -o pipefail

PROJECT=${1:?PROJECT: kornia or ml4gw}
OUTDIR=${2:?OUTDIR}
shift 2
: "${SHARDS:?SHARDS: -k expressions, one a shard, separated by ;}"
HERE=$(cd "$(dirname "$0")" && pwd)
case "$OUTDIR" in /*) ;; *) OUTDIR="$(pwd)/$OUTDIR" ;; esac
mkdir -p "$OUTDIR"
RUN="$HERE/run-on-device.sh"
PY=${PYTHON:-python3}
GPUS=$("$PY" -c "import torch; print(torch.cuda.device_count())")
IFS=';' read -r -a SHARD <<< "$SHARDS"
UNCHANGED=${UNCHANGED:-2}
need=$(( 1 + ${#SHARD[@]} > UNCHANGED + 2 ? 1 + ${#SHARD[@]} : UNCHANGED + 2 ))
if [ "$GPUS" -lt "$need" ]; then
  echo "sharded-at-defaults.sh: $need GPUs needed (1 + ${#SHARD[@]} shards, then $UNCHANGED" \
    "unchanged runs + 2), $GPUS seen" >&2
  exit 2
fi
start=$(date +%s)
LIMIT_S=${LIMIT_S:-560}
step() {  # step NAME RC: its end, seconds from the start, and whether a timeout cut it
  local cut=""
  [ "$2" = 124 ] && cut=" (cut by its time limit)"
  echo "$1: exit $2 at $(( $(date +%s) - start )) s$cut" | tee -a "$OUTDIR/steps.txt"
}
on_gpu() {  # on_gpu GPU NAME LIMIT_S MODE [args...]: one run-on-device.sh step on one GPU
  local gpu=$1 name=$2 limit=$3 mode=$4
  shift 4
  CUDA_VISIBLE_DEVICES=$gpu PUBLIC_SITE="/tmp/public-$PROJECT-gpu$gpu" \
    timeout "$limit" bash "$RUN" "$PROJECT" "$mode" "$OUTDIR/$name" "$@" > /dev/null 2>&1
  step "$name" $?
}

# --- phase 1: pytest-benchmark and the shards' recordings ----------------------------------------
on_gpu 0 pytest-benchmark "$LIMIT_S" pytest-benchmark "$@" &
for i in "${!SHARD[@]}"; do
  on_gpu $((i + 1)) "record-$((i + 1))" "${RECORD_S:-280}" record "$@" -k "${SHARD[$i]}" &
done
wait
mkdir -p "$OUTDIR/record/baselines"
files=("$OUTDIR"/record-*/baselines/*.json)
[ -e "${files[0]}" ] || { echo "no shard recorded a baseline file" >&2; exit 1; }
if ! PYTHONPATH="$HERE/../..${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m pytest_cudaperf.cli merge \
  "$OUTDIR/record/baselines/$(basename "${files[0]}")" "${files[@]}" 2>&1 | tee -a "$OUTDIR/steps.txt"
then
  echo "the shards' baseline files could not be merged: no judged run" >&2
  exit 1
fi

# --- phase 2: judged runs against the merged baselines, and pytest-benchmark again ---------------
left=$(( LIMIT_S - ($(date +%s) - start) ))
export PYTHONPATH="$HERE${PYTHONPATH:+:$PYTHONPATH}"  # plant.py, for the planted run
judged=(--cudaperf-baseline-dir="$OUTDIR/record/baselines")
for i in $(seq 1 "$UNCHANGED"); do
  on_gpu $((i - 1)) "unchanged-$i" "$left" cudaperf "$@" "${judged[@]}" \
    --cudaperf-json="$OUTDIR/unchanged-$i/report.json" &
done
CUDAPERF_PLANT="${CUDAPERF_PLANT:-0.25}" CUDAPERF_PLANT_TESTS="${CUDAPERF_PLANT_TESTS:-}" \
  on_gpu "$UNCHANGED" planted "$left" cudaperf "$@" -p plant "${judged[@]}" \
  --cudaperf-json="$OUTDIR/planted/report.json" &
on_gpu $((UNCHANGED + 1)) pytest-benchmark-2 "$left" pytest-benchmark "$@" &
wait
