"""Profiling a callable with ``torch.profiler`` into a :class:`~.model.Breakdown`: a few warm-up
calls (timed on the host clock), then ``calls`` calls profiled, averaged per call. On CUDA every
device activity on the device counts as a kernel (kernels, copies, memsets), and the top-level aten
ops by host time are kept beside; on the CPU the top-level ops by CPU-inclusive time, each
call in its own profiler range and an op's time the median of its calls' (a call the host
preempted does not make its ops the profile). The entries that cover >= 95% of the total are
kept, the rest summed as ``other``. torch is imported inside :func:`profile` only."""

from __future__ import annotations

import contextlib
import os
import re
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from pytest_cudaperf._torch_compat import cuda_sleep
from pytest_cudaperf.breakdown.model import (
    GRAPH_NOT_VISIBLE,
    GRAPH_VISIBLE,
    Breakdown,
    BreakdownUnavailable,
    Kernel,
    Other,
    sig,
)
from pytest_cudaperf.breakdown.naming import entry_key, short_name

#: the kept entries cover at least this fraction of the total time
COVERAGE = 0.95
#: and are at most this many (the rest go to ``other``)
MAX_ENTRIES = 40
#: keys of the entries summed as ``other`` that are stored (so a diff can name them)
MAX_OTHER_KEYS = 64
#: host ops kept (CUDA breakdowns)
MAX_HOST_OPS = 10
#: the CUDA from which CUPTI is detached after each profile (torch's own profiler keeps it
#: attached below this where CUDA graphs are captured: re-attaching can crash there)
DETACH_CUPTI_FROM = (12, 6)


@dataclass(frozen=True)
class RawEvent:
    """What ``profile`` reads from one profiler event."""

    name: str
    duration_us: float
    kind: str  #: "kernel" (device activity), "op" (top-level op), "graph_launch"
    #: which profiled call it ran in (0, 1, …), where each call had its ``CALL_RANGE``
    call: int | None = None


def _ranked(
    totals: Mapping[str, tuple[str, int, float]], calls: int, coverage: float, limit: int
) -> tuple[tuple[Kernel, ...], Other, float]:
    """Per-call entries sorted by time (then key), cut at ``coverage`` of the total."""
    entries = sorted(
        (
            Kernel(key, short, sig(n / calls), sig(t / calls))
            for key, (short, n, t) in totals.items()
        ),
        key=lambda e: (-e.time_us, e.key),
    )
    total = sum(t for _, _, t in totals.values()) / calls
    kept: list[Kernel] = []
    covered = 0.0
    for e in entries:
        if len(kept) >= limit or (kept and covered >= coverage * total):
            break
        kept.append(e)
        covered += e.time_us
    rest = entries[len(kept) :]
    other = Other(
        count=len(rest),
        launches=sig(sum(e.launches for e in rest)),
        time_us=sig(sum(e.time_us for e in rest)),
        keys=tuple(sorted(e.key for e in rest[:MAX_OTHER_KEYS])),  # the largest ones
    )
    return tuple(kept), other, sig(total)


def _totals(events: Iterable[RawEvent], kind: str, calls: int) -> dict[str, tuple[str, int, float]]:
    """Per entry key: (short name, events, time over all ``calls``). Where every event of
    ``kind`` knows its call, the time is ``calls`` x the median of its per-call times (a call
    without the entry counting 0): one call stretched by the host (preempted, a page fault)
    moves no entry; otherwise the plain sum."""
    totals: dict[str, tuple[str, int, float]] = {}
    per_call: dict[str, list[float]] = {}
    chosen = [ev for ev in events if ev.kind == kind]
    by_call = calls > 1 and all(ev.call is not None and 0 <= ev.call < calls for ev in chosen)
    for ev in chosen:
        short = short_name(ev.name)
        key = entry_key(ev.name, short)
        _, n, t = totals.get(key, (short, 0, 0.0))
        totals[key] = (short, n + 1, t + max(0.0, ev.duration_us))
        if by_call and ev.call is not None:
            per_call.setdefault(key, [0.0] * calls)[ev.call] += max(0.0, ev.duration_us)
    for key, times in per_call.items():
        short, n, _ = totals[key]
        totals[key] = (short, n, calls * statistics.median(times))
    return totals


def aggregate(
    events: Sequence[RawEvent],
    backend: str,
    calls: int,
    host_us: float,
    coverage: float = COVERAGE,
) -> Breakdown:
    """A Breakdown from the events of ``calls`` profiled calls."""
    if calls < 1:
        raise ValueError(f"calls: expected >= 1, got {calls}")
    main_kind = "kernel" if backend == "cuda" else "op"
    totals = _totals(events, main_kind, calls)
    entries, other, total = _ranked(totals, calls, coverage, MAX_ENTRIES)
    host_ops: tuple[Kernel, ...] = ()
    if backend == "cuda":
        ops = _totals(events, "op", calls)
        host_ops = tuple(
            sorted(
                (Kernel(k, s, sig(n / calls), sig(t / calls)) for k, (s, n, t) in ops.items()),
                key=lambda e: (-e.time_us, e.key),
            )[:MAX_HOST_OPS]
        )
    graph = sum(1 for ev in events if ev.kind == "graph_launch") / calls
    all_notes: list[str] = []
    if graph:
        all_notes.append(GRAPH_VISIBLE if entries else GRAPH_NOT_VISIBLE)
    elif backend == "cuda" and not entries:
        all_notes.append("no kernels seen (CUPTI unavailable, or fn launches none)")
    return Breakdown(
        backend=backend,
        calls=calls,
        total_us=total,
        host_us=sig(host_us),
        entries=entries,
        other=other,
        host_ops=host_ops,
        graph_launches=sig(graph),
        notes=tuple(all_notes),
    )


# ---------------------------------------------------------------------------------------------
# profiling


def _is_op(ev: Any) -> bool:
    name = str(ev.name)
    return "::" in name and not getattr(ev, "is_user_annotation", False)


def _top_level(ev: Any) -> bool:
    parent = ev.cpu_parent
    while parent is not None:
        if _is_op(parent):
            return False
        parent = parent.cpu_parent
    return True


#: device activities that count as kernels (kineto's activity types)
DEVICE_KINDS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
#: device activities that are not work, recognised by name when torch gives no activity type
_NOT_WORK = re.compile(r"\b(Sync|Wait)\b")


def raw_events(function_events: Iterable[Any], device_index: int | None) -> list[RawEvent]:
    """RawEvents from torch's FunctionEvents: kernels, memcpys and memsets on ``device_index``
    are kernels (not synchronisations, nor the GPU-side mirrors of ``record_function``
    ranges); top-level CPU ops are ops; ``cudaGraphLaunch`` calls are graph launches."""
    events = list(function_events)
    annotations = {str(ev.name) for ev in events if getattr(ev, "is_user_annotation", False)}
    ranges = _call_ranges(events)
    out: list[RawEvent] = []
    for ev in events:
        dtype = _device_type(ev)
        name = str(ev.name)
        span = float(ev.time_range.end - ev.time_range.start)
        if dtype != "CPU":
            if _device_work(ev, annotations, device_index):
                out.append(RawEvent(name, span, "kernel"))
        elif name.startswith(("cudaGraphLaunch", "hipGraphLaunch")):
            out.append(RawEvent(name, span, "graph_launch"))
        elif _is_op(ev) and _top_level(ev):
            call = _call_of(float(ev.time_range.start), ranges)
            out.append(RawEvent(name, float(ev.cpu_time_total), "op", call))
    return out


#: the utility events torch leaves out of its FunctionEvents (``_filter_name``), by name
_FILTERED = frozenset(
    {
        "[memory]",
        "[OutOfMemory]",
        "profiler::_record_function_enter",
        "profiler::_record_function_enter_new",
        "profiler::_record_function_exit",
        "aten::is_leaf",
        "aten::output_nr",
        "aten::_version",
    }
)


@dataclass
class _Range:
    start: float
    end: float


def _annotation(ev: Any) -> bool:
    """Whether a raw kineto event is a ``record_function`` range (torch marks user annotations
    where it can)."""
    return bool(ev.is_user_annotation()) if hasattr(ev, "is_user_annotation") else False


class KinetoEvent:
    """A raw kineto event with what :func:`raw_events` reads of a FunctionEvent (name, device,
    times in µs, activity type, device index, annotation, CPU parent), without the rest that
    torch builds for each FunctionEvent at tens of µs an event."""

    __slots__ = (
        "activity_type",
        "cpu_parent",
        "device_index",
        "device_type",
        "is_user_annotation",
        "name",
        "nested",
        "thread",
        "time_range",
    )

    def __init__(self, ev: Any, origin: int) -> None:
        kind = ev.activity_type() if hasattr(ev, "activity_type") else None
        self.name = str(ev.name())
        self.device_type = str(ev.device_type())
        self.time_range = _Range(*_span_us(ev, origin))
        self.activity_type = kind if isinstance(kind, str) and kind else None
        self.device_index = int(ev.device_index())
        self.is_user_annotation = _annotation(ev)
        self.thread = ev.start_thread_id()
        #: on the CPU, on one thread: what FunctionEvents nest (async events are not nested)
        self.nested = (
            _device_type(self) == "CPU" and not ev.is_async() and self.thread == ev.end_thread_id()
        )
        self.cpu_parent: KinetoEvent | None = None

    @property
    def cpu_time_total(self) -> float:
        return self.time_range.end - self.time_range.start


def kineto_events(result: Any, ops: bool = True) -> list[KinetoEvent]:
    """The events of a profile's raw kineto results (``prof.kineto_results``) as torch's
    FunctionEvents give them to :func:`raw_events`: torch's utility events left out as torch
    leaves them, each CPU event's parent the innermost event of its thread whose span holds its
    own, as torch's ``EventList._populate_cpu_children`` finds it. ``ops=False``: the device's
    events and the CPU's ranges (``record_function``) only, unnested, which is all a call's
    device time needs (:mod:`pytest_cudaperf.breakdown.percall`)."""
    origin = _trace_start_ns(result)
    out = []
    for ev in result.events():
        hidden = ev.is_hidden_event() if hasattr(ev, "is_hidden_event") else False
        if hidden or ev.name() in _FILTERED:
            continue
        if not ops and str(ev.device_type()).endswith("CPU") and not _annotation(ev):
            continue
        out.append(KinetoEvent(ev, origin))
    if not ops:
        return out
    by_thread: dict[int, list[KinetoEvent]] = {}
    for ev in out:
        if ev.nested:
            by_thread.setdefault(ev.thread, []).append(ev)
    for events in by_thread.values():
        events.sort(key=lambda e: (e.time_range.start, -e.time_range.end))
        open_: list[KinetoEvent] = []
        for ev in events:
            while open_:
                parent = open_[-1].time_range
                if ev.time_range.start >= parent.end or ev.time_range.end > parent.end:
                    open_.pop()
                else:
                    ev.cpu_parent = open_[-1]
                    break
            open_.append(ev)
    return out


def profiled_events(prof: Any, ops: bool = True) -> Any:
    """A finished profile's events: its raw kineto events (:func:`kineto_events`, ``ops`` as
    there) where this torch keeps them, else torch's FunctionEvents."""
    raw = getattr(prof, "kineto_results", None)
    return kineto_events(raw, ops) if raw is not None else prof.function_events


def profiler_failed(exc: BaseException) -> BreakdownUnavailable:
    """What a profiler's error becomes: BreakdownUnavailable with its first line."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return BreakdownUnavailable(f"torch.profiler could not run: {first}")


def _device_type(ev: Any) -> str:
    return str(getattr(ev, "device_type", "DeviceType.CPU")).rsplit(".", 1)[-1]


def _call_ranges(events: Sequence[Any]) -> list[tuple[float, float]]:
    """The host-side ``CALL_RANGE`` ranges (start, end), in call order."""
    return sorted(
        (float(ev.time_range.start), float(ev.time_range.end))
        for ev in events
        if str(ev.name) == CALL_RANGE and _device_type(ev) == "CPU"
    )


def _call_of(start: float, ranges: Sequence[tuple[float, float]]) -> int | None:
    """The index of the range ``start`` falls in, or None."""
    return next((i for i, (low, high) in enumerate(ranges) if low <= start <= high), None)


def _device_work(ev: Any, annotations: set[str], device_index: int | None) -> bool:
    """Whether a device-side event is work on ``device_index``: a kernel, memcpy or memset, not
    a synchronisation nor the GPU-side mirror of a ``record_function`` range."""
    name = str(ev.name)
    kind = getattr(ev, "activity_type", None)
    if isinstance(kind, str) and kind:
        if kind not in DEVICE_KINDS:
            return False
    elif name in annotations or _NOT_WORK.search(name):
        return False
    index = getattr(ev, "device_index", None)
    return device_index is None or index is None or index == device_index


#: the ``record_function`` range around each call :func:`kernel_times` profiles, and each call
#: :func:`profile` profiles on the CPU
CALL_RANGE = "cudaperf:call"


def _trace_start_ns(result: Any) -> int:
    """Where a profile's times count from: its trace's start (kineto's times are Unix-epoch ns,
    which a float in µs holds only to 0.25 µs)."""
    start = getattr(result, "trace_start_ns", None)
    return int(start()) if callable(start) else 0


def _span_us(ev: Any, origin: int) -> tuple[float, float]:
    """A raw kineto event's start and end, µs from ``origin`` (ns)."""
    start = ev.start_ns()
    end = ev.end_ns() if hasattr(ev, "end_ns") else start + ev.duration_ns()
    return (start - origin) / 1e3, (end - origin) / 1e3


def detach_cupti_after_profiles(torch: Any) -> bool:
    """Have kineto detach CUPTI when a profile stops (``TEARDOWN_CUPTI=1``, read by kineto),
    so that a kernel pass does not slow every later CUDA call of the process: left attached,
    CUPTI's callbacks made host-bound calls measured after the first profile 7-66% slower.
    Not where the environment already says (the user's choice stands), nor on CUDA older
    than :data:`DETACH_CUPTI_FROM`. Returns whether CUPTI is detached after a profile."""
    if "TEARDOWN_CUPTI" in os.environ:
        return os.environ["TEARDOWN_CUPTI"] == "1"
    version = getattr(getattr(torch, "version", None), "cuda", None)
    try:
        cuda = tuple(int(part) for part in str(version).split(".")[:2])
    except ValueError:
        return False
    if cuda < DETACH_CUPTI_FROM:
        return False
    os.environ["TEARDOWN_CUPTI"] = "1"
    return True


#: the CUDA devices of this process on which CUPTI was attached for good (:func:`attach_kept_cupti`)
_KEPT_ATTACHED: set[str] = set()


def attach_kept_cupti(
    device: str, lock: Callable[[], AbstractContextManager[object]] = contextlib.nullcontext
) -> bool:
    """Where CUPTI stays attached after a profile (:func:`detach_cupti_after_profiles` says it
    is not detached: CUDA older than 12.6, or ``TEARDOWN_CUPTI=0``), attach it before the first
    measurement on ``device`` ("cuda", "cuda:1") with one profile of a tiny kernel (no memory
    allocated), so that every measurement of the process runs with it, as those after its first
    kernel pass would: the first host-bound test of a process then reads as the later ones.
    Once per process and device, the device held (``lock``); nothing where CUPTI is detached
    after each profile, off CUDA, while another profiler runs, or where the profiler cannot.
    Returns whether it profiled."""
    if device in _KEPT_ATTACHED or not device.startswith("cuda"):
        return False
    _KEPT_ATTACHED.add(device)
    import torch

    if detach_cupti_after_profiles(torch) or _profiler_active(torch):
        return False
    try:
        with (
            lock(),
            torch.cuda.device(device),
            _profiler(torch, True, False) or _profiler(torch, True),
        ):
            cuda_sleep(1)
            torch.cuda.synchronize()
    except Exception:  # noqa: BLE001 - the profiler's own failure: measured without it, as before
        return False
    return True


def _profiler(torch: Any, is_cuda: bool, cpu: bool = True) -> Any:
    """The kineto-backed autograd profiler (what ``torch.profiler.profile`` wraps): it skips
    ``torch.profiler``'s ``prepare_trace``, whose ``hasattr(torch, "_inductor")`` imports
    Inductor (seconds, once per process). ``use_device`` is feature-detected (older torch:
    ``use_cuda``). ``cpu=False``: the CUDA activity alone (no CPU op events); None where this
    torch cannot leave the CPU's out. On CUDA, CUPTI is detached when it stops
    (:func:`detach_cupti_after_profiles`)."""
    import inspect

    if is_cuda:
        detach_cupti_after_profiles(torch)
    profile_cls = torch.autograd.profiler.profile
    params = inspect.signature(profile_cls.__init__).parameters
    kwargs: dict[str, Any] = {"use_kineto": True}
    if is_cuda:
        kwargs.update({"use_device": "cuda"} if "use_device" in params else {"use_cuda": True})
    if not cpu:
        if "use_cpu" not in params or not is_cuda:
            return None
        kwargs["use_cpu"] = False
    return profile_cls(**kwargs)


def _profiler_active(torch: Any) -> bool:
    """Whether a torch profiler session is running (feature-detected across versions)."""
    enabled = getattr(getattr(torch._C, "_autograd", None), "_profiler_enabled", None)
    if callable(enabled):
        return bool(enabled())
    return bool(getattr(torch.autograd.profiler, "_is_profiler_enabled", False))


def profile(
    fn: Callable[[], object],
    device: str,
    calls: int = 5,
    warmup: int = 2,
    budget_s: float = 0.2,
) -> Breakdown:
    """Break ``fn`` down on ``device`` ("cuda", "cuda:1", "cpu"): ``warmup`` (at least one)
    timed calls, then up to ``calls`` profiled calls, per-call averages. The profiled calls are
    fewer (down to one) when the warm calls show that ``calls`` of them would take longer than
    ``budget_s``, so a slow callable's breakdown costs about ``warmup + 1`` calls. A CUDA
    profile that saw no device work is taken again, after each of :data:`EMPTY_SETTLES_S`,
    until one sees some: the previous profile's CUPTI detach may have fallen inside it. Raises
    BreakdownUnavailable when the profiler cannot run here (e.g. the test runs its own)."""
    import torch

    if calls < 1 or warmup < 0:
        raise ValueError(f"calls >= 1 and warmup >= 0 expected, got {calls}, {warmup}")
    dev = torch.device(device)
    is_cuda = dev.type == "cuda"
    if _profiler_active(torch):
        # a nested profiler "works" but silently ends the outer (the user's) session
        raise BreakdownUnavailable("torch.profiler could not run: another profiler is active")
    index = None
    if is_cuda:
        index = dev.index if dev.index is not None else torch.cuda.current_device()
    host: list[float] = []
    wall: list[float] = []
    for _ in range(max(1, warmup)):
        began = time.perf_counter()
        fn()
        host.append((time.perf_counter() - began) * 1e6)
        if is_cuda:
            torch.cuda.synchronize(index)
        wall.append(time.perf_counter() - began)
    host.sort()
    host_us = host[len(host) // 2]
    calls = max(1, min(calls, int(budget_s / max(min(wall), 1e-9))))
    found = _session(torch, fn, calls, is_cuda, index)
    for settle_s in EMPTY_SETTLES_S if is_cuda else ():
        if any(ev.kind in ("kernel", "graph_launch") for ev in found):
            break
        torch.cuda.synchronize(index)
        time.sleep(settle_s)
        found = _session(torch, fn, calls, is_cuda, index)
    return aggregate(found, "cuda" if is_cuda else "cpu", calls, host_us)


#: how long a CUDA profile that saw no device work waits before each time it is taken again
#: (:func:`profile`): kineto detaches CUPTI after a profile on a thread of its own, at the first
#: CUDA call after that thread is ready, and where the next profile has started by then it loses
#: its GPU events (pytorch/kineto#1554). On an idle host the detach has happened 10 ms later; on
#: a loaded one its thread can be later than that, and the last try waits 0.2 s
EMPTY_SETTLES_S = (0.01, 0.2)


def _session(
    torch: Any, fn: Callable[[], object], calls: int, is_cuda: bool, index: int | None
) -> list[RawEvent]:
    """One profiler session of ``calls`` calls of ``fn``: its events as :func:`raw_events`
    reads them."""
    try:
        with _profiler(torch, is_cuda) as prof:
            for _ in range(calls):
                if is_cuda:  # kernels run after their launch: no per-call range holds them
                    fn()
                else:
                    with torch.autograd.profiler.record_function(CALL_RANGE):
                        fn()
            if is_cuda:
                torch.cuda.synchronize(index)
        events = profiled_events(prof)
    except (RuntimeError, AssertionError) as exc:
        raise profiler_failed(exc) from exc
    return raw_events(events or [], index)


# ---------------------------------------------------------------------------------------------
# diff
