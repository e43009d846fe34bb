"""Benchmark suite: the plugin's cuda_timer, wrapped so that CUDAPERF_PLANT can slow every test
by a known amount (see ../_plant.py). Without CUDAPERF_PLANT the fixture is the plugin's own."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _plant import plant_timer


@pytest.fixture
def cuda_timer(cuda_timer: Any, request: pytest.FixtureRequest, cuda_device: Any) -> Any:
    return plant_timer(cuda_timer, request, cuda_device)


def pytest_configure(config: pytest.Config) -> None:
    import torch

    # one intra-op thread: the CI machine's cores are shared with the other xdist workers
    torch.set_num_threads(1)
