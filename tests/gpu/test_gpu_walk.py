"""The walk of one measurement on CUDA (benchmarks/walk.py --device cuda): the walk proper
enters each module once there too; the backend's build happens before the walk (a kept
backend, as a test's second ``cuda_timer`` call finds it) and only its finish hands on."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

WALK = Path(__file__).resolve().parents[2] / "benchmarks" / "walk.py"


def test_the_cuda_walk_enters_each_module_once() -> None:
    done = subprocess.run(
        [sys.executable, str(WALK), "--device", "cuda"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    assert "each module once" in done.stdout, said
    assert "walk proper" in done.stdout
    assert "measure/cuda" in done.stdout.split("walk proper", 1)[1].splitlines()[1], said


#: a backend built once measures twice, reset before each, as a test's two cuda_timer calls
CLOCKS = """
import json
import torch
from pytest_cudaperf.measure.cuda import CudaBackend
from pytest_cudaperf.measure.timing import Budget, measure

device = torch.device("cuda", 0)
props = torch.cuda.get_device_properties(device)
l2_bytes, uuid = int(getattr(props, "L2_cache_size", 0)), str(getattr(props, "uuid", ""))
backend = CudaBackend(device, "cold", l2_bytes, uuid)
x = torch.randn(1024, 1024, device=device)
budget = Budget(warmup=0.05, max_time=0.2, rounds=2)
found = []
for _ in range(2):
    backend.reset()
    found.append(measure(backend, lambda: x @ x, budget))
print(json.dumps({
    "nvml": backend.nvml is not None,
    "blocker": backend.blocker.name,
    "clocks": [m.clocks for m in found],
}))
"""


def test_a_kept_backend_reads_each_measurements_clocks() -> None:
    """The clocks the batches read on a real GPU (NVML's through the readers bound at the
    build, where nvidia-ml-py is installed; the spin blocker's, where Triton is) come out of
    each measurement of a kept backend summarised."""
    done = subprocess.run(
        [sys.executable, "-c", CLOCKS],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=WALK.parents[1],
    )
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout.strip().splitlines()[-1])
    for clocks in said["clocks"]:
        assert clocks["recorded"] is said["nvml"]
        if said["nvml"]:
            assert clocks["sm_mhz_min"] > 0
            assert clocks["sm_mhz_min"] <= clocks["sm_mhz_max"]
        if said["blocker"] == "spin":
            spin = clocks["spin_sm_mhz"]
            assert 0 < spin["p10"] <= spin["median"] <= spin["p90"]
