"""``cudaperf show FILE``: a baseline file or a report as a table."""

from __future__ import annotations

from pathlib import Path

from pytest_cudaperf.cli.sources import load, rows
from pytest_cudaperf.report.terminal import render_table
from pytest_cudaperf.series import baseline_drift, blindness
from pytest_cudaperf.units import format_value

HEADER = ["test", "name", "series", "value", "noise", "processes", "since", "drift", "class"]


def cmd_show(path: Path, tolerance: float) -> int:
    table = []
    for device_class, key, series, entry in rows(load(path)):
        moving = baseline_drift(entry, tolerance)
        table.append(
            [
                key.nodeid,
                key.name,
                series,
                format_value(entry.value, entry.unit),
                f"±{entry.noise:.2%}" + (" BLIND" if blindness(entry) else ""),
                str(entry.processes),
                entry.since,
                moving.text() if moving else "",
                device_class,
            ]
        )
    for line in render_table(table, HEADER):
        print(line)
    return 0
