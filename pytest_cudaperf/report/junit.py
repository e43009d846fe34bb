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
