"""The run history: every run's judged series in an SQLite database (a file path).

One run is written in one transaction, so a writer killed at any point leaves the store with every
earlier run and none of its own (SQLite's journal rolls the half-written one back when the file is
next opened); the write-ahead log lets readers read while a writer writes, and writers wait for one
another (``timeout``). A run is known by its report's ``run_id``: adding it twice keeps the first.
The schema is versioned (:data:`SCHEMA`, the first): a store written by a newer version is refused
with one line (why: docs/decisions.md, "How is the run history stored?").
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_cudaperf.report.document import Report

#: the store's schema version
SCHEMA = 1
#: how long a writer waits for another to finish its run (seconds)
BUSY_TIMEOUT_S = 30.0

_TABLES = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL UNIQUE,
    recorded_at TEXT NOT NULL,
    commit_sha TEXT NOT NULL,
    dirty INTEGER NOT NULL,
    branch TEXT NOT NULL,
    environment TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS results (
    run INTEGER NOT NULL REFERENCES runs(id),
    nodeid TEXT NOT NULL,
    name TEXT NOT NULL,
    series TEXT NOT NULL,
    device_class TEXT NOT NULL,
    unit TEXT NOT NULL,
    value REAL NOT NULL,
    noise REAL NOT NULL,
    sm_mhz REAL,
    verdict TEXT NOT NULL,
    PRIMARY KEY (run, nodeid, name, series, device_class)
);
CREATE INDEX IF NOT EXISTS results_by_series ON results (device_class, nodeid, name, series);
"""


class HistoryError(RuntimeError):
    """The store cannot be opened or written: the message says which file and why, in one
    line."""


@dataclass(frozen=True)
class Source:
    """Where a run's code came from: its commit, whether the tree had changes, its branch."""

    commit: str = ""
    dirty: bool = False
    branch: str = ""


@dataclass(frozen=True)
class Point:
    """One run's value of one series."""

    commit: str
    recorded_at: str
    value: float
    unit: str
    verdict: str


#: a series in the store: (device class, node id, name, series)
SeriesId = tuple[str, str, str, str]


class HistoryStore:
    """An open run history (use as a context manager, or :meth:`close`)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S)
            self._db.execute("PRAGMA journal_mode=WAL")
            version = self._version()
        except sqlite3.DatabaseError as exc:
            raise HistoryError(f"{path}: not a cudaperf history ({exc})") from None
        if version is not None and version > SCHEMA:
            self._db.close()
            raise HistoryError(
                f"{path}: history schema {version} was written by a newer pytest-cudaperf (this "
                f"one reads up to {SCHEMA}); upgrade pytest-cudaperf"
            )
        with self._db:
            self._db.executescript(_TABLES)
            self._db.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES ('schema', ?)", (str(SCHEMA),)
            )

    def _version(self) -> int | None:
        found = self._db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
        ).fetchone()
        if found is None:
            return None
        row = self._db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
        return int(row[0]) if row else None

    def __enter__(self) -> HistoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._db.close()

    def add_run(self, report: Report, source: Source, recorded_at: str) -> bool:
        """Add ``report``'s judged series as one run, in one transaction. False (nothing
        written) when a run with its ``run_id`` is already there."""
        run_id = report.run_id or f"{recorded_at} {source.commit}"
        environment = json.dumps(dict(report.environment), sort_keys=True, default=str)
        try:
            with self._db:
                known = self._db.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,))
                if known.fetchone() is not None:
                    return False
                cursor = self._db.execute(
                    "INSERT INTO runs (run_id, recorded_at, commit_sha, dirty, branch, "
                    "environment) VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        run_id,
                        recorded_at,
                        source.commit,
                        int(source.dirty),
                        source.branch,
                        environment,
                    ),
                )
                run = cursor.lastrowid
                self._db.executemany(
                    "INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [
                        (
                            run,
                            r.key.nodeid,
                            r.key.name,
                            r.series,
                            r.device_class,
                            r.unit,
                            float(r.value),
                            float(r.record.recording.noise),
                            r.record.recording.sm_mhz,
                            r.verdict.kind.value,
                        )
                        for r in report.records()
                    ],
                )
        except sqlite3.Error as exc:
            raise HistoryError(f"{self.path}: could not add the run ({exc})") from None
        return True

    def runs(self) -> int:
        return int(self._db.execute("SELECT count(*) FROM runs").fetchone()[0])

    def series_ids(self) -> list[SeriesId]:
        return [
            (str(c), str(n), str(m), str(s))
            for c, n, m, s in self._db.execute(
                "SELECT DISTINCT device_class, nodeid, name, series FROM results "
                "ORDER BY device_class, nodeid, name, series"
            )
        ]

    def points(self, ident: SeriesId, since: str = "") -> list[Point]:
        """One series' values, oldest run first (runs recorded at or after ``since``, a date or
        time in ISO form, when given)."""
        rows: Iterator[Sequence[object]] = self._db.execute(
            "SELECT runs.commit_sha, runs.recorded_at, results.value, results.unit, "
            "results.verdict "
            "FROM results JOIN runs ON runs.id = results.run "
            "WHERE device_class = ? AND nodeid = ? AND name = ? AND series = ? "
            "AND runs.recorded_at >= ? ORDER BY runs.recorded_at, runs.id",
            (*ident, since),
        )
        return [Point(str(c), str(t), float(v), str(u), str(k)) for c, t, v, u, k in rows]  # type: ignore[arg-type]


def report_source(report: Report) -> tuple[Source, str]:
    """The :class:`Source` and recording time a report's environment carries (``source``,
    ``recorded_at``: written by a run with ``--cudaperf-json`` or ``--cudaperf-history``); empty
    where an older report has none."""
    env = report.environment
    found = env.get("source")
    source = Source()
    if isinstance(found, dict):
        source = Source(
            str(found.get("commit", "")),
            bool(found.get("dirty", False)),
            str(found.get("branch", "")),
        )
    return source, str(env.get("recorded_at", ""))


def open_store(path: Path) -> HistoryStore:
    """The history at ``path`` (created with its folder when missing)."""
    if path.exists() and path.is_dir():
        raise HistoryError(f"{path}: is a folder; give the history a file path")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise HistoryError(f"{path}: cannot create its folder ({exc.strerror})") from None
    return HistoryStore(path)
