"""Run reports for the history's tests, built without measuring: the store keeps what a report
gives it."""

from __future__ import annotations

from collections.abc import Sequence

from pytest_cudaperf.history.store import Source, open_store
from pytest_cudaperf.keys import SeriesKey
from pytest_cudaperf.report.document import Report
from pytest_cudaperf.report.model import JudgedRecord, TestOutcome
from pytest_cudaperf.series import Record, Recording
from pytest_cudaperf.verdict import Kind, Verdict

#: the series ``fill`` writes
IDENT = ("GPU X", "t.py::s", "", "time:device/cold")


def judged(nodeid: str, value: float, ci: tuple[float, float] | None = None) -> JudgedRecord:
    recording = Recording(date="2026-11-01", median=value, noise=0.01, n=30, sm_mhz=1755.0, ci=ci)
    record = Record(SeriesKey(nodeid), "time:device/cold", "GPU X", "ms", recording, {}, None)
    return JudgedRecord(record, Verdict(Kind.PASS))


def run_report(run_id: str, values: dict[str, float], commit: str = "", when: str = "") -> Report:
    """One run: each test's time (its interval ±1%), from ``commit``, recorded ``when``."""
    tests = tuple(TestOutcome(n, (judged(n, v, (v * 0.99, v * 1.01)),)) for n, v in values.items())
    environment = {"source": {"commit": commit, "dirty": False, "branch": "main"}}
    return Report(tests=tests, run_id=run_id, environment={**environment, "recorded_at": when})


def fill(target: str, values: Sequence[float], nodeid: str = "t.py::s") -> None:
    """One run per value of ``nodeid``, at commits c00, c01, … a day apart."""
    with open_store(target) as store:
        for i, value in enumerate(values):
            report = run_report(f"{nodeid} run{i}", {nodeid: value})
            store.add_run(report, Source(f"c{i:02d}"), f"2026-11-{i + 1:02d}T00:00:00+00:00")
