"""Host-bound benchmark suite: the plugin's cuda_timer, wrapped so that CUDAPERF_PLANT can slow
every test by a known amount of one kind:

- ``host:0.25``: host work worth 25% of the test's recorded host-bound time (its ``time:host``
  series, in reference loops) in every call: a busy wait of that many times the plugin's
  reference (``launch_reference``, after its ``launch_wake`` as the plugin times it) as it was
  last timed in this process (every :data:`RETIME_EVERY` calls), so that it keeps its share of
  the call whatever speed the host runs at (a loop calibrated once per process did not: the
  host's speed moves within a process);
- ``kernel:0.10``: a ``torch.cuda._sleep`` kernel worth 10% of the test's recorded kernels'
  time (its ``time:kernels`` series) in every call.

Without CUDAPERF_PLANT the fixture is the plugin's own."""

from __future__ import annotations

import json
import os
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


#: the host plant times the plugin's launch reference again after this many calls
RETIME_EVERY = 8


def host_work(loops: float) -> Callable[[], None]:
    """Work worth ``loops`` launch references on the host in every call: a busy wait of
    ``loops`` times the reference's latest time (timed as the plugin times it, at the first
    call and every :data:`RETIME_EVERY` calls after, outside the wait)."""
    import torch

    from pytest_cudaperf.measure.hostbound import launch_reference, launch_wake

    reference = launch_reference(torch, torch.device("cuda"))
    wake = launch_wake(torch, torch.device("cuda"))
    state = {"calls": 0, "reference_s": 0.0}

    def work() -> None:
        if state["calls"] % RETIME_EVERY == 0:
            wake()
            began = time.perf_counter()
            reference()
            state["reference_s"] = time.perf_counter() - began
        state["calls"] += 1
        end = time.perf_counter() + loops * state["reference_s"]
        while time.perf_counter() < end:
            pass

    return work


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
        return host_work(fraction * loops)
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
