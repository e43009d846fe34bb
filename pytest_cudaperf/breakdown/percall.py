"""The device time of each profiled call of GPU code that synchronizes inside (its
``time:kernels`` series): :func:`kernel_times`, the calls profiled with the CUDA activity alone
and told apart by their host windows (:func:`device_only_pass`) or, where that cannot be read
here, each in its ``record_function`` range (:func:`per_call_device_us`), from the profiler's
raw events (:func:`~pytest_cudaperf.breakdown.capture.kineto_events`). Copies to or from pageable
host memory are left out of it (:func:`host_paced`): the host paces them. torch is imported
inside :func:`kernel_times` only."""

from __future__ import annotations

import bisect
import re
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

from pytest_cudaperf.breakdown.capture import (
    CALL_RANGE,
    _call_of,
    _call_ranges,
    _device_type,
    _device_work,
    _profiler,
    _profiler_active,
    _trace_start_ns,
    kineto_events,
    profiled_events,
    profiler_failed,
)
from pytest_cudaperf.breakdown.model import BreakdownUnavailable
from pytest_cudaperf.seeding import same_draws

#: a copy to or from pageable host memory, as kineto names copies ("Memcpy HtoD (Pageable ->
#: Device)")
_PAGEABLE_COPY = re.compile(r"^Memcpy \S+ \(.*\bPageable\b")

#: why a call has no kernels' time of its own where all its device work is such copies
PAGEABLE_ONLY = (
    "its device work is copies to or from pageable host memory alone, which the host paces "
    "(its host time holds them)"
)


#: why calls have no kernels' time where half or more of them ran no device work of their own
MOSTLY_IDLE = (
    "half or more of its calls ran no device work of their own (copies to or from pageable host "
    "memory, which the host paces, left out): their median has nothing to judge"
)


def _judgeable(times: list[float], paced: bool) -> list[float]:
    """``times`` (one pass's per-call device work), where they can be judged: raises
    BreakdownUnavailable where no call ran any work but copies the host paces (``paced``: such
    copies ran, :data:`PAGEABLE_ONLY`), or where half or more of the calls ran none
    (:data:`MOSTLY_IDLE`: a median of zero, against which no change is a ratio)."""
    if times and not any(times) and paced:
        raise BreakdownUnavailable(PAGEABLE_ONLY)
    if times and statistics.median(times) <= 0:
        raise BreakdownUnavailable(MOSTLY_IDLE)
    return times


def host_paced(ev: Any) -> bool:
    """Whether a device event is a copy to or from pageable host memory. The CUDA driver
    stages such a copy through a pinned buffer with the CPU, chunk by chunk, so its device
    time follows the host's state as much as the device's: it is left out of a call's kernels'
    time, and the host time, which waits for it, holds it (docs/decisions.md, "Why does a
    call's kernels' time leave out copies through pageable memory?")."""
    return _PAGEABLE_COPY.match(str(ev.name)) is not None


def per_call_device_us(events: Iterable[Any], device_index: int | None) -> list[float]:
    """The device work (µs) that ran inside each ``CALL_RANGE`` range, in call order: each
    kernel counts for the range its start falls in (a call that synchronizes at its end holds
    its kernels inside its range); copies the host paces (:func:`host_paced`) do not count.
    ``events``: torch's FunctionEvents, or their raw counterparts
    (:func:`~pytest_cudaperf.breakdown.capture.kineto_events`)."""
    events = list(events)
    annotations = {str(ev.name) for ev in events if getattr(ev, "is_user_annotation", False)}
    ranges = _call_ranges(events)
    totals = [0.0] * len(ranges)
    for ev in events:
        if _device_type(ev) == "CPU" or not _device_work(ev, annotations, device_index):
            continue
        if host_paced(ev):
            continue
        call = _call_of(float(ev.time_range.start), ranges)
        if call is not None:
            totals[call] += float(ev.time_range.end - ev.time_range.start)
    return totals


class DevicePass(NamedTuple):
    """What a device-only pass read (:func:`per_window_device_us`, :func:`device_only_pass`)."""

    #: each call's device work (µs), copies the host paces (:func:`host_paced`) left out
    totals_us: list[float]
    #: work events that fell in no call's window
    outside: int
    #: the copies the host paces that fell in a call's window
    paced: int
    #: the device events read (0 where not counted)
    events: int = 0


def per_window_device_us(
    events: Iterable[Any], windows: Sequence[tuple[float, float]], device_index: int | None
) -> DevicePass:
    """The device work (µs) whose start falls in each host window (start, end: µs on the
    events' clock, in call order, each widened by a quarter of :data:`CALL_GAP_S`), and how many
    work events fell in none: in the middle half of a gap, or beyond the first or last window,
    where a profiler's clock that is not the host's puts the kernels at a call's edges. A copy
    the host paces counts for no call (:func:`host_paced`)."""
    slack = CALL_GAP_S * 1e6 / 4
    starts = [low - slack for low, _ in windows]
    totals = [0.0] * len(windows)
    outside = paced = 0
    for ev in events:
        if _device_type(ev) == "CPU" or not _device_work(ev, set(), device_index):
            continue
        start = float(ev.time_range.start)
        at = bisect.bisect_right(starts, start) - 1
        if not (at >= 0 and start <= windows[at][1] + slack):
            outside += 1
        elif host_paced(ev):
            paced += 1
        else:
            totals[at] += float(ev.time_range.end) - start
    return DevicePass(totals, outside, paced)


#: the host's idle after each call of a device-only pass: its calls' windows lie that far apart
CALL_GAP_S = 0.001


def device_only_pass(
    torch: Any, fn: Callable[[], object], index: int, calls: int
) -> DevicePass | None:
    """``calls`` calls of ``fn`` profiled with the CUDA activity alone: on calls of many ops
    most of what the profiler records, and hands back to be read, is the CPU's op events. The
    device time (µs) of each call is the work whose start falls in its host window:
    ``time.time_ns()`` before the call and after its synchronize (kineto's times are
    Unix-epoch ns, as the host's; :func:`per_window_device_us`), with the work events outside
    every window, the copies the host paces and the device events read. None where this torch
    cannot profile without the CPU or gives no raw results."""
    profiler = _profiler(torch, True, cpu=False)
    if profiler is None:
        return None
    stamps: list[tuple[int, int]] = []
    with same_draws(index), profiler as prof:
        for _ in range(calls):
            began = time.time_ns()
            fn()
            torch.cuda.synchronize(index)
            stamps.append((began, time.time_ns()))
            time.sleep(CALL_GAP_S)
    raw = getattr(prof, "kineto_results", None)
    if raw is None:
        return None
    origin = _trace_start_ns(raw)
    windows = [((low - origin) / 1e3, (high - origin) / 1e3) for low, high in stamps]
    events = kineto_events(raw, ops=False)
    return per_window_device_us(events, windows, index)._replace(events=len(events))


#: per device index, whether a device-only pass read every kernel within its calls' windows
#: (the first pass of a process tries it; one that did not turns it off for the process)
_DEVICE_ONLY: dict[int, bool] = {}


def device_only_times(
    torch: Any, fn: Callable[[], object], index: int, calls: int
) -> list[float] | None:
    """The device time (ms) of each call from a :func:`device_only_pass`, while such passes
    work on device ``index`` in this process; None (the caller profiles with ranges) where the
    pass could not run, a work event fell outside every window, or it saw no work at all (a
    profiler that records no kernel without the CPU's events would read zeros), which turns
    them off. Zeros where the calls' only work was copies the host paces."""
    if not _DEVICE_ONLY.get(index, True):
        return None
    try:
        found = device_only_pass(torch, fn, index, calls)
    except (RuntimeError, AssertionError):  # this torch's profiler needs the CPU's events
        found = None
    works = (
        found is not None
        and found.outside == 0
        and (found.paced > 0 or any(us > 0 for us in found.totals_us))
    )
    _DEVICE_ONLY[index] = works
    return [us / 1e3 for us in found.totals_us] if found is not None and works else None


#: the time a pass of :func:`kernel_times` is sized to (its calls, at least three)
KERNEL_PASS_BUDGET_S = 0.15


def kernel_times(
    fn: Callable[[], object],
    device: str,
    calls: int = 10,
    exact: bool = False,
    each_s: float | None = None,
) -> list[float]:
    """The device time (ms) of the work each of up to ``calls`` calls of ``fn`` ran on
    ``device`` (a CUDA device), each call synchronized at its end: the kernels of GPU code that
    synchronizes inside, apart from its host time. The calls are profiled with the CUDA
    activity alone and told apart by their host windows (:func:`device_only_pass`) where a
    first such pass of the process read every kernel inside its calls' windows; else each in
    its own profiler range (``CALL_RANGE``) of a profile with the CPU's events. Fewer
    calls (down to 3) when ``calls`` of them would take longer than :data:`KERNEL_PASS_BUDGET_S`,
    unless ``exact``: by ``each_s``, one call's time where the caller knows it (a measurement's
    median), else by a call timed first. The calls draw the same random numbers in every
    process and every pass (:func:`seeding.same_draws`). Copies to or from pageable host memory
    do not count (:func:`host_paced`). Raises BreakdownUnavailable when the profiler cannot run
    here, where such copies were all the calls' device work (:data:`PAGEABLE_ONLY`), or where
    half or more of the calls ran none (:data:`MOSTLY_IDLE`)."""
    import torch

    dev = torch.device(device)
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    if _profiler_active(torch):
        raise BreakdownUnavailable("torch.profiler could not run: another profiler is active")
    if not exact:
        if each_s is None:
            began = time.perf_counter()
            fn()
            torch.cuda.synchronize(index)
            each_s = time.perf_counter() - began
        calls = max(3, min(calls, int(KERNEL_PASS_BUDGET_S / max(each_s, 1e-9))))
    torch.cuda.synchronize(index)
    alone = device_only_times(torch, fn, index, calls)
    if alone is not None:  # it reads kernels alone: calls with no work ran copies, if anything
        return _judgeable(alone, paced=True)
    try:
        with same_draws(index), _profiler(torch, True) as prof:
            for _ in range(calls):
                with torch.autograd.profiler.record_function(CALL_RANGE):
                    fn()
                    torch.cuda.synchronize(index)
        events = profiled_events(prof, ops=False)
    except (RuntimeError, AssertionError) as exc:
        raise profiler_failed(exc) from exc
    times = per_call_device_us(events, index)
    paced = any(host_paced(ev) for ev in events if _device_type(ev) != "CPU")
    return [us / 1e3 for us in _judgeable(times, paced)]
