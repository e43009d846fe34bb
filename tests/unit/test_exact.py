"""Exact rounds taken again while INCONCLUSIVE (:func:`pytest_cudaperf.run.exact.taken_again`)
and the wait for other processes to leave the CPU (:class:`pytest_cudaperf.run.hoststate.CpuWait`),
on fake clocks and a CPU wall-time baseline of three processes at 1 ms."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path

import pytest

from pytest_cudaperf.keys import SeriesKey
from pytest_cudaperf.locks import LockRegistry
from pytest_cudaperf.measure.measurement import Measurement
from pytest_cudaperf.report.model import JudgedRecord
from pytest_cudaperf.run import exact
from pytest_cudaperf.run.context import ItemState, RunContext, TestContext
from pytest_cudaperf.run.hoststate import POLL_S, CpuWait, CpuWaited, Spell
from pytest_cudaperf.run.judging import judge_time
from pytest_cudaperf.settings import Settings
from pytest_cudaperf.store.baselines import BaselineStore
from pytest_cudaperf.verdict import Kind

A = SeriesKey("t.py::a")
CPU = "CPU X"
#: what a measurement that met another process on the CPU says
SHARED = ("other processes used 50% of the machine's CPU time",)


class FakeTime:
    """A clock that only ``sleep`` moves."""

    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class Shares:
    """A machine meter that reads ``shares`` in turn (then the last for ever)."""

    def __init__(self, shares: Iterable[float | None]) -> None:
        self._shares = list(shares)
        self.polls = 0

    def reset(self) -> None:
        pass

    def begin(self) -> None:
        pass

    def others(self) -> float | None:
        self.polls += 1
        return self._shares[min(self.polls, len(self._shares)) - 1]


def cpu_wait(
    shares: Iterable[float | None], limit_s: float = 30.0, loads: Iterable[float] = (0.5,)
) -> tuple[CpuWait, Shares]:
    """A wait whose meter reads ``shares`` and whose load average reads ``loads`` in turn."""
    time, meter, load = FakeTime(), Shares(shares), Shares(loads)
    wait = CpuWait(limit_s, meter, load.others, time)  # type: ignore[arg-type]
    return wait, meter


def test_the_wait_ends_once_other_processes_leave_the_cpu() -> None:
    wait, meter = cpu_wait([0.5, 0.6, 0.1])
    waited = wait.until_free()
    assert waited == CpuWaited(True, 3 * POLL_S)
    assert meter.polls == 3
    assert waited.describe().startswith("pedantic rounds: waited 1.5 s for other processes")


def test_a_load_average_above_the_cores_is_not_free() -> None:
    wait, meter = cpu_wait([0.0], loads=[64.0, 64.0, 0.5])
    assert wait.until_free() == CpuWaited(True, 3 * POLL_S)
    assert meter.polls == 3


def test_a_cpu_that_stays_shared_ends_the_wait_at_its_deadline_shared_by_every_wait() -> None:
    wait, meter = cpu_wait([0.5], limit_s=2.0)
    first = wait.until_free()
    assert first == CpuWaited(False, 2.0, "other processes used 50% of the machine's CPU time")
    assert first.describe() == (
        "pedantic rounds: waited 2.0 s for other processes to leave the CPU, in vain (other "
        "processes used 50% of the machine's CPU time); not taken again (--cudaperf-state-wait)"
    )
    assert wait.until_free() == CpuWaited(False, 0.0)  # the deadline passed: no poll
    assert meter.polls == 4


def test_other_processes_that_outlasted_a_wait_make_later_waits_look_once() -> None:
    """Shared for a whole 2 s wait: the spell starts; a later wait looks once (one poll) and
    says so; a look that finds the CPU free ends it."""
    time, spell = FakeTime(), Spell()
    meter, load = Shares([0.5, 0.5, 0.5, 0.5, 0.5, 0.02]), Shares([0.5])

    def new_wait() -> CpuWait:
        return CpuWait(2.0, meter, load.others, time, spell)  # type: ignore[arg-type]

    assert not new_wait().until_free().free
    assert spell.since == pytest.approx(102.0)
    time.sleep(3.0)
    looked = new_wait().until_free()
    assert looked == CpuWaited(
        False, POLL_S, "other processes used 50% of the machine's CPU time", pytest.approx(3.5)
    )
    assert looked.describe() == (
        "pedantic rounds: other processes have shared the CPU since a wait ran out 4 s ago, and a "
        "look of 0.5 s found them there (other processes used 50% of the machine's CPU time); "
        "not waited for again, not taken again (--cudaperf-state-wait)"
    )
    assert new_wait().until_free().free  # the fifth poll reads 2%: the spell is over
    assert spell.since is None


def test_an_unknown_share_does_not_wait() -> None:
    wait, meter = cpu_wait([None])
    assert wait.until_free().free
    assert meter.polls == 1


def wall(median: float, n: int = 20, unstable: tuple[str, ...] = ()) -> Measurement:
    samples = [median * (1 + 0.002 * (i - n // 2)) for i in range(n)]
    noise = 0.5 if unstable else 0.0
    return Measurement.from_samples(
        samples, metric="wall", device="cpu", instability=unstable, instability_noise=noise
    )


def context_of(tmp_path: Path, **settings: object) -> TestContext:
    """t.py::a against a CPU wall-time series of three processes at 1 ms."""
    store = BaselineStore.load(tmp_path)
    run = RunContext(
        settings=Settings(**settings),  # type: ignore[arg-type]
        store=store,
        locks=LockRegistry(tmp_path / "locks"),
        root=tmp_path,
        baseline_dir=tmp_path,
        output_dir=tmp_path,
    )
    recorder = TestContext(run, ItemState("t.py::a"))
    for median in (1.0, 1.01, 0.99):
        store.update(CPU, [judge_time(recorder, A, wall(median), CPU).record])
    return TestContext(run, ItemState("t.py::a"))


class Rounds:
    """Takes rounds again: each call's measurement in turn, its round counts kept."""

    def __init__(self, *measurements: Measurement) -> None:
        self._left = list(measurements)
        self.asked: list[int] = []

    def __call__(self, rounds: int) -> Measurement:
        self.asked.append(rounds)
        return self._left.pop(0)


def first_look(test: TestContext, m: Measurement) -> JudgedRecord:
    return exact._judged(test, A, m, CPU)


def test_a_3x_change_held_back_by_contention_is_taken_again_once_the_cpu_is_free(
    tmp_path: Path,
) -> None:
    test = context_of(tmp_path)
    shared = wall(3.0, unstable=SHARED)
    record = first_look(test, shared)
    assert record.verdict.kind is Kind.INCONCLUSIVE  # judged at 2x while the CPU was shared
    assert record.verdict.threshold == 1.0
    rounds = Rounds(wall(3.0, n=40))
    wait, _ = cpu_wait([0.5, 0.02])
    record, measured = exact.taken_again(test, record, shared, rounds, wait)
    assert record.verdict.kind is Kind.REGRESSION
    assert rounds.asked == [40]  # twice the rounds
    assert measured.n == 40
    (line,) = test.state.details
    assert "waited 1.0 s for other processes to leave the CPU, then took the rounds again" in line


def test_a_wait_in_vain_leaves_the_verdict_as_it_was(tmp_path: Path) -> None:
    test = context_of(tmp_path)
    shared = wall(3.0, unstable=SHARED)
    first = first_look(test, shared)
    rounds = Rounds()
    record, measured = exact.taken_again(test, first, shared, rounds, cpu_wait([0.9], 1.0)[0])
    assert (record, measured, rounds.asked) == (first, shared, [])
    assert "in vain" in test.state.details[0]


def test_the_tests_of_a_run_share_its_cpu_spell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two tests of one process whose rounds met other processes on the CPU: the first waits its
    whole 2 s in vain, the second only looks once."""
    time = FakeTime()

    def waits(limit_s: float, spell: Spell) -> CpuWait:  # the run's spell, on a fake clock
        busy = Shares([0.5])
        return CpuWait(limit_s, busy, Shares([0.5]).others, time, spell)  # type: ignore[arg-type]

    monkeypatch.setattr(exact, "CpuWait", waits)
    first = context_of(tmp_path, state_wait=2.0)
    shared = wall(3.0, unstable=SHARED)
    exact.taken_again(first, first_look(first, shared), shared, Rounds())
    second = TestContext(first.run, ItemState("t.py::a"))
    exact.taken_again(second, first_look(second, shared), shared, Rounds())
    assert "waited 2.0 s for other processes to leave the CPU, in vain" in first.state.details[0]
    (looked,) = second.state.details
    assert "a look of 0.5 s found them there" in looked
    assert time.now == pytest.approx(102.5)


def test_at_most_twice_with_twice_the_rounds_each_time_at_once_without_contention(
    tmp_path: Path,
) -> None:
    test = context_of(tmp_path)
    shared = wall(1.6, unstable=SHARED)
    rounds = Rounds(wall(1.6, unstable=SHARED, n=40), wall(1.6, unstable=SHARED, n=80))
    record, measured = exact.taken_again(
        test, first_look(test, shared), shared, rounds, cpu_wait([0.0])[0]
    )
    assert record.verdict.kind is Kind.INCONCLUSIVE
    assert (rounds.asked, measured.n) == ([40, 80], 80)


@pytest.mark.parametrize(
    ("median", "n", "traced", "kind"),
    [
        (1.0, 20, None, Kind.PASS),
        (3.0, 20, None, Kind.REGRESSION),
        (3.0, 20, "coverage", Kind.INCONCLUSIVE),  # traced: not judged
        (3.0, 5, None, Kind.INCONCLUSIVE),  # too few: the user's count, the message says so
        (1.6, 2000, None, Kind.INCONCLUSIVE),  # 4000 rounds of 1.6 ms: past 2 x max_time
    ],
    ids=["pass", "regression", "traced", "too-few", "too-long"],
)
def test_what_is_not_taken_again(
    tmp_path: Path, median: float, n: int, traced: str | None, kind: Kind
) -> None:
    test = context_of(tmp_path, state_wait=0.0, max_time=1.0)  # off: at once where it is
    m = wall(median, n=n, unstable=SHARED if n == 2000 else ())
    if traced is not None:
        m = dataclasses.replace(m, traced=traced)
    rounds = Rounds()
    record, _ = exact.taken_again(test, first_look(test, m), m, rounds)
    assert (rounds.asked, record.verdict.kind) == ([], kind)


def test_remeasure_off_takes_no_rounds_again(tmp_path: Path) -> None:
    """``--cudaperf-remeasure=off``: an INCONCLUSIVE that would be taken again stays as it is."""
    test = context_of(tmp_path, remeasure="off")
    shared = wall(1.6, unstable=SHARED)
    first = first_look(test, shared)
    assert first.verdict.kind is Kind.INCONCLUSIVE
    rounds = Rounds(wall(1.6, n=40))
    record, measured = exact.taken_again(test, first, shared, rounds, cpu_wait([0.0])[0])
    assert (record, measured, rounds.asked) == (first, shared, [])


def test_a_speed_up_that_cannot_be_a_regression_is_taken_again_once(tmp_path: Path) -> None:
    """0.4x its baseline while the CPU was shared: INCONCLUSIVE, its CI across the speed-up's
    threshold but nowhere near a regression's: taken again once, not twice."""
    test = context_of(tmp_path)
    shared = wall(0.4, unstable=SHARED)
    first = first_look(test, shared)
    assert first.verdict.kind is Kind.INCONCLUSIVE
    assert first.verdict.speed_up_only
    rounds = Rounds(wall(0.4, unstable=SHARED, n=40), wall(0.4, unstable=SHARED, n=80))
    record, measured = exact.taken_again(test, first, shared, rounds, cpu_wait([0.0, 0.0])[0])
    assert record.verdict.kind is Kind.INCONCLUSIVE
    assert (rounds.asked, measured.n) == ([40], 40)
