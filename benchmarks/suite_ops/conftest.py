"""The 20-op CPU suite: the plugin's cuda_timer, wrapped so that CUDAPERF_PLANT can slow the tests
CUDAPERF_PLANT_TESTS names by a known amount (see ../_plant.py). Unlike suite_cpu it leaves
torch's intra-op threads as they are: the threads a measurement runs with are the plugin's
concern (``--cudaperf-cpu-threads``)."""

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
