"""``cudaperf ab`` on a real GPU: two Pythons (one of which doubles a GEMM's work) measured in
alternating fresh processes; the doubled GEMM is SLOWER with its kernels' diff, the untouched
kernel is not, and both sides' kernels are compared."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).parents[2]

SUITE = """
import os

import pytest
import torch

TIMES = 2 if os.environ.get("AB_DOUBLE") else 1


@pytest.mark.perf
def test_gemm(cuda_timer):
    a = torch.randn(2048, 2048, device="cuda")

    def gemm():
        for _ in range(TIMES):
            a @ a

    cuda_timer(gemm)


@pytest.mark.perf
def test_scale(cuda_timer):
    x = torch.randn(1 << 24, device="cuda")
    cuda_timer(lambda: x * 2)
"""


@pytest.fixture
def cuda() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")


@pytest.mark.usefixtures("cuda")
def test_a_doubled_gemm_is_slower_and_its_kernels_say_why(tmp_path: Path) -> None:
    (tmp_path / "test_suite.py").write_text(SUITE)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    head = tmp_path / "doubled-python"
    head.write_text(f'#!/bin/sh\nAB_DOUBLE=1 exec {sys.executable} "$@"\n')
    head.chmod(0o755)
    report = tmp_path / "ab.json"
    done = subprocess.run(
        [sys.executable, "-m", "pytest_cudaperf.cli", "ab", "--base-python", sys.executable,
         "--head-python", str(head), "--pairs", "3", "--json", str(report),
         "--", "-q", "-p", "no:randomly", "--cudaperf-max-time=0.2"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=560,
        check=False,
    )  # fmt: skip
    print(done.stdout)
    assert done.returncode == 1, done.stdout + done.stderr
    document = json.loads(report.read_text())
    series = {s["nodeid"]: s for s in document["series"] if s["unit"] == "ms"}
    gemm, scale = series["test_suite.py::test_gemm"], series["test_suite.py::test_scale"]
    assert gemm["call"] == "slower"
    assert 1.7 < gemm["ratio"] < 2.3
    assert gemm["kernels"] == "kernels differ"
    assert any("gemm" in line.lower() or "sgemm" in line.lower() for line in gemm["diff"])
    assert scale["call"] != "slower"
    assert scale["kernels"] == "same kernels"
    assert document["unconfirmed"] == []
    # three pairs, three confirming pairs of test_gemm alone, one profiling process per side
    assert len(document["processes"]) == 2 * 3 + 2 * 3 + 2
    assert "test_suite.py::test_gemm {time:" in done.stdout
