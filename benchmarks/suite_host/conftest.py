"""Host-bound benchmark suite: the plugin's cuda_timer, wrapped so that CUDAPERF_PLANT can slow
every test by a known amount of one kind:

- ``host:0.25``: Python work worth 25% of the test's recorded host-bound time (its ``time:host``
  series, in reference loops), a loop calibrated against the plugin's reference
  (``launch_reference``), so that it costs the same share whatever speed the host runs at;
- ``kernel:0.10``: a ``torch.cuda._sleep`` kernel worth 10% of the test's recorded kernels'
  time (its ``time:kernels`` series) in every call.

Without CUDAPERF_PLANT the fixture is the plugin's own."""

from __future__ import annotations

import functools
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _plant import TIMER_KWARGS, cycles_per_us


def stored_value(config: pytest.Config, nodeid: str, series: str) -> float | None:
    """The value of one series of a test in the run's baseline files."""
    folder = Path(config.getoption("cudaperf_baseline_dir", None) or ".cudaperf")
    if not folder.is_absolute():
        folder = config.rootpath / folder
    for path in sorted(folder.glob("*.json")):
        entries = json.loads(path.read_text()).get("entries", {})
        found = entries.get(nodeid, {}).get("", {}).get(series)
        if found:
            return float(found["value"])
    return None


def _python_work(iterations: int) -> int:
    total = 0
    for i in range(iterations):
        total += i * i % 7
    return total


@functools.cache
def iterations_per_loop() -> float:
    """Iterations of _python_work that cost one reference loop of the plugin's host-bound
    measurement (``launch_reference``; medians of back-to-back pairs)."""
    import torch

    from pytest_cudaperf.measure.cuda import launch_reference

    reference = launch_reference(torch, torch.device("cuda"))
    ratios = []
    for _ in range(21):
        began = time.perf_counter_ns()
        reference()
        loop = time.perf_counter_ns() - began
        began = time.perf_counter_ns()
        _python_work(2_000)
        ratios.append(2_000 * loop / (time.perf_counter_ns() - began))
    return statistics.median(ratios)


def plant(request: pytest.FixtureRequest) -> Callable[[], None] | None:
    """The extra work CUDAPERF_PLANT asks of every call of this test, or None."""
    text = os.environ.get("CUDAPERF_PLANT", "")
    if not text:
        return None
    kind, _, fraction_text = text.partition(":")
    fraction = float(fraction_text)
    nodeid = request.node.nodeid
    if kind == "host":
        loops = stored_value(request.config, nodeid, "time:host")
        if loops is None:
            return None
        iterations = round(fraction * loops * iterations_per_loop())
        return lambda: _python_work(iterations) and None
    if kind == "kernel":
        import torch

        kernels_ms = stored_value(request.config, nodeid, "time:kernels")
        if kernels_ms is None:
            return None
        cycles = max(1, round(fraction * kernels_ms * 1e3 * cycles_per_us()))
        return lambda: torch.cuda._sleep(cycles)
    raise ValueError(f"CUDAPERF_PLANT: expected host:FRACTION or kernel:FRACTION, got {text!r}")


@pytest.fixture(autouse=True)
def _seeded() -> None:
    """Every test's data from the same seed: a data-dependent op does the same work in every
    process (as a suite run under pytest-randomly's reseeding does)."""
    import torch

    torch.manual_seed(1234)


@pytest.fixture
def cuda_timer(cuda_timer: Any, request: pytest.FixtureRequest) -> Any:
    extra = plant(request)
    if extra is None:
        return cuda_timer

    def timed(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        own = {k: kwargs.pop(k) for k in TIMER_KWARGS if k in kwargs}

        def call() -> Any:
            result = fn(*args, **kwargs)
            extra()
            return result

        return cuda_timer(call, **own)

    return timed
