from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_cudaperf.keys import SeriesKey
from pytest_cudaperf.locks import LockRegistry
from pytest_cudaperf.markers import Marks, PerfOptions
from pytest_cudaperf.measure.measurement import Measurement, kernels_measured, kernels_of_passes
from pytest_cudaperf.report.document import Report
from pytest_cudaperf.report.github import github_annotations, github_summary
from pytest_cudaperf.report.html import render_html
from pytest_cudaperf.report.junit import failure_text
from pytest_cudaperf.report.model import FailureKind
from pytest_cudaperf.report.terminal import render_table, summary_line, table_rows
from pytest_cudaperf.run import judging
from pytest_cudaperf.run.context import ItemState, RunContext, TestContext
from pytest_cudaperf.run.judged import (
    JudgedMeasurement,
    Target,
    Times,
    add_peak,
    add_time,
    budget_for,
    check_peak,
)
from pytest_cudaperf.run.results import Results
from pytest_cudaperf.series import Record, Recording
from pytest_cudaperf.settings import Settings
from pytest_cudaperf.store.baselines import BaselineStore
from pytest_cudaperf.verdict import Kind

A = SeriesKey("t.py::a")


def measured(median: float) -> Measurement:
    return Measurement.from_samples(
        [median * (1 + 0.001 * i) for i in range(-10, 11)], metric="device", cache="cold"
    )


def run_context(tmp_path: Path, **settings: object) -> RunContext:
    return RunContext(
        settings=Settings(**settings),  # type: ignore[arg-type]
        store=BaselineStore.load(tmp_path),
        locks=LockRegistry(tmp_path / "locks"),
        root=tmp_path,
        baseline_dir=tmp_path,
        output_dir=tmp_path,
    )


def new_test(run: RunContext, perf: PerfOptions | None = None) -> TestContext:
    return TestContext(run, ItemState("t.py::a"), Marks(perf=perf))


def judged(test: TestContext, median: float, device_class: str = "GPU X") -> None:
    """Measure-and-record as cuda_timer does, for a test called t.py::a."""
    m = measured(median)
    add_time(test, judging.judge_time(test, A, m, device_class), m)


@dataclasses.dataclass(frozen=True)
class Scripted(Target):
    """A target whose measurements ``run_once`` makes (per budget), with no backend."""

    run_once: Callable[[Any], Measurement] | None = None

    def measure(self, budget: Any) -> Measurement:
        assert self.run_once is not None
        return self.run_once(budget)


def path(
    test: TestContext,
    run_once: Callable[[Any], Measurement] | None = None,
    probe: Callable[[], float] | None = None,
) -> JudgedMeasurement:
    """The judged measurement of t.py::a on GPU X, measured by ``run_once`` (its kernels never
    profiled), with the host's state ``probe``."""
    target = Scripted(lambda: None, "cuda:0", profiled=False, probe=probe, run_once=run_once)
    return JudgedMeasurement(test, A, target, "GPU X")


def test_record_keys_follow_one_scheme() -> None:
    state = ItemState("t.py::a")
    assert state.key() == SeriesKey("t.py::a")
    assert state.key() == SeriesKey("t.py::a", "2")
    assert state.key("fwd") == SeriesKey("t.py::a", "fwd")
    assert state.key("fwd") == SeriesKey("t.py::a", "fwd-2")
    assert state.key(unnamed="guard") == SeriesKey("t.py::a")
    assert state.key(unnamed="guard") == SeriesKey("t.py::a", "guard2")


def test_payload_round_trips_as_json_and_feeds_the_update(tmp_path: Path) -> None:
    run = run_context(tmp_path)
    test = new_test(run)
    judged(test, 1.0)
    payload = test.state.outcome(True, ("t.py", 3)).to_json()
    wire = json.loads(json.dumps(payload))  # what xdist carries
    assert wire == payload
    results = Results()
    results.add("t.py::a", "setup", None)
    results.add("t.py::a", "call", wire)
    assert results.report().counts()["new"] == 1
    results.update_store(run.store, prune=False, root=tmp_path, tolerance=0.05)
    assert BaselineStore.load(tmp_path).keys("GPU X") == [A]


def test_regression_and_budget_become_failure_lines(tmp_path: Path) -> None:
    run = run_context(tmp_path)
    first = new_test(run)
    judged(first, 1.0)
    run.store.update("GPU X", stored(first))
    test = new_test(run, PerfOptions(max_ms=1.2))
    judged(test, 1.5)
    assert [f.kind for f in test.state.failures] == [FailureKind.REGRESSION, FailureKind.BUDGET]
    text = failure_text(test.state.outcome(True, None))
    assert text.splitlines()[0].startswith("perf regression: median 1.500 ms vs baseline 1.000 ms")
    assert text.splitlines()[1].startswith("perf: a median 1.500 ms > max_ms 1.2 ms")


def test_update_mode_does_not_fail_regressions(tmp_path: Path) -> None:
    run = run_context(tmp_path, update=True)
    first = new_test(run)
    judged(first, 1.0, "G")
    run.store.update("G", stored(first))
    test = new_test(run)
    judged(test, 2.0, "G")
    assert test.state.failures == []


def test_crashed_worker_makes_the_run_partial() -> None:
    results = Results()
    results.worker_down("gw0", {"cudaperf": {"deselected": 2}}, None)
    assert results.deselected == 2
    assert not results.complete
    fresh = Results()
    fresh.worker_down("gw1", None, "crashed")
    assert fresh.crashed_workers == ["gw1"]
    assert not fresh.complete
    assert Results().complete


def test_an_outcome_that_cannot_be_read_is_an_error_line_not_a_crash(tmp_path: Path) -> None:
    test = new_test(run_context(tmp_path))
    judged(test, 0.0123)
    payload = test.state.outcome(True, ("t.py", 7)).to_json()
    payload["records"][0]["recording"]["ci"] = [-0.0036, 0.0067]  # what no reader accepts
    results = Results()
    results.add("t.py::a", "call", payload)
    assert "t.py::a" not in results.outcomes
    assert results.errors == [
        "t.py::a: its measurements could not be read (test t.py::a.records[0]: recording: 'ci' "
        "must be a pair [low, high] of finite positive numbers, low <= high, got [-0.0036, 0.0067])"
    ]


def test_reports_render(tmp_path: Path) -> None:
    test = new_test(run_context(tmp_path))
    judged(test, 0.0123)
    test.state.fail(FailureKind.BUDGET, "perf: a median 12.30 µs > max_ms 0.001 ms (x)")
    results = Results()
    results.add("t.py::a", "call", test.state.outcome(True, ("t.py", 7)).to_json())
    rows = table_rows(results.report())
    assert rows == [["t.py::a", "12.30 µs", "—", "", "", "NEW", ""]]
    lines = render_table(rows)
    assert lines[0].split() == [
        "test",
        "median",
        "baseline",
        "change",
        "95%",
        "CI",
        "verdict",
        "peak",
        "mem",
    ]
    assert "| t.py::a | 12.30 µs |" in github_summary(results.report())
    assert github_annotations(results.report()) == [
        "::error file=t.py,line=7::perf: a median 12.30 µs > max_ms 0.001 ms (x)"
    ]
    report = results.report("run1", env={"torch": "x"})
    assert Report.from_json(json.loads(json.dumps(report.to_json()))) == report
    html_text = render_html(report)
    assert html_text.startswith("<!doctype html>")
    assert "<svg" in html_text
    assert "http" not in html_text.split("<body>", 1)[1]


def test_peak_regression_and_budget_show_in_table_and_failures(tmp_path: Path) -> None:
    from pytest_cudaperf.memory import PeakResult

    run = run_context(tmp_path)
    first = new_test(run)
    add_peak(
        first, judging.judge_peak(first, A, PeakResult(1 << 20, device="cuda:0"), "GPU X"), None
    )
    run.store.update("GPU X", stored(first))
    test = new_test(run)
    judged(test, 1.0)
    peak = judging.judge_peak(test, A, PeakResult(2 << 20, device="cuda:0"), "GPU X")
    add_peak(test, peak, 1 << 20)
    failures = test.state.failures
    assert [f.kind for f in failures] == [FailureKind.REGRESSION, FailureKind.MEMORY]
    assert failures[0].message.startswith("memory regression: peak memory 2.0 MiB vs baseline")
    assert failures[1].message == (
        "memory: peak 2.0 MiB > max_peak 1.0 MiB (requested bytes on cuda:0)"
    )
    check_peak(test, A, None, 1)  # no peak read (CPU): nothing to check
    assert len(test.state.failures) == 2
    results = Results()
    results.add("t.py::a", "call", test.state.outcome(True, None).to_json())
    assert table_rows(results.report())[0][-1] == "2.0 MiB REGRESSION"
    # one row, two judged records: the summary says which is which, and the limit by its name
    assert summary_line(results.report().counts()) == (
        "cudaperf: 2 measured (1 time, 1 peak memory), 1 regression, 0 improved, 1 new, "
        "0 inconclusive, 1 over max_peak"
    )


def test_sticky_errors_in_a_body_poison_the_process(tmp_path: Path) -> None:
    run = run_context(tmp_path)
    run.note_error("t.py::a", ValueError("device-side assert triggered"))
    run.note_error("t.py::b", RuntimeError("CUDA out of memory"))
    assert run.faults.message() is None
    run.note_error("t.py::c", RuntimeError("CUDA error: device-side assert triggered\nmore"))
    assert run.faults.message() == (
        "CUDA context unusable since t.py::c: CUDA error: device-side assert triggered"
    )


def test_table_shows_a_threshold_raised_by_noise(tmp_path: Path) -> None:
    run = run_context(tmp_path)
    run.store.update("CPU x", [judging_record(1.0, noise=0.6)])
    test = TestContext(run, ItemState("t.py::noisy"))
    m = Measurement.from_samples([1.19 * (1 + 0.02 * i) for i in range(-10, 11)], metric="wall")
    record = judging.judge_time(test, SeriesKey("t.py::noisy"), m, "CPU x")
    assert record.verdict.threshold == pytest.approx(0.6)
    test.state.records.append(record)
    results = Results()
    results.add("t.py::noisy", "call", test.state.outcome(True, None).to_json())
    assert table_rows(results.report())[0][5].endswith("(t=60%)")


def judging_record(value: float, noise: float) -> Record:
    """A stored wall-time series of one recording with the given noise."""
    recording = Recording("2026-11-23", value, noise, 20, ci=(value, value))
    return Record(SeriesKey("t.py::noisy"), "time:wall", "CPU x", "ms", recording, {})


def stored(test: TestContext) -> list[Record]:
    """What an update stores of a test's judged records."""
    return [r.record for r in test.state.records]


def test_an_infinite_baseline_renders_without_crashing(tmp_path: Path) -> None:
    """A baseline ``"value": Infinity`` gives a ratio of 0: the table shows ``?``."""
    from pytest_cudaperf.verdict import Kind, Verdict

    test = new_test(run_context(tmp_path))
    judged(test, 1.0)
    record = test.state.records[0]
    broken = Verdict(Kind.IMPROVED, ratio=0.0, ci=(0.0, 0.0), threshold=0.05, tolerance=0.05)
    test.state.records[0] = type(record)(**{**record.__dict__, "verdict": broken})
    results = Results()
    results.add("t.py::a", "call", test.state.outcome(True, None).to_json())
    assert table_rows(results.report())[0][2:5] == ["?", "", ""]
    assert render_html(results.report()).startswith("<!doctype html>")


def test_budget_for_takes_arguments_then_the_marker_then_the_settings() -> None:
    settings = Settings(max_time=2.0, rounds=4)
    plain = budget_for(settings, PerfOptions())
    assert (plain.max_time, plain.rounds, plain.warmup) == (2.0, 4, 0.05)
    marked = budget_for(settings, PerfOptions(max_time=0.5, rounds=1, tolerance=0.01))
    assert (marked.max_time, marked.rounds) == (0.5, 1)
    assert marked.precision == pytest.approx(0.001)
    assert budget_for(settings, PerfOptions(max_time=0.5), max_time=0.1).max_time == 0.1


def test_one_round_of_n_is_a_rounds_share_of_the_budget() -> None:
    """``--cudaperf-round-of=3`` (``cudaperf record``'s runs): one round, with the time and the
    precision each of three rounds takes; the host-bound budget follows from it."""
    whole = budget_for(Settings(), PerfOptions())
    one = budget_for(Settings(round_of=3), PerfOptions())
    assert one.rounds == 1
    assert one.max_time == pytest.approx(whole.max_time / 3)
    assert one.precision == pytest.approx(whole.precision * 3**0.5)
    assert one.host_bound().max_time == pytest.approx(whole.host_bound().max_time / 3)
    assert one == dataclasses.replace(whole, rounds=3).per_round()


def test_a_judged_measurement_without_a_budget_takes_the_one_its_target_times_give(
    tmp_path: Path,
) -> None:
    """``cuda_timer(fn, max_time=...)``: the fixture hands the times on with the target and the
    path derives the budget (:func:`budget_for`), as the fixture would have."""
    test = new_test(run_context(tmp_path, max_time=2.0, rounds=4), PerfOptions(tolerance=0.01))
    budgets: list[Any] = []

    def run_once(budget: Any) -> Measurement:
        budgets.append(budget)
        return measured(1.0)

    times = Times(warmup=0.2, max_time=0.5)
    target = Scripted(lambda: None, "cpu", profiled=False, run_once=run_once, times=times)
    JudgedMeasurement(test, A, target, "CPU X").run()
    expected = budget_for(test.settings, PerfOptions(tolerance=0.01), 0.2, None, 0.5)
    assert budgets == [expected]
    assert (expected.warmup, expected.max_time, expected.rounds) == (0.2, 0.5, 4)
    assert expected.precision == pytest.approx(0.001)


def test_a_failed_output_is_one_line_and_the_others_are_written(tmp_path: Path) -> None:
    import dataclasses

    from pytest_cudaperf.run.results import finish_run

    (tmp_path / "out").mkdir()
    (tmp_path / "cudaperf-file").write_text("")
    run = run_context(tmp_path, update=True, json="out", html="r.html")
    run.baseline_dir = tmp_path / "cudaperf-file"
    run.store.folder = run.baseline_dir
    run.settings = dataclasses.replace(run.settings, json="out", html="r.html")
    test = new_test(run)
    judged(test, 1.0)
    results = Results()
    results.add("t.py::a", "call", test.state.outcome(True, None).to_json())
    report, annotations = finish_run(run, results, {})
    assert annotations == []
    assert report.tests[0].nodeid == "t.py::a"
    assert [line.split(": ")[1] for line in results.errors] == [
        "baseline update",
        "--cudaperf-json",
    ]
    assert "(IsADirectoryError); point --cudaperf-json at a writable file" in results.errors[1]
    assert (tmp_path / "r.html").read_text().startswith("<!doctype html>")


def test_html_report_shows_the_breakdown_side_by_side(tmp_path: Path) -> None:
    """The side-by-side table is rendered from the two breakdowns the record carries, at the end
    of the run (the test process sends the breakdowns, not HTML)."""
    import dataclasses

    from pytest_cudaperf.breakdown.model import Breakdown, Kernel

    def kernels(*found: tuple[str, float]) -> Breakdown:
        entries = tuple(Kernel(name, name, 1.0, us) for name, us in found)
        return Breakdown("cuda", 5, sum(us for _, us in found), 1.0, entries)

    test = new_test(run_context(tmp_path))
    judged(test, 1.0)
    record = dataclasses.replace(
        test.state.records[0],
        explanation=("kernels: 1.0 ms -> 1.3 ms per call", "+300 µs  new: exp_kernel"),
        compared=(kernels(("gemm", 1000.0)), kernels(("gemm", 1000.0), ("exp_kernel", 300.0))),
    )
    test.state.records[0] = record
    results = Results()
    results.add("t.py::a", "call", test.state.outcome(True, None).to_json())
    report = results.report()
    page = render_html(Report.from_json(json.loads(json.dumps(report.to_json()))))
    assert "+300 µs  new: exp_kernel" in page
    assert '<table class="cudaperf-breakdown">' in page
    assert "exp_kernel</td>" in page


def test_an_unconfirmed_regression_keeps_the_numbers_of_its_re_measurement(tmp_path: Path) -> None:
    run = run_context(tmp_path)
    first = new_test(run)
    judged(first, 1.0)
    run.store.update("GPU X", stored(first))
    test = new_test(run)
    slow = judging.judge_time(test, A, measured(1.5), "GPU X")
    assert slow.verdict.kind is Kind.REGRESSION
    record, kept = judging.confirm_time(test, slow, measured(1.0))
    assert record.verdict.kind is Kind.INCONCLUSIVE
    assert "not confirmed" in record.verdict.message
    assert kept.median_ms == pytest.approx(1.0)
    assert record.value == pytest.approx(1.0)  # the table's value and baseline agree with the CI
    assert record.baseline_value == pytest.approx(1.0, rel=1e-3)


class FreshStub:
    """Stands in for :class:`FreshProcess`: the fresh process measures ``make()``."""

    def __init__(self, make: object) -> None:
        self.make = make
        self.asked: list[tuple[str, dict[str, str]]] = []
        self.again: list[bool] = []

    def measurements(
        self, nodeid: str, env: dict[str, str] | None = None, again: bool = False
    ) -> dict[tuple[str, str], Measurement]:
        self.asked.append((nodeid, dict(env or {})))
        self.again.append(again)
        again: Measurement = self.make()  # type: ignore[operator]
        return {(str(A), f"time:{again.mode}"): again}


@pytest.mark.parametrize(
    ("fields", "host_dominated"),
    [
        ({"device": "cpu", "metric": "wall"}, True),
        ({"device": "cuda:0", "metric": "wall"}, True),  # a synchronized wall time
        ({"device": "cuda:0", "metric": "region"}, True),
        ({"device": "cuda:0", "metric": "host"}, True),  # synchronizes inside
        ({"device": "cuda:0", "metric": "device", "blocking": "none"}, True),
        ({"device": "cuda:0", "metric": "device", "blocking": "spin"}, False),
        ({"device": "cuda:0", "metric": "kernels"}, False),
        ({"device": "cuda:0", "metric": "graph", "blocking": "none", "graph": True}, False),
    ],
)
def test_which_measurements_the_host_dominates(
    fields: dict[str, object], host_dominated: bool
) -> None:
    m = Measurement.from_samples([1.0, 1.1, 0.9], **fields)  # type: ignore[arg-type]
    assert m.host_dominated is host_dominated
    # what the host dominates, and a host-bound call's kernels, must change in a fresh process
    assert m.process_dependent is (host_dominated or m.metric == "kernels")


def host_bound(loops: float, ms: float = 2.0, device: str = "cuda:1") -> Measurement:
    """A host-bound measurement of ``ms`` per call that read ``loops`` reference loops."""
    return Measurement.from_samples(
        [ms * (1 + 0.001 * i) for i in range(-10, 11)],
        metric="host",
        device=device,
        reference_ms=ms / loops,
        in_loops=loops,
        in_loops_ci=(loops * 0.99, loops * 1.01),
    )


def recorded_at_four_loops(tmp_path: Path, **settings: object) -> RunContext:
    """A run whose baseline holds one host-bound recording of 4 loops (2 ms a call, launch
    reference 0.5 ms) for t.py::a."""
    run = run_context(tmp_path, **settings)
    first = new_test(run)
    m = host_bound(4.0)
    add_time(first, judging.judge_time(first, A, m, "GPU X"), m)
    run.store.update("GPU X", stored(first))
    return run


def test_a_host_bound_time_is_judged_and_recorded_in_reference_loops(tmp_path: Path) -> None:
    run = run_context(tmp_path)
    first = new_test(run)
    m = host_bound(4.0, ms=2.0)
    add_time(first, judging.judge_time(first, A, m, "GPU X"), m)
    (record,) = stored(first)
    assert (record.series, record.unit, record.value) == ("time:host", "loops", 4.0)
    # the host's speed is in the loops already; the reference's time is kept for the kernels'
    # part that does not follow it (see the next test)
    assert record.recording.reference_ms == pytest.approx(0.5)
    run.store.update("GPU X", stored(first))
    # the host ran 1.5x slower (3 ms per call) and the loop with it: the same 4 loops, a pass
    slow_host = judging.judge_time(new_test(run), A, host_bound(4.0, ms=3.0), "GPU X")
    assert slow_host.verdict.kind is Kind.PASS
    slower_code = judging.judge_time(new_test(run), A, host_bound(6.0, ms=3.0), "GPU X")
    assert slower_code.verdict.kind is Kind.REGRESSION
    assert "median 6 loops vs baseline 4 loops" in slower_code.verdict.message


def test_cupti_a_profile_would_leave_attached_is_attached_before_a_profiled_target_measures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A target whose kernels may be profiled asks for CUPTI attached (where profiles leave it
    so) before its first measurement; one that is never profiled, and a rank, do not."""
    from pytest_cudaperf.breakdown import capture
    from pytest_cudaperf.rank_env import RankEnv

    order: list[str] = []
    monkeypatch.setattr(capture, "attach_kept_cupti", lambda device, _lock: order.append(device))

    def measure(_budget: Any) -> Measurement:
        order.append("measured")
        return measured(1.0)

    run = run_context(tmp_path)
    profiled = Scripted(lambda: None, "cuda:1", run_once=measure)
    JudgedMeasurement(new_test(run), A, profiled, "GPU X").run()
    assert order[:2] == ["cuda:1", "measured"]
    order.clear()
    JudgedMeasurement(
        new_test(run), A, dataclasses.replace(profiled, profiled=False), "GPU X"
    ).run()
    assert "cuda:1" not in order
    assert "measured" in order
    order.clear()
    ranked = dataclasses.replace(run, rank=RankEnv(0, 2, 1, None, None, "nccl"))
    JudgedMeasurement(new_test(ranked), A, profiled, "GPU X").run()
    assert order == ["measured"]


def test_a_host_bound_time_measured_as_at_recording_ends_the_runs_spell(tmp_path: Path) -> None:
    """A spell of the host's other state (a wait ran out) lasts until a measurement of any
    callable meets the host as at its recording: 4 loops at 2 ms a call (reference 0.5 ms, the
    recordings'). One in the other state (3 ms a call: 0.75 ms, 1.5x) leaves the spell as it
    was, and so does a measurement with no reference to compare."""
    run = recorded_at_four_loops(tmp_path)
    run.host_spell.since = run.host_spell.seen = 100.0
    judging.judge_time(new_test(run), A, host_bound(4.0, ms=3.0), "GPU X")
    assert run.host_spell.since == 100.0
    judging.judge_time(new_test(run), A, measured(2.0), "GPU X")  # device time: no reference
    assert run.host_spell.since == 100.0
    judging.judge_time(new_test(run), A, host_bound(6.0, ms=3.0), "GPU X")  # a slowdown, 0.5 ms
    assert run.host_spell.since is None


def test_kernels_that_do_not_follow_a_faster_host_are_set_aside(tmp_path: Path) -> None:
    run = run_context(tmp_path)
    first = new_test(run)
    # 2 ms per call: 1.5 ms of host work and 0.5 ms of kernels it waits for; reference 0.5 ms
    m = dataclasses.replace(host_bound(4.0, ms=2.0), fixed_ms=0.5)
    add_time(first, judging.judge_time(first, A, m, "GPU X"), m)
    assert stored(first)[0].recording.fixed_ms == 0.5  # the series' recordings keep it
    run.store.update("GPU X", stored(first))
    # the host runs 1.2x as fast: 1.25 ms of host work, the same 0.5 ms of kernels, reference
    # 0.417 ms: 4.2 loops, of which 0.2 the kernels' fixed time
    faster = dataclasses.replace(host_bound(4.2, ms=1.75), fixed_ms=0.5)
    found = judging.judge_time(new_test(run), A, faster, "GPU X")
    assert found.verdict.kind is Kind.PASS
    assert found.verdict.ratio == pytest.approx(1.0)
    assert "(launch reference 416.67 µs, 500.00 µs at recording)" in found.verdict.message
    # the host work grew by half as well: beyond what the kernels explain
    slower_code = dataclasses.replace(host_bound(8.0, ms=2.0), fixed_ms=0.5)
    assert judging.judge_time(new_test(run), A, slower_code, "GPU X").verdict.kind is (
        Kind.REGRESSION
    )


@pytest.mark.parametrize(
    ("fresh_loops", "kind"),
    [
        (4.0, Kind.INCONCLUSIVE),  # a slow state of one process: not confirmed, not failed
        (6.0, Kind.REGRESSION),  # the fresh process shows it too: it stands
    ],
)
def test_a_host_bound_regression_is_confirmed_in_a_fresh_process_on_the_same_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_loops: float, kind: Kind
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    run = recorded_at_four_loops(tmp_path)
    fresh = FreshStub(lambda: host_bound(fresh_loops))
    run.fresh = fresh  # type: ignore[assignment]
    test = new_test(run)
    slow = host_bound(6.0)
    found = judging.judge_time(test, A, slow, "GPU X")
    assert found.verdict.kind is Kind.REGRESSION
    record, _ = path(test).confirm_fresh(found, slow)
    assert record.verdict.kind is kind
    # the worker measured on cuda:1, the second visible GPU: the fresh process sees only it
    assert fresh.asked == [("t.py::a", {"CUDA_VISIBLE_DEVICES": "5"})]
    if kind is Kind.REGRESSION:
        assert "in a fresh process" in record.verdict.message


@pytest.mark.parametrize(
    ("fresh_ms", "kind", "asked"),
    [
        ((6.0, 3.0), Kind.REGRESSION, [False, True]),  # the second met the recordings' state
        ((6.0, 6.0, 6.0), Kind.INCONCLUSIVE, [False, True, True]),  # none did: not judged
    ],
)
def test_a_fresh_process_in_another_host_state_is_followed_by_another(
    tmp_path: Path, fresh_ms: tuple[float, ...], kind: Kind, asked: list[bool]
) -> None:
    """6 loops against 4: a regression where the launch reference ran as at recording (3 ms a
    call), not judged where it ran 2x slower (6 ms a call, the host's slow state)."""
    run = recorded_at_four_loops(tmp_path)
    each = iter(fresh_ms)
    fresh = FreshStub(lambda: host_bound(6.0, ms=next(each)))
    run.fresh = fresh  # type: ignore[assignment]
    test = new_test(run)
    slow = host_bound(6.0, ms=3.0)
    found = judging.judge_time(test, A, slow, "GPU X")
    assert found.verdict.kind is Kind.REGRESSION
    record, _ = path(test).confirm_fresh(found, slow)
    assert fresh.again == asked
    assert record.verdict.kind is kind
    assert "in a fresh process" in record.verdict.message
    if kind is Kind.INCONCLUSIVE:
        assert record.verdict.other_state
        assert "the machine ran the launch reference 2.0x slower" in record.verdict.message


def test_a_confirmation_in_another_host_state_is_measured_again(tmp_path: Path) -> None:
    """The re-measurement that confirms a host-bound regression met the host's slow state
    (the launch reference 2x slower): it is taken again, not counted against the regression."""
    from pytest_cudaperf.measure.timing import Budget

    run = recorded_at_four_loops(tmp_path)
    taken = iter([3.0, 6.0, 3.0])  # ms per call: the recordings' state, the slow one, back
    test = new_test(run)
    path(test, lambda budget: host_bound(6.0, ms=next(taken))).run(Budget())
    (record,) = test.state.records
    assert record.verdict.kind is Kind.REGRESSION
    assert next(taken, None) is None  # three measurements: measured, the slow state, again


@pytest.mark.parametrize(
    ("probe_ms", "kind", "taken", "said"),
    [
        # slow beside the calls (2x), then back: measured again, judged as it reads
        ((0.2, 0.2, 0.1), Kind.REGRESSION, 3, "waited"),
        # the host stays slow: no measurement after the wait, held back
        ((0.2,), Kind.INCONCLUSIVE, 1, "in vain"),
    ],
)
def test_a_change_read_in_the_other_host_state_waits_for_the_host(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    probe_ms: tuple[float, ...],
    kind: Kind,
    taken: int,
    said: str,
) -> None:
    """6 loops against 4 with the launch reference 2x slower than at recording: held back for
    the host's state, then measured again only once the probe says the host is back."""
    from pytest_cudaperf.measure.timing import Budget
    from pytest_cudaperf.run import hoststate

    monkeypatch.setattr(hoststate, "POLL_S", 0.001)
    run = recorded_at_four_loops(tmp_path, state_wait=0.05)
    calls = iter([6.0, 3.0, 3.0])  # ms per call: the slow state, then the recordings' state
    measurements: list[float] = []

    def run_once(budget: Budget) -> Measurement:
        measurements.append(next(calls))
        return host_bound(6.0, ms=measurements[-1])

    readings = iter(probe_ms)
    probed: list[float] = []

    def probe() -> float:
        probed.append(next(readings, probe_ms[-1]))
        return probed[-1]

    test = new_test(run)
    path(test, run_once, probe).run(Budget())
    (record,) = test.state.records
    assert record.verdict.kind is kind
    assert len(measurements) == taken
    (line,) = [d for d in test.state.details if "host-bound: waited" in d]
    assert said in line
    if kind is Kind.INCONCLUSIVE:
        assert record.verdict.other_state
        # beside the calls 1 ms a reference against 0.5 ms: the probe's 0.2 ms scaled to it
        assert "reference 2.0x slower than at recording (1.000 ms, 500.00 µs at" in line


def test_a_change_that_meets_the_other_host_state_again_is_measured_while_the_wait_lasts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The host came back four times and each re-measurement met its slow state again (its
    states last seconds): measured again each time, with the same budget and beyond
    REMEASURE, within the state wait, until one reads the host as at recording."""
    import itertools

    from pytest_cudaperf.measure.timing import Budget
    from pytest_cudaperf.run import hoststate

    monkeypatch.setattr(hoststate, "POLL_S", 0.001)
    run = recorded_at_four_loops(tmp_path, state_wait=5.0)
    calls = iter([6.0, 6.0, 6.0, 6.0, 6.0, 3.0, 3.0])  # ms per call: the slow state five times
    budgets: list[float] = []

    def run_once(budget: Budget) -> Measurement:
        budgets.append(budget.max_time)
        return host_bound(6.0, ms=next(calls))

    readings = itertools.cycle([0.2, 0.1])  # each wait: scaled to 1 ms, then 0.5 ms: back
    test = new_test(run)
    path(test, run_once, lambda: next(readings)).run(Budget())
    (record,) = test.state.records
    assert record.verdict.kind is Kind.REGRESSION
    assert len(budgets) == 7 > judging.REMEASURE + 2  # and the confirmation
    assert set(budgets) == {Budget().max_time}
    assert len([d for d in test.state.details if "host-bound: waited" in d]) == 5


def test_the_wait_starts_from_the_state_the_measurement_ended_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Held back with the reference 2x slow over the measurement, whose last calls ran as at
    recording again: the probe, read right after, meets that state and is scaled to it, so its
    steady readings say the host is back (scaled to the whole measurement's reference they would
    say 2x slow for as long as the wait lasts)."""
    from pytest_cudaperf.measure.timing import Budget
    from pytest_cudaperf.run import hoststate

    monkeypatch.setattr(hoststate, "POLL_S", 0.001)
    run = recorded_at_four_loops(tmp_path, state_wait=0.05)
    calls = iter([6.0, 3.0, 3.0])  # ms per call: the slow state, then the recordings'

    def run_once(budget: Budget) -> Measurement:
        measured = host_bound(6.0, ms=next(calls))
        ended = (1.0,) * 20 + (0.5,) * 9  # ms: slow over most calls, as at recording at the end
        return dataclasses.replace(measured, references_ms=ended)

    test = new_test(run)
    path(test, run_once, lambda: 0.3).run(Budget())
    (record,) = test.state.records
    assert record.verdict.kind is Kind.REGRESSION
    (line,) = [d for d in test.state.details if "host-bound: waited" in d]
    assert "as at recording (500.00 µs, 500.00 µs at recording), then measured again" in line


def test_an_undecided_slowdown_read_in_a_faster_host_state_waits_for_the_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """+15% with the launch reference 2x faster than at recording: INCONCLUSIVE (the host's
    speed is noise), measured again once the host runs as at recording, where +50% fails."""
    from pytest_cudaperf.measure.timing import Budget
    from pytest_cudaperf.run import hoststate

    monkeypatch.setattr(hoststate, "POLL_S", 0.001)
    run = recorded_at_four_loops(tmp_path, state_wait=0.05)
    calls = iter([(4.6, 1.15), (6.0, 3.0), (6.0, 3.0)])  # (loops, ms): fast state, then back
    taken = 0

    def run_once(budget: Budget) -> Measurement:
        nonlocal taken
        taken += 1
        loops, ms = next(calls)
        return host_bound(loops, ms=ms)

    readings = iter([0.1, 0.1, 0.2])  # scaled to 0.25 ms, 0.25 ms, 0.5 ms: back

    test = new_test(run)
    path(test, run_once, lambda: next(readings)).run(Budget())
    (record,) = test.state.records
    assert record.verdict.kind is Kind.REGRESSION
    assert taken == 3
    (line,) = [d for d in test.state.details if "host-bound: waited" in d]
    assert "as at recording (500.00 µs, 500.00 µs at recording), then measured again" in line


@pytest.mark.parametrize(
    ("settings", "loops", "ms", "taken"),
    [
        # --cudaperf-state-wait=off: 6 loops against 4, the host 2x slower, held back
        ({"state_wait": 0.0}, 6.0, (6.0,), 3),
        # 2.6 loops against 4, the host 2x faster, held back: a speed-up fails nothing, and
        # one whose CI rules out a regression is measured again once
        ({}, 2.6, (0.65,), 2),
        # IMPROVED with the host as at recording, then each confirmation 2x faster, held back:
        # a speed-up, measured again once
        ({}, 2.6, (1.3, 0.65), 1 + 1 + 1),
    ],
)
def test_what_does_not_wait_for_the_host_is_measured_again_at_once(
    tmp_path: Path,
    settings: dict[str, object],
    loops: float,
    ms: tuple[float, ...],
    taken: int,
) -> None:
    """Held back for the host's state, and re-measured at once (REMEASURE times, twice the
    budget each time where the first verdict was INCONCLUSIVE; REMEASURE_SPEED_UP times for a
    speed-up that cannot be a regression) without reading the probe: the state wait's deadline
    bounds only re-measurements that wait."""
    from pytest_cudaperf.measure.timing import Budget

    run = recorded_at_four_loops(tmp_path, **settings)
    budgets: list[Budget] = []
    calls = iter([*ms, *[ms[-1]] * 10])  # ms per call: the last repeats

    def run_once(budget: Budget) -> Measurement:
        budgets.append(budget)
        return host_bound(loops, ms=next(calls))

    def probe() -> float:
        raise AssertionError("the probe is not read")

    test = new_test(run)
    path(test, run_once, probe).run(Budget())
    (record,) = test.state.records
    assert record.verdict.other_state
    assert record.verdict.kind is Kind.INCONCLUSIVE
    assert len(budgets) == taken
    assert (judging.REMEASURE, judging.REMEASURE_SPEED_UP) == (2, 1)
    assert not [d for d in test.state.details if "host-bound: waited" in d]
    again = [d for d in test.state.details if "measured again" in d]
    if ms == (1.3, 0.65):  # an IMPROVED is confirmed, not measured again as an INCONCLUSIVE
        assert again == []
    elif loops == 6.0:  # what each of the three measurements read, and at what budget
        assert again == [
            "measured again twice: +50.0% inconclusive, then +50.0% inconclusive "
            "(2x the budget), +50.0% inconclusive (4x the budget)"
        ]
    else:  # a speed-up: two measurements
        assert again == [
            "measured again once: -35.0% inconclusive, then -35.0% inconclusive (2x the budget)"
        ]


def test_a_fresh_process_follows_another_only_once_the_host_is_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fresh process met the slow state and the host stayed slow: no second fresh process."""
    from pytest_cudaperf.run import hoststate

    monkeypatch.setattr(hoststate, "POLL_S", 0.001)
    run = recorded_at_four_loops(tmp_path, state_wait=0.02)
    fresh = FreshStub(lambda: host_bound(6.0, ms=6.0))
    run.fresh = fresh  # type: ignore[assignment]
    test = new_test(run)
    slow = host_bound(6.0, ms=3.0)
    found = judging.judge_time(test, A, slow, "GPU X")
    assert found.verdict.kind is Kind.REGRESSION
    record, _ = path(test, probe=lambda: 0.1).confirm_fresh(found, slow)
    assert fresh.again == [False]
    assert record.verdict.kind is Kind.INCONCLUSIVE
    assert any("in vain" in d for d in test.state.details)


@pytest.mark.parametrize(
    ("launches", "fresh_too"), [(None, False), (1, False), (2, True), (6, True)]
)
def test_device_time_of_several_launches_regresses_only_in_a_fresh_process_too(
    tmp_path: Path, launches: int | None, fresh_too: bool
) -> None:
    """Device time behind the blocker of a call whose recorded breakdown queues several launches
    read +10% for a whole process: the fresh process, reading it as recorded, withdraws that.
    One launch a call, or a series recorded without a breakdown (None), keeps the verdict of its
    own process and starts none."""
    from pytest_cudaperf.breakdown.model import Breakdown, Kernel

    run = run_context(tmp_path)
    first = new_test(run)
    judged(first, 1.0)
    records = stored(first)
    if launches is not None:
        each = tuple(Kernel(f"k{i}", f"k{i}", 1.0, 100.0) for i in range(launches))
        breakdown = Breakdown("cuda", 5, 100.0 * launches, 100.0 * launches, each).to_json()
        records = [dataclasses.replace(r, breakdown=breakdown) for r in records]
    run.store.update("GPU X", records)
    fresh = FreshStub(lambda: measured(1.0))
    run.fresh = fresh  # type: ignore[assignment]
    test = new_test(run)
    slow = Measurement.from_samples(
        [1.1 * (1 + 0.001 * i) for i in range(-10, 11)],
        metric="device", cache="cold", device="cuda:0", blocking="spin",
    )  # fmt: skip
    found = judging.judge_time(test, A, slow, "GPU X")
    assert found.verdict.kind is Kind.REGRESSION
    record, _ = path(test).confirm_fresh(found, slow)
    if fresh_too:
        assert fresh.asked == [("t.py::a", {"CUDA_VISIBLE_DEVICES": "0"})]
        assert record.verdict.kind is not Kind.REGRESSION
        assert "not confirmed in a fresh process" in record.verdict.message
    else:
        assert fresh.asked == []
        assert record.verdict.kind is Kind.REGRESSION


@pytest.mark.parametrize(
    ("device", "visible", "env"),
    [
        ("cpu", None, {}),
        ("cuda:2", None, {"CUDA_VISIBLE_DEVICES": "2"}),
        ("cuda:1", "3,7", {"CUDA_VISIBLE_DEVICES": "7"}),
        ("cuda", "GPU-abc", {"CUDA_VISIBLE_DEVICES": "GPU-abc"}),
    ],
)
def test_a_fresh_process_is_shown_the_gpu_this_one_measured_on(
    device: str, visible: str | None, env: dict[str, str]
) -> None:
    environ = {"CUDA_VISIBLE_DEVICES": visible} if visible else {}
    assert judging.visible_device(device, environ) == env


def test_a_host_bound_failure_says_what_the_kernels_did(tmp_path: Path) -> None:
    import dataclasses

    from pytest_cudaperf.run.judged import _with_kernels
    from pytest_cudaperf.series import metric_of
    from pytest_cudaperf.verdict import Verdict

    assert metric_of("time:host") == "host"
    assert metric_of("time:kernels") == "device"
    test = new_test(run_context(tmp_path))
    m = host_bound(6.0)
    host = judging.judge_time(test, A, m, "GPU X")
    kernels = judging.judge_time(test, A, measured(0.1), "GPU X")

    def verdict(record: object, kind: Kind, ratio: float | None, message: str = "x") -> object:
        return dataclasses.replace(record, verdict=Verdict(kind, ratio, message=message))  # type: ignore[type-var]

    failed = verdict(host, Kind.REGRESSION, 1.5, "perf regression: median 6 reference loops")
    same = _with_kernels(failed, verdict(kernels, Kind.PASS, 1.003))  # type: ignore[arg-type]
    assert same.verdict.message.endswith("; kernels unchanged (+0.3% per call)")
    slower = _with_kernels(failed, verdict(kernels, Kind.REGRESSION, 1.12))  # type: ignore[arg-type]
    assert slower.verdict.message.endswith("; kernels regression (+12.0% per call)")
    passed = verdict(host, Kind.PASS, 1.01)
    assert _with_kernels(passed, verdict(kernels, Kind.PASS, 1.0)) is passed  # type: ignore[arg-type]


def test_a_host_bound_test_has_two_rows_in_the_table(tmp_path: Path) -> None:
    run = run_context(tmp_path)
    first = new_test(run)
    host = host_bound(4.0)
    add_time(first, judging.judge_time(first, A, host, "GPU X"), host)
    kernels = Measurement.from_samples([0.1] * 5, metric="kernels", device="cuda:1")
    add_time(first, judging.judge_time(first, A, kernels, "GPU X"), kernels)
    run.store.update("GPU X", stored(first))
    test = new_test(run)
    for m in (host_bound(4.4), kernels):
        add_time(test, judging.judge_time(test, A, m, "GPU X"), m)
    results = Results()
    results.add("t.py::a", "call", test.state.outcome(True, None).to_json())
    rows = {row[0]: row[1:4] for row in table_rows(results.report())}
    assert rows["t.py::a [host]"] == ["4.4 loops", "4 loops", "+10.0%"]
    assert rows["t.py::a [kernels]"] == ["100.00 µs", "100.00 µs", "+0.0%"]


def host_measured(loops: float) -> Measurement:
    """GPU code that synchronizes inside: its time in launch references, a tight CI."""
    return dataclasses.replace(
        Measurement.from_samples([loops * 0.1] * 21, metric="host", device="cuda:0"),
        in_loops=loops,
        in_loops_ci=(loops * 0.999, loops * 1.001),
        reference_ms=0.1,
    )


@pytest.mark.parametrize(
    ("perf", "settings", "kind", "tolerance"),
    [
        (None, {}, Kind.PASS, 0.10),  # the run's host tolerance, 10% by default
        (None, {"host_tolerance": 0.05}, Kind.REGRESSION, 0.05),
        (PerfOptions(tolerance=0.05), {}, Kind.REGRESSION, 0.05),  # the marker's wins
        (None, {"tolerance": 0.20}, Kind.PASS, 0.10),  # the device tolerance is not it
    ],
)
def test_a_host_bound_time_is_judged_at_the_host_tolerance(
    tmp_path: Path,
    perf: PerfOptions | None,
    settings: dict[str, float],
    kind: Kind,
    tolerance: float,
) -> None:
    run = run_context(tmp_path, **settings)
    for loops in (2.99, 3.0, 3.01):  # three processes: the series' own noise under 1%
        first = new_test(run, perf)
        m = host_measured(loops)
        add_time(first, judging.judge_time(first, A, m, "G"), m)
        run.store.update("G", stored(first))
    test = new_test(run, perf)
    found = judging.judge_time(test, A, host_measured(3.24), "G")  # +8%
    assert found.verdict.kind is kind
    assert found.verdict.tolerance == pytest.approx(tolerance)
    assert found.record.tolerance == pytest.approx(tolerance)  # the update's and drift's


def test_device_time_keeps_the_runs_tolerance_beside_the_host_one(tmp_path: Path) -> None:
    run = run_context(tmp_path, host_tolerance=0.5)
    first = new_test(run)
    judged(first, 1.0, "G")
    run.store.update("G", stored(first))
    found = judging.judge_time(new_test(run), A, measured(1.3), "G")  # within the host's 50%
    assert found.verdict.kind is Kind.REGRESSION
    assert found.verdict.tolerance == pytest.approx(0.05)
    assert found.record.tolerance == pytest.approx(0.05)


@pytest.mark.parametrize(("host_tolerance", "drifting"), [(0.05, True), (0.10, False)])
def test_drift_is_checked_at_the_tolerance_each_record_was_judged_at(
    tmp_path: Path, host_tolerance: float, drifting: bool
) -> None:
    run = run_context(tmp_path, host_tolerance=host_tolerance)
    for loops in (3.0, 3.06, 3.12, 3.18):  # +2% a recording, +6% in all
        test = new_test(run)
        m = host_measured(loops)
        add_time(test, judging.judge_time(test, A, m, "G"), m)
        run.store.update("G", stored(test))
    results = Results()
    results.add("t.py::a", "setup", None)
    results.add("t.py::a", "call", test.state.outcome(True, None).to_json())
    results.find_drift(run.store, tolerance=0.05)  # the run's: not what a host-bound time uses
    assert bool(results.drifting) is drifting


def profiled_kernels(
    monkeypatch: pytest.MonkeyPatch,
    times: Callable[[int], list[float]],
    sized: list[float | None] | None = None,
) -> tuple[list[tuple[int, bool]], Target]:
    """The profiler's kernel times replaced by ``times(calls)``: the passes asked for, as
    (calls, exact), and a profiled callable to judge; ``sized`` gets each pass's ``each_s``."""
    from pytest_cudaperf.breakdown import percall

    passes: list[tuple[int, bool]] = []

    def kernel_times(
        fn: object, device: str, calls: int = 10, exact: bool = False, each_s: float | None = None
    ) -> list[float]:
        passes.append((calls, exact))
        if sized is not None:
            sized.append(each_s)
        return times(calls)

    monkeypatch.setattr(percall, "kernel_times", kernel_times)
    return passes, Target(lambda: None, "cuda:0")


def test_kernels_that_differ_call_to_call_are_profiled_again_and_judged_by_the_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An auto-augment policy: each call draws other ops (0.05-0.35 ms of kernels), the same
    ones in every pass; a second pass makes the median as precise as the passes agree."""
    drawn = [0.05, 0.35, 0.12, 0.30, 0.08, 0.20, 0.25, 0.10, 0.15, 0.33]
    slower = {"by": 1.0}
    passes, profiled = profiled_kernels(
        monkeypatch, lambda calls: [t * slower["by"] for t in drawn[:calls]]
    )
    run = run_context(tmp_path)
    first = new_test(run)
    found = JudgedMeasurement(first, A, profiled, "GPU X").kernels()
    assert found is not None
    record, m = found
    assert passes == [(10, False), (10, True)]  # the second pass: the same ten calls
    assert m.n == 20
    assert m.seeded_passes == 2
    assert m.ci_ms == pytest.approx((m.median_ms, m.median_ms))
    add_time(first, record, m)
    run.store.update("GPU X", stored(first))
    slower["by"] = 1.10  # every drawn op 10% slower
    found = JudgedMeasurement(new_test(run), A, profiled, "GPU X").kernels()
    assert found is not None
    assert found[0].verdict.kind is Kind.REGRESSION  # at +10%, within a 5% tolerance's reach
    # such calls are confirmed in a fresh process too: there they drew their usual work
    unchanged = kernels_of_passes(drawn, list(drawn), "cuda:0")
    fresh = FreshStub(lambda: unchanged)
    run.fresh = fresh  # type: ignore[assignment]
    found = JudgedMeasurement(new_test(run), A, profiled, "GPU X").kernels()
    assert found is not None
    assert len(fresh.asked) == 1
    assert found[0].verdict.kind is Kind.INCONCLUSIVE
    assert "not confirmed in a fresh process" in found[0].verdict.message


def test_a_second_kernels_pass_that_reads_no_work_leaves_the_first_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Calls that differ call to call are profiled again; where that pass reads no work of
    their own (the profiler raised), the first pass is the kernels' time, not an error."""
    from pytest_cudaperf.breakdown import percall
    from pytest_cudaperf.breakdown.model import BreakdownUnavailable

    drawn = [0.05, 0.35, 0.12, 0.30, 0.08, 0.20, 0.25, 0.10, 0.15, 0.33]
    passes: list[bool] = []

    def kernel_times(
        fn: object, device: str, calls: int = 10, exact: bool = False, each_s: float | None = None
    ) -> list[float]:
        passes.append(exact)
        if exact:
            raise BreakdownUnavailable(percall.MOSTLY_IDLE)
        return drawn[:calls]

    monkeypatch.setattr(percall, "kernel_times", kernel_times)
    test = new_test(run_context(tmp_path))
    found = JudgedMeasurement(test, A, Target(lambda: None, "cuda:0"), "GPU X").kernels()
    assert found is not None
    record, m = found
    assert passes == [False, True]
    assert (m.n, m.seeded_passes) == (10, 1)
    assert record.verdict.kind is Kind.NEW


def test_the_kernels_pass_is_sized_by_the_measured_calls_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The measurement already timed the call: the profiled pass is sized by its median, not by
    a call of its own (a 0.1 s call would spend 0.1 s more a pass)."""
    sized: list[float | None] = []
    _, profiled = profiled_kernels(monkeypatch, lambda calls: [0.1] * calls, sized)
    test = new_test(run_context(tmp_path))
    assert JudgedMeasurement(test, A, profiled, "GPU X").kernels(each_ms=40.0) is not None
    assert sized == [pytest.approx(0.04)]
    sized.clear()
    assert JudgedMeasurement(test, A, profiled, "GPU X").kernels() is not None
    assert sized == [None]  # not measured: kernel_times times a call itself


def test_kernels_that_agree_call_to_call_are_profiled_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:

    slower = {"by": 1.0}
    passes, profiled = profiled_kernels(
        monkeypatch, lambda calls: [0.1 * slower["by"] * (1 + 0.001 * i) for i in range(calls)]
    )
    run = run_context(tmp_path)
    first = new_test(run)
    found = JudgedMeasurement(first, A, profiled, "GPU X").kernels()
    assert found is not None
    assert passes == [(10, False)]
    assert (found[1].n, found[1].seeded_passes) == (10, 1)
    add_time(first, *found)
    run.store.update("GPU X", stored(first))
    # a slower kernel is confirmed by profiling again and in a fresh process: small kernels
    # between the host's work can run slower for a whole process
    slower["by"] = 1.2
    again = [0.1 * 1.2 * (1 + 0.001 * i) for i in range(10)]
    fresh = FreshStub(lambda: kernels_measured(again, "cuda:0"))
    run.fresh = fresh  # type: ignore[assignment]
    found = JudgedMeasurement(new_test(run), A, profiled, "GPU X").kernels()
    assert found is not None
    assert len(fresh.asked) == 1
    assert found[0].verdict.kind is Kind.REGRESSION
    assert "confirmed in a fresh process" in found[0].verdict.message
    # where the fresh process profiles them at their recorded time, the change is not judged
    again = [0.1 * (1 + 0.001 * i) for i in range(10)]
    found = JudgedMeasurement(new_test(run), A, profiled, "GPU X").kernels()
    assert found is not None
    assert len(fresh.asked) == 2
    assert found[0].verdict.kind is Kind.INCONCLUSIVE
    assert "not confirmed in a fresh process" in found[0].verdict.message


@pytest.mark.parametrize("breakdown", ["auto", "always"])
@pytest.mark.parametrize(("host_loops", "kernels_lines"), [(3.0, True), (4.5, False)])
def test_kernels_that_regress_say_what_changed_once(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    host_loops: float,
    kernels_lines: bool,
    breakdown: str,
) -> None:
    """A host-bound call whose kernels regress while its host time passes: the kernels' verdict
    carries the diff against the breakdown stored with the host time. Where the host time is
    not a pass either, its verdict carries the diff and nothing is profiled twice. With
    ``--cudaperf-breakdown=always`` the host time's record also keeps the breakdown, from the
    profile that its diff reads where it has one."""
    from pytest_cudaperf.breakdown import explain
    from pytest_cudaperf.breakdown.explain import Explanation

    slower = {"by": 1.0}
    profiled_kernels(
        monkeypatch, lambda calls: [0.01 * slower["by"] * (1 + 0.001 * i) for i in range(calls)]
    )
    stored_breakdown = {"backend": "cuda", "entries": []}
    diffed: list[object] = []

    profiles: list[str] = []

    class Profiled:
        def to_json(self) -> dict[str, object]:
            return stored_breakdown

    def taken(fn: object, device: str) -> Profiled:
        profiles.append(device)
        return Profiled()

    def explained(stored: object, current: object) -> Explanation:
        diffed.append(stored)
        return Explanation(("kernels: 10.0 µs -> 12.0 µs per call (+2.0 µs, +20.0%)",))

    monkeypatch.setattr(explain, "taken", taken)
    monkeypatch.setattr(explain, "explain", explained)
    loops = {"now": 3.0}
    target = Scripted(lambda: None, "cuda:0", run_once=lambda budget: host_measured(loops["now"]))
    recording = new_test(run_context(tmp_path, update=True))
    JudgedMeasurement(recording, A, target, "GPU X").run()
    assert diffed == []  # an update stores the breakdown; it diffs nothing
    assert len(profiles) == 1
    run = run_context(tmp_path, breakdown=breakdown)
    run.store.update("GPU X", stored(recording))
    slower["by"], loops["now"] = 1.2, host_loops
    test = new_test(run)
    JudgedMeasurement(test, A, target, "GPU X").run()
    by_series = {r.series: r for r in test.state.records}
    host, kernels = by_series["time:host"], by_series["time:kernels"]
    assert kernels.verdict.kind is Kind.REGRESSION
    assert diffed == [stored_breakdown]  # once, against the host time's breakdown
    # one profile for the diff; with always, one more for the host time's where it passed
    assert len(profiles) == 1 + 1 + (breakdown == "always" and kernels_lines)
    assert (host.verdict.kind is Kind.PASS) is kernels_lines
    assert bool(kernels.explanation) is kernels_lines
    assert bool(host.explanation) is not kernels_lines
    assert host.record.breakdown == (stored_breakdown if breakdown == "always" else None)
    assert kernels.record.breakdown is None
    shown = [d for d in test.state.details if "kernels: 10.0 µs" in d]
    assert len(shown) == 1


def test_a_target_measures_on_its_backend_under_its_lock(tmp_path: Path) -> None:
    """The fixture's target: its backend reset and its lock held for each measurement; the
    path records what it measured, NEW without a baseline."""
    import contextlib

    from pytest_cudaperf.measure.cpu import CpuBackend
    from pytest_cudaperf.measure.timing import Budget
    from pytest_cudaperf.run.judged import Backends

    held: list[str] = []

    @contextlib.contextmanager
    def lock(within_s: float | None = None, /) -> Iterator[bool]:
        held.append("locked")
        yield True

    backend = CpuBackend(environ={})
    backends = Backends(None, backend)
    assert backends.get("cold") is backends.get("hot") is backend  # off CUDA: the one given
    target = Target(lambda: sum(range(100)), "cpu", lock, backends, profiled=False)
    test = new_test(run_context(tmp_path))
    m = JudgedMeasurement(test, A, target, "CPU X").run(Budget(warmup=0.0, max_time=0.02))
    assert held == ["locked"]
    assert m.metric == "wall"
    (record,) = test.state.records
    assert record.verdict.kind is Kind.NEW
    assert record.measurement == m


def test_a_targets_wait_for_the_host_takes_the_device_only_within_the_time_left(
    tmp_path: Path,
) -> None:
    """The host's state is probed with the device held through the target's lock, bounded by
    what the wait has left; where other processes hold the device past it, the wait ends there,
    unread (the lock yields False)."""
    import contextlib

    from pytest_cudaperf.run.hoststate import POLL_S

    asked: list[float | None] = []

    @contextlib.contextmanager
    def lock(within_s: float | None = None, /) -> Iterator[bool]:
        asked.append(within_s)
        yield False

    target = Target(lambda: None, "cuda:0", lock, probe=lambda: 0.065)
    wait = JudgedMeasurement(
        new_test(run_context(tmp_path, state_wait=2.0)), A, target, "GPU X"
    ).wait
    assert wait is not None
    waited = wait.until_back(0.130, 0.090)
    assert (waited.back, waited.cut) == (False, True)
    (bound,) = asked  # what is left of 2 s, a poll's room kept
    assert bound is not None
    assert 1.0 < bound <= 2.0 - POLL_S


class Peaks:
    """A peak-memory reader that needs no GPU: each call of ``peak`` reads ``size`` bytes."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.read: list[object] = []

    def peak(self, fn: Callable[[], object]) -> Any:
        from pytest_cudaperf.memory import PeakResult

        self.read.append(fn)
        return PeakResult(self.size, device="cuda:0")


def test_a_peak_is_read_once_and_judged_with_the_time_then_recorded_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A target whose backends read its peak: the peak is read once, after the first time is
    measured, and judged in the same call of the verdict (a re-measured time alone); the
    records and failures come in the order the path always gave them: the time's, then the
    peak's (its regression, then its budget)."""
    from pytest_cudaperf import verdict
    from pytest_cudaperf.measure.cpu import CpuBackend
    from pytest_cudaperf.measure.timing import Budget
    from pytest_cudaperf.run.judged import Backends

    asked: list[list[str]] = []
    judge_all = verdict.judge_all

    def counted(series: Any) -> list[verdict.Verdict]:
        asked.append([obs.unit for obs, *_ in series])
        return judge_all(series)

    monkeypatch.setattr(judging, "judge_all", counted)
    peaks = Peaks(1 << 20)
    backends = Backends(None, CpuBackend(environ={}), memory=peaks)
    assert backends.reads_peak
    assert not Backends(None, CpuBackend(environ={})).reads_peak  # the CPU's: no peak

    def fn() -> int:
        return sum(range(100))

    target = Target(fn, "cpu", backends=backends, profiled=False, peak=backends.reads_peak)
    budget = Budget(warmup=0.0, max_time=0.02)
    run = run_context(tmp_path)
    first = new_test(run)
    JudgedMeasurement(first, A, target, "CPU X").run(budget)
    assert peaks.read == [fn]
    assert [r.series for r in first.state.records] == ["time:wall", "memory:peak"]
    assert [r.verdict.kind for r in first.state.records] == [Kind.NEW, Kind.NEW]
    assert asked[0] == ["ms", "bytes"]
    run.store.update("CPU X", stored(first))
    peaks.size, peaks.read, asked[:] = 2 << 20, [], []
    test = new_test(run, PerfOptions(tolerance=10.0, max_peak=1 << 20))
    JudgedMeasurement(test, A, target, "CPU X").run(budget)
    assert peaks.read == [fn]  # once, however often the time was measured again
    assert asked[0] == ["ms", "bytes"]
    assert all(units == ["ms"] for units in asked[1:])
    time, peak = test.state.records
    assert (time.series, peak.series) == ("time:wall", "memory:peak")
    assert peak.peak is not None
    assert peak.peak.peak_bytes == 2 << 20
    assert peak.verdict.kind is Kind.REGRESSION
    kinds = [f.kind for f in test.state.failures]
    assert kinds[-2:] == [FailureKind.REGRESSION, FailureKind.MEMORY]
    assert test.state.failures[-2].message.startswith("memory regression: peak memory 2.0 MiB")


@pytest.mark.parametrize(
    ("remeasure", "first_ms", "again_ms", "kind", "taken"),
    [
        ("auto", 1.5, 1.0, Kind.INCONCLUSIVE, 2),  # the regression measured again: not confirmed
        ("off", 1.5, 1.0, Kind.REGRESSION, 1),  # measured once: it stands as it reads
        ("auto", 1.0, 1.0, Kind.PASS, 1),
        ("off", 1.0, 1.0, Kind.PASS, 1),
    ],
)
def test_remeasure_off_takes_each_verdict_as_its_one_measurement_reads(
    tmp_path: Path,
    remeasure: str,
    first_ms: float,
    again_ms: float,
    kind: Kind,
    taken: int,
) -> None:
    """``--cudaperf-remeasure=off`` (``cudaperf record``'s measuring runs, whose verdicts count
    for nothing): the callable is measured once, a regression is not measured again."""
    from pytest_cudaperf.measure.timing import Budget

    run = run_context(tmp_path, remeasure=remeasure)
    first = new_test(run)
    judged(first, 1.0)
    run.store.update("GPU X", stored(first))
    calls = iter([first_ms, again_ms])
    budgets: list[Budget] = []

    def run_once(budget: Budget) -> Measurement:
        budgets.append(budget)
        return measured(next(calls))

    test = new_test(run)
    path(test, run_once).run(Budget())
    (record,) = test.state.records
    assert record.verdict.kind is kind
    assert len(budgets) == taken


def test_remeasure_off_leaves_an_inconclusive_as_it_is(tmp_path: Path) -> None:
    """An INCONCLUSIVE is measured again (twice the budget) under auto, never under off."""
    from pytest_cudaperf.measure.timing import Budget

    def noisy(median: float) -> Measurement:  # a CI that straddles the tolerance
        return Measurement.from_samples(
            [median * f for f in (0.6, 0.8, 0.9, 1.0, 1.0, 1.0, 1.1, 1.2, 1.4)],
            metric="device",
            cache="cold",
        )

    taken: dict[str, list[Budget]] = {}
    for remeasure in ("auto", "off"):
        folder = tmp_path / remeasure
        folder.mkdir()
        run = run_context(folder, remeasure=remeasure)
        first = new_test(run)
        judged(first, 1.0)
        run.store.update("GPU X", stored(first))
        budgets = taken.setdefault(remeasure, [])

        def run_once(budget: Budget, budgets: list[Budget] = budgets) -> Measurement:
            budgets.append(budget)
            return noisy(1.2)

        test = new_test(run)
        path(test, run_once).run(Budget(max_time=0.5))
        (record,) = test.state.records
        assert record.verdict.kind is Kind.INCONCLUSIVE, record.verdict.message
    assert [b.max_time for b in taken["auto"]] == [0.5, 1.0, 2.0]
    assert [b.max_time for b in taken["off"]] == [0.5]


@pytest.mark.parametrize(("metric", "series", "again"), [
    ("wall", "time:wall", False),  # the series' noise holds it: not measured again
    ("device", "time:device/cold", True),  # measured again, REMEASURE times
])  # fmt: skip
def test_a_host_clock_verdict_that_only_the_series_noise_holds_is_not_measured_again(
    tmp_path: Path, metric: str, series: str, again: bool
) -> None:
    """+19% against a series that moves ±60%: INCONCLUSIVE, the series cannot support the 5%
    asked for. A more precise measurement of that median cannot decide it; a host clock's
    (the CPU's) is left as it reads, a device time is still measured again."""
    from pytest_cudaperf.run import judged as judged_path

    run = run_context(tmp_path)
    recording = Recording("2026-11-23", 1.0, 0.6, 20, ci=(1.0, 1.0))
    run.store.update("GPU X", [Record(A, series, "GPU X", "ms", recording, {})])
    budgets: list[object] = []

    def run_once(budget: object) -> Measurement:
        budgets.append(budget)
        samples = [1.19 * (1 + 0.001 * i) for i in range(-10, 11)]
        cache = "cold" if metric == "device" else "n/a"
        return Measurement.from_samples(samples, metric=metric, cache=cache)

    test = new_test(run)
    path(test, run_once).run(judged_path.budget_for(run.settings, PerfOptions()))
    (record,) = test.state.records
    assert record.series == series
    assert record.verdict.kind is Kind.INCONCLUSIVE
    assert record.verdict.series_bound
    assert len(budgets) == 1 + (judging.REMEASURE if again else 0)


@pytest.mark.parametrize(("spread", "high", "taken"), [
    (0.02, "-1.7%", 2),  # its CI rules out a regression: measured again once
    (0.10, "+24.8%", 3),  # its CI reaches past the threshold: REMEASURE times
])  # fmt: skip
def test_an_undecided_speed_up_is_measured_again_once_where_its_ci_rules_out_a_regression(
    tmp_path: Path, spread: float, high: str, taken: int
) -> None:
    """-20% against a series that moves ±20%: INCONCLUSIVE, its CI across the speed-up's
    threshold. Where the CI's high end lies within the regression threshold, another
    measurement can say PASS or IMPROVED and never fail: it is measured again once; a CI that
    reaches past it is measured again as any INCONCLUSIVE is."""
    from pytest_cudaperf.run import judged as judged_path

    run = run_context(tmp_path)
    recording = Recording("2026-11-23", 1.0, 0.2, 20, ci=(1.0, 1.0))
    run.store.update("GPU X", [Record(A, "time:device/cold", "GPU X", "ms", recording, {})])
    budgets: list[object] = []

    def run_once(budget: object) -> Measurement:
        budgets.append(budget)
        samples = [0.8 * (1 + spread * i) for i in range(-10, 11)]
        return Measurement.from_samples(samples, metric="device", cache="cold")

    test = new_test(run)
    path(test, run_once).run(judged_path.budget_for(run.settings, PerfOptions()))
    (record,) = test.state.records
    assert record.verdict.kind is Kind.INCONCLUSIVE
    assert "(-20.0%, 95% CI -" in record.verdict.message
    assert f"…{high}, tolerance" in record.verdict.message
    assert record.verdict.speed_up_only is (taken == 2)
    assert len(budgets) == taken
