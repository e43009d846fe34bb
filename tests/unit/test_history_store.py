"""The run history's SQLite store (what it keeps per series, its migration, acks), its
regressions (steps, drifts, cycle space, acknowledged ones) and the run's source."""

from __future__ import annotations

import dataclasses
import random
import re
import sqlite3
import subprocess
import sys
import time
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path

import pytest

from pytest_cudaperf.history.changepoints import change_points
from pytest_cudaperf.history.regressions import DRIFT, STEP, regressions
from pytest_cudaperf.history.source import describe
from pytest_cudaperf.history.store import (
    SCHEMA,
    Ack,
    Confirmation,
    HistoryError,
    HistoryStore,
    Source,
    open_store,
    report_source,
)
from pytest_cudaperf.keys import SeriesKey
from pytest_cudaperf.locks import LockRegistry
from pytest_cudaperf.markers import Marks
from pytest_cudaperf.measure.measurement import Measurement
from pytest_cudaperf.report.document import Report
from pytest_cudaperf.report.model import JudgedRecord, TestOutcome
from pytest_cudaperf.run import judging
from pytest_cudaperf.run.context import ItemState, RunContext, TestContext
from pytest_cudaperf.run.judged import add_time
from pytest_cudaperf.run.results import Results
from pytest_cudaperf.series import Record, Recording
from pytest_cudaperf.settings import Settings
from pytest_cudaperf.store.baselines import BaselineStore
from pytest_cudaperf.verdict import Kind, Verdict


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
        add_time(test, judging.judge_time(test, SeriesKey(nodeid), m, "GPU X"), m)
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


def test_since_names_a_date_a_time_in_utc_or_the_first_run_of_a_commit(tmp_path: Path) -> None:
    with open_store(tmp_path / "h.sqlite") as store:
        for i, (commit, day) in enumerate([("aaaa01", 1), ("bbbb02", 2), ("aaaa01", 3)]):
            run = report(tmp_path, f"r{i}", {"t.py::a": 1.0})
            store.add_run(run, Source(commit + "0" * 34), f"2026-11-0{day}T06:00:00+00:00")
        assert store.since_time("") == ""
        assert store.since_time("2026-11-02") == "2026-11-02"
        assert store.since_time(" 2026-11-02T10:00+02:00 ") == "2026-11-02T08:00:00"
        assert store.since_time("2026-11-02 08:00") == "2026-11-02T08:00:00"
        assert store.since_time("aaaa") == "2026-11-01T06:00:00+00:00"  # its first run's
        assert store.since_time("BBBB02" + "0" * 34) == "2026-11-02T06:00:00+00:00"
        cut = store.since_time("bbbb")
        ident = ("GPU X", "t.py::a", "", "time:device/cold")
        assert [p.run_id for p in store.points(ident, cut)] == ["r1", "r2"]
        for value, why in [
            ("cccc", "no run of commit cccc is in the history"),
            ("aaa", "--since takes a commit (4 or more hex digits of its sha) or an ISO date"),
            ("2026-02-30", "an ISO date such as 2026-11-01, not '2026-02-30'"),
        ]:
            with pytest.raises(HistoryError, match=re.escape(why)):
                store.since_time(value)


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
    with closing(sqlite3.connect(tmp_path / "h.sqlite")) as raw:
        assert raw.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        per_run = raw.execute("SELECT count(*) FROM results GROUP BY run ORDER BY run").fetchall()
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


# --- what a run keeps, the schema's migration -----------------------------------------------------


def judged(
    nodeid: str,
    value: float,
    *,
    sm_mhz: float | None = None,
    ci: tuple[float, float] | None = None,
    breakdown: dict[str, object] | None = None,
    unit: str = "ms",
    series: str = "time:device/cold",
) -> JudgedRecord:
    """A judged record as a run reports it (no judging: the store keeps what it is given)."""
    recording = Recording(date="2026-11-01", median=value, noise=0.01, n=30, sm_mhz=sm_mhz, ci=ci)
    record = Record(SeriesKey(nodeid), series, "GPU X", unit, recording, {}, breakdown)
    return JudgedRecord(record, Verdict(Kind.PASS))


def fill(store: HistoryStore, values: Sequence[float], clocks: Sequence[float | None] = ()) -> None:
    """One run per value of the series ``t.py::s``, at commits c00, c01, … a day apart."""
    clocks = list(clocks) or [None] * len(values)
    for i, (value, mhz) in enumerate(zip(values, clocks, strict=True)):
        report = Report(tests=(TestOutcome("t.py::s", (judged("t.py::s", value, sm_mhz=mhz),)),))
        report = dataclasses.replace(report, run_id=f"run{i}")
        day = f"2026-{10 + i // 28:02d}-{i % 28 + 1:02d}T00:00:00+00:00"
        assert store.add_run(report, Source(f"c{i:02d}"), day)


IDENT = ("GPU X", "t.py::s", "", "time:device/cold")


def test_a_run_without_a_recorded_breakdown_keeps_the_one_its_verdict_was_explained_with(
    tmp_path: Path,
) -> None:
    from pytest_cudaperf.breakdown.model import Breakdown

    def profile(total_us: float) -> Breakdown:
        return Breakdown(backend="cuda", calls=5, total_us=total_us, host_us=30.0, entries=())

    plain = judged("t.py::a", 1.3)  # a regression explained with the baseline's and its own
    explained = dataclasses.replace(plain, compared=(profile(800.0), profile(1040.0)))
    report = Report(tests=(TestOutcome("t.py::a", (explained,)),), run_id="r1")
    with open_store(tmp_path / "h.sqlite") as store:
        store.add_run(report, Source("c1"), "2026-11-01T00:00:00+00:00")
        (point,) = store.points(("GPU X", "t.py::a", "", "time:device/cold"))
    assert point.breakdown == profile(1040.0).to_json()


def test_a_point_holds_the_interval_noise_clock_run_and_breakdown(tmp_path: Path) -> None:
    breakdown = {"kernels": [{"name": "gemm", "ms": 0.8}], "backend": "cuda"}
    records = (
        judged("t.py::a", 1.0, sm_mhz=1755.0, ci=(0.98, 1.03), breakdown=breakdown),
        judged("t.py::a", 4096, unit="bytes", series="memory:peak"),
    )
    report = Report(tests=(TestOutcome("t.py::a", records),), run_id="r1")
    with open_store(tmp_path / "h.sqlite") as store:
        store.add_run(report, Source("c1"), "2026-11-01T00:00:00+00:00")
        (time_point,) = store.points(("GPU X", "t.py::a", "", "time:device/cold"))
        (peak,) = store.points(("GPU X", "t.py::a", "", "memory:peak"))
        assert store.schema == SCHEMA == 3
    assert (time_point.lo, time_point.hi, time_point.noise) == (0.98, 1.03, 0.01)
    assert (time_point.sm_mhz, time_point.run_id, time_point.verdict) == (1755.0, "r1", "pass")
    assert time_point.breakdown == breakdown
    assert (peak.value, peak.unit, peak.lo, peak.sm_mhz, peak.breakdown) == (
        4096,
        "bytes",
        None,
        None,
        None,
    )


def test_a_point_holds_the_speed_of_light_and_the_dashboard_says_it(tmp_path: Path) -> None:
    from pytest_cudaperf.history.pages import sol_text
    from pytest_cudaperf.measure.ceilings import Peaks
    from pytest_cudaperf.measure.roofline import Roofline
    from pytest_cudaperf.measure.work import Work

    work = Work(read_bytes=4 * 10**6, written_bytes=4 * 10**6)
    roof = Roofline(work, 0.004, Peaks(2.5e12, {}, "measured"), None)  # 2 TB/s: 80%
    records = (
        dataclasses.replace(judged("t.py::a", 0.004), roofline=roof),
        judged("t.py::a", 0.3, unit="J", series="energy:call"),
    )
    report = Report(tests=(TestOutcome("t.py::a", records),), run_id="r1")
    with open_store(tmp_path / "h.sqlite") as store:
        store.add_run(report, Source("c1"), "2026-11-01T00:00:00+00:00")
        (point,) = store.points(("GPU X", "t.py::a", "", "time:device/cold"))
        (energy,) = store.points(("GPU X", "t.py::a", "", "energy:call"))
    assert (point.flops, point.bytes, point.bound) == (0.0, 8e6, "memory")
    assert point.peak_fraction == pytest.approx(0.8)
    assert sol_text(point) == "memory-bound, 80% of peak (8 MB, 0 FLOP per call)"
    assert (energy.value, energy.unit, sol_text(energy)) == (0.3, "J", None)


#: the tables as schema 1 wrote them
SCHEMA_1 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE runs (id INTEGER PRIMARY KEY, run_id TEXT NOT NULL UNIQUE, recorded_at TEXT NOT NULL,
    commit_sha TEXT NOT NULL, dirty INTEGER NOT NULL, branch TEXT NOT NULL,
    environment TEXT NOT NULL);
CREATE TABLE results (run INTEGER NOT NULL REFERENCES runs(id), nodeid TEXT NOT NULL,
    name TEXT NOT NULL, series TEXT NOT NULL, device_class TEXT NOT NULL, unit TEXT NOT NULL,
    value REAL NOT NULL, noise REAL NOT NULL, sm_mhz REAL, verdict TEXT NOT NULL,
    PRIMARY KEY (run, nodeid, name, series, device_class));
CREATE INDEX results_by_series ON results (device_class, nodeid, name, series);
INSERT INTO meta VALUES ('schema', '1');
INSERT INTO runs VALUES (1, 'old', '2026-10-01T00:00:00+00:00', 'c0', 0, 'main', '{}');
INSERT INTO results VALUES (1, 't.py::s', '', 'time:device/cold', 'GPU X', 'ms', 1.0, 0.01, 1980.0,
    'new');
"""


def schema_1(path: Path, extra: str = "") -> None:
    with closing(sqlite3.connect(path)) as raw:
        raw.executescript(SCHEMA_1 + extra)


def test_a_schema_1_history_is_migrated_in_place(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    schema_1(db)
    with open_store(db) as store:
        assert store.schema == SCHEMA
        (old,) = store.points(IDENT)
        assert (old.commit, old.value, old.sm_mhz, old.run_id) == ("c0", 1.0, 1980.0, "old")
        assert (old.lo, old.hi, old.breakdown) == (None, None, None)
        assert (old.flops, old.bytes, old.bound, old.peak_fraction) == (None, None, None, None)
        fill(store, [1.1])
        assert [p.value for p in store.points(IDENT)] == [1.0, 1.1]
        assert store.acks() == []


def test_a_failed_migration_leaves_the_history_as_it_was(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    schema_1(db, "ALTER TABLE results ADD COLUMN breakdown TEXT;")  # the third step will fail
    with pytest.raises(HistoryError, match=r"h\.sqlite: cannot open the history \(.*breakdown"):
        open_store(db)
    with closing(sqlite3.connect(db)) as raw:
        assert raw.execute("SELECT value FROM meta").fetchall() == [("1",)]
        columns = [row[1] for row in raw.execute("PRAGMA table_info(results)")]
        assert "lo" not in columns  # the first two steps were rolled back with it
        assert raw.execute("SELECT name FROM sqlite_master WHERE name = 'acks'").fetchall() == []


# --- regressions: cycle space, drifts, acks -------------------------------------------------------


def noisy(levels: Sequence[float], spread: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [level * (1 + rng.gauss(0, spread)) for level in levels]


def test_a_clock_change_alone_is_no_regression(tmp_path: Path) -> None:
    clocks = [1980.0] * 15 + [1410.0] * 15  # the GPU runs 29% slower from run 15: nothing else
    values = noisy([1980 / c for c in clocks], 0.005, seed=1)
    assert change_points(values)  # in milliseconds it is a step
    with open_store(tmp_path / "h.sqlite") as store:
        fill(store, values, clocks)
        assert regressions(store) == []


def test_a_code_step_under_changing_clocks_is_found_in_cycles(tmp_path: Path) -> None:
    rng = random.Random(2)
    clocks = [rng.choice([1980.0, 1755.0, 1410.0]) for _ in range(30)]
    work = [1.08 if i >= 18 else 1.0 for i in range(30)]  # the code got 8% slower at run 18
    values = noisy([w * 1980 / c for w, c in zip(work, clocks, strict=True)], 0.005, seed=3)
    with open_store(tmp_path / "h.sqlite") as store:
        fill(store, values, clocks)
        (found,) = regressions(store)
    assert (found.kind, found.last_good, found.first_bad) == (STEP, "c17", "c18")
    assert found.change == pytest.approx(0.08, abs=0.01)
    assert found.reference_mhz == 1755.0  # the median clock the levels are expressed at


def test_a_creep_is_one_drift_not_a_staircase_of_steps(tmp_path: Path) -> None:
    creep = noisy([1.005**i for i in range(40)], 0.015, seed=4)
    with open_store(tmp_path / "h.sqlite") as store:
        fill(store, creep)
        (found,) = regressions(store)
    assert found.kind == DRIFT
    assert found.last_good in ("c00", "c10")
    assert found.first_bad == "c39"
    assert found.slope == pytest.approx(0.005, abs=0.002)
    assert found.change > 0.1


def test_an_ack_covers_its_step_and_a_drift_for_a_window(tmp_path: Path) -> None:
    step = noisy([1.0] * 15 + [1.1] * 15, 0.005, seed=5)
    with open_store(tmp_path / "h.sqlite") as store:
        fill(store, step)
        (found,) = regressions(store)
        assert (found.commit, found.ack) == ("c15", None)
        ack = Ack(IDENT, STEP, "c15", "intended: exact softmax", "2026-12-01T00:00:00+00:00", "ana")
        store.acknowledge([ack])
        store.acknowledge([dataclasses.replace(ack, note="intended")])  # again: the note replaced
        (found,) = regressions(store)
        assert found.ack == dataclasses.replace(ack, note="intended")
    creep = [1.005**i for i in range(30)]
    with open_store(tmp_path / "drift.sqlite") as store:
        fill(store, creep)
        (found,) = regressions(store)
        store.acknowledge([Ack(IDENT, DRIFT, found.commit, "n", "2026-12-01", "ana")])
        assert regressions(store)[0].ack is not None
        fill_more = [1.005 ** (30 + i) for i in range(29)]
        for i, value in enumerate(fill_more, 30):
            record = judged("t.py::s", value)
            report = Report(tests=(TestOutcome("t.py::s", (record,)),), run_id=f"run{i}")
            store.add_run(report, Source(f"c{i:02d}"), f"2027-01-{i - 29:02d}T00:00:00+00:00")
        (still,) = regressions(store)
        assert still.kind == DRIFT
        assert still.ack is not None
        report = Report(tests=(TestOutcome("t.py::s", (judged("t.py::s", 1.005**59),)),))
        store.add_run(dataclasses.replace(report, run_id="run59"), Source("c59"), "2027-02-01")
        (again,) = regressions(store)
        assert again.kind == DRIFT
        assert again.ack is None


def test_a_confirmation_marks_its_step_with_the_commit_found(tmp_path: Path) -> None:
    step = noisy([1.0] * 15 + [1.1] * 15, 0.005, seed=5)
    with open_store(tmp_path / "h.sqlite") as store:
        fill(store, step)
        (found,) = regressions(store)
        assert found.confirmed is None
        confirmed = Confirmation(
            IDENT, "c15", "c14", "abc123", "pads the input", 0.1, 0.09, 0.11, "2026-12-01"
        )
        store.confirm(dataclasses.replace(confirmed, commit="wrong"))
        store.confirm(confirmed)  # again: the commit and change replaced
        assert store.confirmations() == [confirmed]
        (found,) = regressions(store)
        assert found.confirmed == confirmed
        other = dataclasses.replace(confirmed, first_bad="c99")  # a step the history lacks
        store.confirm(other)
        (found,) = regressions(store)
        assert found.confirmed == confirmed


def test_a_schema_2_history_gains_the_confirmations_and_speed_of_light_in_place(
    tmp_path: Path,
) -> None:
    db = tmp_path / "h.sqlite"
    schema_1(db)
    with open_store(db):
        pass  # now schema 3: make it schema 2 as that version left it
    with closing(sqlite3.connect(db)) as raw, raw:
        raw.execute("DROP TABLE confirmations")
        for column in ("flops", "bytes", "bound", "peak_fraction"):
            raw.execute(f"ALTER TABLE results DROP COLUMN {column}")
        raw.execute("UPDATE meta SET value = '2' WHERE key = 'schema'")
    with open_store(db) as store:
        assert store.schema == SCHEMA == 3
        assert store.confirmations() == []
        (old,) = store.points(IDENT)
        assert old.commit == "c0"


def test_only_a_file_that_is_no_sqlite_database_is_refused_as_a_history(tmp_path: Path) -> None:
    from pytest_cudaperf.history.backends import not_a_history

    notes = tmp_path / "notes.txt"
    notes.write_text("my notes")
    assert not_a_history(notes) == "exists and is not an SQLite history file"
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")
    assert not_a_history(empty) is None  # SQLite makes a database of it
    assert not_a_history(tmp_path / "new.sqlite") is None
    db = tmp_path / "other.sqlite"
    sqlite3.connect(db).execute("CREATE TABLE t (x)").connection.close()
    assert not_a_history(db) is None
