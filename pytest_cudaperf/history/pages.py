"""The dashboard's HTML: the index (a row per measured series and device class, its sparkline
and latest change point) and a test's page (a timeline per measured series, drawn by
``dashboard.js`` from the JSON the page carries, and each change point's breakdown diff).

Every page is complete offline: its data is inline, its script and style are the site's own
files (``assets/``), nothing is fetched from elsewhere. Text from the history is escaped, and the
inline JSON cannot close its ``<script>`` element.
"""

from __future__ import annotations

import hashlib
import html
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pytest_cudaperf.history.changepoints import MIN_SIZE, NEEDED
from pytest_cudaperf.history.store import Ack, Point
from pytest_cudaperf.history.timelines import (
    LevelChange,
    Line,
    RenderedDiff,
    Run,
    TestHistory,
    Timeline,
)
from pytest_cudaperf.measure.roofline import format_count
from pytest_cudaperf.units import format_pct, format_value

#: device classes' colours, in the order of the classes' names (Okabe and Ito's palette, then
#: grey and black: told apart with every common colour-vision deficiency)
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#7F7F7F", "#000000")
#: a change point that made the value larger (slower, more memory), and smaller
WORSE, BETTER = "#C5221F", "#137333"
#: the sparkline's width and height in pixels
SPARK_SIZE = (140, 30)
#: the site's script and style, under ``assets/``
ASSETS = ("dashboard.js", "dashboard.css")


@dataclass(frozen=True)
class Site:
    """What every page names: the history's label, the colour of each device class."""

    source: str
    colours: dict[str, str]

    @classmethod
    def of(cls, source: str, tests: Sequence[TestHistory]) -> Site:
        classes = sorted(
            {line.device_class for t in tests for tl in t.timelines for line in tl.lines}
        )
        return cls(source, {c: PALETTE[i % len(PALETTE)] for i, c in enumerate(classes)})


def page_name(nodeid: str) -> str:
    """A test page's file name under ``tests/``: the node id in safe characters, cut short,
    and a hash of it (two ids never share a name)."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", nodeid).strip("._")[:80]
    return f"{safe}-{hashlib.sha1(nodeid.encode()).hexdigest()[:10]}.html"


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def _breakable(nodeid: str) -> str:
    """A node id, escaped, that may wrap after ``/``, ``::`` and ``[`` only."""
    return re.sub(r"(/|::|\[)", r"\1<wbr>", _esc(nodeid))


def _short(commit: str) -> str:
    return commit[:10] if commit else "no commit"


def _day(date: str) -> str:
    return date[:10]


def _page(title: str, body: str, root: str) -> str:
    return (
        "<!doctype html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{_esc(title)}</title>"
        f"<link rel='stylesheet' href='{root}assets/dashboard.css'></head>"
        f"<body>{body}<script src='{root}assets/dashboard.js'></script></body></html>\n"
    )


def _change_text(change: LevelChange) -> str:
    return (
        f"{_short(change.last_good.commit)} → {_short(change.first_bad.commit)} "
        f"{format_pct(change.point.change)}"
        + (f", {_confirmed_text(change)}" if change.confirmed else "")
    )


def _confirmed_text(change: LevelChange) -> str:
    """``confirmed at <commit>``: the commit ``cudaperf bisect`` found inside the step."""
    return f"confirmed at {_short(change.confirmed.commit)}" if change.confirmed else ""


# ---------------------------------------------------------------------------------------------
# the index


def sparkline(line: Line, colour: str) -> str:
    """An SVG of a line's values in run order: its change points as ticks (red up, green down),
    its latest value as a dot."""
    width, height = SPARK_SIZE
    values = [r.value for r in line.runs]
    lo, hi = min(values), max(values)
    span = hi - lo or abs(hi) or 1.0
    step = (width - 6) / max(1, len(values) - 1)

    def xy(i: int, v: float) -> tuple[float, float]:
        return 3 + i * step, height - 3 - (v - lo) / span * (height - 6)

    coords = [xy(i, v) for i, v in enumerate(values)]
    path = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
    ticks = []
    for change in line.changes:
        x = (coords[change.good_index][0] + coords[change.bad_index][0]) / 2
        ticks.append(
            f"<line x1='{x:.1f}' x2='{x:.1f}' y1='0' y2='{height}' stroke-width='1.5' "
            f"stroke='{WORSE if change.worse else BETTER}'/>"
        )
    last_x, last_y = coords[-1]
    label = f"{len(values)} runs" + (
        f"; latest change point {_change_text(line.changes[-1])}" if line.changes else ""
    )
    return (
        f"<svg class='spark' width='{width}' height='{height}' viewBox='0 0 {width} {height}' "
        f"role='img' aria-label='{_esc(label)}'><title>{_esc(label)}</title>{''.join(ticks)}"
        f"<polyline points='{path}' fill='none' stroke='{colour}' stroke-width='1.5'/>"
        f"<circle cx='{last_x:.1f}' cy='{last_y:.1f}' r='2.5' fill='{colour}'/></svg>"
    )


def _latest_change_cell(line: Line) -> str:
    change = line.latest_change
    drift = ""
    if line.drift is not None:
        runs = line.drift.last - line.drift.first + 1
        drift = (
            f"<div><span class='worse'>drift {_esc(format_pct(line.drift.regression.change))}"
            f"</span> <span class='meta'>over the last {runs} runs"
            + (", acknowledged" if line.drift.ack else "")
            + "</span></div>"
        )
    if change is None:
        none = f"none: {line.too_few.split(':')[0]}" if line.too_few else "none"
        return f"<td>{drift or f'<span class=meta>{_esc(none)}</span>'}</td>"
    kind = "worse" if change.worse else "better"
    return (
        f"<td><span class='{kind}'>{_esc(format_pct(change.point.change))}</span> "
        f"<code>{_esc(_short(change.last_good.commit))}</code> → "
        f"<code>{_esc(_short(change.first_bad.commit))}</code> "
        f"<span class='meta'>{_esc(_day(change.first_bad.date))}"
        + (f", {_esc(_confirmed_text(change))}" if change.confirmed else "")
        + (", acknowledged" if change.ack else "")
        + f"</span>{drift}</td>"
    )


def _test_rows(test: TestHistory, site: Site) -> str:
    rows: list[str] = []
    count = sum(len(t.lines) for t in test.timelines)
    link = f"<a href='tests/{_esc(page_name(test.nodeid))}'>{_breakable(test.nodeid)}</a>"
    for timeline in test.timelines:
        for line in timeline.lines:
            first = not rows
            latest = line.runs[-1]
            rows.append(
                "<tr>"
                + (f"<th scope='rowgroup' rowspan='{count}'>{link}</th>" if first else "")
                + f"<td>{_esc(timeline.title)}</td>"
                f"<td><span class='swatch' style='background:{site.colours[line.device_class]}'>"
                f"</span>{_esc(line.device_class)}</td>"
                f"<td class='num'>{len(line.runs)}</td>"
                f"<td>{sparkline(line, site.colours[line.device_class])}</td>"
                f"<td class='num'>{_esc(format_value(latest.value, latest.unit))}"
                f"{_peak_share(latest.point)}</td>"
                f"{_latest_change_cell(line)}</tr>"
            )
    return f"<tbody data-test='{_esc(test.nodeid)}'>{''.join(rows)}</tbody>"


def _peak_share(point: Point) -> str:
    """The latest run's share of peak under its value, where its speed of light was counted."""
    if point.peak_fraction is None or point.bound is None:
        return ""
    return f"<div class='meta'>{_esc(f'{point.peak_fraction:.0%} of peak, {point.bound}')}</div>"


def render_index(tests: Sequence[TestHistory], site: Site) -> str:
    runs = [r for t in tests for tl in t.timelines for line in tl.lines for r in line.runs]
    series = sum(len(tl.lines) for t in tests for tl in t.timelines)
    worse = sum(
        1
        for t in tests
        for tl in t.timelines
        for line in tl.lines
        if line.latest_change and line.latest_change.worse
    )
    dates = sorted(r.date for r in runs)
    span = ""
    if dates:
        first, last = _esc(_day(dates[0])), _esc(_day(dates[-1]))
        span = f"; runs recorded {first}" + (f" to {last}" if last != first else "")
    short = sum(1 for t in tests for tl in t.timelines for line in tl.lines if line.too_few)
    summary = (
        f"{len(tests)} test{'s' if len(tests) != 1 else ''}, {series} series "
        f"(per device class){span}; {worse} whose latest change point is a rise"
    )
    if short:
        summary += (
            f"; {short} with too few runs to judge (a change point needs {MIN_SIZE} runs on each "
            f"side, {NEEDED} in all)"
        )
    if not tests:
        table = "<p>The history has no runs yet.</p>"
    else:
        table = (
            "<p><label>Filter tests <input id='filter' type='search' "
            "placeholder='part of a test id'></label></p>"
            "<table class='index'><thead><tr><th>test</th><th>series</th><th>device class</th>"
            "<th class='num'>runs</th><th>history</th><th class='num'>latest</th>"
            "<th>latest change point</th></tr></thead>"
            + "".join(_test_rows(t, site) for t in tests)
            + "</table>"
        )
    body = (
        f"<header><h1>cudaperf dashboard</h1><p class='meta'>{_esc(site.source)}: {summary}</p>"
        "<p class='meta'>A change point: where a series' level moved (E-divisive means, "
        "Welch's t on the logarithms, p &lt; 0.001, 2% or more). "
        f"<span class='worse'>Red</span>: it rose (slower, more memory); "
        f"<span class='better'>green</span>: it fell.</p></header>{table}"
    )
    return _page("cudaperf dashboard", body, "")


# ---------------------------------------------------------------------------------------------
# a test's page


def _change_id(plot: int, line: int, change: int) -> str:
    return f"cp-{plot}-{line}-{change}"


def sol_text(point: Point) -> str | None:
    """A run's speed of light as the dashboard says it: ``memory-bound, 71% of peak
    (8.39 MB, 0 FLOP per call)``; None where it was not counted."""
    if point.flops is None or point.bytes is None:
        return None
    work = f"{format_count(point.bytes, 'B')}, {format_count(point.flops, 'FLOP')} per call"
    if point.bound is None:
        return work
    share = f", {point.peak_fraction:.0%} of peak" if point.peak_fraction is not None else ""
    return f"{point.bound}-bound{share} ({work})"


def _run_json(run: Run) -> dict[str, Any]:
    data: dict[str, Any] = {
        "x": run.x,
        "v": run.value,
        "text": format_value(run.value, run.unit),
        "commit": run.commit,
        "date": run.date,
        "verdict": run.verdict,
    }
    sol = sol_text(run.point)
    if sol is not None:
        data["sol"] = sol
    if run.lo is not None and run.hi is not None:
        data.update(
            lo=run.lo,
            hi=run.hi,
            interval=f"{format_value(run.lo, run.unit)} … {format_value(run.hi, run.unit)}",
        )
    return data


def _timeline_json(plot: int, timeline: Timeline, site: Site) -> dict[str, Any]:
    return {
        "title": timeline.title,
        "unit": timeline.unit,
        "axis": [{"commit": p.commit, "date": p.date} for p in timeline.axis],
        "lines": [
            {
                "deviceClass": line.device_class,
                "colour": site.colours[line.device_class],
                "runs": [_run_json(r) for r in line.runs],
                "changes": [
                    {
                        "id": _change_id(plot, li, ci),
                        "good": c.good_index,
                        "bad": c.bad_index,
                        "change": format_pct(c.point.change),
                        "worse": c.worse,
                        "acked": c.ack is not None,
                        "text": _change_text(c) + (" (acknowledged)" if c.ack else ""),
                    }
                    for ci, c in enumerate(line.changes)
                ],
                "drift": _drift_json(plot, li, line),
            }
            for li, line in enumerate(timeline.lines)
        ],
    }


def _drift_id(plot: int, line: int) -> str:
    return f"drift-{plot}-{line}"


def _drift_json(plot: int, li: int, line: Line) -> dict[str, Any] | None:
    drift = line.drift
    if drift is None:
        return None
    change = format_pct(drift.regression.change)
    return {
        "id": _drift_id(plot, li),
        "first": drift.first,
        "last": drift.last,
        "from": drift.start,
        "to": drift.end,
        "change": change,
        "acked": drift.ack is not None,
        "text": f"drift {change} over {drift.last - drift.first + 1} runs"
        + (" (acknowledged)" if drift.ack else ""),
    }


def _ack_text(ack: Ack | None) -> str:
    if ack is None:
        return ""
    return f"{ack.note} ({ack.acked_by}, {ack.acked_at[:10]})"


@dataclass(frozen=True)
class _Listed:
    """A row of a timeline's table of change points and drifts, and its breakdown panel."""

    ident: str
    device_class: str
    kind: str  #: "step" (a change point) or "drift"
    first: Run  #: a step: its last good run; a drift: its stretch's first run
    last: Run  #: a step: its first bad run; a drift: its stretch's last run
    change: float
    before: float
    after: float
    p: float
    ack: Ack | None
    breakdown: RenderedDiff
    #: a step's ``confirmed at <commit>``, where ``cudaperf bisect`` confirmed it
    confirmed: str = ""


def _listed(plot: int, timeline: Timeline) -> list[_Listed]:
    found = []
    for li, line in enumerate(timeline.lines):
        for ci, c in enumerate(line.changes):
            cp = c.point
            found.append(
                _Listed(
                    _change_id(plot, li, ci),
                    line.device_class,
                    "step",
                    c.last_good,
                    c.first_bad,
                    cp.change,
                    cp.before,
                    cp.after,
                    cp.p,
                    c.ack,
                    c.breakdown,
                    _confirmed_text(c),
                )
            )
        if line.drift is not None:
            d, r = line.drift, line.drift.regression
            found.append(
                _Listed(
                    _drift_id(plot, li),
                    line.device_class,
                    "drift",
                    line.runs[d.first],
                    line.runs[d.last],
                    r.change,
                    r.before,
                    r.after,
                    r.p,
                    d.ack,
                    d.breakdown,
                )
            )
    return found


def _breakdown_panel(row: _Listed) -> str:
    bd = row.breakdown
    sides = ("last good", "first bad") if row.kind == "step" else ("first", "last run of the drift")
    head = (
        f"<h3>Kernels, {sides[0]} <code>{_esc(_short(row.first.commit))}</code> → {sides[1]} "
        f"<code>{_esc(_short(row.last.commit))}</code> "
        f"<span class='meta'>{_esc(row.device_class)}</span></h3>"
    )
    if bd.missing:
        inner = f"<p class='missing'>{_esc(bd.missing)}</p>"
    else:  # table_html is escaped by side_by_side_html
        inner = f"<pre>{_esc(chr(10).join(bd.lines))}</pre>{bd.table_html}"
    return f"<div class='breakdown' id='{row.ident}' hidden>{head}{inner}</div>"


def _changes_table(plot: int, timeline: Timeline) -> str:
    listed = _listed(plot, timeline)
    short = "".join(
        f"<p class='meta'>{_esc(line.device_class)}: no change point can be found yet, "
        f"{_esc(line.too_few)}.</p>"
        for line in timeline.lines
        if line.too_few
    )
    if not listed:
        return short or "<p class='meta'>No change point.</p>"
    rows = []
    for row in listed:
        unit = row.last.unit
        rows.append(
            f"<tr><td>{_esc(row.device_class)}</td><td>{row.kind}</td>"
            f"<td><code>{_esc(_short(row.first.commit))}</code> → "
            f"<code>{_esc(_short(row.last.commit))}</code>"
            + (f" <span class='confirmed'>{_esc(row.confirmed)}</span>" if row.confirmed else "")
            + "</td>"
            f"<td class='num {'worse' if row.change > 0 else 'better'}'>"
            f"{_esc(format_pct(row.change))}</td>"
            f"<td class='num'>{_esc(format_value(row.before, unit))} → "
            f"{_esc(format_value(row.after, unit))}</td>"
            f"<td class='num'>{row.p:.1e}</td><td>{_esc(row.last.date)}</td>"
            f"<td>{_esc(_ack_text(row.ack))}</td>"
            f"<td><button type='button' data-change='{row.ident}'>kernels</button></td></tr>"
        )
    return short + (
        "<table class='changes'><thead><tr><th>device class</th><th>kind</th>"
        "<th>last good → first bad</th><th class='num'>change</th>"
        "<th class='num'>before → after</th><th class='num'>p</th><th>first bad run</th>"
        "<th>acknowledged</th><th></th></tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
        + "".join(_breakdown_panel(row) for row in listed)
    )


def _legend(timeline: Timeline, site: Site) -> str:
    items = [
        f"<li><span class='swatch' style='background:{site.colours[line.device_class]}'></span>"
        f"{_esc(line.device_class)}</li>"
        for line in timeline.lines
    ]
    items.append(
        "<li><span class='cp-key worse'>▼</span> rise <span class='cp-key better'>▼</span> fall: "
        "a change point, beside its device class's dot (click: its kernels)</li>"
    )
    if any(line.drift for line in timeline.lines):
        items.append(
            "<li><span class='drift-key'></span> drift: the level crept up (click it)</li>"
        )
    if any(r.lo is not None for line in timeline.lines for r in line.runs):
        items.append("<li><span class='band-key'></span> interval</li>")
    return f"<ul class='legend'>{''.join(items)}</ul>"


def render_test_page(test: TestHistory, site: Site) -> str:
    sections = []
    for i, timeline in enumerate(test.timelines):
        sections.append(
            f"<section class='timeline' id='timeline-{i}'>"
            f"<h2>{_esc(timeline.title)} <span class='meta'>({_esc(timeline.unit)})</span></h2>"
            f"{_legend(timeline, site)}"
            f"<div class='plot' data-plot='{i}'><noscript>The plot needs JavaScript; the "
            f"change points are listed below.</noscript></div>"
            f"{_changes_table(i, timeline)}</section>"
        )
    data = {"plots": [_timeline_json(i, t, site) for i, t in enumerate(test.timelines)]}
    payload = json.dumps(data, sort_keys=True, ensure_ascii=False).replace("</", "<\\/")
    body = (
        f"<header><p><a href='../index.html'>← all tests</a></p><h1>{_breakable(test.nodeid)}</h1>"
        f"<p class='meta'>{_esc(site.source)}: {test.runs} runs. Hover a point for its commit, "
        "date, value and verdict; click a change point for the kernels that changed.</p>"
        f"</header>{''.join(sections)}"
        "<div class='tooltip' id='tooltip' role='status' hidden></div>"
        f"<script type='application/json' id='cudaperf-data'>{payload}</script>"
    )
    return _page(test.nodeid, body, "../")
