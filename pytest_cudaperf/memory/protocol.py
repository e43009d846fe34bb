"""The leak and peak-memory protocol, over any backend that can settle and read memory.

Leak protocol: run the body ``warmup`` times unmeasured, then ``iterations`` times, settling and
reading before the first and after each measured run (settling: see each backend). The verdict is
growth of allocated bytes per signal beyond the tolerance, still growing in the last run.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Collection, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from pytest_cudaperf.units import format_size


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Collect once, then ``gc.freeze()`` what exists: later collections scan only the objects
    the body creates (a full collection of a large process costs ~100 ms). Only for allocator
    readings: ``gc.get_objects()`` omits frozen objects, so a census of CPU tensors would count
    state that a run replaces (new gradients) as growth. A heap that is frozen already (the
    process's own ``gc.freeze()``) is left frozen as it is: ``gc.unfreeze()`` after would undo
    that freeze too, and collections then scan only what was made since it."""
    gc.collect()
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def collect_garbage(limit: int = 5) -> int:
    """``gc.collect()`` until it frees nothing (at most ``limit`` rounds); rounds run."""
    for rounds in range(1, limit + 1):
        if gc.collect() == 0:
            return rounds
    return limit


@dataclass
class LeakResult:
    """Settled readings per signal (``cuda:0``, ``pinned host``, ``cpu tensors``, …)."""

    series: dict[str, list[int]]
    tolerance: int
    settle_steps: list[str] = field(default_factory=list)
    sites: list[str] = field(default_factory=list)
    #: where a second window of runs began (see :func:`check_leaks`): a leak must grow in it too
    confirm_from: int | None = None

    @property
    def iterations(self) -> int:
        return max((len(s) - 1 for s in self.series.values()), default=0)

    @property
    def leaks(self) -> dict[str, int]:
        """Signals that grew beyond the tolerance and were still growing: in the last run or,
        after a second window of runs, over that window."""
        found = {}
        for key, values in self.series.items():
            total = values[-1] - values[0]
            if total <= self.tolerance or len(values) < 2:
                continue
            if self.confirm_from is None:
                growing = values[-1] > values[-2]
            else:
                growing = values[-1] - values[self.confirm_from] > self.tolerance
            if growing:
                found[key] = total
        return found

    def steady(self) -> bool:
        """Every leaking signal grew in every run (not only in some, as a late lazy
        allocation does)."""
        return all(
            all(b > a for a, b in zip(self.series[key], self.series[key][1:], strict=False))
            for key in self.leaks
        )

    @property
    def leaked_bytes(self) -> int:
        return sum(self.leaks.values())

    def message(self) -> str | None:
        """``leak: +3.0 MiB over 3 runs (+1.0 MiB each) on cuda:0``, or None."""
        leaks = self.leaks
        if not leaks:
            return None
        runs = self.iterations
        parts = []
        for key, total in leaks.items():
            if runs == 1:
                parts.append(f"+{format_size(total)} in the guarded block on {key}")
                continue
            steps = [b - a for a, b in zip(self.series[key], self.series[key][1:], strict=False)]
            # steps that read alike are one per-run step (bytes of bookkeeping apart)
            shown = [f"+{format_size(s)}" for s in steps]
            each = f"{shown[0]} each" if len(set(shown)) == 1 else "steps " + ", ".join(shown)
            parts.append(f"+{format_size(total)} over {runs} runs ({each}) on {key}")
        return "leak: " + "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "series": self.series,
            "leaks": self.leaks,
            "tolerance": self.tolerance,
            "settle": self.settle_steps,
            "sites": self.sites,
        }


@dataclass
class PeakWindow:
    """What ``peak_window()`` yields: its result once the window has closed (None on the CPU
    or before CUDA is initialised)."""

    result: PeakResult | None = None


@dataclass(frozen=True)
class PeakResult:
    peak_bytes: int
    alloc_retries: int = 0
    ooms: int = 0
    device: str = "cpu"

    def to_dict(self) -> dict[str, Any]:
        return {
            "peak_bytes": self.peak_bytes,
            "alloc_retries": self.alloc_retries,
            "ooms": self.ooms,
            "device": self.device,
        }


class MemoryBackend(Protocol):
    """What the protocol needs of a backend (:mod:`pytest_cudaperf.memory.backends`)."""

    #: may the heap be frozen while settling? (not when readings come from the gc)
    can_freeze: bool

    def settle(self) -> list[str]: ...

    def settle_devices(self) -> list[str]: ...

    def allocations(self) -> int | None: ...

    def read(self) -> dict[str, int]: ...

    def sites(self, body: Callable[[], object], leaked: Collection[str]) -> list[str]: ...

    def peak(self, fn: Callable[[], object]) -> PeakResult | None: ...

    def peak_window(self) -> AbstractContextManager[PeakWindow]: ...


def check_leaks(
    body: Callable[[], object],
    backend: MemoryBackend,
    warmup: int,
    iterations: int,
    tolerance: int,
) -> LeakResult:
    """The repeat protocol; ``body`` has usually run once already (that run counts as warm-up)."""
    for _ in range(warmup):
        body()

    def repeat(readings: list[dict[str, int]]) -> None:
        for _ in range(iterations):
            body()
            backend.settle()
            readings.append(backend.read())

    with frozen_heap() if backend.can_freeze else contextlib.nullcontext():
        steps = backend.settle()
        readings = [backend.read()]
        repeat(readings)
        result = LeakResult(series=series_of(readings), tolerance=tolerance, settle_steps=steps)
        if result.leaks and not result.steady():
            # growth in some runs only: a lazy allocation made late (a DDP rank's +512 B in its
            # third run on gloo, then nothing) looks like this; a leak grows again in as many runs
            start = len(readings) - 1
            repeat(readings)
            series = series_of(readings)
            result = LeakResult(series, tolerance, settle_steps=steps, confirm_from=start)
    if result.leaks:
        result.sites = backend.sites(body, set(result.leaks))
    return result


def series_of(readings: list[dict[str, int]]) -> dict[str, list[int]]:
    """Readings (signal -> bytes) as one series per signal; a signal missing from a reading
    (a device initialised later) reads 0 there."""
    keys = sorted({key for reading in readings for key in reading})
    return {key: [reading.get(key, 0) for reading in readings] for key in keys}


@dataclass
class BlockCheck:
    """One guarded block: readings before and after (single-shot)."""

    backend: MemoryBackend
    tolerance: int
    before: dict[str, int] = field(default_factory=dict)

    def start(self) -> None:
        self.backend.settle()
        self.before = self.backend.read()

    def finish(self) -> LeakResult:
        self.backend.settle()
        series = series_of([self.before, self.backend.read()])
        return LeakResult(series=series, tolerance=self.tolerance)
