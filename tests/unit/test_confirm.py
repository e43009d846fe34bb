"""run/confirm.py and run/held.py: suspects wait for one fresh process after the test loop, its
verdicts go into each test's record and failures, and the held call reports are finished again
(their end-to-end runs are in tests/integration/test_fresh_process.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pytest
from test_judging import host_bound, measured, path, recorded_at_four_loops, run_context, stored

from pytest_cudaperf.keys import SeriesKey
from pytest_cudaperf.markers import Marks
from pytest_cudaperf.measure.measurement import Measurement
from pytest_cudaperf.report.model import FailureKind
from pytest_cudaperf.run import judging
from pytest_cudaperf.run.child import Fresh
from pytest_cudaperf.run.confirm import confirm_deferred, progress_line
from pytest_cudaperf.run.context import Deferred, ItemState, RunContext, TestContext
from pytest_cudaperf.run.held import HeldReports
from pytest_cudaperf.run.judged import add_time
from pytest_cudaperf.verdict import Kind


class BatchStub:
    """Stands in for :class:`FreshProcess`: each batch measures ``make(nodeid)`` for its tests;
    a test ``make`` has nothing for gets ``why``."""

    def __init__(self, make: Callable[[str], Measurement | None], why: str = "") -> None:
        self.make = make
        self.why = why
        self.batches: list[tuple[list[str], dict[str, str]]] = []

    def batch(
        self, nodeids: Sequence[str], env: Mapping[str, str], progress: object = None
    ) -> dict[str, Fresh]:
        self.batches.append((list(nodeids), dict(env)))
        found: dict[str, Fresh] = {}
        for nodeid in nodeids:
            m = self.make(nodeid)
            found[nodeid] = {(nodeid, f"time:{m.mode}"): m} if m is not None else self.why
        return found

    def measurements(self, *args: object, **kwargs: object) -> Fresh:
        raise AssertionError("a deferred suspect is not measured inside its call")


def recorded_at_one_ms(tmp_path: Path, nodeids: Sequence[str]) -> RunContext:
    """A run whose baseline holds 1 ms CPU wall times for ``nodeids``, deferring its suspects."""
    run = run_context(tmp_path)
    for nodeid in nodeids:
        test = TestContext(run, ItemState(nodeid), Marks())
        m = cpu(1.0)
        add_time(test, judging.judge_time(test, SeriesKey(nodeid), m, "CPU X"), m)
        run.store.update("CPU X", stored(test))
    run.deferred = Deferred()
    return run


def cpu(median: float) -> Measurement:
    return dataclasses.replace(measured(median), metric="wall", cache="hot", device="cpu")


def suspected(
    run: RunContext, nodeid: str, median: float, kind: Kind = Kind.REGRESSION
) -> TestContext:
    """``nodeid`` measured ``median`` ms twice in its own process (read as ``kind``), as its call
    records it."""
    test = TestContext(run, ItemState(nodeid), Marks())
    assert run.deferred is not None
    run.deferred.running = nodeid
    judged = path(test)
    judged.key = SeriesKey(nodeid)
    slow = cpu(median)
    found = judging.judge_time(test, judged.key, slow, "CPU X")
    assert found.verdict.kind is kind
    record, again = judging.confirm_time(test, found, cpu(median))
    record, again = judged.confirm_fresh(record, again)
    add_time(test, record, again)
    run.deferred.running = None
    return test


def test_a_suspect_waits_for_the_loop_and_one_process_confirms_them_all(tmp_path: Path) -> None:
    run = recorded_at_one_ms(tmp_path, ["t.py::a", "t.py::b"])
    # t.py::a was slow in its own process only; t.py::b is slow anywhere
    fresh = BatchStub(lambda nodeid: cpu(1.0 if nodeid == "t.py::a" else 3.0))
    run.fresh = fresh  # type: ignore[assignment]
    a, b = suspected(run, "t.py::a", 3.0), suspected(run, "t.py::b", 3.0)
    assert run.deferred is not None
    assert [s.test.nodeid for s in run.deferred.suspects] == ["t.py::a", "t.py::b"]
    assert [f.kind for f in a.state.failures] == [FailureKind.REGRESSION]  # as the call saw it
    lines: list[str] = []
    confirm_deferred(run.deferred, fresh, lines.append)  # type: ignore[arg-type]
    assert fresh.batches == [(["t.py::a", "t.py::b"], {})]
    assert lines == ["cudaperf: confirming 2 suspected regressions in a fresh process"]
    assert run.deferred.suspects == []
    (withdrawn,) = a.state.records
    assert withdrawn.verdict.kind is Kind.INCONCLUSIVE
    assert "not confirmed in a fresh process" in withdrawn.verdict.message
    assert withdrawn.value == pytest.approx(1.0)  # the fresh process's measurement
    assert a.state.failures == []
    (stands,) = b.state.records
    assert stands.verdict.kind is Kind.REGRESSION
    (failure,) = b.state.failures
    assert failure.message.endswith("confirmed in a fresh process")


def test_speed_ups_alone_start_no_process_and_stand_inconclusive(tmp_path: Path) -> None:
    run = recorded_at_one_ms(tmp_path, ["t.py::a", "t.py::b"])
    fresh = BatchStub(lambda nodeid: cpu(0.3))
    run.fresh = fresh  # type: ignore[assignment]
    tests = [suspected(run, nodeid, 0.3, Kind.IMPROVED) for nodeid in ("t.py::a", "t.py::b")]
    assert run.deferred is not None
    assert len(run.deferred.suspects) == 2
    lines: list[str] = []
    confirm_deferred(run.deferred, fresh, lines.append)  # type: ignore[arg-type]
    assert fresh.batches == []
    assert lines == []
    for test in tests:
        (record,) = test.state.records
        assert record.verdict.kind is Kind.INCONCLUSIVE
        assert record.verdict.message.startswith(
            "inconclusive: -70.0% not confirmed in a fresh process "
            "(a speed-up starts none: --cudaperf-confirm-process=all) — median 300.00 µs vs baseline 1.000 ms"
        )
        assert test.state.failures == []


def test_confirm_process_all_starts_one_for_speed_ups_alone(tmp_path: Path) -> None:
    run = recorded_at_one_ms(tmp_path, ["t.py::a"])
    run.settings = dataclasses.replace(run.settings, confirm_process="all")
    fresh = BatchStub(lambda nodeid: cpu(0.3))
    run.fresh = fresh  # type: ignore[assignment]
    test = suspected(run, "t.py::a", 0.3, Kind.IMPROVED)
    assert run.deferred is not None
    confirm_deferred(run.deferred, fresh, lambda line: None)  # type: ignore[arg-type]
    assert fresh.batches == [(["t.py::a"], {})]
    (improved,) = test.state.records
    assert improved.verdict.kind is Kind.IMPROVED
    assert improved.verdict.message.endswith("confirmed in a fresh process")


def test_a_speed_up_is_measured_along_with_a_suspected_regression(tmp_path: Path) -> None:
    run = recorded_at_one_ms(tmp_path, ["t.py::a", "t.py::b"])
    fresh = BatchStub(lambda nodeid: cpu(0.3 if nodeid == "t.py::a" else 3.0))
    run.fresh = fresh  # type: ignore[assignment]
    faster = suspected(run, "t.py::a", 0.3, Kind.IMPROVED)
    slower = suspected(run, "t.py::b", 3.0)
    assert run.deferred is not None
    lines: list[str] = []
    confirm_deferred(run.deferred, fresh, lines.append)  # type: ignore[arg-type]
    assert fresh.batches == [(["t.py::a", "t.py::b"], {})]
    assert lines == ["cudaperf: confirming 2 suspected changes in a fresh process"]
    (improved,) = faster.state.records
    assert improved.verdict.kind is Kind.IMPROVED
    assert improved.verdict.message.endswith("confirmed in a fresh process")
    assert [r.verdict.kind for r in slower.state.records] == [Kind.REGRESSION]


def test_a_speed_up_confirmed_in_its_call_starts_no_process(tmp_path: Path) -> None:
    run = recorded_at_one_ms(tmp_path, ["t.py::a"])
    fresh = BatchStub(lambda nodeid: None)  # its measurements() fails the test if called
    run.fresh = fresh  # type: ignore[assignment]
    test = TestContext(run, ItemState("t.py::a"), Marks())
    judged = path(test)
    judged.key = SeriesKey("t.py::a")
    found = judging.judge_time(test, judged.key, cpu(0.3), "CPU X")
    assert found.verdict.kind is Kind.IMPROVED
    record, _ = judged.confirm_fresh(found, cpu(0.3))  # running is another test (None)
    assert record.verdict.kind is Kind.INCONCLUSIVE
    assert "(a speed-up starts none: " in record.verdict.message


def kernels_failed(test: TestContext) -> None:
    """A regression of another series of ``test``, confirmed where it was measured (device time
    behind the stream blocker): the test fails whatever a fresh process finds."""
    test.state.fail(FailureKind.REGRESSION, "[fused] perf regression: median 84 µs vs 67 µs")


def test_a_regression_of_a_test_that_fails_anyway_starts_no_process(tmp_path: Path) -> None:
    run = recorded_at_one_ms(tmp_path, ["t.py::a"])
    fresh = BatchStub(lambda nodeid: cpu(3.0))
    run.fresh = fresh  # type: ignore[assignment]
    test = suspected(run, "t.py::a", 3.0)
    kernels_failed(test)
    assert run.deferred is not None
    confirm_deferred(run.deferred, fresh, lambda line: None)  # type: ignore[arg-type]
    assert fresh.batches == []
    (record,) = test.state.records
    assert record.verdict.kind is Kind.INCONCLUSIVE
    assert record.verdict.message.startswith(
        "inconclusive: +200.0% not confirmed in a fresh process (its test fails anyway: "
        "--cudaperf-confirm-process=all) — median 3.000 ms vs baseline 1.000 ms"
    )
    assert [f.message for f in test.state.failures] == [
        "[fused] perf regression: median 84 µs vs 67 µs"
    ]


def test_a_regression_of_a_failing_test_is_measured_along_with_another(tmp_path: Path) -> None:
    run = recorded_at_one_ms(tmp_path, ["t.py::a", "t.py::b"])
    fresh = BatchStub(lambda nodeid: cpu(3.0))
    run.fresh = fresh  # type: ignore[assignment]
    failing = suspected(run, "t.py::a", 3.0)
    kernels_failed(failing)
    suspected(run, "t.py::b", 3.0)
    assert run.deferred is not None
    confirm_deferred(run.deferred, fresh, lambda line: None)  # type: ignore[arg-type]
    assert fresh.batches == [(["t.py::a", "t.py::b"], {})]
    (record,) = failing.state.records
    assert record.verdict.kind is Kind.REGRESSION
    assert len(failing.state.failures) == 2


def test_a_suspect_the_fresh_process_did_not_measure_stands_and_says_why(tmp_path: Path) -> None:
    run = recorded_at_one_ms(tmp_path, ["t.py::a"])
    fresh = BatchStub(lambda nodeid: None, why="pytest exited 4 without measuring it (x)")
    run.fresh = fresh  # type: ignore[assignment]
    test = suspected(run, "t.py::a", 3.0)
    assert run.deferred is not None
    confirm_deferred(run.deferred, fresh, lambda line: None)  # type: ignore[arg-type]
    assert [r.verdict.kind for r in test.state.records] == [Kind.REGRESSION]
    assert len(test.state.failures) == 1
    assert test.state.details[-1] == (
        "not re-measured in a fresh process: pytest exited 4 without measuring it (x)"
    )


def test_an_interrupted_batch_leaves_its_suspects_unconfirmed(tmp_path: Path) -> None:
    run = recorded_at_one_ms(tmp_path, ["t.py::a"])

    def interrupted(nodeid: str) -> Measurement:
        raise KeyboardInterrupt

    fresh = BatchStub(interrupted)
    run.fresh = fresh  # type: ignore[assignment]
    test = suspected(run, "t.py::a", 3.0)
    assert run.deferred is not None
    with pytest.raises(KeyboardInterrupt):
        confirm_deferred(run.deferred, fresh, lambda line: None)  # type: ignore[arg-type]
    assert test.state.details[-1] == "not re-measured in a fresh process: the run was interrupted"
    assert [r.verdict.kind for r in test.state.records] == [Kind.REGRESSION]


def test_a_suspect_of_a_test_the_loop_does_not_hold_is_confirmed_in_its_call(
    tmp_path: Path,
) -> None:
    run = recorded_at_one_ms(tmp_path, ["t.py::a"])
    asked: list[str] = []

    def measurements(nodeid: str, env: object = None, again: bool = False) -> Fresh:
        asked.append(nodeid)
        return {(nodeid, "time:wall/hot"): cpu(3.0)}

    fresh = BatchStub(lambda nodeid: None)
    fresh.measurements = measurements  # type: ignore[method-assign,assignment]
    run.fresh = fresh  # type: ignore[assignment]
    assert run.deferred is not None
    test = TestContext(run, ItemState("t.py::a"), Marks())
    judged = path(test)
    judged.key = SeriesKey("t.py::a")
    found = judging.judge_time(test, judged.key, cpu(3.0), "CPU X")
    record, _ = judged.confirm_fresh(found, cpu(3.0))  # running is another test (None)
    assert asked == ["t.py::a"]
    assert run.deferred.suspects == []
    assert record.verdict.message.endswith("confirmed in a fresh process")


def test_a_host_bound_suspect_in_another_host_state_goes_to_a_second_batch(
    tmp_path: Path,
) -> None:
    """6 loops against 4: the first fresh process met the host 2x slower (6 ms a call), the
    second as at recording (3 ms): a regression, after two batches."""
    run = recorded_at_four_loops(tmp_path)
    run.deferred = Deferred(running="t.py::a")
    each = iter([6.0, 3.0])
    fresh = BatchStub(lambda nodeid: host_bound(6.0, ms=next(each)))
    run.fresh = fresh  # type: ignore[assignment]
    test = TestContext(run, ItemState("t.py::a"), Marks())
    slow = host_bound(6.0, ms=3.0)
    found = judging.judge_time(test, SeriesKey("t.py::a"), slow, "GPU X")
    record, again = path(test).confirm_fresh(found, slow)
    add_time(test, record, again)
    confirm_deferred(run.deferred, fresh, lambda line: None)  # type: ignore[arg-type]
    visible = fresh.batches[0][1]
    assert fresh.batches == [(["t.py::a"], visible), (["t.py::a"], visible)]
    (settled,) = test.state.records
    assert settled.verdict.kind is Kind.REGRESSION
    assert "in a fresh process" in settled.verdict.message


@pytest.mark.parametrize(
    ("fresh_loops", "kind", "batches", "said"),
    [
        # read as at recording there: a pass, settled at once
        ((4.0,), Kind.PASS, 1, "host-bound: measured in a fresh process: +0.0% (pass)"),
        # slow there, and in the next process too: confirmed
        ((6.0, 6.0), Kind.REGRESSION, 2, "confirmed in a fresh process"),
        # slow there, not in the next one: one process's word
        ((6.0, 4.0), Kind.INCONCLUSIVE, 2, "not confirmed in a fresh process"),
        # faster there: a speed-up starts no process of its own
        ((3.0,), Kind.INCONCLUSIVE, 1, "a speed-up starts none"),
    ],
)
def test_a_change_the_hosts_state_left_undecided_is_judged_by_the_fresh_process(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fresh_loops: tuple[float, ...],
    kind: Kind,
    batches: int,
    said: str,
) -> None:
    """6 loops against 4 read with the launch reference 2x slower than at recording: held back
    for the host's state, which outlasts the wait, so the test goes to the loop's fresh process
    (no wait of its whole limit here). What that process reads with the host as at recording
    (0.5 ms a reference) judges it; a change read there is confirmed in the next one."""
    from pytest_cudaperf.measure.timing import Budget
    from pytest_cudaperf.run import hoststate
    from pytest_cudaperf.run.confirm import DEFERRED

    monkeypatch.setattr(hoststate, "POLL_S", 0.001)
    run = recorded_at_four_loops(tmp_path, state_wait=0.05)
    run.deferred = Deferred(running="t.py::a")
    readings = iter(fresh_loops)
    fresh = BatchStub(lambda nodeid: host_bound(next(readings), ms=2.0))
    run.fresh = fresh  # type: ignore[assignment]
    test = TestContext(run, ItemState("t.py::a"), Marks())
    taken: list[float] = []

    def run_once(budget: Budget) -> Measurement:
        taken.append(6.0)
        return host_bound(6.0, ms=6.0)  # 1 ms a reference: the host 2x slower

    path(test, run_once, lambda: 0.2).run(Budget())
    assert taken == [6.0]  # not measured again here
    (held,) = run.deferred.suspects
    assert held.awaits_host
    assert held.first.verdict.kind is Kind.INCONCLUSIVE
    assert DEFERRED in test.state.details[-1]
    lines: list[str] = []
    confirm_deferred(run.deferred, fresh, lines.append)  # type: ignore[arg-type]
    assert len(fresh.batches) == batches
    assert lines[0] == (
        "cudaperf: measuring 1 test the host's state left undecided in a fresh process"
    )
    (settled,) = test.state.records
    assert settled.verdict.kind is kind
    assert any(said in line for line in [settled.verdict.message, *test.state.details])
    failed = [f.kind for f in test.state.failures]
    assert failed == ([FailureKind.REGRESSION] if kind is Kind.REGRESSION else [])


def test_in_a_spell_of_the_hosts_state_a_change_is_not_left_to_the_fresh_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A state that outlasted a wait lasts minutes: the test looks once and stays INCONCLUSIVE
    here, as before, rather than costing a measurement in a fresh process that would likely
    meet the same state."""
    import time

    from pytest_cudaperf.measure.timing import Budget
    from pytest_cudaperf.run import hoststate

    monkeypatch.setattr(hoststate, "POLL_S", 0.001)
    run = recorded_at_four_loops(tmp_path, state_wait=0.05)
    run.deferred = Deferred(running="t.py::a")
    run.fresh = BatchStub(lambda nodeid: host_bound(4.0))  # type: ignore[assignment]
    run.host_spell.since = run.host_spell.seen = time.monotonic()
    test = TestContext(run, ItemState("t.py::a"), Marks())
    path(test, lambda budget: host_bound(6.0, ms=6.0), lambda: 0.2).run(Budget())
    assert run.deferred.suspects == []
    (record,) = test.state.records
    assert record.verdict.kind is Kind.INCONCLUSIVE
    assert any("a look of " in line for line in test.state.details)


class BothSeries:
    """Stands in for :class:`FreshProcess`: each batch measures a host-bound test's host time
    and its kernels as ``host`` and ``kernels`` make them."""

    def __init__(self, host: Measurement, kernels: Measurement) -> None:
        self.found = {"time:host": host, "time:kernels": kernels}
        self.batches: list[list[str]] = []

    def batch(
        self, nodeids: Sequence[str], env: Mapping[str, str], progress: object = None
    ) -> dict[str, Fresh]:
        self.batches.append(list(nodeids))
        return {n: {(n, series): m for series, m in self.found.items()} for n in nodeids}


def kernels(ms: float) -> Measurement:
    """A host-bound call's kernels profiled at ``ms`` a call."""
    from pytest_cudaperf.measure.measurement import kernels_measured

    return kernels_measured([ms * (1 + 0.001 * i) for i in range(10)], "cuda:1")


def recorded_host_bound(tmp_path: Path) -> RunContext:
    """t.py::a recorded at 4 loops, its kernels at 0.1 ms a call; its suspects deferred."""
    run = recorded_at_four_loops(tmp_path)
    recorder = TestContext(run, ItemState("t.py::a"), Marks())
    found = judging.judge_time(recorder, SeriesKey("t.py::a"), kernels(0.1), "GPU X")
    add_time(recorder, found, kernels(0.1))
    run.store.update("GPU X", stored(recorder))
    run.deferred = Deferred(running="t.py::a")
    return run


def test_a_host_time_says_what_its_kernels_settled_as(tmp_path: Path) -> None:
    """6 loops against 4, and its kernels +20% in its own process: the fresh process reads the
    host time as slow and the kernels as recorded, so the host time's failure no longer says
    that the kernels regressed."""
    from pytest_cudaperf.run.judged import _with_kernels

    run = recorded_host_bound(tmp_path)
    key = SeriesKey("t.py::a")
    fresh = BothSeries(host_bound(6.0, ms=3.0), kernels(0.1))
    run.fresh = fresh  # type: ignore[assignment]
    test = TestContext(run, ItemState("t.py::a"), Marks())
    found = judging.judge_time(test, key, kernels(0.12), "GPU X")
    theirs, slower = path(test).confirm_fresh(*judging.confirm_time(test, found, kernels(0.12)))
    found = judging.judge_time(test, key, host_bound(6.0, ms=3.0), "GPU X")
    host, slow = path(test).confirm_fresh(
        *judging.confirm_time(test, found, host_bound(6.0, ms=3.0))
    )
    add_time(test, _with_kernels(host, theirs), slow)
    add_time(test, theirs, slower)
    assert len(run.deferred.suspects) == 2
    said = "; kernels regression (+20.0% per call)"
    assert [f.message.endswith(said) for f in test.state.failures] == [True, False]
    confirm_deferred(run.deferred, fresh, lambda line: None)  # type: ignore[arg-type]
    assert fresh.batches == [["t.py::a"]]
    host_record, kernels_record = test.state.records
    assert kernels_record.verdict.kind is Kind.INCONCLUSIVE
    assert host_record.verdict.kind is Kind.REGRESSION
    assert "confirmed in a fresh process; kernels inconclusive (" in host_record.verdict.message
    (failure,) = test.state.failures
    assert failure.message == host_record.verdict.message
    assert "kernels regression" not in failure.message


def test_a_suspects_wait_for_the_host_takes_its_device_only_within_the_time_left(
    tmp_path: Path,
) -> None:
    """In the fresh process's turn, a suspect's wait probes the host with the device held
    through the suspect's lock, bounded by what the wait has left."""
    import contextlib
    from collections.abc import Iterator

    from pytest_cudaperf.run.confirm import _wait
    from pytest_cudaperf.run.context import Suspect

    asked: list[float | None] = []

    @contextlib.contextmanager
    def lock(within_s: float | None = None, /) -> Iterator[bool]:
        asked.append(within_s)
        yield False  # other processes measure there to the wait's end

    run = recorded_host_bound(tmp_path)
    test = TestContext(run, ItemState("t.py::a"), Marks())
    first = judging.judge_time(test, SeriesKey("t.py::a"), host_bound(6.0, ms=6.0), "GPU X")
    suspect = Suspect(test, first, host_bound(6.0, ms=6.0), {}, lock, lambda: 0.065)
    wait = _wait(suspect)
    assert wait is not None
    assert wait.until_back(0.130, 0.090).cut
    (bound,) = asked
    assert bound is not None
    assert bound <= test.settings.state_wait


def test_the_breakdown_a_host_time_carried_goes_to_its_kernels_where_only_they_regressed(
    tmp_path: Path,
) -> None:
    """The host time left undecided by the host's state (6 loops, the reference 2x slower) and
    its kernels +20%, the breakdown's lines said once, under the host time; the fresh process
    reads the host time as recorded: the kernels' verdict takes the lines over."""

    from pytest_cudaperf.locks import free
    from pytest_cudaperf.run.confirm import _shown, settle
    from pytest_cudaperf.run.context import Suspect

    run = recorded_host_bound(tmp_path)
    key = SeriesKey("t.py::a")
    test = TestContext(run, ItemState("t.py::a"), Marks())
    undecided = judging.judge_time(test, key, host_bound(6.0, ms=6.0), "GPU X")
    assert undecided.verdict.kind is Kind.INCONCLUSIVE
    theirs = judging.judge_time(test, key, kernels(0.12), "GPU X")
    assert theirs.verdict.kind is Kind.REGRESSION
    lines = ("kernels: 0.1 ms -> 0.12 ms per call", "  +0.02 ms  new: spin_kernel (1x per call)")
    add_time(test, dataclasses.replace(undecided, explanation=lines), host_bound(6.0, ms=6.0))
    add_time(test, theirs, kernels(0.12))
    suspect = Suspect(test, undecided, host_bound(6.0, ms=6.0), {}, free)
    shown = _shown(suspect)
    assert shown is not None
    passed = judging.judge_time(test, key, host_bound(4.0), "GPU X")
    assert passed.verdict.kind is Kind.PASS
    settle(suspect, shown, (passed, host_bound(4.0)))
    host_record, kernels_record = test.state.records
    assert (host_record.verdict.kind, host_record.explanation) == (Kind.PASS, ())
    assert (kernels_record.verdict.kind, kernels_record.explanation) == (Kind.REGRESSION, lines)
    assert [line in test.state.details for line in lines] == [True, True]


def test_a_host_time_says_its_kernels_speed_up_was_left_alone(tmp_path: Path) -> None:
    """4.5 loops against 4 (within the series' noise: INCONCLUSIVE) and its kernels -20%: a
    speed-up alone starts no process, so the host time's line says the kernels are
    inconclusive, not improved."""
    from pytest_cudaperf.run.judged import _with_kernels

    run = recorded_host_bound(tmp_path)
    fresh = BothSeries(host_bound(4.5, ms=3.0), kernels(0.08))
    run.fresh = fresh  # type: ignore[assignment]
    key = SeriesKey("t.py::a")
    test = TestContext(run, ItemState("t.py::a"), Marks())
    found = judging.judge_time(test, key, kernels(0.08), "GPU X")
    theirs, faster = path(test).confirm_fresh(*judging.confirm_time(test, found, kernels(0.08)))
    assert theirs.verdict.kind is Kind.IMPROVED
    host = judging.judge_time(test, key, host_bound(4.5, ms=3.0), "GPU X")
    assert host.verdict.kind is Kind.INCONCLUSIVE
    add_time(test, _with_kernels(host, theirs), host_bound(4.5, ms=3.0))
    add_time(test, theirs, faster)
    assert "; kernels improved (-20.0% per call)" in test.state.records[0].verdict.message
    assert run.deferred is not None
    confirm_deferred(run.deferred, fresh, lambda line: None)  # type: ignore[arg-type]
    assert fresh.batches == []
    host_record, kernels_record = test.state.records
    assert kernels_record.verdict.kind is Kind.INCONCLUSIVE
    assert host_record.verdict.message.endswith("; kernels inconclusive (-20.0% per call)")


def test_the_progress_line_counts_tests_and_names_what_they_are(tmp_path: Path) -> None:
    run = recorded_at_one_ms(tmp_path, ["t.py::a"])
    run.fresh = BatchStub(lambda nodeid: None)  # type: ignore[assignment]
    test = suspected(run, "t.py::a", 3.0)
    assert run.deferred is not None
    (suspect,) = run.deferred.suspects
    assert progress_line(["t.py::a"], [suspect]) == (
        "cudaperf: confirming 1 suspected regression in a fresh process"
    )
    better = dataclasses.replace(
        suspect.first, verdict=dataclasses.replace(suspect.first.verdict, kind=Kind.IMPROVED)
    )
    assert progress_line(["t.py::a", "t.py::b"], [dataclasses.replace(suspect, first=better)]) == (
        "cudaperf: confirming 2 suspected changes in a fresh process"
    )
    undecided = dataclasses.replace(suspect, awaits_host=True)
    assert progress_line(["t.py::b"], [undecided]) == (
        "cudaperf: measuring 1 test the host's state left undecided in a fresh process"
    )
    other = dataclasses.replace(undecided, test=TestContext(run, ItemState("t.py::b"), Marks()))
    assert progress_line(["t.py::a", "t.py::b"], [suspect, other], controls=1) == (
        "cudaperf: confirming 1 suspected regression and measuring 1 test the host's state left "
        "undecided in a fresh process, beside 1 test that passed"
    )
    assert test.nodeid == "t.py::a"


class Item:
    """What a held test needs of its item."""

    def __init__(self) -> None:
        self.user_properties: list[tuple[str, object]] = []


def test_a_held_call_report_is_finished_again_from_the_confirmed_state(tmp_path: Path) -> None:
    from pytest_cudaperf.run.callreport import apply_outcome

    run = recorded_at_one_ms(tmp_path, ["t.py::a"])
    fresh = BatchStub(lambda nodeid: cpu(1.0))
    run.fresh = fresh  # type: ignore[assignment]
    test = suspected(run, "t.py::a", 3.0)
    item = Item()
    location = ("t.py", 0, "a")
    call = pytest.TestReport("t.py::a", location, {}, "passed", None, "call", [])
    apply_outcome(call, test.state.outcome(True, ("t.py", 1)), True, item.user_properties)
    teardown = pytest.TestReport(
        "t.py::a",
        location,
        {},
        "passed",
        None,
        "teardown",
        [],
        user_properties=item.user_properties,
    )
    assert call.failed
    assert call.user_properties == [("cudaperf time:wall/hot", "3 ms (regression)")]
    held = HeldReports()
    held.hold(item, [call, teardown], test)  # type: ignore[arg-type]
    assert run.deferred is not None
    confirm_deferred(run.deferred, fresh, lambda line: None)  # type: ignore[arg-type]
    (released,) = held.release()
    assert released.reports == [call, teardown]
    assert call.passed
    assert call.longrepr is None
    assert not hasattr(call, "cudaperf_failure")
    assert call.cudaperf["records"][0]["verdict"]["kind"] == "inconclusive"  # type: ignore[attr-defined]
    now = [("cudaperf time:wall/hot", "1 ms (inconclusive)")]
    assert (call.user_properties, teardown.user_properties, item.user_properties) == (now,) * 3
    assert len(held) == 0
