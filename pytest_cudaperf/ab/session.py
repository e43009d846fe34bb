"""One ``cudaperf ab`` comparison: fresh pytest processes of the two sides in balanced order (ABBA),
pairs added until every series is decided or the budget is spent, fresh pairs of just the SLOWER
and FASTER tests to confirm them, then one profiling process per side for the kernels, and the
paired verdicts (:class:`~pytest_cudaperf.ab.result.AbResult`).

A SLOWER (or FASTER) stands only when it survives :data:`CONFIRM_PAIRS` fresh pairs of its own
tests: all the pairs together still say so, the fresh pairs alone show at least half the
minimum effect in the same direction, and none of them reads more than half the minimum effect
the other way. Three pairs whose ratios agree by chance make a narrow interval; with many series
in a suite one of them does (why: docs/decisions.md, "Why is a SLOWER from cudaperf ab
confirmed?")."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pytest_cudaperf.ab import prior
from pytest_cudaperf.ab.paired import (
    CONFIRM_PAIRS,
    MIN_PAIRS,
    Call,
    Paired,
    abba,
    compare_peaks,
    compare_times,
    leans,
    repeats,
)
from pytest_cudaperf.ab.result import AbResult, Compared, Process
from pytest_cudaperf.ab.sides import Side
from pytest_cudaperf.breakdown.diff import diff
from pytest_cudaperf.breakdown.model import Breakdown
from pytest_cudaperf.keys import SeriesKey
from pytest_cudaperf.report.document import Report, read_report
from pytest_cudaperf.report.fields import ReportError
from pytest_cudaperf.run import deselect
from pytest_cudaperf.series import TIME_UNITS, Record
from pytest_cudaperf.units import format_duration

#: (key, series) of a measured series
Ident = tuple[SeriesKey, str]
#: runs one pytest process of a side: (side, pytest arguments) -> (exit code, its output's end)
Runner = Callable[[Side, Sequence[str]], tuple[int, str]]


@dataclass(frozen=True)
class AbBudget:
    """How many pairs at most, how long in all (seconds), and whether pairs go on while a series
    is undecided though none leans toward a change (``until_decided``: ``cudaperf bisect``'s
    steps, which need a SAME to move on, and ``ab --until-decided``)."""

    pairs: int = 6
    seconds: float = 1800.0
    until_decided: bool = False


def progress(elapsed: float, processes: int, budget: AbBudget) -> str:
    """What a progress line says of the time: spent, what the pairs left take at this pace, and
    the ``--max-time`` budget, named as a budget (``30 min``), where it ends the run first."""
    pace = elapsed / max(processes, 1) * max(2 * budget.pairs - processes, 0)
    left = max(0.0, budget.seconds - elapsed)
    spent, limit = format_duration(elapsed), format_duration(budget.seconds)
    if pace <= left:
        return (
            f"{spent} elapsed, about {format_duration(pace)} more at this pace (--max-time {limit})"
        )
    return f"{spent} elapsed; --max-time {limit} ends it within {format_duration(left)}"


def _records(report: Report) -> tuple[dict[Ident, Record], list[str]]:
    """The series a process measured (tests whose body passed) and the tests that failed."""
    found: dict[Ident, Record] = {}
    failed = []
    for test in report.tests:
        if not test.body_passed:
            failed.append(test.nodeid)
            continue
        for judged in test.records:
            found[(judged.key, judged.series)] = judged.record
    return found, failed


@dataclass(frozen=True)
class SideRuns:
    """How the pytest processes of a comparison run: each side's checkout (``sides``), the
    arguments every process gets, the folder their reports and baselines go to, and what runs
    one (``runner``)."""

    sides: Mapping[str, Side]
    pytest_args: Sequence[str]
    scratch: Path
    runner: Runner


class AbSession:
    """The state of one comparison as its processes run."""

    def __init__(
        self,
        result: AbResult,
        runs: SideRuns,
        say: Callable[[str], None] = print,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.result = result
        self.sides = runs.sides
        self.args = list(runs.pytest_args)
        self.scratch = runs.scratch
        self.runner = runs.runner
        self.say = say
        self.clock = clock
        self.began = clock()
        #: per side, per pair: what that process measured
        self.measured: dict[str, list[dict[Ident, Record]]] = {"base": [], "head": []}
        self.failed: dict[str, set[str]] = {"base": set(), "head": set()}
        #: what the comparison is doing: its pairs, their confirmation, or the kernels' profiles
        self.phase = "pairs"

    def _process(self, side: str, pair: int, extra: Sequence[str]) -> Report | None:
        """One pytest process of ``side``; its report, or None when the side failed."""
        report = self.scratch / f"{side}-{pair}.json"
        args = [
            *self.args,
            f"--cudaperf-json={report}",
            f"--cudaperf-baseline-dir={self.scratch / f'baselines-{side}-{pair}'}",
            "--cudaperf-confirm-process=off",
            "-p",
            "no:cacheprovider",
            *extra,
        ]
        began = self.clock()
        rc, output = self.runner(self.sides[side], args)
        wall = self.clock() - began
        document = None
        if rc in (0, 1) and report.exists():
            try:
                document = read_report(report)
            except ReportError as exc:
                output = f"{output}\n{exc}".strip()
        self.result.processes.append(Process(side, pair, rc, wall, "" if document else output))
        if document is None:
            self.result.failed_side = side
            self.say(
                f"cudaperf ab: {side} ({self.sides[side].label}) failed: pytest exited {rc}"
                + (f"; its output ends:\n{_indent(output)}" if output else "")
            )
        return document

    def measure(self, budget: AbBudget) -> None:
        """Pairs in ABBA order until every time series is decided, or no undecided one
        :func:`~pytest_cudaperf.ab.paired.leans` toward a change (unless
        ``budget.until_decided``), or the budget is spent. From the :data:`MIN_PAIRS`-th pair
        on, a test whose every time series is decided (SLOWER, FASTER or SAME) is deselected
        from the pairs that follow: its call stands on the pairs that made it (why:
        docs/decisions.md, "Why does cudaperf ab stop measuring a decided test?"), and only the
        undecided tests pay for more pairs."""
        order = abba(budget.pairs)
        done: list[str] = []
        for pair in range(1, budget.pairs + 1):
            extra = ["--cudaperf-breakdown=off", *map(deselect.arg, done)]
            for side in order[2 * (pair - 1) : 2 * pair]:
                document = self._process(side, pair, extra)
                if document is None:
                    return
                found, failed = _records(document)
                self.measured[side].append(found)
                self.failed[side].update(failed)
                self._progress(side, pair, budget)
            if not self._compare() and not self.result.compared:
                self.result.stopped = "no series was measured on both sides"
                return
            if pair >= MIN_PAIRS:
                if not self._undecided():
                    return
                if pair < budget.pairs and not budget.until_decided and not self._leaning(budget):
                    self.result.stopped = (
                        f"stopped after {_pairs(pair)}: no undecided series leans toward a "
                        f"change that {_pairs(budget.pairs)} could show (--until-decided goes on)"
                    )
                    return
                done = self._decided_tests()
            per_pair = (self.clock() - self.began) / pair
            if pair < budget.pairs and self.clock() - self.began + per_pair > budget.seconds:
                self.result.stopped = (
                    f"stopped after {_pairs(pair)}: another would pass --max-time "
                    f"{format_duration(budget.seconds)}"
                )
                return
        if self._undecided():
            self.result.stopped = f"stopped after {_pairs(budget.pairs)} (--pairs)"

    def _undecided(self) -> list[Compared]:
        """The time series no call is made for yet (peak memory is exact: its first pair
        decides it, and a peak with no reading is not measured, which more pairs do not change)."""
        return [c for c in self.result.calls(Call.UNDECIDED) if c.unit in TIME_UNITS]

    def _leaning(self, budget: AbBudget) -> list[Compared]:
        """The undecided time series that keep the pairs going (:func:`leans`)."""
        return [
            c
            for c in self._undecided()
            if leans(c.paired.ratios, self.result.prior, budget.pairs, self.result.min_effect)
        ]

    def _decided_tests(self) -> list[str]:
        """The tests compared whose every time series is decided, sorted."""
        compared = {c.key.nodeid for c in self.result.compared}
        return sorted(compared - {c.key.nodeid for c in self._undecided()})

    def _progress(self, side: str, pair: int, budget: AbBudget) -> None:
        done = self.result.processes[-1]
        spent = progress(self.clock() - self.began, len(self.result.processes), budget)
        self.say(
            f"cudaperf ab: pair {pair} of at most {budget.pairs}, {side} "
            f"({self.sides[side].label}): pytest exited {done.rc} in "
            f"{format_duration(done.wall_s)}; {spent}"
        )

    def confirm(self) -> None:
        """:data:`CONFIRM_PAIRS` fresh pairs of the tests with a SLOWER or FASTER time series,
        every other test deselected; a call that does not hold on them becomes UNDECIDED and is
        listed in :attr:`AbResult.unconfirmed`. It runs even when ``--max-time`` is spent: a
        regression is worth its few processes, and no call is left unconfirmed."""
        suspects = {
            (c.key, c.series): c.paired.call
            for c in self.result.compared
            if c.unit in TIME_UNITS and c.paired.call in (Call.SLOWER, Call.FASTER)
        }
        if not suspects:
            return
        self.phase = "confirming"
        tests = {key.nodeid for key, _ in suspects}
        seen = {i[0].nodeid for side in self.measured.values() for found in side for i in found}
        seen |= self.failed["base"] | self.failed["head"]
        extra = ["--cudaperf-breakdown=off", *map(deselect.arg, sorted(seen - tests))]
        first = min(len(self.measured["base"]), len(self.measured["head"]))
        order = abba(CONFIRM_PAIRS)
        for k in range(CONFIRM_PAIRS):
            for side in order[2 * k : 2 * k + 2]:
                document = self._process(side, first + k + 1, extra)
                if document is None:
                    return
                found, failed = _records(document)
                self.measured[side].append(found)
                self.failed[side].update(failed)
                self.say(
                    f"cudaperf ab: confirming {len(suspects)} series, pair {k + 1} of "
                    f"{CONFIRM_PAIRS}, {side}: pytest exited {self.result.processes[-1].rc}"
                )
        self._compare()
        fresh = range(first, first + CONFIRM_PAIRS)
        kept = []
        for c in self.result.compared:
            call = c.paired.call
            decided = call in (Call.SLOWER, Call.FASTER)
            holds = decided and (c.unit not in TIME_UNITS or self._confirmed(c, fresh))
            was = suspects.get((c.key, c.series))
            if was is not None and not (holds and call is was):
                self.result.unconfirmed.append(f"{_label((c.key, c.series))} ({was.name})")
            kept.append(_withdrawn(c) if decided and not holds else c)
        self.result.compared = kept

    def stopped_early(self) -> bool:
        """The result as it stands where the comparison was stopped (Ctrl-C, SIGTERM): the calls
        of the pairs that had ended, each SLOWER or FASTER time series withdrawn (UNDECIDED)
        unless its confirming pairs had all ended, and :attr:`AbResult.stopped` saying so; in
        the kernels' profiles, the calls as they stand. False where no series had been compared
        on both sides (nothing to say)."""
        result = self.result
        if not result.compared:
            return False
        if self.phase == "profiling":
            result.stopped = "stopped while the kernels were profiled: the calls stand, no kernels"
            return True
        pairs = max(c.paired.pairs for c in result.compared)
        pending = [
            c
            for c in result.compared
            if c.unit in TIME_UNITS and c.paired.call in (Call.SLOWER, Call.FASTER)
        ]
        result.compared = [_withdrawn(c) if c in pending else c for c in result.compared]
        withdrawn = [f"{_label((c.key, c.series))} ({c.paired.call.name})" for c in pending]
        result.stopped = f"stopped after {_pairs(pairs)}: the calls of the pairs that had ended" + (
            "; not confirmed, so UNDECIDED: " + ", ".join(withdrawn) if withdrawn else ""
        )
        return True

    def _confirmed(self, c: Compared, fresh: range) -> bool:
        """Whether the fresh pairs alone, every one of them measured, repeat the call
        (:func:`~pytest_cudaperf.ab.paired.repeats`)."""
        b, h = c.base[fresh.start : fresh.stop], c.head[fresh.start : fresh.stop]
        alone = compare_times(
            [r.median if r else None for r in b],
            [r.median if r else None for r in h],
            self.result.min_effect,
            ([r.sm_mhz if r else None for r in b], [r.sm_mhz if r else None for r in h]),
        )
        if alone.pairs != len(fresh):
            return False
        return repeats(c.paired.call, alone.ratios, self.result.min_effect)

    def _compare(self) -> bool:
        """The paired verdict of every series measured on both sides so far; False when none."""
        pairs = min(len(self.measured["base"]), len(self.measured["head"]))
        base, head = self.measured["base"][:pairs], self.measured["head"][:pairs]
        on_base = {i for found in base for i in found}
        on_head = {i for found in head for i in found}
        failed = self.failed["base"] | self.failed["head"]
        both = []
        for ident in sorted(on_base & on_head):
            if ident[0].nodeid in failed:
                continue
            b = tuple(found.get(ident) for found in base)
            h = tuple(found.get(ident) for found in head)
            unit = next(r.unit for r in (*b, *h) if r is not None)
            both.append((ident, unit, b, h))
        # the pair noise the time series share (its prior), then each series' call weighed with it
        alone = [self._paired(*series, None) for series in both]
        shared = prior.fit(
            [
                own
                for c in alone
                if c.unit in TIME_UNITS and (own := prior.log_variance(c.paired.ratios))
            ]
        )
        self.result.prior = shared
        self.result.compared = [
            self._paired(*series, shared) if shared is not None and c.unit in TIME_UNITS else c
            for series, c in zip(both, alone, strict=True)
        ]
        self.result.only_base = [_label(i) for i in sorted(on_base - on_head)]
        self.result.only_head = [_label(i) for i in sorted(on_head - on_base)]
        self.result.failed_tests = {
            side: sorted(tests) for side, tests in self.failed.items() if tests
        }
        return bool(self.result.compared)

    def _paired(
        self,
        ident: Ident,
        unit: str,
        b: tuple[Record | None, ...],
        h: tuple[Record | None, ...],
        shared: prior.Prior | None,
    ) -> Compared:
        base = [r.recording.median if r else None for r in b]
        head = [r.recording.median if r else None for r in h]
        if unit == "bytes":
            paired = compare_peaks(base, head)
        else:
            b_mhz, h_mhz = ([r.recording.sm_mhz if r else None for r in s] for s in (b, h))
            paired = compare_times(base, head, self.result.min_effect, (b_mhz, h_mhz), shared)
        return Compared(ident[0], ident[1], unit, tuple(r.recording if r else None for r in b),
                        tuple(r.recording if r else None for r in h), paired)  # fmt: skip

    def profile(self) -> None:
        """One more process per side, profiling only (its timings dropped): whether both sides
        launched the same kernels, and what differs for a SLOWER series."""
        self.phase = "profiling"
        breakdowns: dict[str, dict[Ident, Breakdown]] = {}
        for side in ("base", "head"):
            document = self._process(side, 0, ["--cudaperf-update", "--cudaperf-breakdown=auto"])
            if document is None:
                return
            found, _ = _records(document)
            breakdowns[side] = {}
            for ident, record in found.items():
                if record.breakdown is not None:
                    try:
                        breakdowns[side][ident] = Breakdown.from_json(record.breakdown)
                    except ValueError:
                        continue
        updated = []
        for c in self.result.compared:
            b = breakdowns["base"].get((c.key, c.series))
            h = breakdowns["head"].get((c.key, c.series))
            if b is None or h is None or b.backend != h.backend:
                updated.append(c)
                continue
            same = _launches(b) == _launches(h)
            lines = tuple(diff(b, h).lines(8)) if c.paired.call is Call.SLOWER else ()
            named = bool(b.entries or h.entries)  # pure Python code launches no op at all
            words = "" if not named else f"same {b.unit}" if same else f"{b.unit} differ"
            updated.append(
                Compared(c.key, c.series, c.unit, c.base, c.head, c.paired, words, lines)
            )
        self.result.compared = updated


def _withdrawn(c: Compared) -> Compared:
    """``c`` with its call withdrawn: UNDECIDED, its pairs as they were."""
    p = c.paired
    return dataclasses.replace(c, paired=Paired(p.ratios, p.ratio, p.ci, Call.UNDECIDED, p.cycles))


def _launches(b: Breakdown) -> dict[str, float]:
    """The kernels (ops) a breakdown names and how often each ran per call."""
    found = {e.key: round(e.launches, 2) for e in b.entries}
    found.update(dict.fromkeys(b.other.keys, 0.0))
    return found


def _pairs(n: int) -> str:
    return f"{n} pair" if n == 1 else f"{n} pairs"


def _label(ident: Ident) -> str:
    key, series = ident
    return f"{key} {{{series}}}"


def _indent(text: str, lines: int = 15) -> str:
    return "\n".join(f"    {line}" for line in text.strip().splitlines()[-lines:])
