"""Whether a callable queues work on the current CUDA stream or waits for the GPU
(:func:`runs_cuda_work`): what the ``benchmark`` fixture asks before it times a call with the
CUDA timer or the CPU's.

One call is watched under a hold (:func:`watch_call`): a sleep kernel queued ahead of it. With
the GPU held, events recorded before and after the call take no time apart unless the call queued
something between them; a call that returns after the GPU got past the hold either waited for the
GPU (it synchronizes inside) or took longer on the host than the hold lasted. The decision
(:func:`needs_cuda`) is plain logic over the watches, tested without a GPU.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pytest_cudaperf import _torch_compat

#: the longest hold (ms)
MAX_HOLD_MS = 2000.0
#: the first hold (ms): most calls return within it, and it answers them
FIRST_HOLD_MS = 20.0
#: events around a call that queued nothing measure at most this much more than two adjacent
#: events (ms); one kernel takes microseconds
EMPTY_SPAN_MS = 0.001


@dataclass(frozen=True)
class Watch:
    """One call watched under a hold."""

    #: the GPU got past the hold before the call returned
    waited: bool
    #: the events around the call took time apart: it queued work (read only where not ``waited``)
    queued: bool
    #: the host's time from the call's start to its return (ms)
    returned_ms: float


#: watches one call under a hold of that many ms
Watcher = Callable[[float], Watch]


def needs_cuda(watch: Watcher, host_s: float) -> bool:
    """Whether the call that ``watch`` watches queues CUDA work or waits for the GPU; ``host_s``
    is what one call took on the host (the first, often the slowest).

    The full hold is three times ``host_s`` (1 ms to :data:`MAX_HOLD_MS`): a call that still
    returns after it waited for the GPU. It is tried last. First a hold of at most
    :data:`FIRST_HOLD_MS`: a call that returns within it is answered by it. One that returned
    after it is watched again under a longer hold (longer by half the time it ran past the first,
    at least the first hold again): a call whose return moved on by half that difference or more
    waited for the GPU both times; one that returns within it is answered by it. So a call that
    synchronizes inside costs two short holds and two calls, not a hold three times its first
    call (why: docs/decisions.md, "How does the ``benchmark`` fixture tell GPU code from CPU
    code?")."""
    full = min(MAX_HOLD_MS, max(1.0, 3e3 * host_s))
    hold = min(FIRST_HOLD_MS, full)
    first = watch(hold)
    if not first.waited:
        return first.queued
    if hold >= full:
        return True
    longer = min(full, hold + max(hold, (first.returned_ms - hold) / 2))
    second = watch(longer)
    if not second.waited:
        return second.queued
    if second.returned_ms - first.returned_ms >= (longer - hold) / 2 or longer >= full:
        return True
    last = watch(full)
    return last.waited or last.queued


def watch_call(
    torch_mod: Any,
    call: Callable[[], object],
    hold_ms: float,
    sleep: Callable[[int], object],
    cycles_per_ms: float,
) -> Watch:
    """``call`` once on the current stream, held by ``sleep`` (the sleep kernel, which runs
    ``cycles_per_ms`` cycles a ms) for ``hold_ms``."""
    torch_mod.cuda.synchronize()
    before, start, end = (torch_mod.cuda.Event(enable_timing=True) for _ in range(3))
    sleep(int(hold_ms * cycles_per_ms))
    before.record()
    start.record()
    began = time.perf_counter()
    call()
    returned_ms = (time.perf_counter() - began) * 1e3
    end.record()
    waited = bool(start.query())
    end.synchronize()
    span = float(start.elapsed_time(end)) - float(before.elapsed_time(start))
    return Watch(waited, span > EMPTY_SPAN_MS, returned_ms)


def runs_cuda_work(torch_mod: Any, call: Callable[[], object], host_s: float) -> bool:
    """Whether ``call`` queues work on the current CUDA stream or waits for the GPU
    (:func:`needs_cuda` over :func:`watch_call`, the sleep kernel resolved and timed once);
    ``host_s``: one call's time on the host."""
    from pytest_cudaperf.measure.cuda import sleep_cycles_per_ms

    torch_mod.cuda.synchronize()
    sleep = _torch_compat.cuda_sleeper()
    cycles = sleep_cycles_per_ms(torch_mod, sleep)
    return needs_cuda(lambda hold_ms: watch_call(torch_mod, call, hold_ms, sleep, cycles), host_s)
