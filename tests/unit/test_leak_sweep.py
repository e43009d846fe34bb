"""The leak sweep's policy, options, marker, report field and summary, without pytest runs."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pytest_cudaperf.keys import SeriesKey
from pytest_cudaperf.markers import DistributedOptions, LeakOptions, MarkerError, Marks, parse
from pytest_cudaperf.markers import SweepOptions as Sweep
from pytest_cudaperf.memory import sweep as policy
from pytest_cudaperf.memory.sweep import Snapshot, SweepStatus
from pytest_cudaperf.report.document import Report, SweepSummary, merge_reports
from pytest_cudaperf.report.fields import ReportError
from pytest_cudaperf.report.model import LeakOutcome, SweepOutcome, TestOutcome
from pytest_cudaperf.report.terminal import sweep_lines
from pytest_cudaperf.settings import (
    OPTIONS,
    SettingError,
    option_arguments,
    parse_names,
    parse_sweep,
    resolve,
)

# --- the first pass ------------------------------------------------------------------------------


def test_a_run_without_allocations_is_untouched() -> None:
    same = Snapshot({"cuda:0": 512}, allocations=7)
    assert policy.first_pass(same, same) == (SweepStatus.UNTOUCHED, {})


def test_allocations_that_were_freed_read_clean() -> None:
    before = Snapshot({"cuda:0": 512}, allocations=7)
    after = Snapshot({"cuda:0": 512}, allocations=9)
    assert policy.first_pass(before, after) == (SweepStatus.CLEAN, {})


def test_growth_on_any_signal_goes_on_to_the_full_check() -> None:
    before = Snapshot({"cuda:0": 512}, allocations=7)
    after = Snapshot({"cuda:0": 512, "cuda:1": 1024, "pinned host": 8}, allocations=12)
    assert policy.first_pass(before, after) == (None, {"cuda:1": 1024, "pinned host": 8})
    assert policy.first_pass(before, after, tolerance=8) == (None, {"cuda:1": 1024})


def test_less_memory_after_the_body_is_not_growth() -> None:
    before = Snapshot({"cuda:0": 4096}, allocations=1)
    after = Snapshot({"cuda:0": 0}, allocations=2)
    assert policy.first_pass(before, after) == (SweepStatus.CLEAN, {})


def test_a_body_that_loads_torch_is_read_from_nothing() -> None:
    before = Snapshot({}, 0, torch_loaded=False)
    assert policy.first_pass(before, Snapshot({}, 0, torch_loaded=False))[0] is (
        SweepStatus.UNTOUCHED
    )
    assert policy.first_pass(before, Snapshot({"cuda:0": 0}, 3))[0] is SweepStatus.CLEAN
    assert policy.first_pass(before, Snapshot({"cuda:0": 64}, 3)) == (None, {"cuda:0": 64})


def test_the_census_cannot_count_allocations_so_any_run_with_torch_is_touched() -> None:
    census = Snapshot({"cpu tensors": 100}, allocations=None)
    assert policy.touched(census, census)
    assert not policy.touched(census, Snapshot({}, None, torch_loaded=False))


# --- what is swept, what may be re-run -----------------------------------------------------------


def test_no_leak_tests_check_themselves_and_distributed_ones_are_unchecked() -> None:
    assert policy.not_swept(Marks()) is None
    assert policy.not_swept(Marks(no_leak=LeakOptions())) == ""
    why = policy.not_swept(Marks(distributed=DistributedOptions()))
    assert why is not None
    assert "@distributed" in why


def test_a_test_marked_not_repeatable_is_not_rerun() -> None:
    marks = Marks(leak_sweep=Sweep(repeatable=False, reason="writes a file once"))
    assert policy.rerun_blocker(marks, ["tmp_path"]) == (
        "marked leak_sweep(repeatable=False): writes a file once"
    )
    bare = Marks(leak_sweep=Sweep(repeatable=False))
    assert policy.rerun_blocker(bare, []) == "marked leak_sweep(repeatable=False)"
    assert policy.rerun_blocker(Marks(leak_sweep=Sweep()), ["tmp_path"]) is None


def test_a_test_using_an_unsafe_fixture_is_not_rerun() -> None:
    why = policy.rerun_blocker(Marks(), ["request", "db", "tmp_path"], unsafe=("db",))
    assert why is not None
    assert why.startswith("uses the fixture 'db'")
    assert policy.rerun_blocker(Marks(), ["request", "tmp_path"], unsafe=("db",)) is None


def test_unchecked_reasons_say_what_grew_and_why() -> None:
    text = policy.unchecked_after_growth({"cuda:0": 2 << 20}, "marked")
    assert text == "grew +2.0 MiB on cuda:0 in its run, not re-run: marked"
    raised = policy.rerun_failed(AssertionError("assert 2 == 1\nmore"))
    assert raised.startswith("its body raised AssertionError: assert 2 == 1 when re-run")
    assert "more" not in raised
    assert "KeyError when re-run" in policy.rerun_failed(KeyError())
    assert len(policy.rerun_failed(ValueError("x" * 500))) < 250


def test_the_marker_is_validated() -> None:
    assert parse("leak_sweep", (), {}) == Sweep()
    assert parse("leak_sweep", (False,), {"reason": "r"}) == Sweep(False, "r")
    with pytest.raises(MarkerError, match=r"@pytest.mark.leak_sweep: repeatable: expected True"):
        parse("leak_sweep", ("no",), {})
    with pytest.raises(MarkerError, match=r"@pytest.mark.leak_sweep: reason: expected a string"):
        parse("leak_sweep", (), {"reason": 3})


# --- options -------------------------------------------------------------------------------------


class _Config:
    def __init__(self, cli: dict[str, Any] | None = None, ini: dict[str, str] | None = None):
        self.cli, self.ini = cli or {}, ini or {}

    def getoption(self, name: str) -> Any:
        return self.cli.get(name)

    def getini(self, name: str) -> Any:
        return self.ini.get(name)


@pytest.mark.parametrize(
    ("given", "mode"),
    [("fail", "fail"), ("REPORT", "report"), ("off", "off"), ("1", "fail"), ("no", "off")],
)
def test_the_mode_reads_fail_report_off_or_a_boolean(given: str, mode: str) -> None:
    assert parse_sweep(given) == mode


def test_the_flag_alone_means_fail_and_its_twins_resolve() -> None:
    [option] = [o for o in OPTIONS if o.name == "leak-sweep"]
    arguments = option_arguments(option)
    assert (arguments["nargs"], arguments["const"], arguments["default"]) == ("?", "fail", None)
    assert resolve(_Config(), {}, "pytest.ini").leak_sweep == "off"
    assert resolve(_Config({"cudaperf_leak_sweep": "fail"}), {}, "x").leak_sweep == "fail"
    env = {"PYTEST_CUDAPERF_LEAK_SWEEP": "report"}
    assert resolve(_Config(), env, "pytest.ini").leak_sweep == "report"
    ini = _Config(ini={"cudaperf_leak_sweep": "report"})
    assert resolve(ini, {}, "pytest.ini").leak_sweep == "report"
    unsafe = _Config(ini={"cudaperf_leak_sweep_unsafe_fixtures": "db, session db"})
    assert resolve(unsafe, {}, "tox.ini").leak_sweep_unsafe_fixtures == ("db", "session")


def test_bad_values_name_the_option_and_where_they_came_from() -> None:
    with pytest.raises(SettingError, match=r"^--cudaperf-leak-sweep: expected fail, report or off"):
        resolve(_Config({"cudaperf_leak_sweep": "tests/"}), {}, "pytest.ini")
    env = {"PYTEST_CUDAPERF_LEAK_SWEEP_UNSAFE_FIXTURES": "db,my-fixture"}
    with pytest.raises(SettingError, match=r"expected fixture names, got 'my-fixture' \(from the"):
        resolve(_Config(), env, "pytest.ini")
    assert parse_names("") == ()


# --- the report field and the summary ------------------------------------------------------------


def _swept(name: str, sweep: SweepOutcome, **kwargs: Any) -> TestOutcome:
    return TestOutcome(f"t.py::{name}", sweep=sweep, **kwargs)


LEAK = LeakOutcome(
    SeriesKey("t.py::leaks", ""),
    {"cuda:0": [0, 512, 1024, 1536]},
    {"cuda:0": 1536},
    0,
    sites=("1.0 KiB in 1 block at t.py:9 in test_leaks",),
)
TESTS = (
    _swept("clean", SweepOutcome(SweepStatus.CLEAN, seconds=0.25)),
    _swept("lazy", SweepOutcome(SweepStatus.CLEAN, "", {"cuda:0": 4096}, True, 1.0)),
    _swept(
        "leaks",
        SweepOutcome(SweepStatus.LEAK, "leak: +1.5 KiB", {"cuda:0": 512}, True, 2.0),
        leak=LEAK,
    ),
    _swept("failed", SweepOutcome(SweepStatus.UNCHECKED, "the body failed"), body_passed=False),
    _swept("cpu_only", SweepOutcome(SweepStatus.UNTOUCHED, seconds=0.001)),
)


def test_the_summary_counts_each_status_and_the_time_added() -> None:
    summary = SweepSummary.of("fail", TESTS)
    assert (summary.checked, summary.clean, summary.untouched, summary.rechecked) == (3, 2, 1, 2)
    assert [t.nodeid for t in summary.leaking] == ["t.py::leaks"]
    assert summary.unchecked == (("t.py::failed", "the body failed"),)
    assert summary.seconds == pytest.approx(3.251)
    assert Report(tests=TESTS).sweep_summary() is None  # the run did not sweep


def test_the_summary_lines_name_sites_and_reasons() -> None:
    lines = sweep_lines(SweepSummary.of("report", TESTS))
    assert lines == [
        "leak sweep (report): 3 checked (2 re-run), 1 leaking, 1 unchecked, 1 without "
        "allocations; the sweep added 3.3 s",
        "LEAKING t.py::leaks: leak: +1.5 KiB",
        "    1.0 KiB in 1 block at t.py:9 in test_leaks",
        "UNCHECKED t.py::failed: the body failed",
    ]
    assert sweep_lines(SweepSummary.of("fail", TESTS))[1].startswith("LEAKED t.py::leaks")


def test_the_sweep_round_trips_through_the_report_document() -> None:
    report = Report(tests=tuple(sorted(TESTS, key=lambda t: t.nodeid)), leak_sweep="fail")
    document = json.loads(json.dumps(report.to_json()))
    assert document["schema"] == 4
    assert document["leak_sweep"]["leaking"] == ["t.py::leaks"]
    assert document["leak_sweep"]["unchecked"] == {"t.py::failed": "the body failed"}
    assert Report.from_json(document) == report
    for outcome in TESTS:
        assert TestOutcome.from_json(json.loads(json.dumps(outcome.to_json()))) == outcome


def test_an_older_report_has_no_sweep_and_shards_keep_the_mode() -> None:
    document = Report(tests=TESTS[:1]).to_json()
    document.update(schema=3)
    del document["leak_sweep"]
    del document["tests"][0]["sweep"]  # type: ignore[index, union-attr, call-overload]
    older = Report.from_json(document)
    assert older.leak_sweep is None
    assert older.tests[0].sweep is None
    merged = merge_reports([older, Report(tests=TESTS[1:], leak_sweep="report")])
    assert merged.leak_sweep == "report"
    assert len(merged.tests) == len(TESTS)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["tests"][0]["sweep"].update(status="odd"), r"sweep.status: expected one"),
        (
            lambda d: d["tests"][0]["sweep"].update(seconds="x"),
            r"sweep.seconds: expected an integer or a number",
        ),
        (lambda d: d["tests"][0]["sweep"].update(growth=[]), r"sweep.growth: expected an obj"),
        (lambda d: d["leak_sweep"].update(mode="loud"), r"leak_sweep.mode: expected 'fail'"),
    ],
)
def test_reading_the_sweep_is_strict(change: Any, message: str) -> None:
    document = json.loads(json.dumps(Report(tests=TESTS, leak_sweep="fail").to_json()))
    change(document)
    with pytest.raises(ReportError, match=message):
        Report.from_json(document)
