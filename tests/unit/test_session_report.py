from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_cudaperf.baselines import BaselineStore, Record
from pytest_cudaperf.measure.timing import Measurement
from pytest_cudaperf.report import (
    github_annotations,
    github_summary,
    json_document,
    render_html,
    render_table,
    table_rows,
)
from pytest_cudaperf.session import ItemState, Judge, Results, failure_text, record_key
from pytest_cudaperf.settings import Settings


def measured(median: float) -> Measurement:
    return Measurement.from_samples(
        [median * (1 + 0.001 * i) for i in range(-10, 11)], metric="device", cache="cold"
    )


def judged(
    test_side: Judge,
    state: ItemState,
    median: float,
    perf: object = None,
    device_class: str = "GPU X",
) -> None:
    """Measure-and-record as cuda_timer does, for a test called t.py::a."""
    m = measured(median)
    record, verdict = test_side.judge_time("t.py::a", m, perf, device_class)  # type: ignore[arg-type]
    test_side.add_time(state, record, verdict, m, perf)  # type: ignore[arg-type]


def side(tmp_path: Path, **settings: object) -> Judge:
    return Judge(Settings(**settings), BaselineStore.load(tmp_path))  # type: ignore[arg-type]


def test_record_keys() -> None:
    state = ItemState()
    assert record_key("t.py::a", None, state) == "t.py::a"
    assert record_key("t.py::a", None, state) == "t.py::a#2"
    assert record_key("t.py::a", "fwd", state) == "t.py::a#fwd"
    assert record_key("t.py::a", "fwd", state) == "t.py::a#fwd-2"


def test_payload_round_trips_as_json_and_feeds_the_update(tmp_path: Path) -> None:
    test_side = side(tmp_path)
    state = ItemState()
    judged(test_side, state, 1.0)
    payload = test_side.report_payload(state, "t.py::a", body_passed=True)
    assert payload is not None
    wire = json.loads(json.dumps(payload))  # what xdist carries
    assert wire == payload
    results = Results()
    results.add("t.py::a", "setup", None)
    results.add("t.py::a", "call", wire)
    assert results.counts()["new"] == 1
    results.update_store(test_side.store, prune=False, root=tmp_path)
    assert BaselineStore.load(tmp_path).keys("GPU X") == ["t.py::a"]


def test_regression_and_budget_become_failure_lines(tmp_path: Path) -> None:
    test_side = side(tmp_path)
    from pytest_cudaperf.markers import PerfOptions

    first = measured(1.0)
    record, _ = test_side.judge_time("t.py::a", first, None, "GPU X")
    test_side.store.update("GPU X", [record])
    state = ItemState()
    slow = measured(1.5)
    perf = PerfOptions(max_ms=1.2)
    record, verdict = test_side.judge_time("t.py::a", slow, perf, "GPU X")
    test_side.add_time(state, record, verdict, slow, perf)
    kinds = [kind for kind, _ in state.failures]
    assert kinds == ["regression", "budget"]
    text = failure_text(state)
    assert text.splitlines()[0].startswith("perf regression: median 1.500 ms vs baseline 1.000 ms")
    assert text.splitlines()[1].startswith("perf: a median 1.500 ms > max_ms 1.2 ms")


def test_update_mode_does_not_fail_regressions(tmp_path: Path) -> None:
    test_side = side(tmp_path, update=True)
    record, _ = test_side.judge_time("t.py::a", measured(1.0), None, "G")
    test_side.store.update("G", [record])
    state = ItemState()
    record, verdict = test_side.judge_time("t.py::a", measured(2.0), None, "G")
    test_side.add_time(state, record, verdict, measured(2.0), None)
    assert state.failures == []


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


def test_reports_render(tmp_path: Path) -> None:
    test_side = side(tmp_path)
    state = ItemState()
    judged(test_side, state, 0.0123)
    state.failures.append(("budget", "perf: a median 12.30 µs > max_ms 0.001 ms (x)"))
    payload = test_side.report_payload(state, "t.py::a", True)
    assert payload is not None
    payload["location"] = ["t.py", 7]
    results = Results()
    results.add("t.py::a", "call", payload)
    rows = table_rows(results)
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
    assert "| t.py::a | 12.30 µs |" in github_summary(results)
    assert github_annotations(results) == [
        "::error file=t.py,line=7::perf: a median 12.30 µs > max_ms 0.001 ms (x)"
    ]
    document = json_document(results, {"torch": "x"}, "run1")
    html_text = render_html(json.loads(json.dumps(document)))
    assert html_text.startswith("<!doctype html>")
    assert "<svg" in html_text
    assert "http" not in html_text.split("<body>", 1)[1]


def test_peak_regression_and_budget_show_in_table_and_failures(tmp_path: Path) -> None:
    from pytest_cudaperf.memory import PeakResult

    test_side = side(tmp_path)
    first = ItemState()
    test_side.add_peak(first, "t.py::a", PeakResult(1 << 20, device="cuda:0"), "GPU X", None)
    test_side.store.update("GPU X", [Record.from_dict(r) for r in first.records])
    state = ItemState()
    judged(test_side, state, 1.0)
    test_side.add_peak(state, "t.py::a", PeakResult(2 << 20, device="cuda:0"), "GPU X", 1 << 20)
    assert [kind for kind, _ in state.failures] == ["regression", "memory"]
    assert state.failures[0][1].startswith("memory regression: peak memory 2.0 MiB vs baseline")
    assert state.failures[1][1] == (
        "memory: peak 2.0 MiB > max_peak 1.0 MiB (requested bytes on cuda:0)"
    )
    test_side.check_peak(state, "t.py::a", None, 1)  # no peak read (CPU): nothing to check
    assert len(state.failures) == 2
    results = Results()
    results.add("t.py::a", "call", test_side.report_payload(state, "t.py::a", True))
    assert table_rows(results)[0][-1] == "2.0 MiB REGRESSION"
    # one row, two judged records: the summary says which is which
    assert results.summary_line().startswith(
        "cudaperf: 2 measured (1 time, 1 peak memory), 1 regression, 0 improved, 1 new"
    )


def test_sticky_errors_in_a_body_poison_the_process(tmp_path: Path) -> None:
    test_side = side(tmp_path)
    test_side.note_error("t.py::a", ValueError("device-side assert triggered"))
    test_side.note_error("t.py::b", RuntimeError("CUDA out of memory"))
    assert test_side.faults.message() is None
    test_side.note_error("t.py::c", RuntimeError("CUDA error: device-side assert triggered\nmore"))
    assert test_side.faults.message() == (
        "CUDA context unusable since t.py::c: CUDA error: device-side assert triggered"
    )


def test_table_shows_a_threshold_raised_by_noise() -> None:
    from pytest_cudaperf.verdict import judge

    base = {"value": 1.0, "noise": 0.4, "env": {}}
    record = {
        "key": "t.py::noisy",
        "unit": "ms",
        "value": 1.19,
        "series": "time:wall",
        "verdict": judge(1.19, 0.2, "ms", base, 0.05, "CPU x", {}).to_dict(),
        "others": [],
    }
    results = Results()
    results.add("t.py::noisy", "call", {"records": [record]})
    assert table_rows(results)[0][5] == "INCONCLUSIVE (t=40%)"


def test_budget_for_takes_arguments_then_the_marker_then_the_settings(tmp_path: Path) -> None:
    from pytest_cudaperf.fixtures import budget_for
    from pytest_cudaperf.markers import PerfOptions

    test_side = side(tmp_path, max_time=2.0, rounds=4)
    plain = budget_for(test_side, PerfOptions())
    assert (plain.max_time, plain.rounds, plain.warmup) == (2.0, 4, 0.05)
    marked = budget_for(test_side, PerfOptions(max_time=0.5, rounds=1, tolerance=0.01))
    assert (marked.max_time, marked.rounds) == (0.5, 1)
    assert marked.precision == pytest.approx(0.001)
    assert budget_for(test_side, PerfOptions(max_time=0.5), max_time=0.1).max_time == 0.1
