"""How the ``benchmark`` fixture tells a call that queues CUDA work or waits for the GPU from one
that does neither (:func:`pytest_cudaperf.measure.cudawork.needs_cuda`), over calls modelled as
the GPU and the host would run them under a hold; and the watch itself
(:func:`~pytest_cudaperf.measure.cudawork.watch_call`, :func:`runs_cuda_work`) on a simulated
stream."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from pytest_cudaperf.measure.cudawork import FIRST_HOLD_MS, MAX_HOLD_MS, Watch, needs_cuda


@dataclass
class Call:
    """A call as the GPU and the host run it: ``host_ms`` on the host per call (one value per
    call, the last repeated), ``gpu_ms`` of kernels queued (0: none), ``syncs``: it waits for
    the GPU before it returns."""

    host_ms: list[float]
    gpu_ms: float = 0.0
    syncs: bool = False
    holds: list[float] = field(default_factory=list)

    def _host(self) -> Iterator[float]:
        yield from self.host_ms
        while True:
            yield self.host_ms[-1]

    def __post_init__(self) -> None:
        self._times = self._host()

    def watch(self, hold_ms: float) -> Watch:
        self.holds.append(hold_ms)
        host = next(self._times)
        if self.syncs:  # returns once the hold and its kernels are done
            return Watch(True, True, max(hold_ms, host) + self.gpu_ms)
        return Watch(host > hold_ms, self.gpu_ms > 0, host)


def test_a_cheap_call_is_answered_by_the_first_short_hold() -> None:
    """A first call of 50 ms (cold) no longer holds the GPU for 150 ms: a warm call of 0.2 ms
    returns within the first hold, which says whether it queued work."""
    gpu, cpu = Call([0.2], gpu_ms=0.05), Call([0.2])
    assert needs_cuda(gpu.watch, host_s=0.05) is True
    assert needs_cuda(cpu.watch, host_s=0.05) is False
    assert gpu.holds == cpu.holds == [FIRST_HOLD_MS]


def test_a_call_that_synchronizes_inside_is_found_by_two_short_holds() -> None:
    """Its return moves on with the hold: 20 ms and 40 ms, not the 300 ms that three times its
    cold first call would hold."""
    call = Call([0.3], gpu_ms=0.2, syncs=True)
    assert needs_cuda(call.watch, host_s=0.1) is True
    assert call.holds == [FIRST_HOLD_MS, 2 * FIRST_HOLD_MS]


def test_a_long_call_that_synchronizes_inside_moves_with_a_hold_half_its_time_longer() -> None:
    call = Call([5.0], gpu_ms=126.0, syncs=True)
    assert needs_cuda(call.watch, host_s=0.15) is True
    first_return = FIRST_HOLD_MS + 126.0
    assert call.holds == [FIRST_HOLD_MS, FIRST_HOLD_MS + (first_return - FIRST_HOLD_MS) / 2]
    assert sum(call.holds) < 3e3 * 0.15  # less than the one hold three times the call


def test_a_noisy_call_that_synchronizes_inside_still_moves_with_the_hold() -> None:
    """Its kernels took 20% less the second time: the return still moved by more than half the
    hold's difference."""
    durations = iter([126.0, 100.0])

    def watch(hold_ms: float) -> Watch:
        return Watch(True, True, hold_ms + next(durations))

    assert needs_cuda(watch, host_s=0.15) is True


def test_a_long_host_call_with_no_cuda_work_gets_the_full_hold() -> None:
    """60 ms on the host: past both short holds, its return did not move with them, so the full
    hold (three times the call) answers it: no CUDA work."""
    call = Call([60.0])
    assert needs_cuda(call.watch, host_s=0.06) is False
    assert call.holds[-1] == pytest.approx(180.0)
    assert len(call.holds) == 3


def test_a_host_call_a_little_longer_than_the_first_hold_is_answered_by_the_second() -> None:
    """30 ms of launches that queue kernels: past the first hold, within the second."""
    queues, plain = Call([30.0], gpu_ms=1.0), Call([30.0])
    assert needs_cuda(queues.watch, host_s=0.03) is True
    assert needs_cuda(plain.watch, host_s=0.03) is False
    assert len(queues.holds) == len(plain.holds) == 2


def test_a_short_first_call_keeps_the_single_hold_three_times_its_length() -> None:
    """Where three times the first call is shorter than the first hold, that one hold decides,
    as it always did: a call that still returns after it waited for the GPU."""
    call = Call([1.0], gpu_ms=0.5, syncs=True)
    assert needs_cuda(call.watch, host_s=0.002) is True
    assert call.holds == [pytest.approx(6.0)]
    tiny = Call([0.01])
    assert needs_cuda(tiny.watch, host_s=1e-5) is False
    assert tiny.holds == [1.0]  # never under a millisecond


def test_no_hold_is_longer_than_the_longest() -> None:
    call = Call([5000.0])
    assert needs_cuda(call.watch, host_s=5.0) is True  # past every hold: counted as waiting
    assert max(call.holds) == MAX_HOLD_MS


# --- watch_call and runs_cuda_work on a simulated GPU -------------------------------------------

#: the simulated sleep kernel's clock: cycles per ms
CYCLES_PER_MS = 1.98e6


class SimulatedGpu:
    """One stream in ms: the host's clock, when the GPU gets through what is queued, and the
    holds queued (ms)."""

    def __init__(self) -> None:
        self.host = 0.0
        self.free_at = 0.0
        self.sleeps: list[float] = []

    def enqueue(self, ms: float) -> float:
        self.free_at = max(self.host, self.free_at) + ms
        return self.free_at

    def synchronize(self, *_: object) -> None:
        self.host = max(self.host, self.free_at)

    def sleep(self, cycles: int) -> None:
        self.sleeps.append(cycles / CYCLES_PER_MS)
        self.enqueue(cycles / CYCLES_PER_MS)

    def perf_counter(self) -> float:
        return self.host / 1e3


class SimulatedEvent:
    def __init__(self, gpu: SimulatedGpu) -> None:
        self.gpu = gpu
        self.at = 0.0

    def record(self) -> None:
        self.at = self.gpu.enqueue(0.0)

    def query(self) -> bool:
        return self.gpu.host >= self.at

    def synchronize(self) -> None:
        self.gpu.host = max(self.gpu.host, self.at)

    def elapsed_time(self, end: SimulatedEvent) -> float:
        return end.at - self.at


@pytest.fixture
def gpu(monkeypatch: pytest.MonkeyPatch) -> SimulatedGpu:
    from pytest_cudaperf import _torch_compat
    from pytest_cudaperf.measure import cudawork

    simulated = SimulatedGpu()
    monkeypatch.setattr(_torch_compat, "cuda_sleeper", lambda: simulated.sleep)
    monkeypatch.setattr(cudawork, "time", simulated)
    return simulated


def torch_on(gpu: SimulatedGpu) -> object:
    cuda = type("cuda", (), {})()
    cuda.synchronize = gpu.synchronize
    cuda.Event = lambda enable_timing=False: SimulatedEvent(gpu)
    return type("torch", (), {"cuda": cuda})()


def a_call(gpu: SimulatedGpu, host_ms: float, kernel_ms: float = 0.0, syncs: bool = False) -> Any:
    def call() -> None:
        gpu.host += host_ms
        if kernel_ms:
            gpu.enqueue(kernel_ms)
        if syncs:
            gpu.synchronize()

    return call


def test_on_a_simulated_gpu_each_call_is_told_apart_as_the_rule_says(gpu: SimulatedGpu) -> None:
    """The events and the host's clock as a stream orders them: kernels queued behind the hold
    take time between the events, a call that synchronizes returns after the hold, and the holds
    are the ones :func:`needs_cuda` asks for."""
    from pytest_cudaperf.measure.cudawork import runs_cuda_work

    torch = torch_on(gpu)
    cases = [  # (call, its first call's host time in s, the answer, the holds after calibration)
        (a_call(gpu, 0.2, kernel_ms=0.05), 0.05, True, [20.0]),
        (a_call(gpu, 0.2), 0.05, False, [20.0]),
        (a_call(gpu, 0.1, kernel_ms=0.2, syncs=True), 0.1, True, [20.0, 40.0]),
        (a_call(gpu, 60.0), 0.06, False, [20.0, 40.0, 180.0]),
        (a_call(gpu, 30.0, kernel_ms=1.0), 0.03, True, [20.0, 40.0]),
    ]
    for call, host_s, answer, holds in cases:
        gpu.sleeps.clear()
        assert runs_cuda_work(torch, call, host_s) is answer
        # the first two sleeps calibrate the sleep kernel's clock (measure/cuda.py)
        assert gpu.sleeps[2:] == [pytest.approx(h) for h in holds]
