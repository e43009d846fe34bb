"""What a budget for the waits of a process would have changed in judged runs: the runs' waits
for the host's state replayed in their tests' order, a wait that starts past the budget (the
waits so far over one ``--cudaperf-state-wait`` limit and ``--share`` of the process's time so
far) taken as a single look of half a second.

    python benchmarks/public_suites/wait_budget.py RUN [RUN ...] [--share 0.1] [--limit 15]
    python benchmarks/public_suites/wait_budget.py RUN [RUN ...] --defer-after 5

``--defer-after S`` replays instead the waits cut at S seconds, each longer one leaving its test
to the loop's fresh process (``hoststate.DEFER_AFTER_S``): the waits it cuts, in vain or back
later (where that test failed, a catch the next fresh process must confirm), the seconds of
waiting saved, and the runs that had no fresh process before (each would start one). What the
fresh process then spends measuring those tests is not counted.

A RUN is a judged run's ``--cudaperf-json`` report beside its JUnit file
(``judged-at-defaults.sh``'s step folder: ``report.json`` and ``*-junit.xml``;
``bench_suite.py``'s ``NAME.json`` and
``NAME.xml``), or a folder holding such runs. A report found twice (a kept copy of a folder)
counts once. The clock is the tests' JUnit times added up, from the first test; the waits are
read from the lines they leave in a test's details (:func:`defaults_table.waits`), each taken
where its test started. A wait the budget would have turned into a look costs half a second;
one that had met the host back later than that would have left its test INCONCLUSIVE, and where
that test failed (a planted run's catch) it is counted as a catch at stake. Prints one line per
run and the totals: the evidence for why the waits have no such budget (docs/decisions.md, "Why
does a host-bound change read in the host's other state wait for it?").
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent.parent))

from public_suites.defaults_table import junit_name, waits  # noqa: E402
from public_suites.tally_waits import files, read_once, report_tests  # noqa: E402

from pytest_cudaperf.run.confirm import WHERE  # noqa: E402
from pytest_cudaperf.run.hoststate import POLL_S  # noqa: E402
from pytest_cudaperf.verdict import Kind  # noqa: E402


@dataclass
class Replayed:
    """What the budget would have done to one run's waits, or to all of them."""

    runs: int = 0
    waits: int = 0
    waited_s: float = 0.0
    looked_back: int = 0
    looked_in_vain: int = 0
    saved_s: float = 0.0
    catches: int = 0
    wall_s: float = 0.0

    def merge(self, other: Replayed) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def line(self) -> str:
        return (
            f"{self.waits} waits ({self.waited_s:.0f} s of {self.wall_s:.0f} s of tests); past the "
            f"budget: {self.looked_in_vain} in vain, {self.looked_back} back "
            f"({self.catches} of them a failing test's); {self.saved_s:.0f} s saved"
        )


def runs(paths: list[Path]) -> list[tuple[Path, Path]]:
    """The (report, JUnit file) pairs the paths name (:func:`tally_waits.files`): the JUnit file
    of the same name, else the folder's ``*-junit.xml``."""
    found = []
    for report in files(paths):
        junit = report.with_suffix(".xml")
        if not junit.exists():
            junit = next(iter(sorted(report.parent.glob("*-junit.xml"))), junit)
        if junit.exists():
            found.append((report, junit))
    return found


#: one test of a run: its JUnit time, the waits its details name, whether it failed a time series
Played = tuple[float, list[tuple[str, float]], bool]


def tests_in_order(text: str, report: Path, junit: Path) -> list[Played]:
    """Each test of the JUnit file in its order: its time, the waits its details name, whether
    it failed a time series (REGRESSION); [] where ``text`` (``report``'s) is not a cudaperf
    report (:func:`tally_waits.report_tests`)."""
    by_name = {junit_name(t.nodeid): t for t in report_tests(text, str(report)) or ()}
    if not by_name:
        return []
    found: list[Played] = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        test = by_name.get(f"{case.get('classname')}::{case.get('name')}")
        if test is None:
            found.append((float(case.get("time") or 0.0), [], False))
            continue
        failed = any(
            r.verdict.kind is Kind.REGRESSION for r in test.records if r.series.startswith("time:")
        )
        found.append((float(case.get("time") or 0.0), waits(test.details), failed))
    return found


def waits_of(tests: list[Played], out: Replayed) -> Iterator[tuple[float, str, float, bool]]:
    """Each wait of the run's tests (its looks passed over) with the time of the tests before
    it, each counted in ``out``, whose ``wall_s`` ends as the tests' time."""
    clock = 0.0
    for seconds, found, failed in tests:
        for ended, waited in found:
            if ended == "looked once":
                continue
            out.waits += 1
            out.waited_s += waited
            yield clock, ended, waited, failed
        clock += seconds
    out.wall_s = clock


def replay(tests: list[Played], share: float, limit_s: float) -> Replayed:
    """The run's waits against the budget, each taken where its test started."""
    spent = 0.0
    out = Replayed(runs=1)
    for clock, ended, waited, failed in waits_of(tests, out):
        if spent <= limit_s + share * clock:
            spent += waited
            continue
        spent += POLL_S
        out.saved_s += max(0.0, waited - POLL_S)
        if ended != "back":
            out.looked_in_vain += 1
        elif waited > POLL_S:  # a look of one poll finds a host back within it
            out.looked_back += 1
            out.catches += failed
    return out


def deferred(tests: list[Played], after_s: float) -> Replayed:
    """The run's waits cut at ``after_s``: ``looked_back`` and ``looked_in_vain`` count the waits
    it cuts (that met the host back later, that ran out), ``catches`` those of a failing test."""
    out = Replayed(runs=1)
    for _, ended, waited, failed in waits_of(tests, out):
        if waited <= after_s:
            continue
        out.saved_s += waited - after_s
        if ended == "back":
            out.looked_back += 1
            out.catches += failed
        else:
            out.looked_in_vain += 1
    return out


def deferred_line(replayed: Replayed, started: int) -> str:
    """One line for ``--defer-after``: ``started`` runs would start a fresh process."""
    cut = replayed.looked_back + replayed.looked_in_vain
    return (
        f"{replayed.waits} waits ({replayed.waited_s:.0f} s of {replayed.wall_s:.0f} s of tests); "
        f"cut: {cut} ({replayed.looked_in_vain} in vain, {replayed.looked_back} back later, "
        f"{replayed.catches} of them a failing test's); {replayed.saved_s:.0f} s saved; "
        f"{started} runs without a fresh process would start one"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", type=Path, nargs="+", help="runs, or folders holding them")
    parser.add_argument("--share", type=float, default=0.1, help="the budget's share of the time")
    parser.add_argument("--limit", type=float, default=15.0, help="the state wait's limit, s")
    parser.add_argument(
        "--defer-after", type=float, default=None, metavar="S", help="replay waits cut at S s"
    )
    args = parser.parse_args(argv)
    for path in args.paths:
        if not path.exists():
            parser.error(f"RUN: {path} does not exist")
    total, seen, started = Replayed(), set[str](), 0
    for report, junit in runs(args.paths):
        text = read_once(report, seen)
        tests = [] if text is None else tests_in_order(text, report, junit)
        if not tests:
            continue
        if args.defer_after is None:
            one = replay(tests, args.share, args.limit)
            said = one.line()
        else:
            one = deferred(tests, args.defer_after)
            starts = int(bool(one.looked_back + one.looked_in_vain) and WHERE not in (text or ""))
            started += starts
            said = deferred_line(one, starts)
        total.merge(one)
        print(f"- {report}: {said}")
    said = total.line() if args.defer_after is None else deferred_line(total, started)
    print(f"{total.runs} runs: {said}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
