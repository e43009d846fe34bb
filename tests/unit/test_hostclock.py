"""The host clock of regions and pedantic's rounds on the CPU, and the rule for a measurement of
exact rounds: too few samples read no change."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from pytest_cudaperf.measure.cpu import ReferenceProbe, WaitMeter
from pytest_cudaperf.measure.hostclock import MIN_MACHINE_WINDOW_S, HostClock
from pytest_cudaperf.run.exact import MIN_EXACT_SAMPLES, too_few
from pytest_cudaperf.verdict import Kind, Verdict


class Schedstat:
    """A thread that waits ``wait_ns`` in a run queue during each timed block."""

    def __init__(self, wait_ns: int) -> None:
        self.wait_ns = wait_ns
        self._reads: Iterator[int] = itertools.count()

    def read(self) -> tuple[int, int]:
        return 0, (next(self._reads) + 1) // 2 * self.wait_ns  # a wait between begin and end


def _clock(wait_ns: int = 0, load_free: bool = True) -> HostClock:
    probe = ReferenceProbe(work=lambda: None, clock=iter(range(0, 10**9, 500_000)).__next__)
    environ = {} if load_free else {"PYTEST_XDIST_WORKER_COUNT": "8"}
    return HostClock(1, WaitMeter(Schedstat(wait_ns).read), probe, environ)


def test_each_block_is_one_sample_less_its_run_queue_wait() -> None:
    clock = _clock(wait_ns=10**12)  # far more than the block: at most 90% is taken off
    for _ in range(3):
        with clock.timed():
            sum(range(1000))
    with pytest.raises(RuntimeError), clock.timed():
        raise RuntimeError("the body failed: no sample")
    assert len(clock.samples_ms) == 3
    measured = clock.measurement("step", calls=1)
    assert (measured.metric, measured.mode, measured.n, measured.name) == (
        "wall",
        "wall",
        3,
        "step",
    )
    assert measured.reference_ms == 0.5  # timed at the first sample and at the end
    assert any("waited for a CPU" in why for why in measured.instability)
    assert measured.instability_noise > 0


def test_a_sample_of_several_calls_is_divided_and_the_workers_are_named() -> None:
    clock = _clock(load_free=False)
    with clock.timed():
        sum(range(1000))
    whole = clock.samples_ms[0]
    measured = clock.measurement(calls=4)
    assert measured.median_ms == pytest.approx(whole / 4)
    assert any("xdist workers" in why for why in measured.instability)


@pytest.mark.parametrize("kind", [Kind.REGRESSION, Kind.IMPROVED])
def test_a_change_from_too_few_samples_is_inconclusive(kind: Kind) -> None:
    verdict = Verdict(kind, 3.0, (2.5, 3.5), 0.5, "perf regression: median 3 ms vs baseline 1 ms")
    few = too_few(verdict, MIN_EXACT_SAMPLES - 1)
    assert few.kind is Kind.INCONCLUSIVE
    assert few.message.startswith("inconclusive: median 3 ms vs baseline 1 ms; only 9 samples")
    assert "more rounds" in few.message
    assert too_few(verdict, MIN_EXACT_SAMPLES) is verdict


def test_a_pass_from_few_samples_stands() -> None:
    verdict = Verdict(Kind.PASS, 1.0, (0.9, 1.1), 0.5, "median 1 ms vs baseline 1 ms")
    assert too_few(verdict, 2) is verdict


class Machine:
    """A machine meter: other processes' share read over the window it was open."""

    def __init__(self) -> None:
        self.opened = 0

    def begin(self) -> None:
        self.opened += 1

    def reset(self) -> None:
        pass

    def others(self) -> float:
        return 0.0


@pytest.mark.parametrize(("spent_s", "slept"), [(0.03, [pytest.approx(0.07)]), (0.5, [])])
def test_the_machine_is_read_over_a_tenth_of_a_second_at_least(
    spent_s: float, slept: list[float]
) -> None:
    """Rounds of a few milliseconds hold one 10 ms tick of the machine or none: the window is
    kept open until :data:`MIN_MACHINE_WINDOW_S` passed since the first sample."""
    probe = ReferenceProbe(work=lambda: None, clock=iter(range(0, 10**9, 500_000)).__next__)
    clock = HostClock(1, WaitMeter(Schedstat(0).read, machine=Machine()), probe, {})  # type: ignore[arg-type]
    now = [10.0]
    waits: list[float] = []
    clock.clock = lambda: now[0]  # type: ignore[method-assign]
    clock.sleep = waits.append  # type: ignore[method-assign]
    with clock.timed():
        now[0] += spent_s
    clock.measurement()
    assert MIN_MACHINE_WINDOW_S == 0.1
    assert waits == slept
