"""After a time is judged: its speed of light on the record, the min_peak gate, the energy
series and max_joules, and how the reports show them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_cudaperf.keys import SeriesKey
from pytest_cudaperf.locks import LockRegistry
from pytest_cudaperf.markers import Marks, PerfOptions
from pytest_cudaperf.measure.ceilings import MeasuredCeilings
from pytest_cudaperf.measure.energy import Energy, Resolution
from pytest_cudaperf.measure.timing import Measurement
from pytest_cudaperf.report.document import Report
from pytest_cudaperf.report.github import github_summary
from pytest_cudaperf.report.html import render_html
from pytest_cudaperf.report.junit import junit_properties
from pytest_cudaperf.report.model import FailureKind
from pytest_cudaperf.report.terminal import header_of, render_table, summary_line, table_rows
from pytest_cudaperf.run import judging
from pytest_cudaperf.run.context import ItemState, RunContext, TestContext
from pytest_cudaperf.run.judged import add_time
from pytest_cudaperf.run.results import Results
from pytest_cudaperf.run.speed_of_light import (
    Declared,
    Measured,
    after_measurement,
    counted_work,
    record_energy,
)
from pytest_cudaperf.settings import Settings
from pytest_cudaperf.store.baselines import BaselineStore
from pytest_cudaperf.verdict import Kind

torch = pytest.importorskip("torch")

A = SeriesKey("t.py::a")
H100 = "NVIDIA H100 80GB HBM3"


def run_context(tmp_path: Path, **settings: object) -> RunContext:
    return RunContext(
        settings=Settings(**settings),  # type: ignore[arg-type]
        store=BaselineStore.load(tmp_path),
        locks=LockRegistry(tmp_path / "locks"),
        root=tmp_path,
        baseline_dir=tmp_path,
        output_dir=tmp_path,
        # a device whose copy reaches 2.95 TB/s and whose fp32 GEMM 50 TFLOP/s
        ceilings=MeasuredCeilings(lambda device: 2.95e12, lambda device, klass: 50e12),
    )


def timed(test: TestContext, ms: float, device: str = "cuda:0") -> Measurement:
    m = Measurement.from_samples(
        [ms * (1 + 0.001 * i) for i in range(-10, 11)], metric="device", device=device
    )
    add_time(test, judging.judge_time(test, A, m, H100), m)
    return m


def outcome_report(test: TestContext) -> Report:
    results = Results()
    results.add("t.py::a", "call", test.state.outcome(True, ("t.py", 7)).to_json())
    return Report.from_json(json.loads(json.dumps(results.report("r").to_json())))


SRC, DST = torch.empty(1 << 20), torch.empty(1 << 20)  # 4 MiB each


def copy() -> None:
    DST.copy_(SRC)


def test_the_speed_of_light_rides_on_the_time_and_shows_in_every_report(tmp_path: Path) -> None:
    test = TestContext(run_context(tmp_path, roofline=True), ItemState("t.py::a"), Marks())
    m = timed(test, 0.004)  # 8 MiB moved in 4 µs: 2.10 TB/s
    after_measurement(test, A, Measured(copy, "cuda:0", H100), m, Declared())
    roof = test.state.records[0].roofline
    assert roof is not None
    assert (roof.work.bytes, roof.bound) == (2 * SRC.nbytes, "memory")
    assert roof.fraction("measured") == pytest.approx(2 * SRC.nbytes / 4e-6 / 2.95e12, rel=0.01)
    assert test.state.details == [
        "speed of light: 2.1 TB/s: 71% of measured 2.95 TB/s, 63% of datasheet 3.35 TB/s "
        "(memory-bound, 0 FLOP/B, counted)"
    ]
    assert test.state.failures == []
    report = outcome_report(test)
    assert header_of(report)[-1] == "speed of light"
    assert table_rows(report)[0][-1] == "2.1 TB/s 71% mem"
    assert render_table(table_rows(report), header_of(report))[0].endswith("speed of light")
    assert ("cudaperf time:device sol", test.state.details[0][len("speed of light: ") :]) in (
        junit_properties(report.tests[0])
    )
    assert "speed of light: 2.1 TB/s: 71% of measured" in render_html(report)
    summary = github_summary(report).splitlines()
    assert summary[2].endswith("| speed of light |")
    assert summary[4].endswith("| 2.1 TB/s 71% mem |")


def test_min_peak_fails_the_test_alone_with_rate_ceiling_and_bound(tmp_path: Path) -> None:
    perf = PerfOptions(min_peak=0.8)
    test = TestContext(run_context(tmp_path), ItemState("t.py::a"), Marks(perf=perf))
    m = timed(test, 0.004)
    after_measurement(test, A, Measured(copy, "cuda:0", H100), m, Declared())
    assert [(f.kind, f.message) for f in test.state.failures] == [
        (
            FailureKind.BUDGET,
            "speed of light: 2.1 TB/s is 71% of the measured 2.95 TB/s (memory-bound, "
            "0 FLOP/B) < min_peak 80%",
        )
    ]


def test_nothing_is_counted_unless_asked(tmp_path: Path) -> None:
    test = TestContext(run_context(tmp_path), ItemState("t.py::a"), Marks(perf=PerfOptions()))
    m = timed(test, 0.004)
    ran = []
    after_measurement(test, A, Measured(lambda: ran.append(1), "cuda:0", H100), m, Declared())
    assert (ran, test.state.details, test.state.records[0].roofline) == ([], [], None)
    assert "speed of light" not in header_of(outcome_report(test))


def test_declared_work_wins_is_labelled_and_needs_no_call() -> None:
    work = counted_work(lambda: pytest.fail("not called"), Declared(2e9, 1 << 20))
    assert (work.flops, work.bytes, work.declared) == (2 * 10**9, 1 << 20, ("flops", "bytes"))


def test_on_the_cpu_the_rates_are_reported_and_min_peak_says_it_was_not_checked(
    tmp_path: Path,
) -> None:
    perf = PerfOptions(min_peak=0.5)
    test = TestContext(run_context(tmp_path), ItemState("t.py::a"), Marks(perf=perf))
    m = timed(test, 4.0, device="cpu")
    after_measurement(test, A, Measured(copy, "cpu", "CPU x"), m, Declared())
    assert test.state.details == [
        "speed of light: 2.1 GB/s (memory-bound, 0 FLOP/B, counted)",
        "min_peak not checked: no measured ceiling on cpu",
    ]
    assert test.state.failures == []


WINDOW = Energy(0.30, 400.0, 3000, 0.9, Resolution(0.005, 1))


def test_energy_is_a_series_judged_like_a_time_and_max_joules_limits_it(tmp_path: Path) -> None:
    run = run_context(tmp_path)
    first = TestContext(run, ItemState("t.py::a"), Marks())
    record_energy(first, A, WINDOW, H100)
    assert [(r.series, r.unit, r.value, r.verdict.kind) for r in first.state.records] == [
        ("energy:call", "J", 0.30, Kind.NEW)
    ]
    run.store.update(H100, [r.record for r in first.state.records])
    twice = Energy(0.60, 800.0, 3000, 0.9, Resolution(0.005, 1))
    test = TestContext(run, ItemState("t.py::a"), Marks(perf=PerfOptions(max_joules=0.45)))
    record_energy(test, A, twice, H100)
    kinds = [f.kind for f in test.state.failures]
    assert kinds == [FailureKind.REGRESSION, FailureKind.BUDGET]
    assert test.state.failures[0].message.startswith("energy perf regression: median 0.6 J")
    assert test.state.failures[1].message == (
        "energy: 600 mJ per call > max_joules 0.45 J (800 W over 3000 calls)"
    )
    timed(test, 1.0)
    report = outcome_report(test)
    assert header_of(report)[-1] == "energy/call"
    assert table_rows(report)[0][-1] == "600 mJ REGRESSION"
    assert summary_line(report.counts()).startswith("cudaperf: 2 measured (1 time, 1 energy)")
    assert "600 mJ/call at 800 W" in render_html(report)


def test_a_window_that_cannot_resolve_the_counter_gives_its_reason_not_a_figure(
    tmp_path: Path,
) -> None:
    perf = PerfOptions(max_joules=1.0)
    test = TestContext(run_context(tmp_path), ItemState("t.py::a"), Marks(perf=perf))
    record_energy(test, A, "energy not measured: a 50 ms window is too short", H100)
    assert test.state.records == []
    assert test.state.failures == []
    assert test.state.details == [
        "energy not measured: a 50 ms window is too short; max_joules 1 J not checked"
    ]


def test_a_call_that_fails_under_counting_says_why_and_fails_nothing(tmp_path: Path) -> None:
    test = TestContext(run_context(tmp_path, roofline=True), ItemState("t.py::a"), Marks())
    m = timed(test, 0.004)

    def refuses() -> None:
        raise RuntimeError("no dispatch here")

    after_measurement(test, A, Measured(refuses, "cuda:0", H100), m, Declared())
    assert test.state.details == [
        "speed of light not counted: the call failed under torch's dispatch mode (RuntimeError: "
        "no dispatch here); declare flops= and bytes= to skip counting"
    ]
    assert (test.state.failures, test.state.records[0].roofline) == ([], None)


def test_a_call_with_nothing_counted_is_told_to_declare_its_work(tmp_path: Path) -> None:
    perf = PerfOptions(min_peak=0.5)
    run = run_context(tmp_path)
    run.ceilings = MeasuredCeilings(lambda device: None, lambda device, klass: None)  # no room
    test = TestContext(run, ItemState("t.py::a"), Marks(perf=perf))
    m = timed(test, 0.004)
    after_measurement(test, A, Measured(lambda: None, "cuda:0", H100), m, Declared())
    assert test.state.details[1:] == [
        "nothing counted: the call dispatched no torch op that reads, writes or computes (a "
        "Triton or custom kernel?); declare flops= and bytes=",
        "min_peak not checked: no measured ceiling for its bound",
    ]
    assert test.state.failures == []


def test_max_joules_without_an_energy_counter_checks_nothing_and_says_why(tmp_path: Path) -> None:
    perf = PerfOptions(max_joules=1.0)
    test = TestContext(run_context(tmp_path), ItemState("t.py::a"), Marks(perf=perf))
    m = timed(test, 0.004)
    after_measurement(test, A, Measured(copy, "cuda:0", H100, uuid=""), m, Declared())
    (line,) = test.state.details  # no NVML here, or no driver: no counter
    assert line.startswith("energy not measured: ")
    assert line.endswith("; max_joules 1 J not checked")
    assert [r.series for r in test.state.records] == ["time:device"]
    assert test.state.failures == []
