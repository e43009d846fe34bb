#!/usr/bin/env bash
# On a machine with two or more GPUs: the distributed tests on NCCL. Outputs go to $OUT/dist/.
#   bash scripts/distributed-on-gpu.sh
# 1. the GPU suite's distributed and multi-GPU tests (tests/gpu/test_gpu_distributed.py,
#    tests/gpu/test_gpu_multi.py), with -rA so the inner runs' output is kept;
# 2. the example project's DDP tests on the GPUs, serial and under -n 2;
# 3. benchmarks/bench_allreduce.py: 256 MiB bf16 all-reduce bus bandwidth beside nccl-tests' formula.
set -u
OUT=${OUT:-out}
mkdir -p "$OUT/dist"
# NVLink multicast stays off (the device tool's machines require it; harmless elsewhere)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH=$PWD:$PWD/example_project${PYTHONPATH:+:$PYTHONPATH}
if ! python3 -c "import importlib.metadata as m, sys; sys.exit(0 if any(e.name == 'cudaperf' for e in m.entry_points(group='pytest11')) else 1)"; then
  export PYTEST_PLUGINS=pytest_cudaperf.plugin
fi
{
  date -u +"%Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader
  nvidia-smi topo -m
  python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version(), 'gpus', torch.cuda.device_count())"
} >"$OUT/dist/env.txt" 2>&1
cat "$OUT/dist/env.txt"
step() {  # step NAME command...
  local name=$1
  shift
  local began=$SECONDS
  "$@" >"$OUT/dist/$name.txt" 2>&1
  echo "$name: exit $? in $((SECONDS - began)) s"
  tail -3 "$OUT/dist/$name.txt"
}
step gpu-tests python3 -m pytest tests/gpu/test_gpu_distributed.py tests/gpu/test_gpu_multi.py \
  -m gpu --cudaperf-require-gpu -p no:cacheprovider -rA -v --junitxml="$OUT/dist/gpu-junit.xml"
step ddp-serial python3 -m pytest example_project/tests/test_ddp.py -p no:cacheprovider -rA -v \
  --cudaperf-require-gpu --cudaperf-json="$OUT/dist/ddp-serial.json"
step ddp-n2 python3 -m pytest example_project/tests/test_ddp.py example_project/tests/test_perf.py \
  -n 2 -p no:cacheprovider -rA --cudaperf-require-gpu --cudaperf-json="$OUT/dist/ddp-n2.json"
step allreduce python3 benchmarks/bench_allreduce.py
if [ "${WHOLE:-0}" = 1 ]; then  # the rest of the GPU suite on these GPUs too
  step whole-suite env OUT="$OUT/dist/suite" bash scripts/gpu-suite.sh \
    --ignore=tests/gpu/test_gpu_distributed.py
fi
