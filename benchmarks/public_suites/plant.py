"""Plant a known slowdown in an unchanged pytest-benchmark suite served by pytest-cudaperf.

Loaded with ``-p plant`` (this folder on ``PYTHONPATH``) beside ``--cudaperf-benchmark``:
``CUDAPERF_PLANT=0.10`` appends a calibrated ``torch.cuda._sleep`` worth 10% of the test's
baseline time to every call of the callable the test benchmarks (``benchmark(fn, ...)``), as
``benchmarks/_plant.py`` does for ``cuda_timer`` suites; the project's files are not touched.
``CUDAPERF_PLANT_TESTS`` (comma-separated substrings of test ids) plants only in the tests it
names.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _plant import parse_plant, planted, reference_ms


def pytest_configure(config: pytest.Config) -> None:
    from pytest_cudaperf.fixtures import benchmark

    fraction, factor = parse_plant(os.environ.get("CUDAPERF_PLANT", ""))
    if fraction == 0.0 and factor == 1:
        return
    raw = benchmark.BenchmarkFixture._raw
    only = [t for t in os.environ.get("CUDAPERF_PLANT_TESTS", "").split(",") if t]

    def with_plant(self: Any, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        call: Callable[[], Any] = functools.partial(fn, *args, **kwargs)
        if only and not any(t in self.fullname for t in only):
            return raw(self, call, (), {})
        ref = reference_ms(config, self.fullname, None)
        if ref is not None or factor > 1:
            call = planted(call, fraction * (ref or 0.0), factor, cuda=True)
        return raw(self, call, (), {})

    benchmark.BenchmarkFixture._raw = with_plant  # type: ignore[method-assign]
