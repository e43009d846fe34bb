"""``cudaperf bisect --good REV --bad REV [-- PYTEST_ARGS]`` (or ``--history DB --test NODEID
[--series NAME]``: the latest unconfirmed step of that test in the run history): the first commit
that made the tests slower, each step a ``cudaperf ab`` of only those tests between the last good
commit and the candidate (worktrees, alternating fresh processes, the paired rule and its
confirmation), with :mod:`pytest_cudaperf.ab.bisection` choosing the candidates.

Exit codes: 0 no change (nothing slower between good and bad), 1 the first bad commit named, 2
bad input (one line), 3 a run of the good or the bad end failed (named, with its output), 4 no
commit named: a step was UNDECIDED, or skipped commits leave several candidates (each named),
130 interrupted, 143 terminated (SIGTERM); no worktree is left behind either way, and once the
bad end was found slower a line says where the first bad commit lies and how to go on from there.
"""

from __future__ import annotations

import datetime
import math
import re
import subprocess
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from pytest_cudaperf.ab.bisection import Bisection, Mark, commit_range, concerned, step_mark, worst
from pytest_cudaperf.ab.paired import Call
from pytest_cudaperf.ab.result import AbResult, Compared, lines
from pytest_cudaperf.ab.sides import SideError, git, repository, resolve
from pytest_cudaperf.cli.ab import Request, Runner, check, measure, run_side
from pytest_cudaperf.cli.sources import CliError
from pytest_cudaperf.history.backends import is_url
from pytest_cudaperf.history.regressions import STEP, Regression, regressions
from pytest_cudaperf.history.store import Confirmation, HistoryError, open_store
from pytest_cudaperf.units import format_pct
from pytest_cudaperf.verdict import ci_text

NO_CHANGE_EXIT = 0
FOUND_EXIT = 1
ENDS_FAILED_EXIT = 3
UNDECIDED_EXIT = 4


@dataclass(frozen=True)
class BisectRequest:
    """``cudaperf bisect``'s arguments: the range (two revisions, or a history's step), the
    tests, and ab's knobs (``ab``: its :class:`~pytest_cudaperf.cli.ab.Request`, its base and
    head left out: each step sets them)."""

    good: str | None
    bad: str | None
    history: str | None
    test: str | None
    series: str | None
    ab: Request
    first_parent: bool = True


@dataclass(frozen=True)
class Range:
    good: str
    bad: str
    #: the step of the history it came from, where it did
    step: Regression | None = None


def _selects(args: Sequence[str]) -> bool:
    """Whether pytest arguments name tests (a node id, a file or a folder)."""
    return any("::" in a or a.endswith(".py") or Path(a).is_dir() for a in args)


def _from_history(request: BisectRequest) -> Range:
    db = request.history or ""
    if not is_url(db) and not Path(db).is_file():
        raise CliError(f"bisect: --history: {db}: no such history file")
    try:
        with open_store(db) as store:
            found = regressions(store)
    except HistoryError as exc:
        raise CliError(f"bisect: --history: {exc}") from None
    steps = [
        r
        for r in found
        if r.kind == STEP
        and r.series[1] == request.test
        and (request.series is None or r.series[3] == request.series)
    ]
    open_steps = [r for r in steps if r.confirmed is None]
    if not open_steps:
        what = f"{request.test}" + (f" {{{request.series}}}" if request.series else "")
        why = "every one is confirmed already" if steps else "history regressions lists none"
        raise CliError(f"bisect: no unconfirmed step of {what} in {db} ({why})")
    latest = max(open_steps, key=lambda r: r.date)
    return Range(latest.last_good, latest.first_bad, latest)


def _range(request: BisectRequest) -> Range:
    if request.history is not None:
        if request.good or request.bad:
            raise CliError("bisect: give --good and --bad, or --history with --test, not both")
        if not request.test:
            raise CliError("bisect: --history needs --test NODEID (the test whose step to bisect)")
        return _from_history(request)
    if not request.good or not request.bad:
        raise CliError("bisect: give --good REV and --bad REV, or --history DB --test NODEID")
    return Range(request.good, request.bad)


def commits_between(repo: Path, good: str, bad: str, first_parent: bool) -> tuple[str, ...]:
    """The range a bisection searches: ``good``, then the commits after it up to ``bad`` (its
    first-parent line, else every commit between them in topological order), oldest first."""
    known = subprocess.run(
        ["git", "-C", str(repo), "merge-base", "--is-ancestor", good, bad],
        capture_output=True,
        check=False,
    )
    if known.returncode != 0:
        raise SideError(f"the good commit {good[:9]} is not an ancestor of the bad one {bad[:9]}")
    if good == bad:
        raise SideError(f"--good and --bad are the same commit ({good[:9]}): nothing to bisect")
    how = ["--first-parent"] if first_parent else ["--topo-order", "--ancestry-path"]
    return commit_range(good, git(repo, "rev-list", "--reverse", *how, f"{good}..{bad}"))


def subject(repo: Path, commit: str) -> str:
    return git(repo, "log", "-1", "--format=%s", commit)


def _change(found: Sequence[Compared]) -> str:
    c = worst(found)
    if c is None or not math.isfinite(c.paired.ratio):
        return "no series measured"
    ci = c.paired.ci
    interval = f" ({ci_text(ci)})" if all(map(math.isfinite, ci)) else ""
    return f"{c.paired.call.name} {format_pct(c.paired.ratio - 1)}{interval}"


class Bisector:
    """One bisection as it runs: the steps' comparisons, their progress lines."""

    def __init__(self, request: BisectRequest, runner: Runner, say: Callable[[str], None]) -> None:
        self.request = request
        self.runner = runner
        self.say = say
        self.cwd = Path.cwd()
        self.repo = repository(self.cwd)
        self.tests = [request.test] if request.test else []
        args = list(request.ab.pytest_args)
        if request.test and not _selects(args):
            args.append(request.test)
        self.ab = replace(
            request.ab, pytest_args=args, kernels_when_slower=True, until_decided=True
        )
        self.steps = 0
        #: per bad commit, the comparison that found it bad
        self.found: dict[str, AbResult] = {}

    def step(self, good: str, candidate: str, left: str) -> tuple[Mark, AbResult | None]:
        """One ab of the concerned tests: the last good commit against the candidate."""
        self.steps += 1
        name = f"{candidate[:9]} {subject(self.repo, candidate)}"
        self.say(f"cudaperf bisect: step {self.steps}{left}: {name}, against {good[:9]}")
        request = replace(self.ab, base=good, head=candidate)
        try:
            result = measure(request, self.cwd, self.runner, lambda line: self.say(f"  {line}"))
        except SideError as exc:  # the candidate's --setup failed
            self.say(f"  cudaperf bisect: {exc}")
            return Mark.SKIP, None
        if result.failed_side == "base":
            raise _EndFailedError(f"the good commit {good[:9]}'s run failed; its output is above")
        mark = step_mark(result, self.tests, self.request.series)
        if mark is Mark.BAD:
            self.found[candidate] = result
        return mark, result


class _EndFailedError(Exception):
    pass


#: what ``--series`` names: a kind and what of it (``time:device/cold``, ``time:host``,
#: ``memory:peak``)
SERIES_FORM = re.compile(r"^(time|memory):[\w.-]+(/[\w.-]+)?$")


def _not_measured(
    result: AbResult | None, tests: Collection[str], series: str | None, bad: str
) -> str:
    """Why the first step decides nothing: where both sides ran, no series it is asked about
    was measured on both (the series each had are named); else the bad commit's run failed."""
    if result is None or result.failed_side or result.failed_tests.get("head"):
        return f"the bad commit {bad[:9]} cannot be measured: nothing to bisect"
    had = sorted({c.series for c in result.compared if not tests or c.key.nodeid in tests})
    what = f"series {series}" if series else "time series"
    of = f" of {', '.join(sorted(tests))}" if tests else ""
    return (
        f"no {what}{of} was measured on both sides (they measured "
        f"{', '.join(had) or 'none'}): nothing to bisect; --series chooses one"
    )


def cmd_bisect(
    request: BisectRequest, runner: Runner = run_side, say: Callable[[str], None] = print
) -> int:
    try:
        check(replace(request.ab, base=request.good or "good"))
    except CliError as exc:
        raise CliError(f"bisect: {str(exc).removeprefix('ab: ')}") from None
    if request.series is not None and not SERIES_FORM.match(request.series):
        raise CliError(
            "bisect: --series: expected a series such as time:device/cold, time:host or "
            f"memory:peak, got {request.series!r}"
        )
    chosen = _range(request)
    try:
        return _bisect(request, chosen, runner, say)
    except SideError as exc:
        raise CliError(f"bisect: {exc}" + (f"\n{exc.output}" if exc.output else "")) from None


def _bisect(
    request: BisectRequest, chosen: Range, runner: Runner, say: Callable[[str], None]
) -> int:
    if chosen.step is not None and request.series is None:
        # the history's step is of one series: that series decides each step
        request = replace(request, series=chosen.step.series[3])
    bisector = Bisector(request, runner, say)
    repo = bisector.repo
    good, bad = resolve(repo, chosen.good), resolve(repo, chosen.bad)
    bisection = Bisection(commits_between(repo, good, bad, request.first_parent))
    where = f" (the step of {chosen.step.series[1]} in the history)" if chosen.step else ""
    say(
        f"cudaperf bisect: {len(bisection.commits) - 1} commits after {good[:9]} up to "
        f"{bad[:9]}{where}; first: is {bad[:9]} slower than {good[:9]}?"
    )
    try:
        mark, result = bisector.step(good, bad, "")
    except _EndFailedError as exc:
        say(f"cudaperf bisect: {exc}")
        return ENDS_FAILED_EXIT
    found = concerned(result, bisector.tests, request.series) if result else []
    if mark is Mark.SKIP:
        say(f"cudaperf bisect: {_not_measured(result, bisector.tests, request.series, bad)}")
        return ENDS_FAILED_EXIT
    if mark is Mark.UNDECIDED:
        say(
            f"cudaperf bisect: UNDECIDED at step 1 ({bad[:9]} against {good[:9]}): {_change(found)}"
        )
        return UNDECIDED_EXIT
    if mark is Mark.GOOD:
        say(
            f"cudaperf bisect: no change: {bad[:9]} is not slower than {good[:9]} "
            f"({_change(found)})"
        )
        return NO_CHANGE_EXIT
    say(f"cudaperf bisect: {bad[:9]} is slower: {_change(found)}")
    try:
        return _narrow(bisector, bisection, chosen)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: where it stands, then 130 or 143
        say(
            f"cudaperf bisect: stopped at step {bisector.steps}: the first bad commit is after "
            f"{bisection.last_good[:9]}, at or before {bisection.first_bad[:9]} "
            f"({bisection.bad - bisection.good} commits); to go on from there: --good "
            f"{bisection.last_good} --bad {bisection.first_bad}"
        )
        raise


def _narrow(bisector: Bisector, bisection: Bisection, chosen: Range) -> int:
    """The steps after the first (the bad end found slower), until one commit is left."""
    say, request = bisector.say, bisector.request
    while (candidate := bisection.candidate()) is not None:
        left = f" (about {bisection.steps_left()} left)"
        try:
            mark, result = bisector.step(bisection.last_good, candidate, left)
        except _EndFailedError as exc:
            say(f"cudaperf bisect: {exc}")
            return ENDS_FAILED_EXIT
        found = concerned(result, bisector.tests, request.series) if result else []
        if mark is Mark.UNDECIDED:
            say(
                f"cudaperf bisect: UNDECIDED at step {bisector.steps} ({candidate[:9]} against "
                f"{bisection.last_good[:9]}): {_change(found)}; no commit named"
            )
            return UNDECIDED_EXIT
        bisection.mark(candidate, mark)
        interval = f"{bisection.last_good[:9]}..{bisection.first_bad[:9]}"
        what = {Mark.BAD: "bad", Mark.GOOD: "good", Mark.SKIP: "skipped (its run failed)"}[mark]
        change = f" {_change(found)}," if mark is not Mark.SKIP else ""
        say(
            f"cudaperf bisect: step {bisector.steps}: {candidate[:9]} {what},{change} "
            f"now {interval}"
        )
    return _report(bisector, bisection, chosen)


def _report(bisector: Bisector, bisection: Bisection, chosen: Range) -> int:
    say, repo = bisector.say, bisector.repo
    suspects = bisection.suspects()
    if len(suspects) > 1:
        say(
            f"cudaperf bisect: no single commit: the first bad one is one of these (the others "
            f"could not be measured), after {bisection.last_good[:9]}:"
        )
        for commit in suspects:
            say(f"  {commit[:9]} {subject(repo, commit)}")
        return UNDECIDED_EXIT
    first = bisection.first_bad
    result = bisector.found[first]
    found = concerned(result, bisector.tests, bisector.request.series)
    say(f"cudaperf bisect: first bad commit: {first} {subject(repo, first)}")
    say(
        f"cudaperf bisect: the change at it: {_change(found)} against {result.base.label}, "
        f"{bisector.steps} steps"
    )
    for line in lines(result):
        say(line)
    if chosen.step is not None and bisector.request.history:
        _confirm(bisector, chosen.step, first, found)
    return FOUND_EXIT


def _confirm(bisector: Bisector, step: Regression, first: str, found: Sequence[Compared]) -> None:
    c = next(
        (x for x in found if x.series == step.series[3] and x.paired.call is Call.SLOWER), None
    )
    c = c or worst(found)
    ratio = c.paired.ratio if c is not None else math.nan
    lo, hi = c.paired.ci if c is not None else (math.nan, math.nan)
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    confirmation = Confirmation(
        step.series,
        step.first_bad,
        step.last_good,
        first,
        subject(bisector.repo, first),
        ratio - 1,
        lo - 1 if math.isfinite(lo) else None,
        hi - 1 if math.isfinite(hi) else None,
        now,
    )
    try:
        with open_store(bisector.request.history or "") as store:
            store.confirm(confirmation)
    except HistoryError as exc:
        raise CliError(f"bisect: --history: {exc}") from None
    bisector.say(
        f"cudaperf bisect: the step {step.last_good[:10]} → {step.first_bad[:10]} of "
        f"{step.series[1]} marked confirmed at {first[:10]} in the history"
    )
