"""The self-contained HTML report, rendered on the controller at the end of the run: a card per
measured series (samples, baseline and its band, the CI), the kernel breakdowns side by side where
a verdict was explained, leaks with their allocation sites."""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from pytest_cudaperf import atomic
from pytest_cudaperf.breakdown.html import side_by_side_html
from pytest_cudaperf.report.document import Report
from pytest_cudaperf.report.model import JudgedRecord, TestOutcome
from pytest_cudaperf.units import format_ms, format_size, format_value


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


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
        # the strip draws the samples (ms); a host-bound baseline is in reference loops
        same_unit = record.unit == "ms"
        baseline = record.baseline_value if same_unit and _finite(record.baseline_value) else None
        m = record.measurement
        samples, ci = (m.samples_ms, m.ci_ms) if m is not None else ((), None)
        body = _strip(samples, baseline, ci, verdict.threshold)
        value = format_value(record.value, record.unit)
    elif record.energy is not None:
        value = record.energy.describe()
    else:
        value = format_size(record.value)
    if record.roofline is not None:
        body += f"<div class='meta'>speed of light: {html.escape(record.roofline.describe())}</div>"
    warnings = "".join(f"<li>{esc(w)}</li>" for w in record.warnings)
    explained = "".join(f"<div class='meta'>{esc(line)}</div>" for line in record.explanation)
    if record.compared is not None:  # escaped by side_by_side_html
        explained += side_by_side_html(*record.compared)
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


def render_html(report: Report) -> str:
    cards = [card for outcome in report.tests for card in _cards(outcome)]
    legend = (
        "Bars: the samples' distribution; green line and band: the baseline and its "
        "threshold t (the tolerance, or the series' noise where larger); red bar: the 95% CI "
        "of the median."
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>cudaperf report</title>"
        f"<style>{_CSS}</style></head><body><h1>cudaperf report</h1>"
        f"<table>{_rows(report.counts())}</table><h2>Environment</h2>"
        f"<table>{_rows(report.environment)}</table>"
        f"<p class='meta'>{legend}</p>{''.join(cards)}</body></html>\n"
    )


def write_html(path: Path, report: Report) -> None:
    atomic.write_text(path, render_html(report))
