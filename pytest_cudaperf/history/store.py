"""The run history: every run's judged series in an SQLite file or a PostgreSQL database (the
backends: :mod:`pytest_cudaperf.history.backends`), the acknowledged regressions, and the change
points ``cudaperf bisect`` confirmed, each with the commit it found.

One run is written in one transaction, so a writer killed at any point leaves the store with every
earlier run and none of its own; readers read while a writer writes, and concurrent writers are
safe: a run is known by its report's ``run_id``, and adding it twice, one after the other or from
two writers at once, keeps the first (the second is "already there", not an error). Per run and
series the store keeps the value (the median), its interval (``lo``, ``hi``), the noise, the SM
clock, the verdict and the kernel breakdown (JSON) where the run has one (:func:`run_breakdown`),
and a time's speed of light where it was counted: FLOPs and bytes per call, the bound and the
fraction of the measured ceiling (else of the datasheet's). Energy per call is a series of its
own (``energy:call``, in J).

The schema is versioned (:data:`SCHEMA`): opening a store of an older version migrates it in place
in one transaction (a failed migration leaves it as it was); a store written by a newer version is
refused with one line (why: docs/decisions.md, "How is the run history stored?").
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_cudaperf.history.backends import (
    BUSY_TIMEOUT_S,
    Database,
    HistoryError,
    connect,
)

if TYPE_CHECKING:
    from pytest_cudaperf.report.document import Report
    from pytest_cudaperf.report.model import JudgedRecord

__all__ = [
    "BUSY_TIMEOUT_S",
    "SCHEMA",
    "Ack",
    "Confirmation",
    "HistoryError",
    "HistoryStore",
    "Point",
    "SeriesId",
    "Source",
    "open_store",
    "report_source",
]

#: the store's schema version: 2 added each result's interval and breakdown, and the acks; 3 a
#: time's speed of light (flops, bytes, bound, peak_fraction) and the confirmations
SCHEMA = 3
#: a commit as ``--since`` takes it: its sha or a prefix of it, 4 hex digits or more
_COMMIT = re.compile(r"[0-9a-fA-F]{4,64}")
#: the candidates an ambiguous commit prefix names, at most
_CANDIDATES = 3

#: the tables of a new store ({serial}: the backend's auto-numbered key)
_TABLES = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id {serial},
    run_id TEXT NOT NULL UNIQUE,
    recorded_at TEXT NOT NULL,
    commit_sha TEXT NOT NULL,
    dirty INTEGER NOT NULL,
    branch TEXT NOT NULL,
    environment TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS results (
    run BIGINT NOT NULL REFERENCES runs(id),
    nodeid TEXT NOT NULL,
    name TEXT NOT NULL,
    series TEXT NOT NULL,
    device_class TEXT NOT NULL,
    unit TEXT NOT NULL,
    value DOUBLE PRECISION NOT NULL,
    noise DOUBLE PRECISION NOT NULL,
    sm_mhz DOUBLE PRECISION,
    verdict TEXT NOT NULL,
    lo DOUBLE PRECISION,
    hi DOUBLE PRECISION,
    breakdown TEXT,
    flops DOUBLE PRECISION,
    bytes DOUBLE PRECISION,
    bound TEXT,
    peak_fraction DOUBLE PRECISION,
    PRIMARY KEY (run, nodeid, name, series, device_class)
);
CREATE INDEX IF NOT EXISTS results_by_series ON results (device_class, nodeid, name, series);
{acks}
{confirmations}
"""

_ACKS = """
CREATE TABLE IF NOT EXISTS acks (
    device_class TEXT NOT NULL,
    nodeid TEXT NOT NULL,
    name TEXT NOT NULL,
    series TEXT NOT NULL,
    kind TEXT NOT NULL,
    commit_sha TEXT NOT NULL,
    note TEXT NOT NULL,
    acked_at TEXT NOT NULL,
    acked_by TEXT NOT NULL,
    PRIMARY KEY (device_class, nodeid, name, series, kind, commit_sha)
);
"""

_CONFIRMATIONS = """
CREATE TABLE IF NOT EXISTS confirmations (
    device_class TEXT NOT NULL,
    nodeid TEXT NOT NULL,
    name TEXT NOT NULL,
    series TEXT NOT NULL,
    first_bad TEXT NOT NULL,
    last_good TEXT NOT NULL,
    commit_sha TEXT NOT NULL,
    subject TEXT NOT NULL,
    change DOUBLE PRECISION NOT NULL,
    lo DOUBLE PRECISION,
    hi DOUBLE PRECISION,
    confirmed_at TEXT NOT NULL,
    PRIMARY KEY (device_class, nodeid, name, series, first_bad)
);
"""

#: what brings a store of version ``v`` to ``v + 1``
_MIGRATIONS = {
    1: f"""
ALTER TABLE results ADD COLUMN lo DOUBLE PRECISION;
ALTER TABLE results ADD COLUMN hi DOUBLE PRECISION;
ALTER TABLE results ADD COLUMN breakdown TEXT;
{_ACKS}
""",
    2: """
ALTER TABLE results ADD COLUMN flops DOUBLE PRECISION;
ALTER TABLE results ADD COLUMN bytes DOUBLE PRECISION;
ALTER TABLE results ADD COLUMN bound TEXT;
ALTER TABLE results ADD COLUMN peak_fraction DOUBLE PRECISION;
"""
    + _CONFIRMATIONS,
}


def _statements(script: str) -> list[str]:
    return [s.strip() for s in script.split(";") if s.strip()]


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
    #: the median
    value: float
    unit: str
    verdict: str
    #: the median's interval, where the recording has one
    lo: float | None = None
    hi: float | None = None
    noise: float = 0.0
    #: the SM clock while it was measured (CUDA)
    sm_mhz: float | None = None
    run_id: str = ""
    #: the kernel (CPU: op) breakdown's JSON object, where the record has one
    breakdown: dict[str, Any] | None = None
    #: a time's speed of light, where it was counted: FLOPs and bytes per call, the bound
    #: (``memory``, ``compute``) and the fraction of the measured (else datasheet) ceiling
    flops: float | None = None
    bytes: float | None = None
    bound: str | None = None
    peak_fraction: float | None = None


#: a series in the store: (device class, node id, name, series)
SeriesId = tuple[str, str, str, str]


@dataclass(frozen=True)
class Ack:
    """A regression someone acknowledged: the series, the kind (``step`` or ``drift``), the
    commit that names it (a step's first bad commit, the last commit of a drift's window), the
    note, when (UTC, ISO) and who."""

    series: SeriesId
    kind: str
    commit: str
    note: str
    acked_at: str
    acked_by: str


@dataclass(frozen=True)
class Confirmation:
    """A step of the history that ``cudaperf bisect`` confirmed: the series, the step as the
    history names it (its last good and first bad run's commits), the commit the bisection found
    inside it and its subject, the paired change measured at that commit (ratio - 1) with its 95%
    interval, and when (UTC, ISO)."""

    series: SeriesId
    first_bad: str
    last_good: str
    commit: str
    subject: str
    change: float
    lo: float | None
    hi: float | None
    confirmed_at: str


def _number(x: object) -> float | None:
    return None if x is None else float(x)  # type: ignore[arg-type]


def run_breakdown(judged: JudgedRecord) -> Mapping[str, Any] | None:
    """The breakdown a run keeps for a series: the record's (a recording run profiles each
    series), else the run's own that its verdict was explained with (a run profiles a series
    whose verdict is not PASS): the dashboard diffs the last good and the first bad run's."""
    if judged.record.breakdown is not None:
        return judged.record.breakdown
    return judged.compared[1].to_json() if judged.compared is not None else None


def speed_of_light(judged: JudgedRecord) -> tuple[object, ...]:
    """A record's speed-of-light columns: FLOPs, bytes, bound, fraction of the measured
    ceiling (else the datasheet's); all None without a roofline."""
    roof = judged.roofline
    if roof is None:
        return (None, None, None, None)
    fraction = roof.fraction("measured")
    if fraction is None:
        fraction = roof.fraction("datasheet")
    return (float(roof.work.flops), float(roof.work.bytes), roof.bound, fraction)


def _iso_time(text: str) -> str | None:
    """``text`` as the recorded times compare with it, where it is an ISO date (``2026-11-01``)
    or time (in UTC, without its zone; one without a zone is UTC); else None."""
    try:
        return datetime.date.fromisoformat(text).isoformat()
    except ValueError:
        pass
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is not None:
        moment = moment.astimezone(datetime.timezone.utc).replace(tzinfo=None)
    return moment.isoformat()


def _breakdown(text: object) -> dict[str, Any] | None:
    if not text:
        return None
    try:
        found = json.loads(str(text))
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


class HistoryStore:
    """An open run history (use as a context manager, or :meth:`close`)."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self.where = db.where
        try:
            with db.guard("cannot open the history"):
                self._prepare()
        except BaseException:
            db.close()
            raise

    def _version(self) -> int | None:
        if not self._db.table_exists("meta"):
            return None
        rows, _ = self._db.execute("SELECT value FROM meta WHERE key = 'schema'")
        return int(rows[0][0]) if rows else None

    def _refuse_newer(self, version: int | None) -> None:
        if version is not None and version > SCHEMA:
            raise HistoryError(
                f"{self.where}: history schema {version} was written by a newer pytest-cudaperf "
                f"(this one reads up to {SCHEMA}); upgrade pytest-cudaperf"
            )

    def _prepare(self) -> None:
        """Create the tables of a new store, migrate an older one (one transaction)."""
        version = self._version()
        self._refuse_newer(version)
        if version == SCHEMA:
            return
        with self._db.transaction(schema=True):
            version = self._version()  # again: another process may have done it meanwhile
            self._refuse_newer(version)
            if version == SCHEMA:
                return
            if version is None:
                script = _TABLES.format(
                    serial=self._db.serial, acks=_ACKS, confirmations=_CONFIRMATIONS
                )
                for statement in _statements(script):
                    self._db.execute(statement)
            else:
                for step in range(version, SCHEMA):
                    for statement in _statements(_MIGRATIONS[step]):
                        self._db.execute(statement)
            self._db.execute(
                "INSERT INTO meta (key, value) VALUES ('schema', ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (str(SCHEMA),),
            )

    @property
    def schema(self) -> int:
        with self._db.guard("could not read the schema"):
            return self._version() or SCHEMA

    def __enter__(self) -> HistoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._db.close()

    def add_run(self, report: Report, source: Source, recorded_at: str) -> bool:
        """Add ``report``'s judged series as one run, in one transaction. False (nothing
        written) when a run with its ``run_id`` is already there, or another writer adds it
        meanwhile."""
        run_id = report.run_id or f"{recorded_at} {source.commit}"
        environment = json.dumps(dict(report.environment), sort_keys=True, default=str)
        rows: dict[tuple[str, str, str, str], tuple[object, ...]] = {}
        for r in report.records():
            recording = r.record.recording
            lo, hi = recording.ci if recording.ci is not None else (None, None)
            breakdown = run_breakdown(r)
            rows[(r.key.nodeid, r.key.name, r.series, r.device_class)] = (
                r.unit,
                float(r.value),
                float(recording.noise),
                recording.sm_mhz,
                r.verdict.kind.value,
                lo,
                hi,
                None if breakdown is None else json.dumps(dict(breakdown), sort_keys=True),
                *speed_of_light(r),
            )
        db = self._db
        with db.guard("could not add the run"), db.transaction():
            _, added = db.execute(
                "INSERT INTO runs (run_id, recorded_at, commit_sha, dirty, branch, "
                "environment) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (run_id) DO NOTHING",
                (run_id, recorded_at, source.commit, int(source.dirty), source.branch, environment),
            )
            if added != 1:
                return False
            found, _ = db.execute("SELECT id FROM runs WHERE run_id = ?", (run_id,))
            run = int(found[0][0])
            db.execute_many(
                "INSERT INTO results (run, nodeid, name, series, device_class, unit, value, "
                "noise, sm_mhz, verdict, lo, hi, breakdown, flops, bytes, bound, peak_fraction) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(run, *key, *values) for key, values in rows.items()],
            )
        return True

    def runs(self) -> int:
        with self._db.guard("could not read the runs"):
            rows, _ = self._db.execute("SELECT count(*) FROM runs")
        return int(rows[0][0])

    def series_ids(self) -> list[SeriesId]:
        with self._db.guard("could not read the series"):
            rows, _ = self._db.execute(
                "SELECT DISTINCT device_class, nodeid, name, series FROM results "
                "ORDER BY device_class, nodeid, name, series"
            )
        return [(str(c), str(n), str(m), str(s)) for c, n, m, s in rows]

    def since_time(self, since: str) -> str:
        """The time ``since`` (a ``--since`` value) names, which :meth:`points` keeps the runs
        recorded at or after: ``""`` (every run) for ``""``; a date or time in ISO form as a date
        (``2026-11-01``) or a time in UTC (``2026-11-01T08:00:00``; one without a zone is UTC, as
        the recorded ones are); else a commit, its sha or a prefix of it (4 hex digits or more):
        the time its first run in the store was recorded. A commit no run has, a prefix of
        several, or anything else is a :class:`HistoryError`."""
        text = since.strip()
        if not text:
            return ""
        moment = _iso_time(text)
        if moment is not None:
            return moment
        if _COMMIT.fullmatch(text) is None:
            raise HistoryError(
                f"--since takes a commit (4 or more hex digits of its sha) or an ISO date such "
                f"as 2026-11-01, not {text!r}"
            )
        prefix = text.lower()
        with self._db.guard("could not read the runs"):
            rows, _ = self._db.execute(
                "SELECT commit_sha, min(recorded_at) FROM runs WHERE lower(commit_sha) LIKE ? "
                "GROUP BY commit_sha ORDER BY min(recorded_at), commit_sha",
                (prefix + "%",),
            )
        if not rows:
            raise HistoryError(
                f"{self.where}: no run of commit {text} is in the history (--since takes a "
                "commit recorded in the history or a date such as 2026-11-01)"
            )
        if len(rows) > 1:
            shown = [str(sha)[: max(12, len(prefix) + 4)] for sha, _ in rows[:_CANDIDATES]]
            more = len(rows) - len(shown)
            listed = ", ".join(shown) + (f" and {more} more" if more else "")
            raise HistoryError(
                f"{self.where}: --since {text} is ambiguous: {len(rows)} commits of the history "
                f"start with it ({listed}); give more of the sha"
            )
        return str(rows[0][1])

    def points(self, ident: SeriesId, since: str = "") -> list[Point]:
        """One series' values, oldest run first (runs recorded at or after ``since``, a date or
        time in ISO form as :meth:`since_time` gives it, when given)."""
        with self._db.guard("could not read a series"):
            rows, _ = self._db.execute(
                "SELECT runs.commit_sha, runs.recorded_at, results.value, results.unit, "
                "results.verdict, results.lo, results.hi, results.noise, results.sm_mhz, "
                "runs.run_id, results.breakdown, results.flops, results.bytes, results.bound, "
                "results.peak_fraction "
                "FROM results JOIN runs ON runs.id = results.run "
                "WHERE device_class = ? AND nodeid = ? AND name = ? AND series = ? "
                "AND runs.recorded_at >= ? ORDER BY runs.recorded_at, runs.id",
                (*ident, since),
            )
        return [
            Point(
                commit=str(c),
                recorded_at=str(t),
                value=float(v),
                unit=str(u),
                verdict=str(k),
                lo=_number(lo),
                hi=_number(hi),
                noise=float(noise),
                sm_mhz=_number(mhz),
                run_id=str(run_id),
                breakdown=_breakdown(breakdown),
                flops=_number(flops),
                bytes=_number(nbytes),
                bound=None if bound is None else str(bound),
                peak_fraction=_number(fraction),
            )
            for (
                c,
                t,
                v,
                u,
                k,
                lo,
                hi,
                noise,
                mhz,
                run_id,
                breakdown,
                flops,
                nbytes,
                bound,
                fraction,
            ) in rows
        ]

    def acknowledge(self, acks: Sequence[Ack]) -> None:
        """Store acknowledgements (one transaction); acknowledging one again replaces its note,
        time and author."""
        with self._db.guard("could not store the acknowledgement"), self._db.transaction():
            self._db.execute_many(
                "INSERT INTO acks (device_class, nodeid, name, series, kind, commit_sha, note, "
                "acked_at, acked_by) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (device_class, nodeid, name, series, kind, commit_sha) DO UPDATE "
                "SET note = excluded.note, acked_at = excluded.acked_at, "
                "acked_by = excluded.acked_by",
                [(*a.series, a.kind, a.commit, a.note, a.acked_at, a.acked_by) for a in acks],
            )

    def acks(self) -> list[Ack]:
        """Every acknowledgement, oldest first."""
        with self._db.guard("could not read the acknowledgements"):
            rows, _ = self._db.execute(
                "SELECT device_class, nodeid, name, series, kind, commit_sha, note, acked_at, "
                "acked_by FROM acks ORDER BY acked_at, device_class, nodeid, name, series"
            )
        return [
            Ack((str(c), str(n), str(m), str(s)), str(k), str(sha), str(note), str(t), str(by))
            for c, n, m, s, k, sha, note, t, by in rows
        ]

    def confirm(self, found: Confirmation) -> None:
        """Store a confirmed change point (one transaction); confirming one again replaces the
        commit and the change it names."""
        with self._db.guard("could not store the confirmation"), self._db.transaction():
            self._db.execute(
                "INSERT INTO confirmations (device_class, nodeid, name, series, first_bad, "
                "last_good, commit_sha, subject, change, lo, hi, confirmed_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (device_class, nodeid, name, series, first_bad) DO UPDATE "
                "SET last_good = excluded.last_good, commit_sha = excluded.commit_sha, "
                "subject = excluded.subject, change = excluded.change, lo = excluded.lo, "
                "hi = excluded.hi, confirmed_at = excluded.confirmed_at",
                (
                    *found.series,
                    found.first_bad,
                    found.last_good,
                    found.commit,
                    found.subject,
                    found.change,
                    found.lo,
                    found.hi,
                    found.confirmed_at,
                ),
            )

    def confirmations(self) -> list[Confirmation]:
        """Every confirmed change point, oldest confirmation first."""
        with self._db.guard("could not read the confirmations"):
            rows, _ = self._db.execute(
                "SELECT device_class, nodeid, name, series, first_bad, last_good, commit_sha, "
                "subject, change, lo, hi, confirmed_at FROM confirmations "
                "ORDER BY confirmed_at, device_class, nodeid, name, series"
            )
        return [
            Confirmation(
                (str(c), str(n), str(m), str(s)),
                str(bad),
                str(good),
                str(sha),
                str(subject),
                float(change),
                _number(lo),
                _number(hi),
                str(at),
            )
            for c, n, m, s, bad, good, sha, subject, change, lo, hi, at in rows
        ]


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


def open_store(target: str | Path) -> HistoryStore:
    """The history at ``target``: a ``postgresql://`` URL (its tables created when missing), or
    an SQLite file path (created with its folder when missing)."""
    return HistoryStore(connect(target))
