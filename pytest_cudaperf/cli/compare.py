"""``cudaperf compare BASE CURRENT``: judge CURRENT (a report or a baseline file) against BASE;
the stored kernel breakdowns of each regressed or improved series diffed under the table."""

from __future__ import annotations

from pathlib import Path

from pytest_cudaperf.breakdown.explain import explain_stored
from pytest_cudaperf.cli.sources import load, rows
from pytest_cudaperf.keys import SeriesKey
from pytest_cudaperf.observation import Observation
from pytest_cudaperf.report.terminal import render_table
from pytest_cudaperf.units import format_pct, format_value
from pytest_cudaperf.verdict import Kind, ci_text, judge


def cmd_compare(base_path: Path, current_path: Path, tolerance: float) -> int:
    base = {(cls, key, series): entry for cls, key, series, entry in rows(load(base_path))}
    base_any = {(key, series): (cls, entry) for (cls, key, series), entry in base.items()}
    table = []
    regressions = 0
    #: regressed or improved series: their stored breakdowns are diffed under the table
    flagged: list[tuple[SeriesKey, str, object, object]] = []
    for cls, key, series, current in rows(load(current_path)):
        entry = base.get((cls, key, series))
        other = base_any.get((key, series))
        cells = [key.nodeid, key.name, series, format_value(current.value, current.unit)]
        if entry is None and other is not None:
            table.append([*cells, format_value(other[1].value, other[1].unit), "", "",
                         f"OTHER CLASS ({other[0]}), not enforced"])  # fmt: skip
            continue
        observation = Observation(
            current.value,
            current.noise,
            env=current.env,
            unit=current.unit,
            reference_ms=current.reference_ms,
            launch_gap_us=current.launch_gap_us,
        )
        verdict = judge(observation, entry, tolerance, cls)
        regressions += verdict.kind is Kind.REGRESSION
        table.append(
            [
                *cells,
                format_value(entry.value, entry.unit) if entry else "—",
                format_pct(verdict.ratio - 1) if verdict.ratio is not None else "",
                ci_text(verdict.ci) if verdict.ci is not None else "",
                verdict.kind.value.upper(),
            ]
        )
        if entry is not None and verdict.kind in (Kind.REGRESSION, Kind.IMPROVED):
            flagged.append((key, series, entry.breakdown, current.breakdown))
    header = ["test", "name", "series", "current", "baseline", "change", "95% CI", "verdict"]
    for line in render_table(table, header):
        print(line)
    for key, series, base_breakdown, current_breakdown in flagged:
        print(f"{key} {{{series}}}:")
        for line in explain_stored(base_breakdown, current_breakdown).lines:
            print(f"    {line}")
    print(
        f"cudaperf: {len(table)} compared, {regressions} regression"
        f"{'s' if regressions != 1 else ''} (tolerance {tolerance:.1%})"
    )
    return 1 if regressions else 0
