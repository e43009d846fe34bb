"""The end-of-run ``cudaperf`` section of the terminal: the table of measured series, the notes
(failures other than regressions, inconclusive verdicts and why, NEW, OBSOLETE, DRIFT, baseline
updates), the errors of end-of-run outputs, and the summary line."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Protocol

from pytest_cudaperf.measure.energy import format_joules
from pytest_cudaperf.memory.sweep import SweepStatus
from pytest_cudaperf.report.document import Report, SweepSummary
from pytest_cudaperf.report.model import LIMITS, FailureKind, JudgedRecord
from pytest_cudaperf.units import format_ms, format_pct, format_size, format_value
from pytest_cudaperf.verdict import Kind, ci_text


class TerminalWriter(Protocol):
    """What the end-of-run section needs of pytest's terminal reporter."""

    def write_sep(self, sep: str, title: str) -> None: ...

    def write_line(self, line: str, **markup: bool) -> None: ...


def _short(nodeid: str, width: int = 60) -> str:
    return nodeid if len(nodeid) <= width else "…" + nodeid[-(width - 1) :]


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def _baseline_cells(record: JudgedRecord) -> tuple[str, str, str]:
    """Baseline, change and CI cells; a baseline that cannot be shown (infinite) reads ``?``."""
    verdict = record.verdict
    if verdict.ratio is not None:
        base = record.baseline_value
        if not (_finite(base) and _finite(verdict.ratio)):
            return "?", "", ""
        assert base is not None
        return (
            format_value(base, record.unit),
            format_pct(verdict.ratio - 1),
            ci_text(verdict.ci) if verdict.ci else "",
        )
    if record.others:
        other = record.others[0]
        return f"({other.device_class}: {format_ms(other.value)})", "", ""
    return "—", "", ""


def _verdict_word(record: JudgedRecord) -> str:
    verdict = record.verdict
    word = verdict.kind.value.upper()
    threshold, tolerance = verdict.threshold, verdict.tolerance
    if threshold is not None and tolerance is not None and threshold > tolerance:
        word += f" (t={threshold:.0%})"  # the baseline's noise raised the threshold
    return word


#: what a test's row says of the series beside its name, where one test has two time series: a
#: host-bound callable's time in reference loops and its kernels' time
SERIES_TAGS = {"time:host": " [host]", "time:kernels": " [kernels]"}


def sol_cell(record: JudgedRecord) -> str:
    """A time's speed of light: its rate in the resource that bounds it and the share of the
    measured ceiling (``2.56 TB/s 87% mem``); the rates alone without a ceiling (the CPU)."""
    roof = record.roofline
    if roof is None:
        return ""
    return roof.cell()


def energy_cell(record: JudgedRecord | None) -> str:
    """An ``energy:call`` series' joules per call, and its verdict where it is not a pass."""
    if record is None:
        return ""
    text = format_joules(record.value)
    if record.verdict.kind not in (Kind.PASS, Kind.NEW):
        text += f" {record.verdict.kind.value.upper()}"
    return text


def table_rows(report: Report) -> list[list[str]]:
    peaks = {r.key: r for r in report.records() if r.series == "memory:peak"}
    energies = {r.key: r for r in report.records() if r.is_energy}
    with_sol = any(r.roofline is not None for r in report.records())
    rows = []
    for record in sorted(report.records(), key=lambda r: r.key):
        if not record.is_time:
            continue
        base, change, ci = _baseline_cells(record)
        peak = peaks.get(record.key)
        peak_text = format_size(peak.value) if peak else ""
        if peak and peak.verdict.kind not in (Kind.PASS, Kind.NEW):
            peak_text += f" {peak.verdict.kind.value.upper()}"  # e.g. "14.0 MiB REGRESSION"
        row = [
            _short(str(record.key) + SERIES_TAGS.get(record.series, "")),
            format_value(record.value, record.unit),
            base,
            change,
            ci,
            _verdict_word(record),
            peak_text,
        ]
        if with_sol:
            row.append(sol_cell(record))
        if energies:
            row.append(energy_cell(energies.get(record.key) if record.unit == "ms" else None))
        rows.append(row)
    return rows


HEADER = ["test", "median", "baseline", "change", "95% CI", "verdict", "peak mem"]
SOL_HEADER = "speed of light"
ENERGY_HEADER = "energy/call"


def header_of(report: Report) -> list[str]:
    """The table's columns: the speed of light and the energy per call only where measured."""
    header = list(HEADER)
    if any(r.roofline is not None for r in report.records()):
        header.append(SOL_HEADER)
    if any(r.is_energy for r in report.records()):
        header.append(ENERGY_HEADER)
    return header


def render_table(rows: Sequence[Sequence[str]], header: Sequence[str] = HEADER) -> list[str]:
    table = [header, *rows]
    widths = [max(len(str(r[i])) for r in table) for i in range(len(header))]
    return [
        "  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in table
    ]


def summary_line(counts: Mapping[str, int]) -> str:
    measured = f"{counts['measured']} measured"
    energies = counts.get("energies", 0)
    if counts["peaks"] or energies:  # a time, a peak and an energy are judged alike: how many
        times, peaks = counts["times"], counts["peaks"]
        kinds = [f"{times} time{'s' if times != 1 else ''}"]
        if peaks:
            kinds.append(f"{peaks} peak memory")
        if energies:
            kinds.append(f"{energies} energy")
        measured += f" ({', '.join(kinds)})"
    parts = [
        measured,
        f"{counts['regression']} regression{'s' if counts['regression'] != 1 else ''}",
        f"{counts['improved']} improved",
        f"{counts['new']} new",
        f"{counts['inconclusive']} inconclusive",
    ]
    if counts["leak"]:
        parts.append(f"{counts['leak']} leak{'s' if counts['leak'] != 1 else ''}")
    parts += [f"{counts[name]} {name}" for name in LIMITS.values() if counts[name]]
    return "cudaperf: " + ", ".join(parts)


def _notes(report: Report, update: bool) -> list[str]:
    """Failures other than regressions, NEW and OBSOLETE entries, updates, refused prunes."""
    lines = [
        f"{_short(outcome.nodeid)}: {failure.message}"
        for outcome in report.judged()
        for failure in outcome.failures
        # regressions show in the table, the sweep's leaks in its own lines
        if failure.kind is not FailureKind.REGRESSION
        and not (failure.kind is FailureKind.LEAK and _swept_leak(outcome.sweep))
    ]
    lines.extend(
        f"{_short(str(r.key))}: {r.verdict.message}"
        for r in report.records()
        if r.verdict.kind is Kind.INCONCLUSIVE and not r.traced  # the table cannot say why
    )
    traced = [r for r in report.records() if r.traced]
    if traced:  # one line for all: a run under coverage measures every test under it
        tracers = ", ".join(sorted({str(r.traced) for r in traced}))
        lines.append(
            f"cudaperf: {len(traced)} measured under {tracers}, which slows Python code: not "
            "judged, not recorded; measure without it (coverage: a run of its own)"
        )
    new = [r for r in report.records() if r.verdict.kind is Kind.NEW and not r.traced]
    if new and not update:
        lines.append(
            f"NEW (no baseline for this device class): {len(new)}; record them with "
            "pytest --cudaperf-update"
        )
    for device_class, keys in report.obsolete.items():
        lines.append(
            f"OBSOLETE in {device_class} ({len(keys)}; remove with --cudaperf-update "
            "--cudaperf-prune):"
        )
        lines.extend(f"  {key}" for key in keys)
    lines.extend(f"DRIFT {line}" for line in report.drifting)
    for written in report.updates:
        lines.append(written.line())
        lines.extend(written.notes())
    if report.interrupted and report.updates:
        lines.append(
            "cudaperf: the run was interrupted: the baselines keep what the tests that finished "
            "recorded; nothing was pruned"
        )
    if report.pruned_refused:
        lines.append(
            "cudaperf: --cudaperf-prune skipped: this run was partial (deselection, "
            "a crashed worker, tests left unrun or an interruption)"
        )
    return lines


def _swept_leak(sweep: object) -> bool:
    return getattr(sweep, "status", None) is SweepStatus.LEAK


def sweep_lines(summary: SweepSummary) -> list[str]:
    """The leak sweep's lines: its counts and the time it added, then each leaking test with
    its allocation sites, and each unchecked test with why."""
    head = (
        f"leak sweep ({summary.mode}): {summary.checked} checked ({summary.rechecked} re-run), "
        f"{len(summary.leaking)} leaking, {len(summary.unchecked)} unchecked, "
        f"{summary.untouched} without allocations; the sweep added {summary.seconds:.1f} s"
    )
    lines = [head]
    for outcome in summary.leaking:
        word = "LEAKED" if summary.mode == "fail" else "LEAKING"
        message = outcome.sweep.reason if outcome.sweep else ""
        lines.append(f"{word} {_short(outcome.nodeid)}: {message}")
        sites = outcome.leak.sites if outcome.leak else ()
        lines.extend(f"    {site}" for site in sites)
    lines.extend(f"UNCHECKED {_short(nodeid)}: {why}" for nodeid, why in summary.unchecked)
    return lines


def terminal_summary(
    tr: TerminalWriter,
    report: Report,
    update: bool,
    errors: Sequence[str] = (),
    notes: Sequence[str] = (),
) -> None:
    """The ``cudaperf`` section (nothing when the run measured and wrote nothing). ``update``:
    the run recorded baselines (NEW needs no hint); ``errors``: end-of-run outputs that failed;
    ``notes``: outputs written that the user would not see else (the run added to a history)."""
    if not (report.tests or report.updates or errors or notes):
        return
    tr.write_sep("=", "cudaperf")
    rows = table_rows(report)
    if rows:
        for line in render_table(rows, header_of(report)):
            tr.write_line(line)
    for line in _notes(report, update):
        tr.write_line(line)
    for line in notes:
        tr.write_line(line)
    sweep = report.sweep_summary()
    for line in sweep_lines(sweep) if sweep else ():
        tr.write_line(line, red=line.startswith("LEAK"), yellow=line.startswith("UNCHECKED"))
    for line in errors:
        tr.write_line(line, red=True)
    counts = report.counts()
    bad = (
        counts["regression"] or counts["leak"] or any(counts[n] for n in LIMITS.values()) or errors
    )
    tr.write_line(summary_line(counts), red=bool(bad), green=not bad, bold=True)
