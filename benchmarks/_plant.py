"""Plant a known slowdown in every perf test of a benchmark suite (used by suite_*/conftest.py).

CUDAPERF_PLANT=0.10 appends work worth 10% of the test's reference median to the timed callable:
a calibrated ``torch.cuda._sleep`` on CUDA, a host busy-wait on the CPU. CUDAPERF_PLANT=3x calls
the callable three times instead. The reference median is read from CUDAPERF_PLANT_REF (a JSON
object ``{nodeid: median_ms}``, written by bench_suite.py from the unchanged runs) or, without
it, from the baseline files. The realised change is read from the medians afterwards, never
assumed from the planted amount (a launch-bound kernel gains more than the sleep's length).
CUDAPERF_PLANT_TESTS (comma-separated substrings of test ids) plants only in the tests it names.
"""

from __future__ import annotations

import functools
import json
import os
import statistics
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

#: cuda_timer's own keyword arguments; every other keyword goes to the timed callable
TIMER_KWARGS = ("name", "cache", "graph", "warmup", "min_time", "max_time")


def parse_plant(text: str) -> tuple[float, int]:
    """'' or '0' -> no plant; '0.10' -> (0.10, 1): add 10%; '3x' -> (0.0, 3): call three times."""
    text = text.strip().lower()
    if not text:
        return 0.0, 1
    if text.endswith("x"):
        factor = int(text[:-1])
        if factor < 1:
            raise ValueError(f"CUDAPERF_PLANT: factor must be >= 1, got {text!r}")
        return 0.0, factor
    fraction = float(text)
    if not 0.0 <= fraction < 10.0:
        raise ValueError(
            f"CUDAPERF_PLANT: expected a fraction such as 0.10 or a factor such as 3x, got {text!r}"
        )
    return fraction, 1


def _series(entry: Any, name: str | None) -> Iterator[float]:
    """Time values (ms) inside one test's baseline entry, whatever its nesting."""
    if isinstance(entry, dict):
        value, unit = entry.get("value"), entry.get("unit")
        if isinstance(value, int | float) and unit in ("ms", None) and not isinstance(value, bool):
            yield float(value)
            return
        for key, sub in entry.items():
            if isinstance(key, str) and key.startswith("memory"):
                continue
            if (
                name is not None
                and isinstance(key, str)
                and key.startswith("time")
                and name not in key
            ):
                continue
            yield from _series(sub, name)


def _find(data: Any, nodeid: str, name: str | None) -> float | None:
    """The first time value stored under a key that is (or starts with) the test's id."""
    if isinstance(data, dict):
        for key, sub in data.items():
            if isinstance(key, str) and (key == nodeid or key.startswith(nodeid + "#")):
                for value in _series(sub, name):
                    return value
            found = _find(sub, nodeid, name)
            if found is not None:
                return found
    elif isinstance(data, list):
        for sub in data:
            found = _find(sub, nodeid, name)
            if found is not None:
                return found
    return None


def reference_ms(config: pytest.Config, nodeid: str, name: str | None) -> float | None:
    ref = os.environ.get("CUDAPERF_PLANT_REF")
    if ref:
        value = json.loads(Path(ref).read_text()).get(nodeid)
        return float(value) if value else None
    try:
        folder = Path(config.getoption("cudaperf_baseline_dir", None) or ".cudaperf")
    except ValueError:
        folder = Path(".cudaperf")
    if not folder.is_absolute():
        folder = config.rootpath / folder
    for path in sorted(folder.glob("*.json")):
        value = _find(json.loads(path.read_text()), nodeid, name)
        if value is not None:
            return value
    return None


@functools.cache
def cycles_per_us() -> float:
    """Cycles of torch.cuda._sleep per µs on the current device (median of three readings)."""
    import torch

    torch.cuda._sleep(10_000)
    torch.cuda.synchronize()
    readings = []
    for _ in range(3):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        cycles = 2_000_000
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        readings.append(cycles / (start.elapsed_time(end) * 1e3))
    return float(statistics.median(readings))


def _busy_wait(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def planted(call: Callable[[], Any], delay_ms: float, factor: int, cuda: bool) -> Callable[[], Any]:
    """`call` repeated `factor` times, then `delay_ms` of extra work on the same device."""
    if cuda and delay_ms > 0:
        import torch

        cycles = max(1, round(delay_ms * 1e3 * cycles_per_us()))

        def extra() -> None:
            torch.cuda._sleep(cycles)

    elif delay_ms > 0:
        seconds = delay_ms / 1e3

        def extra() -> None:
            _busy_wait(seconds)

    else:

        def extra() -> None:
            pass

    def run() -> Any:
        result = None
        for _ in range(factor):
            result = call()
        extra()
        return result

    return run


def plant_timer(timer: Any, request: pytest.FixtureRequest, device: Any) -> Any:
    """Wrap the plugin's cuda_timer so that every timed callable carries the plant (if any)."""
    fraction, factor = parse_plant(os.environ.get("CUDAPERF_PLANT", ""))
    only = [t for t in os.environ.get("CUDAPERF_PLANT_TESTS", "").split(",") if t]
    if only and not any(t in request.node.nodeid for t in only):
        return timer
    if fraction == 0.0 and factor == 1:
        return timer

    def timed(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        own = {k: kwargs.pop(k) for k in TIMER_KWARGS if k in kwargs}
        call = functools.partial(fn, *args, **kwargs)
        delay_ms = 0.0
        if fraction:
            ref = reference_ms(request.config, request.node.nodeid, own.get("name"))
            if ref is None:
                warnings.warn(
                    f"CUDAPERF_PLANT: no reference median for {request.node.nodeid}; not planted",
                    stacklevel=2,
                )
            else:
                delay_ms = fraction * ref
        return timer(planted(call, delay_ms, factor, getattr(device, "type", "") == "cuda"), **own)

    timed.compare = getattr(timer, "compare", None)  # type: ignore[attr-defined]
    return timed
