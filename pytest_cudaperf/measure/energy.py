"""Energy per call on CUDA: NVML's total-energy counter (``nvmlDeviceGetTotalEnergyConsumption``,
millijoules since the driver loaded) read around a window of back-to-back calls.

The counter moves in steps: it is updated every few milliseconds (the update period, found by
polling it: :func:`probe_resolution`), in whole millijoules. A window therefore starts on an
update (polled for) and ends on the first update after the last call finished, so that no update
period is cut in two; what it still cannot place is the idle tail between the last call and that
update, at most one period. A window that spans fewer than ``1 / MAX_ERROR`` update periods
cannot bound that share below :data:`MAX_ERROR`: it is extended (more calls), up to
:data:`MAX_WINDOW_S`; one still too short, or a counter that does not move, gives no figure and
the reason instead. Never a number from noise.

The calls run back to back (the L2 cache as the previous call left it), the way a served model
runs them; the timing's samples may flush the cache between calls.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

#: the largest share of a window the counter's last update period may be
MAX_ERROR = 0.05
#: the longest energy window of one measurement (seconds)
MAX_WINDOW_S = 3.0
#: the shortest: even a fast-updating counter is read over this long
MIN_WINDOW_S = 0.1
#: how long to poll for the counter's updates before calling it stuck (seconds)
PROBE_LIMIT_S = 1.0
#: the polling interval while waiting for an update (seconds)
POLL_S = 0.0005
#: updates seen to estimate the update period
PROBE_UPDATES = 4
#: a window's energy must span at least this many of the counter's smallest steps (what it moved
#: by in one update period, at the least): one step is then at most MAX_ERROR of the window's
MIN_STEPS = round(1 / MAX_ERROR)


class EnergyCounter(Protocol):
    """A monotonic energy counter in millijoules."""

    def millijoules(self) -> int: ...


class NvmlEnergyCounter:
    """NVML's total-energy counter of one GPU (by UUID)."""

    def __init__(self, nvml: Any, handle: Any) -> None:
        self._nvml = nvml
        self._handle = handle

    def millijoules(self) -> int:
        return int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle))


def nvml_counter(uuid: str) -> NvmlEnergyCounter | str:
    """The GPU's energy counter, or why there is none (no ``nvidia-ml-py``, no driver, a device
    without the counter: NVML has it from Volta on)."""
    try:
        import pynvml
    except ImportError:
        return "no NVML: install the nvml extra (nvidia-ml-py)"
    try:
        pynvml.nvmlInit()
        key = uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"
        handle = pynvml.nvmlDeviceGetHandleByUUID(key)
        counter = NvmlEnergyCounter(pynvml, handle)
        counter.millijoules()
    # NVML_ERROR_NOT_SUPPORTED, no driver, a device unknown to NVML: the reason, not a figure
    except Exception as exc:  # noqa: BLE001
        return f"NVML has no energy counter for this GPU ({exc})"
    return counter


@dataclass(frozen=True)
class Resolution:
    """How the counter moves: every ``update_s`` seconds, by at least ``step_mj``."""

    update_s: float
    step_mj: int

    def describe(self) -> str:
        return (
            f"counter updates every {self.update_s * 1e3:.3g} ms in steps of >= {self.step_mj} mJ"
        )


@dataclass(frozen=True)
class Energy:
    """Energy per call over one window of back-to-back calls."""

    joules_per_call: float
    watts: float
    calls: int
    window_s: float
    resolution: Resolution

    @property
    def uncertainty(self) -> float:
        """The largest share of the window's energy the idle tail can be: one update period
        of the window."""
        return self.resolution.update_s / self.window_s

    def describe(self) -> str:
        return (
            f"{format_joules(self.joules_per_call)}/call at {self.watts:.0f} W over "
            f"{self.calls} calls in {self.window_s:.2f} s (±{self.uncertainty:.1%}: "
            f"{self.resolution.describe()})"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "joules_per_call": self.joules_per_call,
            "watts": self.watts,
            "calls": self.calls,
            "window_s": self.window_s,
            "update_s": self.resolution.update_s,
            "step_mj": self.resolution.step_mj,
        }

    @classmethod
    def from_dict(cls, d: Any) -> Energy:
        return cls(
            joules_per_call=float(d["joules_per_call"]),
            watts=float(d["watts"]),
            calls=int(d["calls"]),
            window_s=float(d["window_s"]),
            resolution=Resolution(float(d["update_s"]), int(d["step_mj"])),
        )


def format_joules(value: float) -> str:
    """``1.23 J``, ``412 mJ``, ``35.1 µJ``: three significant digits."""
    for scale, unit in ((1.0, "J"), (1e-3, "mJ"), (1e-6, "µJ")):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value / 1e-9:.3g} nJ"


@dataclass(frozen=True)
class Clock:
    """Time and waiting, injected in tests."""

    now: Callable[[], float] = time.perf_counter
    sleep: Callable[[float], None] = time.sleep


def _next_update(counter: EnergyCounter, clock: Clock, limit_s: float) -> tuple[int, float] | None:
    """Poll until the counter moves: its new value and when; None within ``limit_s``."""
    first, began = counter.millijoules(), clock.now()
    while clock.now() - began < limit_s:
        clock.sleep(POLL_S)
        value = counter.millijoules()
        if value != first:
            return value, clock.now()
    return None


def probe_resolution(counter: EnergyCounter, clock: Clock | None = None) -> Resolution | str:
    """The counter's update period and smallest step, from :data:`PROBE_UPDATES` updates; the
    reason where it does not move within :data:`PROBE_LIMIT_S`."""
    clock = clock or Clock()
    seen: list[tuple[int, float]] = []
    for _ in range(PROBE_UPDATES + 1):
        found = _next_update(counter, clock, PROBE_LIMIT_S)
        if found is None:
            return f"the energy counter did not move within {PROBE_LIMIT_S:g} s"
        seen.append(found)
    periods = [b[1] - a[1] for a, b in itertools.pairwise(seen)]
    steps = [b[0] - a[0] for a, b in itertools.pairwise(seen)]
    return Resolution(update_s=max(periods), step_mj=max(1, min(steps)))


def window_needed(resolution: Resolution) -> float | str:
    """Seconds of calls that bound the idle tail below :data:`MAX_ERROR`; the reason where that
    is longer than :data:`MAX_WINDOW_S`."""
    needed = max(MIN_WINDOW_S, resolution.update_s / MAX_ERROR)
    if needed > MAX_WINDOW_S:
        return (
            f"energy not measured: the {resolution.describe()}; a window of {needed:.2g} s "
            f"would be needed for ±{MAX_ERROR:.0%}, beyond {MAX_WINDOW_S:g} s"
        )
    return needed


@dataclass(frozen=True)
class Calls:
    """What an energy window runs back to back: ``run`` (one call), ``sync`` (waits for the
    device's work) and ``each_s``, its measured time, to batch the calls."""

    run: Callable[[], object]
    sync: Callable[[], None]
    each_s: float


def measure_energy(
    calls_of: Calls, counter: EnergyCounter, resolution: Resolution, clock: Clock | None = None
) -> Energy | str:
    """Joules per call and mean power over back-to-back ``calls_of``, the window aligned on the
    counter's updates; the reason instead of a figure where the window cannot resolve it."""
    clock = clock or Clock()
    call, sync, call_s = calls_of.run, calls_of.sync, calls_of.each_s
    needed = window_needed(resolution)
    if isinstance(needed, str):
        return needed
    batch = max(1, min(10_000, int(0.01 / max(call_s, 1e-7))))
    sync()
    start = _next_update(counter, clock, 2 * resolution.update_s + PROBE_LIMIT_S)
    if start is None:
        return "energy not measured: the energy counter stopped moving"
    start_mj, began = start
    calls = 0
    while clock.now() - began < needed:
        for _ in range(batch):
            call()
        calls += batch
        sync()
    busy = clock.now() - began
    end = _next_update(counter, clock, 2 * resolution.update_s + PROBE_LIMIT_S)
    if end is None:
        return "energy not measured: the energy counter stopped moving"
    return energy_of(end[0] - start_mj, busy, calls, resolution)


def energy_of(delta_mj: int, busy_s: float, calls: int, resolution: Resolution) -> Energy | str:
    """The window's arithmetic: joules per call and mean power, or why the window cannot say
    (too short against the update period, too few counter steps, a counter that went back)."""
    if busy_s <= 0 or calls <= 0 or not math.isfinite(busy_s):
        return "energy not measured: no calls in the window"
    if resolution.update_s / busy_s > MAX_ERROR:
        return (
            f"energy not measured: a {busy_s * 1e3:.3g} ms window is too short for the "
            f"{resolution.describe()} (needs >= {resolution.update_s / MAX_ERROR * 1e3:.3g} ms)"
        )
    if delta_mj < MIN_STEPS * resolution.step_mj:
        return (
            f"energy not measured: {delta_mj} mJ over the window is under {MIN_STEPS} steps of "
            f"the counter ({resolution.step_mj} mJ)"
        )
    joules = delta_mj / 1e3
    return Energy(joules / calls, joules / busy_s, calls, busy_s, resolution)
