"""``cudaperf ab --base REV [--head REV] [-- PYTEST_ARGS]``: is the head side slower than the base
side, on this machine, now? Both measured in alternating fresh pytest processes, judged pair by
pair; no stored baseline.

Exit codes: 0 nothing slower, 1 a series SLOWER (or using more memory) on head, 2 bad input (one
line), 3 a side's run failed or crashed (named, with its output), 130 interrupted, 143
terminated (SIGTERM); stopped once a pair had ended, it first prints (and writes) the calls of the
pairs that had ended, a SLOWER or FASTER whose confirmation had not ended withdrawn.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from pytest_cudaperf import atomic
from pytest_cudaperf.ab.paired import MIN_PAIRS, Call
from pytest_cudaperf.ab.result import AbResult, SideInfo, github_summary, lines
from pytest_cudaperf.ab.session import AbBudget, AbSession, SideRuns
from pytest_cudaperf.ab.sides import (
    Side,
    SideError,
    check_imports,
    dirty,
    own_paths,
    repository,
    resolve,
    run_setup,
    worktrees,
)
from pytest_cudaperf.cli.process import run_in_session
from pytest_cudaperf.cli.sources import CliError, has_option
from pytest_cudaperf.paths import unwritable

#: exit codes of ``cudaperf ab``
SLOWER_EXIT = 1
USAGE_EXIT = 2
SIDE_FAILED_EXIT = 3

#: runs one pytest process of a side: (side, pytest arguments) -> (exit code, its output)
Runner = Callable[[Side, Sequence[str]], tuple[int, str]]


def run_side(side: Side, args: Sequence[str]) -> tuple[int, str]:
    """The default :data:`Runner`: ``PYTHON -m pytest ARGS`` in the side's folder and
    environment, in a session of its own (:func:`run_in_session`: a Ctrl-C or SIGTERM reaches
    ``cudaperf ab`` alone, which stops it); its output kept for the message when it fails."""
    with tempfile.TemporaryFile("w+") as out:
        rc = run_in_session(
            [side.python, "-m", "pytest", *args],
            cwd=side.cwd,
            env=side.env(os.environ),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        out.seek(0)
        return rc, out.read()[-4000:]


@dataclass(frozen=True)
class Request:
    """``cudaperf ab``'s arguments."""

    base: str | None
    head: str | None
    base_python: str | None
    head_python: str | None
    setup: str | None
    pairs: int
    max_time: float
    min_effect: float
    json: Path | None
    pytest_args: Sequence[str]
    #: profile each side once more for its kernels (same kernels, the diff of a SLOWER series)
    kernels: bool = True
    #: profile only when a series is SLOWER (``cudaperf bisect``: a step's diff is wanted only
    #: where the step found the slowdown)
    kernels_when_slower: bool = False
    #: add pairs while a series is undecided, also once none leans toward a change
    #: (``--until-decided``; ``cudaperf bisect``'s steps, which need a SAME to move on)
    until_decided: bool = False


def check(request: Request) -> None:
    """Bad arguments, before anything runs: one line each."""
    if request.base is None and request.base_python is None:
        raise CliError("ab: give --base REV (a revision to compare against) or --base-python")
    if request.pairs < MIN_PAIRS:
        raise CliError(f"ab: --pairs must be at least {MIN_PAIRS}, got {request.pairs}")
    if request.max_time <= 0:
        raise CliError(f"ab: --max-time must be positive, got {request.max_time:g}")
    for bad in ("--cudaperf-json", "--cudaperf-update", "--cudaperf-baseline-dir"):
        if has_option(request.pytest_args, bad):
            raise CliError(f"ab: leave {bad} out of the pytest arguments (ab sets it)")
    for option, python in (
        ("--base-python", request.base_python),
        ("--head-python", request.head_python),
    ):
        if python is not None and not Path(python).exists() and not _on_path(python):
            raise CliError(f"ab: {option}: no such Python: {python}")
    if request.json is not None and (why := unwritable(request.json)):
        raise CliError(f"ab: --json: {request.json} {why}")


def _on_path(program: str) -> bool:
    return any(
        Path(folder, program).exists() for folder in os.environ.get("PATH", "").split(os.pathsep)
    )


def cmd_ab(request: Request, runner: Runner = run_side, say: Callable[[str], None] = print) -> int:
    check(request)
    cwd = Path.cwd()
    try:
        return _compare(request, cwd, runner, say)
    except SideError as exc:
        raise CliError(f"ab: {exc}" + (f"\n{exc.output}" if exc.output else "")) from None


def _compare(request: Request, cwd: Path, runner: Runner, say: Callable[[str], None]) -> int:
    if request.head is not None and (changed := dirty(repository(cwd))):
        raise SideError(
            f"the working tree has uncommitted changes ({', '.join(changed[:3])}"
            f"{'…' if len(changed) > 3 else ''}): with --head REV commit or stash them, or "
            "leave --head out to measure the working tree as it is"
        )

    def stopped(result: AbResult) -> None:  # said, then the interruption goes on up: 130, 143
        _finish(result, request, say)

    return _finish(measure(request, cwd, runner, say, stopped), request, say)


def measure(
    request: Request,
    cwd: Path,
    runner: Runner,
    say: Callable[[str], None],
    stopped: Callable[[AbResult], None] | None = None,
) -> AbResult:
    """One comparison as ``cudaperf ab`` makes it (worktrees, sides, pairs, confirmation, the
    kernels), its progress through ``say``; the result, printed by nobody. A side that cannot
    be prepared is a :class:`SideError`. ``cudaperf bisect`` runs one per step. Stopped (Ctrl-C,
    SIGTERM) once a series had been compared, ``stopped`` is given the result as it stands
    (:meth:`AbSession.stopped_early`) before the interruption goes on up."""
    revisions = {k: v for k, v in (("base", request.base), ("head", request.head)) if v}
    repo = repository(cwd) if revisions else cwd
    rel = cwd.relative_to(repo) if revisions else Path(".")
    commits = {name: resolve(repo, rev) for name, rev in revisions.items()}
    with ExitStack() as stack:
        trees = stack.enter_context(worktrees(repo, commits))
        sides = {}
        for name in ("base", "head"):
            rev = revisions.get(name)
            python = request.base_python if name == "base" else request.head_python
            commit: str | None = None
            if rev is not None:
                commit, root = commits[name], trees[name]
                label = f"{rev} ({commit[:9]})" if rev != commit else commit[:9]
            else:
                root, label = repo, "the working tree" + (f" with {python}" if python else "")
            sides[name] = Side(
                name=name,
                label=label,
                root=root,
                cwd=root / rel,
                python=python or sys.executable,
                paths=own_paths(root),
                commit=commit,
            )
            if python and rev is not None:
                sides[name].label += f" with {python}"
        env: Mapping[str, str] = os.environ
        imports = {}
        for name, side in sides.items():
            if request.setup:
                run_setup(side, request.setup, env)
            imports[name] = check_imports(side, env)
            say(f"cudaperf ab: {imports[name]}")
        same_code = not commits or (len(commits) == 2 and commits["base"] == commits["head"])
        same = same_code and request.base_python == request.head_python
        result = AbResult(
            _info(sides["base"], imports["base"]),
            _info(sides["head"], imports["head"]),
            request.min_effect,
            same_revision=same,
        )
        if same:
            say("cudaperf ab: both sides are the same code: an A/A")
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="cudaperf-ab-runs-")))
        runs = SideRuns(sides, request.pytest_args, scratch, runner)
        comparison = AbSession(result, runs, say)
        try:
            comparison.measure(AbBudget(request.pairs, request.max_time, request.until_decided))
            if result.failed_side is None:
                comparison.confirm()
            wanted = not request.kernels_when_slower or bool(result.calls(Call.SLOWER))
            if request.kernels and wanted and result.failed_side is None and result.compared:
                comparison.profile()
        except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (signals.Terminated)
            if stopped is not None and comparison.stopped_early():
                stopped(result)
            raise
    return result


def _finish(result: AbResult, request: Request, say: Callable[[str], None]) -> int:
    for line in lines(result):
        say(line)
    if request.json is not None:
        result.write_json(request.json)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary and os.environ.get("GITHUB_ACTIONS") == "true":
        atomic.append_text(Path(summary), github_summary(result))
    if any(p.rc == 5 for p in result.processes):
        say("cudaperf ab: no tests selected: check the pytest arguments after --")
        return USAGE_EXIT
    if result.failed_side is not None:
        return SIDE_FAILED_EXIT
    return SLOWER_EXIT if result.calls(Call.SLOWER) else 0


def _info(side: Side, imports: str) -> SideInfo:
    return SideInfo(side.name, side.label, side.commit, side.python, imports)
