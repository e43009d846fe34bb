"""run/controls.py: tests that passed in this process are kept as controls, measured beside the
suspects in their fresh process, and a regression that process confirms is withdrawn where the
slowdown it ran its controls' unchanged code with explains it (end to end, on the CPU:
tests/integration/test_fresh_process.py)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
from test_confirm import BatchStub, cpu, recorded_at_one_ms, suspected
from test_judging import host_bound, run_context

from pytest_cudaperf.keys import SeriesKey
from pytest_cudaperf.markers import Marks
from pytest_cudaperf.measure.measurement import Measurement
from pytest_cudaperf.run import judging
from pytest_cudaperf.run.confirm import confirm_deferred, progress_line
from pytest_cudaperf.run.context import Control, Deferred, ItemState, RunContext, TestContext
from pytest_cudaperf.run.controls import (
    Slowdown,
    choose,
    folder,
    host_share,
    offer,
    rules_out_a_change,
    shift,
    slowdowns,
)
from pytest_cudaperf.run.judged import add_time
from pytest_cudaperf.verdict import Kind, Verdict


def recorded(tmp_path: Path, nodeids: list[str]) -> RunContext:
    """A run whose baseline holds 1 ms CPU wall times for ``nodeids`` (one process: a CI of
    -33%…+50% around a reading at the baseline), judged at a tolerance of 60%, which a pass at
    +3% rules a change beyond out (:func:`rules_out_a_change`)."""
    run = recorded_at_one_ms(tmp_path, nodeids)
    run.settings = dataclasses.replace(run.settings, tolerance=0.6)
    return run


def passed(run: RunContext, nodeid: str, median: float = 1.0) -> TestContext:
    """``nodeid`` measured ``median`` ms (a PASS against its 1 ms baseline) while the loop held
    it, as its call records it."""
    test = TestContext(run, ItemState(nodeid), Marks())
    assert run.deferred is not None
    run.deferred.running = nodeid
    m = cpu(median)
    record = judging.judge_time(test, SeriesKey(nodeid), m, "CPU X")
    assert record.verdict.kind is Kind.PASS
    add_time(test, record, m)
    run.deferred.running = None
    return test


def kept(run: RunContext) -> dict[str, list[str]]:
    assert run.deferred is not None
    return {
        place[2]: [c.test.nodeid for c in controls]
        for place, controls in run.deferred.controls.items()
    }


def with_fresh(run: RunContext, medians: dict[str, float]) -> BatchStub:
    """A fresh process that measures each test at ``medians`` (1 ms where not named)."""
    fresh = BatchStub(lambda nodeid: cpu(medians.get(nodeid, 1.0)))
    run.fresh = fresh  # type: ignore[assignment]
    return fresh


def test_the_folder_of_a_tests_file() -> None:
    assert folder(SeriesKey("benchmarks/color/yuv_test.py::test_a[1]")) == "benchmarks/color"
    assert folder(SeriesKey("test_a.py::test_b", "inner")) == ""


def test_a_host_bound_calls_share_outside_its_kernels() -> None:
    m = dataclasses.replace(host_bound(4.0, ms=2.0), fixed_ms=0.5)
    assert host_share(m) == pytest.approx(0.75)
    assert host_share(host_bound(4.0)) == 0.0  # its kernels not timed apart
    assert host_share(cpu(1.0)) == 0.0


def test_a_pass_of_a_held_test_is_kept_the_two_closest_to_their_baseline_per_folder(
    tmp_path: Path,
) -> None:
    nodeids = ["d/t.py::far", "d/t.py::near", "d/t.py::on", "e/t.py::q"]
    run = recorded(tmp_path, nodeids)
    with_fresh(run, {})
    for nodeid, median in zip(nodeids, (0.85, 1.03, 1.0, 0.9), strict=True):
        passed(run, nodeid, median)
    assert kept(run) == {"d": ["d/t.py::on", "d/t.py::near"], "e": ["e/t.py::q"]}


def test_host_bound_controls_are_kept_by_their_host_share_before_their_closeness(
    tmp_path: Path,
) -> None:
    """Calls the host's speed moves most witness a host's state best: a call that is mostly
    kernels is kept after one that is mostly host work, however close to its baseline."""
    run = run_context(tmp_path, host_tolerance=0.3)  # the CI of a pass at +5% reaches +21%
    shares = {"d/t.py::kernels": 1.6, "d/t.py::host": 0.1, "d/t.py::half": 1.0}  # fixed_ms of 2
    for nodeid in shares:
        test = TestContext(run, ItemState(nodeid), Marks())
        m = host_bound(4.0)
        add_time(test, judging.judge_time(test, SeriesKey(nodeid), m, "GPU X"), m)
        run.store.update("GPU X", [r.record for r in test.state.records])
    run.deferred = Deferred()
    with_fresh(run, {})
    for nodeid, fixed in shares.items():
        test = TestContext(run, ItemState(nodeid), Marks())
        run.deferred.running = nodeid
        loops = 4.0 if nodeid == "d/t.py::kernels" else 4.2  # the kernels' one reads closest
        m = dataclasses.replace(host_bound(loops), fixed_ms=fixed)
        record = judging.judge_time(test, SeriesKey(nodeid), m, "GPU X")
        assert record.verdict.kind is Kind.PASS
        add_time(test, record, m)
    assert kept(run) == {"d": ["d/t.py::host", "d/t.py::half"]}


def test_a_pass_rules_out_a_change_only_with_its_ci_within_the_tolerance() -> None:
    def read(high: float) -> Verdict:
        return Verdict(Kind.PASS, ratio=1.08, ci=(0.99, high), threshold=0.2, tolerance=0.1)

    assert rules_out_a_change(read(1.10))
    assert not rules_out_a_change(read(1.182))  # passed only under a threshold raised by noise
    assert not rules_out_a_change(Verdict(Kind.PASS, ratio=1.0, threshold=0.1, tolerance=0.1))


def test_a_pass_that_may_be_a_slowdown_read_low_is_kept_as_no_control(tmp_path: Path) -> None:
    """A host suite slowed everywhere by a quarter (H200, 2026-11-29) had one test pass at +8.2%
    (CI up to +18.2%, its threshold raised to 20.2% by its series' noise); as the only control, it
    read +21.6% in the fresh process and withdrew 25 real regressions."""
    nodeids = ["d/t.py::wide", "d/t.py::tight"]
    run = recorded(tmp_path, nodeids)
    with_fresh(run, {})
    assert run.deferred is not None
    for nodeid, high in zip(nodeids, (1.182, 1.05), strict=True):
        test = TestContext(run, ItemState(nodeid), Marks())
        run.deferred.running = nodeid
        m = cpu(1.0)
        record = judging.judge_time(test, SeriesKey(nodeid), m, "CPU X")
        noisy = dataclasses.replace(
            record.verdict, ratio=1.08, ci=(0.99, high), threshold=0.2, tolerance=0.1
        )
        offer(test, dataclasses.replace(record, verdict=noisy), m)
    assert kept(run) == {"d": ["d/t.py::tight"]}


def test_no_control_is_kept_of_a_test_the_loop_does_not_hold_or_of_a_change(
    tmp_path: Path,
) -> None:
    run = recorded(tmp_path, ["t.py::a", "t.py::b"])
    with_fresh(run, {})
    test = TestContext(run, ItemState("t.py::a"), Marks())
    m = cpu(1.0)
    add_time(test, judging.judge_time(test, SeriesKey("t.py::a"), m, "CPU X"), m)  # not held
    suspected(run, "t.py::b", 3.0)  # a regression
    assert kept(run) == {}


def test_no_control_is_kept_without_a_fresh_process_or_on_an_update(tmp_path: Path) -> None:
    run = recorded(tmp_path, ["t.py::a"])
    passed(run, "t.py::a")  # run.fresh is None: nothing confirms anything
    assert kept(run) == {}
    with_fresh(run, {})
    run.settings = dataclasses.replace(run.settings, update=True)
    passed(run, "t.py::a")
    assert kept(run) == {}


def test_controls_are_chosen_from_a_suspects_folder_first_and_never_the_groups_own(
    tmp_path: Path,
) -> None:
    nodeids = ["d/t.py::a", "d/t.py::b", "d/u.py::p", "e/t.py::q", "e/t.py::r"]
    run = recorded(tmp_path, nodeids)
    with_fresh(run, {})
    for nodeid in ("d/t.py::b", "e/t.py::q", "e/t.py::r", "d/u.py::p"):
        passed(run, nodeid, 1.0 if nodeid.startswith("e") else 1.04)
    a = suspected(run, "d/t.py::a", 3.0)
    assert run.deferred is not None
    group = run.deferred.of(a.nodeid)
    # the folder d first, though e's read closer to their baseline; two per series
    assert [c.test.nodeid for c in choose(run.deferred, group)] == ["d/t.py::b", "d/u.py::p"]
    b = run.deferred.controls[("time:wall/hot", (), "d")][0].test
    b.state.nodeid = a.nodeid  # as if b were a test of the group: it is not its own control
    assert [c.test.nodeid for c in choose(run.deferred, group)] == ["d/u.py::p", "e/t.py::q"]


def test_controls_are_chosen_only_for_regressions(tmp_path: Path) -> None:
    run = recorded(tmp_path, ["t.py::a", "t.py::p"])
    with_fresh(run, {})
    passed(run, "t.py::p")
    a = suspected(run, "t.py::a", 0.3, Kind.IMPROVED)
    assert run.deferred is not None
    assert choose(run.deferred, run.deferred.of(a.nodeid)) == []


def control(run: RunContext, nodeid: str, median: float) -> Control:
    test = TestContext(run, ItemState(nodeid), Marks())
    m = cpu(median)
    return Control(test, judging.judge_time(test, SeriesKey(nodeid), m, "CPU X"), m)


def measured_there(nodeid: str, median: float) -> dict[tuple[str, str], Measurement]:
    return {(nodeid, "time:wall/hot"): cpu(median)}


def test_a_slowdown_is_the_least_of_its_controls_shifts_and_only_a_slowdown(
    tmp_path: Path,
) -> None:
    run = recorded(tmp_path, ["t.py::p", "t.py::q"])
    p, q = control(run, "t.py::p", 1.0), control(run, "t.py::q", 1.0)
    found = {"t.py::p": measured_there("t.py::p", 2.0), "t.py::q": measured_there("t.py::q", 1.5)}
    (slow,) = slowdowns([p, q], found).values()
    assert slow.names == ("p", "q")
    assert 1.45 < slow.factor < 1.5  # q's, by the near ends of both CIs
    found["t.py::q"] = measured_there("t.py::q", 1.0)
    assert slowdowns([p, q], found) == {}  # q ran as here: no slowdown shown
    assert slowdowns([p, q], {"t.py::p": "it did not finish", "t.py::q": {}}) == {}


def test_a_control_read_on_a_busy_host_shows_less_of_a_slowdown_not_none(tmp_path: Path) -> None:
    run = recorded(tmp_path, ["t.py::p"])
    p = control(run, "t.py::p", 1.0)
    quiet = shift(p, measured_there("t.py::p", 10.0))
    busy = dataclasses.replace(cpu(10.0), instability_noise=1.2)  # its noise past 100%
    shaken = shift(p, {("t.py::p", "time:wall/hot"): busy})
    assert quiet is not None
    assert shaken is not None
    assert 1 < shaken < quiet < 10
    assert shaken == pytest.approx(
        10 * math.exp(-math.sqrt(math.log1p(1.2) ** 2 + math.log1p(0.01) ** 2)), rel=0.01
    )


def test_a_slowdown_explains_a_regression_only_within_its_threshold(tmp_path: Path) -> None:
    run = recorded_at_one_ms(tmp_path, ["t.py::a"])
    test = TestContext(run, ItemState("t.py::a"), Marks())
    # 3x, at least 2x by its CI (a baseline of one process is uncertain by ±50%)
    three = judging.judge_time(test, SeriesKey("t.py::a"), cpu(3.0), "CPU X").verdict
    assert three.kind is Kind.REGRESSION
    assert three.threshold == pytest.approx(0.50)  # a CPU series from one process
    why = Slowdown(1.8, ("p",)).explains(three)
    assert why is not None
    assert why.startswith("p, which passed in this run, read at least +80.0% there")
    assert why.endswith("that taken out, at least +11.1%, within the threshold 50.0%")
    assert Slowdown(1.2, ("p",)).explains(three) is None  # +67% beyond it: a regression still


def test_the_fresh_process_measures_the_controls_and_withdraws_what_they_explain(
    tmp_path: Path,
) -> None:
    run = recorded(tmp_path, ["d/t.py::a", "d/t.py::b", "d/t.py::p"])
    # the fresh process runs everything 1.8x slower, p's unchanged code too: a read 3x here and
    # 3.6x there (2x beyond the slowdown, within the ±50% of its baseline's one process), b 6x
    fresh = with_fresh(run, {"d/t.py::a": 3.6, "d/t.py::b": 6.0, "d/t.py::p": 1.8})
    passed(run, "d/t.py::p")
    a, b = suspected(run, "d/t.py::a", 3.0), suspected(run, "d/t.py::b", 3.0)
    assert run.deferred is not None
    lines: list[str] = []
    confirm_deferred(run.deferred, fresh, lines.append)  # type: ignore[arg-type]
    assert fresh.batches == [(["d/t.py::a", "d/t.py::b", "d/t.py::p"], {})]
    assert lines == [
        "cudaperf: confirming 2 suspected regressions in a fresh process, beside 1 test that passed"
    ]
    (withdrawn,) = a.state.records
    assert withdrawn.verdict.kind is Kind.INCONCLUSIVE
    assert withdrawn.verdict.message.startswith(
        "inconclusive: +260.0% in a fresh process too, where p, which passed in this run, read"
    )
    assert "; confirmed in a fresh process" not in withdrawn.verdict.message
    assert a.state.failures == []
    (stands,) = b.state.records  # 6x there: 3.3x beyond the slowdown, 2.2x by its CI
    assert stands.verdict.kind is Kind.REGRESSION
    assert len(b.state.failures) == 1


def test_a_control_that_ran_as_before_leaves_the_regression_standing(tmp_path: Path) -> None:
    run = recorded(tmp_path, ["t.py::a", "t.py::p"])
    fresh = with_fresh(run, {"t.py::a": 3.0})
    passed(run, "t.py::p")
    a = suspected(run, "t.py::a", 3.0)
    assert run.deferred is not None
    confirm_deferred(run.deferred, fresh, lambda line: None)  # type: ignore[arg-type]
    assert fresh.batches == [(["t.py::a", "t.py::p"], {})]
    (stands,) = a.state.records
    assert stands.verdict.kind is Kind.REGRESSION
    assert stands.verdict.message.endswith("confirmed in a fresh process")


def test_the_progress_line_counts_the_controls() -> None:
    assert progress_line(["t.py::a"], [], 2).endswith(
        "in a fresh process, beside 2 tests that passed"
    )
    assert progress_line(["t.py::a"], [], 0).endswith("in a fresh process")
