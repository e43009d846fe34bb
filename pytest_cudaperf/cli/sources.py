"""What the commands read: a baseline file (any schema, strictly) or a ``--cudaperf-json``
report, and the one-line error for a file that cannot be used."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_cudaperf import atomic
from pytest_cudaperf.keys import SeriesKey
from pytest_cudaperf.report.document import Report
from pytest_cudaperf.report.fields import ReportError
from pytest_cudaperf.series import Entry, Record, entry_of, metric_of
from pytest_cudaperf.store.format import BaselineError, Entries
from pytest_cudaperf.store.schema import parse_document


class CliError(Exception):
    """A file or argument that cannot be used; one line for stderr."""


@dataclass
class Baseline:
    device_class: str
    entries: Entries


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CliError(f"{path}: cannot read ({exc.strerror})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CliError(f"{path}: not valid JSON ({exc})") from None


def load(path: Path) -> Baseline | Report:
    """A baseline file (strictly validated, any schema) or a JSON report."""
    document = read_json(path)
    if isinstance(document, dict) and "entries" in document:
        try:
            return Baseline(*parse_document(path, document))
        except BaselineError as exc:
            raise CliError(str(exc)) from None
    if not isinstance(document, dict) or not isinstance(document.get("tests"), list):
        raise CliError(f"{path}: neither a baseline file nor a --cudaperf-json report")
    try:
        return Report.from_json(document, str(path))
    except ReportError as exc:
        raise CliError(str(exc)) from None


def read_report(path: Path) -> Report:
    """A ``--cudaperf-json`` report, or a :class:`CliError` naming the file."""
    found = load(path)
    if not isinstance(found, Report):
        raise CliError(f"{path}: a baseline file, not a --cudaperf-json report")
    return found


def report_records(report: Report) -> list[tuple[Record, bool]]:
    """Every (record, its test's body passed) of a report."""
    return [(judged.record, t.body_passed) for t in report.tests for judged in t.records]


#: a series of a source: (device class, key, series name, the series)
Row = tuple[str, SeriesKey, str, Entry]


def rows(source: Baseline | Report) -> list[Row]:
    """The series of a baseline file, or the one-recording series of a report's records."""
    if isinstance(source, Baseline):
        return [
            (source.device_class, key, series, entry)
            for key, by_series in sorted(source.entries.items())
            for series, entry in sorted(by_series.items())
        ]
    found = []
    for record, _ in report_records(source):
        metric = metric_of(record.series, record.unit)
        entry = entry_of(
            [record.recording], record.unit, record.env, metric, breakdown=record.breakdown
        )
        found.append((record.device_class, record.key, record.series, entry))
    return found


def write_text(path: Path, text: str) -> None:
    try:
        atomic.write_text(path, text)
    except OSError as exc:
        raise CliError(f"{path}: cannot write ({exc.strerror or exc})") from None


def loaded(paths: Sequence[Path]) -> list[Baseline | Report]:
    return [load(p) for p in paths]


def has_option(args: Sequence[str], option: str) -> bool:
    """Whether ``option`` is among pytest arguments ``args``, alone or as ``option=value``."""
    return any(a == option or a.startswith(option + "=") for a in args)
