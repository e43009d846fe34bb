"""The walk of one measurement on CUDA (benchmarks/walk.py --device cuda): the walk proper
enters each module once there too; the backend's build happens before the walk (a kept
backend, as a test's second ``cuda_timer`` call finds it) and only its finish hands on."""

from __future__ import annotations

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
