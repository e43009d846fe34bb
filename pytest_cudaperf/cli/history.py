"""``cudaperf history ingest DB REPORT…``, ``cudaperf history regressions DB [--since REV|DATE]
[--confirmed]``
and ``cudaperf history ack DB (TEST SERIES COMMIT | --all) --note TEXT``: the run history
(:mod:`pytest_cudaperf.history`) from the command line. ``DB`` is an SQLite file path or a
``postgresql://`` URL."""

from __future__ import annotations

import argparse
import datetime
import getpass
import sys
from collections.abc import Sequence
from pathlib import Path

from pytest_cudaperf.cli.sources import CliError
from pytest_cudaperf.history.backends import is_url, redacted
from pytest_cudaperf.history.changepoints import MIN_SIZE, NEEDED
from pytest_cudaperf.history.regressions import DRIFT, Regression, regressions, run_counts
from pytest_cudaperf.history.store import (
    Ack,
    HistoryError,
    HistoryStore,
    SeriesId,
    open_store,
    report_source,
)
from pytest_cudaperf.report.document import read_report
from pytest_cudaperf.report.fields import ReportError
from pytest_cudaperf.report.terminal import render_table
from pytest_cudaperf.units import format_pct, format_value

HEADER = [
    "test",
    "series",
    "kind",
    "commits",
    "change",
    "before → after",
    "p",
    "date",
    "class",
]


def _open(db: str, create: bool) -> HistoryStore:
    if not create and not is_url(db) and not Path(db).is_file():
        raise CliError(f"history: {db}: no such history file")
    try:
        return open_store(db)
    except HistoryError as exc:
        raise CliError(f"history: {exc}") from None


def _name(db: str) -> str:
    return redacted(db) if is_url(db) else db


def cmd_ingest(db: str, reports: Sequence[Path]) -> int:
    """Add each ``--cudaperf-json`` report as a run (all read before any is written: a bad one
    adds nothing), one line per report as it goes. A report already in the history is skipped
    and said so."""
    loaded = []
    for i, path in enumerate(reports, 1):
        if len(reports) > 1:
            print(f"reading [{i}/{len(reports)}] {path}", file=sys.stderr, flush=True)
        try:
            loaded.append((path, read_report(path)))
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
        runs = store.runs()
    print(f"cudaperf history: {runs} runs in {_name(db)}")
    return 0


def _label(r: Regression) -> str:
    _, nodeid, name, _ = r.series
    return nodeid + (f" [{name}]" if name else "")


def _row(r: Regression, acks: bool, confirmed: bool) -> list[str]:
    change = format_pct(r.change)
    if r.slope is not None:
        change += f" ({r.slope * 100:+.2f}%/run)"
    levels = f"{format_value(r.before, r.unit)} → {format_value(r.after, r.unit)}"
    if r.reference_mhz is not None:
        levels += f" at {r.reference_mhz:.0f} MHz"
    row = [
        _label(r),
        r.series[3],
        r.kind,
        f"{r.last_good[:10] or '?'} → {r.first_bad[:10] or '?'}",
        change,
        levels,
        f"{r.p:.1e}",
        r.date,
        r.series[0],
    ]
    if confirmed:
        row.append(f"at {r.confirmed.commit[:10]}" if r.confirmed else "")
    if acks:
        row.append(f"{r.ack.note} ({r.ack.acked_by}, {r.ack.acked_at[:10]})" if r.ack else "")
    return row


def cmd_regressions(db: str, since: str, confirmed_only: bool = False) -> int:
    """The steps and drifts that made a series slower, as a table; exit 1 when one is not
    acknowledged. ``confirmed_only``: the steps ``cudaperf bisect`` confirmed, and no other."""
    with _open(db, create=False) as store:
        try:
            found = regressions(store, since)
            counts = run_counts(store, since)
        except HistoryError as exc:
            raise CliError(f"history: {exc}") from None
    short = _too_few_line(counts)
    if confirmed_only:
        found = [r for r in found if r.confirmed is not None]
    if not found:
        print(
            f"cudaperf history: no {'confirmed ' if confirmed_only else ''}regression in "
            f"{_name(db)}" + (f" since {since}" if since else "")
        )
        if short:
            print(short)
        return 0
    acked = sum(1 for r in found if r.ack is not None)
    confirmed = sum(1 for r in found if r.confirmed is not None)
    header = [*HEADER, "confirmed"] if confirmed else list(HEADER)
    header += ["acknowledged"] if acked else []
    for line in render_table([_row(r, acked > 0, confirmed > 0) for r in found], header):
        print(line)
    drifts = sum(1 for r in found if r.kind == DRIFT)
    summary = f"{len(found)} regression{'s' if len(found) != 1 else ''}"
    if drifts:
        summary += f" ({len(found) - drifts} step{'s' if len(found) - drifts != 1 else ''}, "
        summary += f"{drifts} drift{'s' if drifts != 1 else ''})"
    if confirmed:
        summary += f", {confirmed} confirmed"
    if acked:
        summary += f", {acked} acknowledged"
    print(f"cudaperf history: {summary}")
    if short:
        print(short)
    return 1 if acked < len(found) else 0


def _too_few_line(counts: dict[SeriesId, int]) -> str | None:
    """The line that says how many series are too short to show a change point, or None."""
    short = sorted(n for n in counts.values() if n < NEEDED)
    if not short:
        return None
    have = f"{short[0]}" if short[0] == short[-1] else f"{short[0]} to {short[-1]}"
    return (
        f"cudaperf history: {len(short)} of {len(counts)} series cannot be judged yet: a change "
        f"point needs {MIN_SIZE} runs on each side ({NEEDED} in all), "
        f"{'it has' if len(short) == 1 else 'they have'} {have}"
    )


def _matches(r: Regression, test: str, series: str, commit: str) -> bool:
    return _label(r) == test and r.series[3] == series and r.commit.startswith(commit)


def _user() -> str:
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no login name and no password entry (a bare container)
        return "unknown"


def cmd_ack(db: str, which: Sequence[str], every: bool, note: str) -> int:
    """Acknowledge the regression ``which`` names (test as listed, series, first bad commit or
    a prefix of it; a drift: the last commit listed), or with ``every`` each one not yet
    acknowledged, with a note, the time and the user."""
    if every == bool(which) or (which and len(which) != 3):
        raise CliError(
            "history ack: give TEST SERIES COMMIT (as history regressions lists them), or --all"
        )
    if not note.strip():
        raise CliError("history ack: --note: give a reason, not an empty note")
    with _open(db, create=False) as store:
        try:
            found = regressions(store)
            if every:
                chosen = [r for r in found if r.ack is None]
            else:
                test, series, commit = which
                chosen = [r for r in found if commit and _matches(r, test, series, commit)]
                if not chosen:
                    raise CliError(
                        f"history ack: no regression of {test} {series} at commit {commit} in "
                        f"{_name(db)} (cudaperf history regressions lists them)"
                    )
            now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
            user = _user()
            store.acknowledge(
                [Ack(r.series, r.kind, r.commit, note.strip(), now, user) for r in chosen]
            )
        except HistoryError as exc:
            raise CliError(f"history ack: {exc}") from None
    for r in chosen:
        print(
            f"acknowledged: {_label(r)} {r.series[3]} {r.kind} at {r.commit[:10] or '?'} "
            f"({r.series[0]})"
        )
    print(f"cudaperf history: {len(chosen)} acknowledged by {user} in {_name(db)}")
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    """``cudaperf history``'s subcommands."""
    if args.history_command == "ingest":
        return cmd_ingest(args.db, args.reports)
    if args.history_command == "ack":
        return cmd_ack(args.db, args.which, args.all, args.note)
    return cmd_regressions(args.db, args.since, args.confirmed)
