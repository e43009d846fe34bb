"""How the waits for the host's state ended across judged runs: each wait that met the host back
and how long it took, each that ran out, each single look of a spell.

    python benchmarks/public_suites/tally_waits.py PATH [PATH ...]

A PATH is a ``--cudaperf-json`` report or a folder, which stands for every ``*.json`` below it
that is such a report (``judged-at-defaults.sh``'s ``report.json``, ``bench_suite.py``'s run
files; pytest-benchmark's files and baselines are passed over). A report found twice (the same
text, as in a kept copy of a folder) counts once. The waits are read from the lines they leave
in a test's details (:func:`defaults_table.waits`). Prints the totals, then one line per report
with a wait; an evidence for ``--cudaperf-state-wait``'s limit (docs/decisions.md, "Why does a
host-bound change read in the host's other state wait for it?").
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent.parent))

from public_suites.defaults_table import summed, waits  # noqa: E402

from pytest_cudaperf.report.document import Report  # noqa: E402
from pytest_cudaperf.report.fields import ReportError  # noqa: E402
from pytest_cudaperf.report.model import TestOutcome  # noqa: E402

#: upper ends (seconds) of the bands the waits that met the host back are counted in
BANDS = (5.0, 10.0, 15.0, 30.0)


@dataclass
class Tally:
    """The waits of one report, or of all of them."""

    back: list[float] = field(default_factory=list)
    ran_out: list[float] = field(default_factory=list)
    looks: int = 0

    def add(self, ended: str, seconds: float) -> None:
        if ended == "back":
            self.back.append(seconds)
        elif ended == "in vain":
            self.ran_out.append(seconds)
        else:
            self.looks += 1

    def merge(self, other: Tally) -> None:
        self.back += other.back
        self.ran_out += other.ran_out
        self.looks += other.looks

    @property
    def any(self) -> bool:
        return bool(self.back or self.ran_out or self.looks)


def files(paths: list[Path]) -> list[Path]:
    """The JSON files the paths name, a folder's sorted."""
    return [f for p in paths for f in (sorted(p.rglob("*.json")) if p.is_dir() else [p])]


def read_once(path: Path, seen: set[str]) -> str | None:
    """``path``'s text, or None where a file of the same content was read before (a kept copy
    of a folder): its digest joins ``seen``."""
    text = path.read_text(encoding="utf-8", errors="replace")
    digest = hashlib.sha256(text.encode()).hexdigest()
    if digest in seen:
        return None
    seen.add(digest)
    return text


def report_tests(text: str, where: str) -> tuple[TestOutcome, ...] | None:
    """The tests of one JSON file's ``text``; None for a file that is not a cudaperf report (no
    ``tests``: a baseline file, pytest-benchmark's JSON)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict) or "tests" not in data or "entries" in data:
        return None
    try:
        return Report.from_json(data, where).tests
    except ReportError:
        return None


def tally(text: str, where: str) -> Tally | None:
    """The waits the tests of one JSON file's ``text`` name; None for a file that is not a
    cudaperf report (:func:`report_tests`)."""
    tests = report_tests(text, where)
    if tests is None:
        return None
    found = Tally()
    for test in tests:
        for ended, seconds in waits(test.details):
            found.add(ended, seconds)
    return found


def bands(back: list[float]) -> str:
    """``≤ 5 s 75, 5–10 s 8, 10–15 s 1, 15–30 s 0`` (and ``> 30 s`` where any)."""
    counts, low = [], None
    for high in BANDS:
        n = sum(s <= high and (low is None or s > low) for s in back)
        counts.append(f"{'≤ ' if low is None else f'{low:g}–'}{high:g} s {n}")
        low = high
    beyond = sum(s > BANDS[-1] for s in back)
    return ", ".join(counts + ([f"> {BANDS[-1]:g} s {beyond}"] if beyond else []))


def seconds(values: list[float]) -> str:
    return ", ".join(f"{s:.1f}" for s in sorted(values, reverse=True)) + " s" if values else "none"


def lines(paths: list[Path]) -> list[str]:
    """The totals, then a line per report with a wait; each file read once, a content seen
    before (a kept copy of a folder) passed over."""
    total, each, skipped, seen = Tally(), [], 0, set[str]()
    found = files(paths)
    for report in found:
        text = read_once(report, seen)
        one = None if text is None else tally(text, str(report))
        if one is None:
            skipped += 1
            continue
        total.merge(one)
        if one.any:
            each.append(
                f"- {report}: {len(one.back)} back ({summed(one.back)}); "
                f"ran out: {seconds(one.ran_out)}; looks: {one.looks}"
            )
    read = len(found) - skipped
    out = [
        f"reports: {read} ({len(each)} with a wait; {skipped} other or repeated JSON files "
        "passed over)"
    ]
    if total.back:
        out.append(
            f"waits that met the host back: {len(total.back)}, {min(total.back):.1f}–"
            f"{max(total.back):.1f} s ({bands(total.back)})"
        )
    else:
        out.append("waits that met the host back: 0")
    out.append(f"waits that ran out: {len(total.ran_out)}: {seconds(total.ran_out)}")
    out.append(f"single looks in a spell: {total.looks}")
    return [*out, *each]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", type=Path, nargs="+", help="reports, or folders holding them")
    args = parser.parse_args(argv)
    for path in args.paths:
        if not path.exists():
            parser.error(f"PATH: {path} does not exist")
    print("\n".join(lines(args.paths)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
