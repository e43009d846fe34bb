"""GitHub Actions: the step summary table (``$GITHUB_STEP_SUMMARY``) and an ``::error``
annotation at each failed test's line."""

from __future__ import annotations

from pathlib import Path

from pytest_cudaperf import atomic
from pytest_cudaperf.report.document import Report
from pytest_cudaperf.report.terminal import header_of, summary_line, table_rows


def github_summary(report: Report) -> str:
    header = header_of(report)  # the speed-of-light and energy columns where measured
    lines = ["### cudaperf", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines.extend(
        "| " + " | ".join(c.replace("|", "\\|") or " " for c in row) + " |"
        for row in table_rows(report)
    )
    lines.extend(["", summary_line(report.counts()), ""])
    return "\n".join(lines)


def github_annotations(report: Report) -> list[str]:
    lines = []
    for outcome in report.tests:
        if not outcome.body_passed:
            continue
        file, line = outcome.location or ("", 0)
        for failure in outcome.failures:
            text = failure.message.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
            lines.append(f"::error file={file},line={line}::{text}")
    return lines


def append_github_summary(path: Path, report: Report) -> None:
    """Append the Markdown table to the step summary file ($GITHUB_STEP_SUMMARY)."""
    atomic.append_text(path, github_summary(report))
