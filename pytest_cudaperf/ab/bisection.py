"""The bisection behind ``cudaperf bisect``, pure: the commits of a range, oldest first; which one
to measure next; what a step's paired comparison says of its candidate (bad, good, skip or
undecided); and where the first bad commit lies once nothing is left to measure.

A range is the good commit, then every commit after it up to the bad one (on the bad commit's
first-parent line by default, so a merge is one commit, as a nightly history sees it). The next
candidate is the commit nearest the middle of the open interval between the last good and the
first bad commit known, leaving out the skipped ones (a commit that does not build, import, or
whose tests fail: ``git bisect skip``); none left means the bisection is over: the first bad
commit is the bad end of the interval, or, where skipped commits sit just before it, one of
them or it (named, never guessed).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from enum import Enum

from pytest_cudaperf.ab.paired import Call
from pytest_cudaperf.ab.result import AbResult, Compared
from pytest_cudaperf.series import TIME_UNITS


class Mark(str, Enum):
    """What a step says of its candidate commit."""

    BAD = "bad"  #: the concerned series is SLOWER than on the last good commit (confirmed)
    GOOD = "good"  #: SAME or FASTER
    SKIP = "skip"  #: its run failed, its tests failed, or it does not have them
    UNDECIDED = "undecided"  #: neither: the bisection stops there


def commit_range(good: str, listed: str) -> tuple[str, ...]:
    """The range from ``git rev-list --reverse [--first-parent] GOOD..BAD``'s output (oldest
    first, the bad commit last), the good commit put first."""
    return (good, *(line.strip() for line in listed.splitlines() if line.strip()))


@dataclass
class Bisection:
    """Where a bisection stands over ``commits`` (the good one first, the bad one last)."""

    commits: tuple[str, ...]
    #: the index of the last commit known good, of the first known bad
    good: int = 0
    bad: int = -1
    skipped: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        if len(self.commits) < 2:
            raise ValueError("a bisection needs a good and a bad commit")
        if self.bad < 0:
            self.bad = len(self.commits) - 1

    def _open(self) -> list[int]:
        return [i for i in range(self.good + 1, self.bad) if i not in self.skipped]

    def candidate(self) -> str | None:
        """The commit to measure next: the one nearest the middle of the interval, skipped ones
        left out (the earlier of two as near); None when none is left."""
        inside = self._open()
        if not inside:
            return None
        middle = (self.good + self.bad) / 2
        return self.commits[min(inside, key=lambda i: (abs(i - middle), i))]

    def mark(self, commit: str, mark: Mark) -> None:
        """Record what a step said of ``commit`` (UNDECIDED is not a mark: the bisection stops)."""
        i = self.commits.index(commit)
        if not self.good < i < self.bad:
            raise ValueError(f"{commit} is not inside the interval still searched")
        if mark is Mark.BAD:
            self.bad = i
        elif mark is Mark.GOOD:
            self.good = i
        elif mark is Mark.SKIP:
            self.skipped.add(i)
        else:
            raise ValueError("an undecided step stops the bisection; it marks nothing")

    @property
    def last_good(self) -> str:
        return self.commits[self.good]

    @property
    def first_bad(self) -> str:
        """The first commit known bad (the answer once :meth:`candidate` is None, unless
        :meth:`suspects` names more than it)."""
        return self.commits[self.bad]

    def suspects(self) -> list[str]:
        """Once no candidate is left: the commits one of which is the first bad one; one commit
        when no skipped commit sits between the last good and the first bad."""
        return [self.commits[i] for i in range(self.good + 1, self.bad + 1)]

    def steps_left(self) -> int:
        """The steps at most still needed when no further commit is skipped."""
        return math.ceil(math.log2(len(self._open()) + 1))


def concerned(
    result: AbResult, tests: Collection[str], series: str | None = None
) -> list[Compared]:
    """The series of a step's comparison that decide it: those of ``tests`` (node ids; all when
    empty) and of ``series`` when given, else their time series."""
    return [
        c
        for c in result.compared
        if (not tests or c.key.nodeid in tests)
        and (c.series == series if series else c.unit in TIME_UNITS)
    ]


def step_mark(result: AbResult, tests: Collection[str], series: str | None = None) -> Mark:
    """What a step's comparison (base: the last good commit, head: the candidate) says of the
    candidate: SKIP when its side's run failed, a concerned test failed on it, or no concerned
    series was measured on both sides; BAD when a concerned series is SLOWER (after ab's
    confirmation); GOOD when every one is SAME or FASTER; otherwise UNDECIDED (a concerned test
    that failed on the good side, where it passed before, is UNDECIDED too)."""
    if result.failed_side == "head":
        return Mark.SKIP
    if any(not tests or t in tests for t in result.failed_tests.get("base", ())):
        return Mark.UNDECIDED
    if any(not tests or t in tests for t in result.failed_tests.get("head", ())):
        return Mark.SKIP
    found = concerned(result, tests, series)
    if not found:
        return Mark.SKIP
    calls = [c.paired.call for c in found]
    if Call.SLOWER in calls:
        return Mark.BAD
    if all(c in (Call.SAME, Call.FASTER) for c in calls):
        return Mark.GOOD
    return Mark.UNDECIDED


def worst(found: Sequence[Compared]) -> Compared | None:
    """The concerned series that decided a step: the SLOWER one with the largest change, else
    the one with the largest change."""
    if not found:
        return None
    slower = [c for c in found if c.paired.call is Call.SLOWER] or list(found)
    return max(slower, key=lambda c: c.paired.ratio if math.isfinite(c.paired.ratio) else 0.0)
