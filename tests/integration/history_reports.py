"""Run reports for the history's tests, built without measuring: the store keeps what a report
gives it."""

from __future__ import annotations

import hashlib
import random
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


def fill(
    target: str, values: Sequence[float], nodeid: str = "t.py::s", commits: Sequence[str] = ()
) -> None:
    """One run per value of ``nodeid``, at ``commits`` (else c00, c01, …) a day apart."""
    with open_store(target) as store:
        for i, value in enumerate(values):
            report = run_report(f"{nodeid} run{i}", {nodeid: value})
            commit = commits[i] if commits else f"c{i:02d}"
            store.add_run(report, Source(commit), f"2026-11-{i + 1:02d}T00:00:00+00:00")


def shas(n: int) -> list[str]:
    """``n`` commit shas of 40 hex digits, the ``i``-th starting with ``c0de`` and ``i`` in two
    digits (``c0de00…``, ``c0de01…``): ``c0de`` names all of them, ``c0de1`` ten."""
    return [f"c0de{i:02d}" + hashlib.sha1(str(i).encode()).hexdigest()[6:] for i in range(n)]


def stepped_pair(target: str, commits: Sequence[str]) -> None:
    """Two series over the runs at ``commits`` (30), each 20% slower from one run on:
    ``t.py::early`` from run 6, ``t.py::late`` from run 20."""
    rng = random.Random(4)
    for nodeid, step in (("t.py::early", 6), ("t.py::late", 20)):
        levels = [(1.2 if i >= step else 1.0) * rng.gauss(1, 0.005) for i in range(len(commits))]
        fill(target, levels, nodeid, commits)
