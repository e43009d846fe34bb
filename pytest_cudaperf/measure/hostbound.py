"""GPU code that synchronizes inside, measured on the host: each call timed up to a synchronize
after it (:class:`HostSampler`), beside the launch reference timed right before it
(:func:`launch_reference`, after its wake), so that its verdict can be judged in reference loops;
the probes of the host's state (:func:`reference_probe`) and of the GPU's launch gap
(:func:`launch_gap_us`) that the verdicts scale by.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pytest_cudaperf import _torch_compat

if TYPE_CHECKING:
    import torch


#: a host-bound batch aims at this much time (calls of a few ms: a few calls per batch)
HOST_BATCH_TARGET_MS = 20.0
MAX_HOST_BATCH = 32
#: the most calls in a host-bound sampler's first batch (before it has timed a batch)
FIRST_HOST_BATCH = 4


def host_batch_size(call_ms: float, most: int = MAX_HOST_BATCH) -> int:
    """Calls in a host-bound batch: as many as fill :data:`HOST_BATCH_TARGET_MS`, two to
    ``most``."""
    return max(2, min(most, int(HOST_BATCH_TARGET_MS / max(call_ms, 1e-3))))


class HostSampler:
    """GPU code that synchronizes inside (it cannot wait behind a blocker): each sample is one
    call timed on the host up to a synchronize after it, and the ``reference`` work
    (:func:`launch_reference`) timed right before it, kept in :attr:`references` (every
    batch's, warm-up included: the samples are the last ones). ``wake`` runs untimed before
    each reference (:func:`launch_wake`), so that the reference does not time the GPU waking
    from the idle the call left behind. ``first_ms``, one call's time if known, sizes the first
    batch (up to :data:`FIRST_HOST_BATCH` calls): a 130 ms call warms up with two, not four."""

    graph = False
    blocker = None

    def __init__(
        self,
        run: Callable[[], object],
        synchronize: Callable[[], object],
        reference: Callable[[], object],
        wake: Callable[[], object] = lambda: None,
        first_ms: float = 0.0,
    ) -> None:
        self.run = run
        self._synchronize = synchronize
        self._reference = reference
        #: the host clock (ns) its calls and references are timed on (the seconds its budget is
        #: counted in are :func:`~pytest_cudaperf.measure.timing.run_adaptive`'s)
        self.ns_clock: Callable[[], int] = time.perf_counter_ns
        self._wake = wake
        self._size = host_batch_size(first_ms, FIRST_HOST_BATCH)
        #: the reference loop's time (ms) before each sample taken so far
        self.references: list[float] = []

    def batch(self) -> list[float]:
        run, sync, reference, clock = self.run, self._synchronize, self._reference, self.ns_clock
        wake = self._wake
        times = []
        for _ in range(self._size):
            wake()
            began = clock()
            reference()
            called = clock()
            run()
            sync()
            done = clock()
            self.references.append((called - began) / 1e6)
            times.append((done - called) / 1e6)
        self._size = host_batch_size(sum(times) / len(times))
        return times


#: tiny additions on the GPU in the host-bound reference: ~0.12 ms with its synchronize on the
#: H100 host
LAUNCH_CALLS = 8


def launch_reference(
    torch_mod: Any, device: torch.device, calls: int = LAUNCH_CALLS
) -> Callable[[], object]:
    """The reference timed beside each host-bound call: ``calls`` (:data:`LAUNCH_CALLS`)
    additions of two 4-element tensors on ``device`` and a synchronize, the launch path and the
    wait that host-bound GPU code spends its time on. Of the references tried it followed the
    calls best between processes on the H100 (why: docs/decisions.md, "How is GPU code that
    synchronizes inside judged?")."""
    one = torch_mod.ones(4, device=device)
    add = torch_mod.add
    synchronize = torch_mod.cuda.synchronize

    def work() -> object:
        out = one
        for _ in range(calls):
            out = add(out, one)
        synchronize(device)
        return out

    return work


def launch_wake(torch_mod: Any, device: torch.device) -> Callable[[], object]:
    """The launch reference with one addition, run untimed before each timed one. A launch
    after an idle GPU is slower (on the H100 the reference took 0.16 ms after 10 ms of host
    work, 0.09 ms after none, and 0.10 ms after the wake), so a reference timed cold grows with
    the host work of the call before it and hides part of a host slowdown (why:
    docs/decisions.md, "Why is the launch path woken before the reference is timed?")."""
    return launch_reference(torch_mod, device, calls=1)


#: timed references in one probe of the host's state (:func:`reference_probe`)
STATE_PROBE_REPEATS = 9


def reference_probe(device: torch.device) -> Callable[[], float]:
    """The host's state now: the median of :data:`STATE_PROBE_REPEATS` launch references
    (:func:`launch_reference`, each after its wake), ms. Back to back, not after a call, they
    need not read what the reference beside a call reads, so a reading is compared with another
    (:class:`pytest_cudaperf.run.hoststate.HostWait` scales it). Its tensors are made at the
    first reading."""
    import torch

    made: list[tuple[Callable[[], object], Callable[[], object]]] = []

    def probe() -> float:
        if not made:
            made.append((launch_wake(torch, device), launch_reference(torch, device)))
        wake, reference = made[0]
        times = []
        for _ in range(STATE_PROBE_REPEATS):
            wake()
            began = time.perf_counter_ns()
            reference()
            times.append((time.perf_counter_ns() - began) / 1e6)
        return statistics.median(times)

    return probe


#: tiny additions queued back to back in the launch-gap probe, and the probe's repeats
GAP_PROBE_LAUNCHES = 400
GAP_PROBE_REPEATS = 5
#: the launch-gap probe's answer per device, once per process (:func:`launch_gap_us`)
_LAUNCH_GAPS: dict[str, float] = {}


def launch_gap_us(torch_mod: Any, device: torch.device, cycles_per_ms: float) -> float:
    """The GPU's time per kernel launch (µs) when tiny additions run back to back, queued behind
    a sleep so that the host's enqueueing does not pace them: the gap between two queued kernels
    plus the tiny kernel. Probed once per process and device: on the H100 it held within a
    process (start and end within 1%) and took one of two levels between processes (about 1.92
    and 2.12 µs), which device time of launch-dense calls carries once per launch (why:
    docs/decisions.md, "Why does device time of many small kernels carry a noise per launch?")."""
    key = str(device)
    if key not in _LAUNCH_GAPS:
        _LAUNCH_GAPS[key] = probe_launch_gap(torch_mod, device, cycles_per_ms)
    return _LAUNCH_GAPS[key]


def probe_launch_gap(torch_mod: Any, device: torch.device, cycles_per_ms: float) -> float:
    """One probe (:func:`launch_gap_us` keeps the first per process): the median over
    :data:`GAP_PROBE_REPEATS` of :data:`GAP_PROBE_LAUNCHES` additions between two events, behind a
    sleep of 5 ms, doubled (while under 200 ms) whenever the host took more than 80% of it to
    enqueue them: the GPU must not catch up with the host."""
    one = torch_mod.ones(4, device=device)
    add = torch_mod.add
    sleep_ms, per = 5.0, list[float]()
    while len(per) < GAP_PROBE_REPEATS:
        start = torch_mod.cuda.Event(enable_timing=True)
        end = torch_mod.cuda.Event(enable_timing=True)
        torch_mod.cuda.synchronize()
        _torch_compat.cuda_sleep(int(sleep_ms * cycles_per_ms))
        began = time.perf_counter()
        start.record()
        out = one
        for _ in range(GAP_PROBE_LAUNCHES):
            out = add(out, one)
        end.record()
        enqueued_ms = (time.perf_counter() - began) * 1e3
        end.synchronize()
        if enqueued_ms > 0.8 * sleep_ms and sleep_ms < 200:  # the GPU may have caught up
            sleep_ms *= 2
            continue
        per.append(start.elapsed_time(end) * 1e3 / GAP_PROBE_LAUNCHES)
    return float(sorted(per)[len(per) // 2])
