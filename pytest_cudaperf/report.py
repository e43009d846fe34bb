"""Everything shown or written about results, rendered from typed outcomes: the failing report
of a test, JUnit properties, the end-of-run ``cudaperf`` table, the JSON artefact, GitHub step
summary and annotations, and the self-contained HTML report. Writing files starts in
:mod:`pytest_cudaperf.results`; the writers here only render and write one file each.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from pytest_cudaperf.outcome import FailureKind, JudgedRecord, TestOutcome
from pytest_cudaperf.units import format_ms, format_pct, format_size
from pytest_cudaperf.verdict import Kind, ci_text

if TYPE_CHECKING:
    from pytest_cudaperf.results import Results
    from pytest_cudaperf.settings import Settings

JSON_SCHEMA = 2


class TerminalWriter(Protocol):
    """What the end-of-run section needs of pytest's terminal reporter."""

    def write_sep(self, sep: str, title: str) -> None: ...

    def write_line(self, line: str, **markup: bool) -> None: ...


# --- per test ----------------------------------------------------------------------------------


def failure_text(outcome: TestOutcome) -> str:
    """The report's longrepr: one line per failure, then details (sites, warnings)."""
    lines = [failure.message for failure in outcome.failures]
    lines.extend(f"    {detail}" for detail in outcome.details)
    return "\n".join(lines)


def junit_properties(outcome: TestOutcome) -> list[tuple[str, str]]:
    """``("cudaperf time:device/cold", "0.0123 ms (pass)")``; a named series says its name."""
    props = []
    for record in outcome.records:
        suffix = f"#{record.key.name}" if record.key.name else ""
        props.append(
            (
                f"cudaperf{suffix} {record.series}",
                f"{record.value:.6g} {record.unit} ({record.verdict.kind.value})",
            )
        )
    return props


def output_error(what: str, path: Path, exc: BaseException, hint: str) -> str:
    """One line for an end-of-run output that could not be written, and what to do."""
    reason = getattr(exc, "strerror", None) or (str(exc).splitlines() or [type(exc).__name__])[0]
    return f"cudaperf: {what}: {path}: {reason} ({type(exc).__name__}); {hint}"


# --- the end-of-run table ----------------------------------------------------------------------


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
            format_ms(base),
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


def table_rows(results: Results) -> list[list[str]]:
    peaks = {r.key: r for r in results.records() if r.series == "memory:peak"}
    rows = []
    for record in sorted(results.records(), key=lambda r: r.key):
        if not record.is_time:
            continue
        base, change, ci = _baseline_cells(record)
        peak = peaks.get(record.key)
        peak_text = format_size(peak.value) if peak else ""
        if peak and peak.verdict.kind not in (Kind.PASS, Kind.NEW):
            peak_text += f" {peak.verdict.kind.value.upper()}"  # e.g. "14.0 MiB REGRESSION"
        rows.append(
            [
                _short(str(record.key)),
                format_ms(record.value),
                base,
                change,
                ci,
                _verdict_word(record),
                peak_text,
            ]
        )
    return rows


HEADER = ["test", "median", "baseline", "change", "95% CI", "verdict", "peak mem"]


def render_table(rows: Sequence[Sequence[str]], header: Sequence[str] = HEADER) -> list[str]:
    table = [header, *rows]
    widths = [max(len(str(r[i])) for r in table) for i in range(len(header))]
    return [
        "  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in table
    ]


def summary_line(counts: Mapping[str, int]) -> str:
    measured = f"{counts['measured']} measured"
    if counts["peaks"]:  # a time and a peak are judged alike: say how many of each
        times, peaks = counts["times"], counts["peaks"]
        measured += f" ({times} time{'s' if times != 1 else ''}, {peaks} peak memory)"
    parts = [
        measured,
        f"{counts['regression']} regression{'s' if counts['regression'] != 1 else ''}",
        f"{counts['improved']} improved",
        f"{counts['new']} new",
        f"{counts['inconclusive']} inconclusive",
    ]
    if counts["leak"]:
        parts.append(f"{counts['leak']} leak{'s' if counts['leak'] != 1 else ''}")
    if counts["over budget"]:
        parts.append(f"{counts['over budget']} over budget")
    return "cudaperf: " + ", ".join(parts)


def _notes(results: Results, settings: Settings) -> list[str]:
    """Failures other than regressions, NEW and OBSOLETE entries, updates, refused prunes."""
    lines = [
        f"{_short(outcome.nodeid)}: {failure.message}"
        for outcome in results.judged()
        for failure in outcome.failures
        if failure.kind is not FailureKind.REGRESSION  # regressions show in the table
    ]
    lines.extend(
        f"{_short(str(r.key))}: {r.verdict.message}"
        for r in results.records()
        if r.verdict.kind is Kind.INCONCLUSIVE  # the table cannot say why: this line does
    )
    new = [r for r in results.records() if r.verdict.kind is Kind.NEW]
    if new and not settings.update:
        lines.append(
            f"NEW (no baseline for this device class): {len(new)}; record them with "
            "pytest --cudaperf-update"
        )
    for device_class, keys in results.obsolete.items():
        lines.append(
            f"OBSOLETE in {device_class} ({len(keys)}; remove with --cudaperf-update "
            "--cudaperf-prune):"
        )
        lines.extend(f"  {key}" for key in keys)
    lines.extend(f"DRIFT {line}" for line in results.drifting)
    lines.extend(update.line() for update in results.updates)
    if results.pruned_refused:
        lines.append(
            "cudaperf: --cudaperf-prune skipped: this run was partial (deselection, "
            "a crashed worker or an interruption)"
        )
    return lines


def terminal_summary(tr: TerminalWriter, results: Results, settings: Settings) -> None:
    if not (results.outcomes or results.updates or results.errors):
        return
    tr.write_sep("=", "cudaperf")
    rows = table_rows(results)
    if rows:
        for line in render_table(rows):
            tr.write_line(line)
    for line in _notes(results, settings):
        tr.write_line(line)
    for line in results.errors:
        tr.write_line(line, red=True)
    counts = results.counts()
    bad = counts["regression"] or counts["leak"] or counts["over budget"] or results.errors
    tr.write_line(summary_line(counts), red=bool(bad), green=not bad, bold=True)


# --- artefacts ---------------------------------------------------------------------------------


def json_document(
    results: Results, environment: Mapping[str, object], run_id: str, baseline_dir: str = ""
) -> dict[str, object]:
    return {
        "schema": JSON_SCHEMA,
        "run_id": run_id,
        "baseline_dir": baseline_dir,
        "environment": dict(environment),
        "summary": results.counts(),
        "tests": [results.outcomes[k].to_payload() for k in sorted(results.outcomes)],
        "updates": [
            {
                "path": str(u.path),
                "added": u.added,
                "changed": u.changed,
                "afresh": u.afresh,
                "pruned": u.pruned,
            }
            for u in results.updates
        ],
        "obsolete": {c: [str(k) for k in keys] for c, keys in results.obsolete.items()},
        "complete_run": results.complete,
    }


def write_json(path: Path, document: Mapping[str, object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def github_summary(results: Results) -> str:
    lines = ["### cudaperf", "", "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines.extend(
        "| " + " | ".join(c.replace("|", "\\|") or " " for c in row) + " |"
        for row in table_rows(results)
    )
    lines.extend(["", summary_line(results.counts()), ""])
    return "\n".join(lines)


def github_annotations(results: Results) -> list[str]:
    lines = []
    for outcome in results.outcomes.values():
        if not outcome.body_passed:
            continue
        file, line = outcome.location or ("", 0)
        for failure in outcome.failures:
            text = failure.message.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
            lines.append(f"::error file={file},line={line}::{text}")
    return lines


def append_github_summary(path: Path, results: Results) -> None:
    """Append the Markdown table to the step summary file ($GITHUB_STEP_SUMMARY)."""
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(github_summary(results))


# --- HTML ----------------------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1100px}
h1{font-size:1.4em}table{border-collapse:collapse}td,th{padding:.2em .6em;text-align:left}
.card{border:1px solid #ddd;border-radius:6px;padding:.8em;margin:.8em 0}
.pass,.improved{color:#137333}.regression{color:#c5221f}.new{color:#1a73e8}
.inconclusive{color:#b06000}.kind{font-weight:bold;text-transform:uppercase}
.meta{color:#666;font-size:.85em}svg{background:#fafafa;border:1px solid #eee}
"""


#: the SVG strip's width and height in pixels
_STRIP_SIZE = (640, 90)


def _strip(
    samples: Sequence[float],
    baseline: float | None,
    ci: Sequence[float] | None,
    band: float | None,
) -> str:
    """An SVG histogram of the samples with the baseline and its tolerance band."""
    width, height = _STRIP_SIZE
    if not samples:
        return ""
    values = list(samples)
    lo, hi = min(values), max(values)
    if baseline is not None:
        spread = baseline * (band or 0)
        lo, hi = min(lo, baseline - spread), max(hi, baseline + spread)
    if hi <= lo:
        hi = lo + abs(lo) * 0.01 + 1e-9
    pad = (hi - lo) * 0.05
    lo, hi = lo - pad, hi + pad
    bins = 40
    counts = [0] * bins
    for v in values:
        counts[min(bins - 1, int((v - lo) / (hi - lo) * bins))] += 1
    top = max(counts)

    def x(v: float) -> float:
        return (v - lo) / (hi - lo) * width

    parts = [f'<svg width="{width}" height="{height + 18}" role="img">']
    if baseline is not None:
        spread = baseline * (band or 0)
        parts.append(
            f'<rect x="{x(baseline - spread):.1f}" y="0" '
            f'width="{max(1.0, x(baseline + spread) - x(baseline - spread)):.1f}" '
            f'height="{height}" fill="#e6f4ea"/>'
        )
        parts.append(
            f'<line x1="{x(baseline):.1f}" x2="{x(baseline):.1f}" y1="0" '
            f'y2="{height}" stroke="#137333" stroke-width="2"/>'
        )
    step = width / bins
    for i, c in enumerate(counts):
        if c:
            h = c / top * (height - 4)
            parts.append(
                f'<rect x="{i * step:.1f}" y="{height - h:.1f}" '
                f'width="{step - 1:.1f}" height="{h:.1f}" fill="#5b8def"/>'
            )
    if ci:
        parts.append(
            f'<rect x="{x(ci[0]):.1f}" y="{height - 3}" '
            f'width="{max(1.0, x(ci[1]) - x(ci[0])):.1f}" height="3" fill="#c5221f"/>'
        )
    parts.append(
        f'<text x="2" y="{height + 14}" font-size="11">{html.escape(format_ms(lo))}'
        f'</text><text x="{width - 2}" y="{height + 14}" font-size="11" '
        f'text-anchor="end">{html.escape(format_ms(hi))}</text></svg>'
    )
    return "".join(parts)


def _record_card(record: JudgedRecord) -> str:
    esc = html.escape
    verdict = record.verdict
    body = ""
    if record.is_time:
        baseline = record.baseline_value if _finite(record.baseline_value) else None
        body = _strip(record.samples_ms, baseline, record.measured_ci_ms, verdict.threshold)
        value = format_ms(record.value)
    else:
        value = format_size(record.value)
    warnings = "".join(f"<li>{esc(w)}</li>" for w in record.warnings)
    explained = "".join(f"<div class='meta'>{esc(line)}</div>" for line in record.explanation)
    side_by_side = (record.explanation_data or {}).get("html")
    if isinstance(side_by_side, str):  # built and escaped by breakdown.side_by_side_html
        explained += side_by_side
    kind = verdict.kind.value
    return (
        f'<div class="card"><div><b>{esc(str(record.key))}</b> '
        f'<span class="meta">{esc(record.series)}</span></div>'
        f'<div><span class="kind {esc(kind)}">{esc(kind)}</span>'
        f" — {esc(value)}; {esc(verdict.message or '')}</div>{body}"
        f'<div class="meta">{esc(record.device_class)}; n={record.n}; '
        f"{esc(json.dumps(dict(record.env), sort_keys=True, default=str))}</div>"
        f"<ul>{warnings}</ul>{explained}</div>"
    )


def _cards(outcome: TestOutcome) -> list[str]:
    esc = html.escape
    cards = [_record_card(record) for record in outcome.records]
    leak = outcome.leak
    if leak and leak.leaks:
        sites = "".join(f"<li>{esc(s)}</li>" for s in leak.sites)
        series = {k: list(v) for k, v in leak.series.items()}
        cards.append(
            f'<div class="card"><b>{esc(outcome.nodeid)}</b> '
            f'<span class="kind regression">leak</span> '
            f"{esc(json.dumps(series))}<ul>{sites}</ul></div>"
        )
    return cards


def _rows(values: Mapping[str, object]) -> str:
    esc = html.escape
    return "".join(f"<tr><th>{esc(k)}</th><td>{esc(str(v))}</td></tr>" for k, v in values.items())


def render_html(results: Results, environment: Mapping[str, object]) -> str:
    cards = [card for k in sorted(results.outcomes) for card in _cards(results.outcomes[k])]
    legend = (
        "Bars: the samples' distribution; green line and band: the baseline and its "
        "tolerance; red bar: the 95% CI of the median."
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>cudaperf report</title>"
        f"<style>{_CSS}</style></head><body><h1>cudaperf report</h1>"
        f"<table>{_rows(results.counts())}</table><h2>Environment</h2>"
        f"<table>{_rows(environment)}</table>"
        f"<p class='meta'>{legend}</p>{''.join(cards)}</body></html>\n"
    )


def write_html(path: Path, results: Results, environment: Mapping[str, object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(results, environment), encoding="utf-8")
