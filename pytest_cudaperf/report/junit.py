"""What a failing test's own report carries: the failure text (its longrepr) and the JUnit
properties of each measured series."""

from __future__ import annotations

from pytest_cudaperf.report.model import TestOutcome


def failure_text(outcome: TestOutcome) -> str:
    """The report's longrepr: one line per failure, then details (sites, warnings)."""
    lines = [failure.message for failure in outcome.failures]
    lines.extend(f"    {detail}" for detail in outcome.details)
    return "\n".join(lines)


def junit_properties(outcome: TestOutcome) -> list[tuple[str, str]]:
    """``("cudaperf time:device/cold", "0.0123 ms (pass)")``; a named series says its name.
    A time with its speed of light adds ``cudaperf time:device/cold sol``
    (``2.56 TB/s: 87% of measured 2.95 TB/s, … (memory-bound, …)``)."""
    props = []
    for record in outcome.records:
        suffix = f"#{record.key.name}" if record.key.name else ""
        props.append(
            (
                f"cudaperf{suffix} {record.series}",
                f"{record.value:.6g} {record.unit} ({record.verdict.kind.value})",
            )
        )
        if record.roofline is not None:
            props.append((f"cudaperf{suffix} {record.series} sol", record.roofline.describe()))
    return props
