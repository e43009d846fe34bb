"""The side-by-side HTML table of two breakdowns (the HTML report renders it on the controller,
at the end of the run)."""

from __future__ import annotations

import html

from pytest_cudaperf.breakdown.diff import launches_text, signed_us, us
from pytest_cudaperf.breakdown.model import Breakdown, Kernel


def side_by_side_html(base: Breakdown, current: Breakdown) -> str:
    """An escaped ``<table>`` fragment: one row per kernel/op on either side, ranked by
    |time delta|, then the other bucket and the totals."""
    b = {e.key: e for e in base.entries}
    c = {e.key: e for e in current.entries}
    rows: list[tuple[str, str, Kernel | None, Kernel | None]] = []
    for key in b.keys() | c.keys():
        eb, ec = b.get(key), c.get(key)
        either = ec or eb
        rows.append((either.name if either else key, key, eb, ec))
    rows.sort(
        key=lambda r: (
            -abs((r[3].time_us if r[3] else 0.0) - (r[2].time_us if r[2] else 0.0)),
            r[0],
            r[1],
        )
    )

    def cells(e: Kernel | None) -> str:
        if e is None:
            return "<td>–</td><td>–</td>"
        return f"<td>{launches_text(e.launches)}</td><td>{html.escape(us(e.time_us))}</td>"

    def delta(eb: float, ec: float) -> str:
        return f"<td>{html.escape(signed_us(ec - eb))}</td>"

    unit = html.escape(base.unit)
    out = [
        '<table class="cudaperf-breakdown">',
        f"<thead><tr><th>{unit[:-1]}</th><th>base launches/call</th><th>base time/call</th>"
        "<th>current launches/call</th><th>current time/call</th><th>Δ time</th></tr></thead>",
        "<tbody>",
    ]
    for name, full, eb, ec in rows:
        out.append(
            f'<tr><td title="{html.escape(full, quote=True)}">{html.escape(name)}</td>'
            f"{cells(eb)}{cells(ec)}"
            f"{delta(eb.time_us if eb else 0.0, ec.time_us if ec else 0.0)}</tr>"
        )
    ob, oc = base.other, current.other
    if ob.count or oc.count:
        out.append(
            f"<tr><td>(other {ob.count} / {oc.count} {unit})</td>"
            f"<td>{launches_text(ob.launches)}</td><td>{html.escape(us(ob.time_us))}</td>"
            f"<td>{launches_text(oc.launches)}</td><td>{html.escape(us(oc.time_us))}</td>"
            f"{delta(ob.time_us, oc.time_us)}</tr>"
        )
    out.append(
        f"<tr><th>total</th><td></td><td>{html.escape(us(base.total_us))}</td>"
        f"<td></td><td>{html.escape(us(current.total_us))}</td>"
        f"{delta(base.total_us, current.total_us)}</tr>"
    )
    out.append(
        f"<tr><th>host/call</th><td></td><td>{html.escape(us(base.host_us))}</td>"
        f"<td></td><td>{html.escape(us(current.host_us))}</td>"
        f"{delta(base.host_us, current.host_us)}</tr>"
    )
    out.append("</tbody></table>")
    notes = sorted(set(base.notes) | set(current.notes))
    if notes:
        out.append(
            '<p class="cudaperf-breakdown-notes">'
            + "; ".join(html.escape(n) for n in notes)
            + "</p>"
        )
    return "\n".join(out)
