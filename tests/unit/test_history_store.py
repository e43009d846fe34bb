"""The run history's SQLite store, its regressions and the run's source."""

from __future__ import annotations

import random
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_cudaperf.history.regressions import regressions
from pytest_cudaperf.history.source import describe
from pytest_cudaperf.history.store import (
    HistoryError,
    Source,
    open_store,
    report_source,
)
from pytest_cudaperf.keys import SeriesKey
from pytest_cudaperf.locks import LockRegistry
from pytest_cudaperf.markers import Marks
from pytest_cudaperf.measure.timing import Measurement
from pytest_cudaperf.report.document import Report
from pytest_cudaperf.run import judging
from pytest_cudaperf.run.context import ItemState, RunContext, TestContext
from pytest_cudaperf.run.results import Results
from pytest_cudaperf.settings import Settings
from pytest_cudaperf.store.baselines import BaselineStore


def report(tmp_path: Path, run_id: str, medians: dict[str, float]) -> Report:
    """A run's report: each test measured at its median (device time, tight samples)."""
    run = RunContext(
        settings=Settings(),
        store=BaselineStore.load(tmp_path / "baselines"),
        locks=LockRegistry(tmp_path / "locks"),
        root=tmp_path,
        baseline_dir=tmp_path,
        output_dir=tmp_path,
    )
    results = Results()
    for nodeid, median in medians.items():
        test = TestContext(run, ItemState(nodeid), Marks())
        m = Measurement.from_samples(
            [median * (1 + 0.001 * i) for i in range(-5, 6)], metric="device", cache="cold"
        )
        judging.add_time(test, judging.judge_time(test, SeriesKey(nodeid), m, "GPU X"), m)
        results.add(nodeid, "call", test.state.outcome(True, None).to_json())
    return results.report(run_id=run_id)


def test_a_run_is_added_once_and_its_series_read_back_in_order(tmp_path: Path) -> None:
    db = tmp_path / "history" / "runs.sqlite"
    with open_store(db) as store:
        first = report(tmp_path, "r1", {"t.py::a": 1.0, "t.py::b": 2.0})
        assert store.add_run(first, Source("c1", False, "main"), "2026-11-01T00:00:00+00:00")
        assert not store.add_run(first, Source("c1"), "2026-11-01T00:00:00+00:00")
        second = report(tmp_path, "r2", {"t.py::a": 1.5})
        assert store.add_run(second, Source("c2", True, "main"), "2026-11-02T00:00:00+00:00")
        assert store.runs() == 2
        ident = ("GPU X", "t.py::a", "", "time:device/cold")
        assert ident in store.series_ids()
        points = store.points(ident)
        assert [(p.commit, p.value, p.unit) for p in points] == [
            ("c1", pytest.approx(1.0), "ms"),
            ("c2", pytest.approx(1.5), "ms"),
        ]
        assert [p.commit for p in store.points(ident, since="2026-11-02")] == ["c2"]


def test_a_step_is_named_by_its_last_good_and_first_bad_commit(tmp_path: Path) -> None:
    rng = random.Random(7)
    with open_store(tmp_path / "h.sqlite") as store:
        for i in range(20):
            slow = 1.10 if i >= 12 else 1.0
            medians = {
                "t.py::stepped": slow * rng.gauss(1.0, 0.005),
                "t.py::flat": rng.gauss(2.0, 0.01),
            }
            run = report(tmp_path, f"run{i}", medians)
            store.add_run(run, Source(f"commit{i:02d}"), f"2026-11-{i + 1:02d}T00:00:00+00:00")
        (found,) = regressions(store)
    assert found.series == ("GPU X", "t.py::stepped", "", "time:device/cold")
    assert (found.last_good, found.first_bad) == ("commit11", "commit12")
    assert found.change == pytest.approx(0.10, abs=0.02)
    assert found.date.startswith("2026-11-13")


def test_a_history_from_a_newer_version_or_not_a_history_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    open_store(db).close()
    with sqlite3.connect(db) as raw:
        raw.execute("UPDATE meta SET value = '99' WHERE key = 'schema'")
    with pytest.raises(HistoryError, match="schema 99 was written by a newer pytest-cudaperf"):
        open_store(db)
    junk = tmp_path / "junk.sqlite"
    junk.write_text("not a database at all, just text " * 100)
    with pytest.raises(HistoryError, match="not a cudaperf history"):
        open_store(junk)
    with pytest.raises(HistoryError, match="is a folder"):
        open_store(tmp_path)


WRITER = """
import sys
from pathlib import Path
sys.path.insert(0, {tests!r})
from test_history_store import report
from pytest_cudaperf.history.store import Source, open_store

tmp = Path({tmp!r})
medians = {{f"t.py::test_{{i}}": 1.0 + i for i in range(200)}}
with open_store(tmp / "h.sqlite") as store:
    for i in range(10_000):
        store.add_run(report(tmp, f"run{{i}}", medians), Source(str(i)), f"2026-11-01T{{i}}")
        print(i, flush=True)
"""


def test_a_writer_killed_mid_run_leaves_every_earlier_run(tmp_path: Path) -> None:
    script = WRITER.format(tests=str(Path(__file__).parent), tmp=str(tmp_path))
    child = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    done = -1
    deadline = time.monotonic() + 60
    while done < 3 and time.monotonic() < deadline:
        line = child.stdout.readline()
        if not line:
            break
        done = int(line.split()[0])
    child.kill()  # SIGKILL, most likely inside the next run's transaction
    child.wait()
    assert done >= 3, child.stderr.read() if child.stderr else ""
    with open_store(tmp_path / "h.sqlite") as store:
        assert store.runs() >= done + 1
        assert store._db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        per_run = store._db.execute(
            "SELECT count(*) FROM results GROUP BY run ORDER BY run"
        ).fetchall()
        assert {n for (n,) in per_run} == {200}  # no run half written


def test_the_source_is_the_commit_the_dirty_flag_and_the_branch(tmp_path: Path) -> None:
    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", *args], cwd=tmp_path, capture_output=True, text=True, check=True
        )
        return done.stdout.strip()

    git("init", "-q", "-b", "work")
    (tmp_path / "f.txt").write_text("one\n")
    git("add", "f.txt")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    head = git("rev-parse", "HEAD")
    assert describe(tmp_path, {}) == Source(head, False, "work")
    (tmp_path / "f.txt").write_text("two\n")
    assert describe(tmp_path, {}).dirty
    ci = {"GITHUB_SHA": "abc", "GITHUB_REF_NAME": "main"}
    assert describe(Path("/"), ci) == Source("abc", False, "main")


def test_a_report_carries_its_source_for_a_later_ingest() -> None:
    env = {"source": {"commit": "c9", "dirty": True, "branch": "b"}, "recorded_at": "2026"}
    assert report_source(Report(environment=env)) == (Source("c9", True, "b"), "2026")
    assert report_source(Report()) == (Source(), "")
