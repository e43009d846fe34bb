"""``cudaperf history ingest DB REPORT…`` and ``cudaperf history regressions DB``: the run history
(:mod:`pytest_cudaperf.history`) from the command line."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pytest_cudaperf.cli.sources import CliError
from pytest_cudaperf.history.regressions import regressions
from pytest_cudaperf.history.store import HistoryError, HistoryStore, open_store, report_source
from pytest_cudaperf.report.document import read_report
from pytest_cudaperf.report.fields import ReportError
from pytest_cudaperf.report.terminal import render_table
from pytest_cudaperf.units import format_pct
from pytest_cudaperf.verdict import format_value

HEADER = [
    "test",
    "series",
    "last good → first bad",
    "change",
    "before → after",
    "p",
    "date",
    "class",
]


def _open(db: Path, create: bool) -> HistoryStore:
    if not create and not db.is_file():
        raise CliError(f"history: {db}: no such history file")
    try:
        return open_store(db)
    except HistoryError as exc:
        raise CliError(f"history: {exc}") from None


def cmd_ingest(db: Path, reports: Sequence[Path]) -> int:
    """Add each ``--cudaperf-json`` report as a run (all read before any is written: a bad one
    adds nothing). A report already in the history is skipped and said so."""
    try:
        loaded = [(path, read_report(path)) for path in reports]
    except ReportError as exc:
        raise CliError(f"history ingest: {exc}") from None
    with _open(db, create=True) as store:
        for i, (path, report) in enumerate(loaded, 1):
            source, recorded_at = report_source(report)
            try:
                added = store.add_run(report, source, recorded_at or "unknown")
            except HistoryError as exc:
                raise CliError(f"history ingest: {exc}") from None
            what = f"{len(report.records())} series" if added else "already in the history"
            commit = source.commit[:12] or "no commit"
            print(f"[{i}/{len(loaded)}] {path}: {what} ({commit})", flush=True)
        print(f"cudaperf history: {store.runs()} runs in {db}")
    return 0


def cmd_regressions(db: Path, since: str) -> int:
    """The slowdown change points as a table; exit 1 when there is one."""
    with _open(db, create=False) as store:
        found = regressions(store, since)
    if not found:
        print(f"cudaperf history: no regression in {db}" + (f" since {since}" if since else ""))
        return 0
    table = []
    for r in found:
        device_class, nodeid, name, series = r.series
        table.append(
            [
                nodeid + (f" [{name}]" if name else ""),
                series,
                f"{r.last_good[:10] or '?'} → {r.first_bad[:10] or '?'}",
                format_pct(r.change),
                f"{format_value(r.before, r.unit)} → {format_value(r.after, r.unit)}",
                f"{r.p:.1e}",
                r.date,
                device_class,
            ]
        )
    for line in render_table(table, HEADER):
        print(line)
    print(f"cudaperf history: {len(found)} regression{'s' if len(found) != 1 else ''}")
    return 1
