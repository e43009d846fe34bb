"""The ``cudaperf`` console script: record, show, merge and compare baselines and JSON reports.

    cudaperf record [--runs K] [--baseline-dir DIR] [--] PYTEST_ARGS...
                                           record fresh baselines from K separate pytest processes
    cudaperf show FILE                     a table of a baseline file or a --cudaperf-json report
    cudaperf merge OUT A.json B.json ...   merge shard reports (or baseline files of one class)
    cudaperf compare BASE CURRENT          judge CURRENT against BASE; exit 1 on a regression
    cudaperf ab --base REV [--head REV] [--] PYTEST_ARGS...
                                           is head slower than base, here and now? (paired)
    cudaperf bisect --good REV --bad REV [--] PYTEST_ARGS...
    cudaperf bisect --history DB --test NODEID [--series NAME] [--] PYTEST_ARGS...
                                           the first commit that made the tests slower (ab
                                           steps); with --history, its step marked confirmed
    cudaperf history ingest|regressions|ack DB ...
                                           the run history (an SQLite file or a postgresql:// URL)
    cudaperf dashboard DB OUT_DIR          the run history DB as a static site in OUT_DIR

Exit codes: 0 fine, 1 a regression (compare) or a failed test body (record), 2 a file or
argument that cannot be used (one line on stderr), 130 interrupted (Ctrl-C: one line), 143
terminated (SIGTERM: one line); either way the pytest processes it started are stopped, and
``record`` first writes the series of the runs that had ended, where three or more had.
``record`` stops at the first run that pytest ends with another code than 0 or 1 (an
interruption, an internal or usage error, no tests collected) and exits with that code,
recording nothing. Progress lines are written as they come, into a pipe too (a CI log).
"""

from __future__ import annotations

import argparse
import io
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from pytest_cudaperf.ab.paired import MIN_EFFECT
from pytest_cudaperf.cli.ab import Request, cmd_ab, run_side
from pytest_cudaperf.cli.ab import Runner as AbRunner
from pytest_cudaperf.cli.bisect import BisectRequest, cmd_bisect
from pytest_cudaperf.cli.compare import cmd_compare
from pytest_cudaperf.cli.dashboard import cmd_dashboard
from pytest_cudaperf.cli.history import cmd_history
from pytest_cudaperf.cli.merge import cmd_merge
from pytest_cudaperf.cli.process import TERMINATED_EXIT
from pytest_cudaperf.cli.record import Runner, cmd_record, run_pytest
from pytest_cudaperf.cli.show import cmd_show
from pytest_cudaperf.cli.sources import CliError
from pytest_cudaperf.signals import Terminated, sigterm_raises
from pytest_cudaperf.units import parse_fraction, parse_seconds


def _folder(text: str) -> Path:
    """A folder argument: a path, not an empty string (which would read as the current one)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a folder, got an empty string")
    return Path(text)


def _ab_request(args: argparse.Namespace) -> Request:
    command = args.command
    try:
        max_time = parse_seconds(args.max_time)
    except ValueError as exc:
        raise CliError(f"{command}: --max-time: {exc}") from None
    try:
        min_effect = parse_fraction(args.min_effect)
    except ValueError as exc:
        raise CliError(f"{command}: --min-effect: {exc}") from None
    ab = command == "ab"
    return Request(
        base=args.base if ab else None,
        head=args.head if ab else None,
        base_python=args.base_python if ab else None,
        head_python=args.head_python if ab else None,
        setup=args.setup,
        pairs=args.pairs,
        max_time=max_time,
        min_effect=min_effect,
        json=args.json if ab else None,
        pytest_args=[a for a in args.pytest_args if a != "--"],
        kernels=not args.no_kernels,
        until_decided=args.until_decided if ab else False,
    )


def _bisect_request(args: argparse.Namespace) -> BisectRequest:
    return BisectRequest(
        good=args.good,
        bad=args.bad,
        history=args.history,
        test=args.test,
        series=args.series,
        ab=_ab_request(args),
        first_parent=args.first_parent,
    )


def _ab_knobs(command: argparse.ArgumentParser, budget: str) -> None:
    """The options ``ab`` and ``bisect`` share."""
    command.add_argument(
        "--setup", default=None, help="a shell command run once in each side's folder"
    )
    command.add_argument(
        "--pairs", type=int, default=6, help="pairs of processes at most (default: 6)"
    )
    command.add_argument("--max-time", default="30min", help=f"{budget} (default: 30min)")
    command.add_argument(
        "--min-effect",
        default=f"{MIN_EFFECT:.0%}",
        help=f"the smallest change called slower or faster (default: {MIN_EFFECT * 100:.0f}%%)",
    )
    command.add_argument(
        "--no-kernels",
        action="store_true",
        help="skip the profiling process of each side (kernels same or not, a SLOWER's diff)",
    )


def _bisect_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bisect = sub.add_parser(
        "bisect", help="find the first commit that made the tests slower, each step an ab"
    )
    bisect.add_argument("--good", default=None, help="a revision that is not slower")
    bisect.add_argument("--bad", default=None, help="a revision that is slower")
    bisect.add_argument(
        "--history",
        default=None,
        metavar="DB",
        help="take the range from the latest unconfirmed step of --test in this run history "
        "(an SQLite file or a postgresql:// URL), and mark it confirmed with the commit found",
    )
    bisect.add_argument(
        "--test", default=None, metavar="NODEID", help="the test that decides each step"
    )
    bisect.add_argument(
        "--series", default=None, help="the series that decides (default: the test's times)"
    )
    bisect.add_argument(
        "--first-parent",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="bisect the bad commit's first-parent line: a merge is one commit (default: on)",
    )
    _ab_knobs(bisect, "time budget of each step")
    bisect.add_argument("pytest_args", nargs=argparse.REMAINDER, help="arguments for pytest")


def parser() -> argparse.ArgumentParser:
    """The command's arguments: every subcommand, positional and option with its help."""
    parser = argparse.ArgumentParser(prog="cudaperf", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    record = sub.add_parser("record", help="record fresh baselines from K pytest processes")
    record.add_argument("--runs", type=int, default=5, help="pytest processes (default: 5)")
    record.add_argument(
        "--baseline-dir",
        type=_folder,
        default=None,
        help="the folder the baselines are written to (default: .cudaperf)",
    )
    record.add_argument(
        "pytest_args", nargs=argparse.REMAINDER, help="arguments for pytest, after an optional --"
    )
    show = sub.add_parser("show", help="print a baseline file or a JSON report as a table")
    show.add_argument(
        "file", type=Path, help="a baseline file (.cudaperf/*.json) or a --cudaperf-json report"
    )
    show.add_argument(
        "--tolerance",
        default="5%",
        help="drift: recordings moving one way in steps each under this, by more in all "
        "(default: 5%%)",
    )
    merge = sub.add_parser("merge", help="merge shard reports, or baseline files of one class")
    merge.add_argument("out", type=Path, help="the merged file to write")
    merge.add_argument(
        "inputs",
        type=Path,
        nargs="+",
        help="the --cudaperf-json reports of the shards, or baseline files of one device class",
    )
    compare = sub.add_parser("compare", help="judge CURRENT against BASE; exit 1 on regression")
    compare.add_argument(
        "base",
        type=Path,
        help="what to compare against: a baseline file (.cudaperf/*.json) or a --cudaperf-json "
        "report",
    )
    compare.add_argument(
        "current",
        type=Path,
        help="what is judged: a --cudaperf-json report or a baseline file; each of its series "
        "against the same series in BASE",
    )
    compare.add_argument("--tolerance", default="5%", help="as 0.05 or 5%% (default: 5%%)")
    ab = sub.add_parser(
        "ab", help="compare two revisions (or Pythons) in alternating fresh processes"
    )
    ab.add_argument("--base", default=None, help="the revision to compare against")
    ab.add_argument("--head", default=None, help="default: the working tree as it is")
    ab.add_argument("--base-python", default=None, help="the base side's Python")
    ab.add_argument("--head-python", default=None, help="the head side's Python")
    _ab_knobs(ab, "time budget in all")
    ab.add_argument("--json", type=Path, default=None, help="write the comparison as JSON")
    ab.add_argument(
        "--until-decided",
        action="store_true",
        help="add pairs up to --pairs while a series is undecided, also once none leans toward "
        "a change (by default ab stops there: more pairs would at most call them same)",
    )
    ab.add_argument(
        "pytest_args",
        nargs=argparse.REMAINDER,
        help="arguments for every pytest process of both sides, after an optional --",
    )
    _bisect_parser(sub)
    history = sub.add_parser(
        "history", help="the run history: add reports, list and acknowledge regressions"
    )
    what = history.add_subparsers(dest="history_command", required=True)
    ingest = what.add_parser("ingest", help="add --cudaperf-json reports to a history")
    ingest.add_argument(
        "db", help="an SQLite file (created if missing) or a postgresql:// URL (tables created)"
    )
    ingest.add_argument(
        "reports", type=Path, nargs="+", help="--cudaperf-json reports, one run each, oldest first"
    )
    found = what.add_parser("regressions", help="list slowdown change points; exit 1 on one")
    found.add_argument("db", help="an SQLite history file or a postgresql:// URL")
    found.add_argument(
        "--confirmed",
        action="store_true",
        help="only the steps cudaperf bisect confirmed (with the commit it found)",
    )
    found.add_argument(
        "--since",
        default="",
        metavar="REV|DATE",
        help="only runs from this commit (the first run of it in the history) or this date on",
    )
    ack = what.add_parser(
        "ack", help="acknowledge a regression (or --all): it no longer fails `history regressions`"
    )
    ack.add_argument("db", help="an SQLite history file or a postgresql:// URL")
    ack.add_argument(
        "which",
        nargs="*",
        metavar="TEST SERIES COMMIT",
        help="the regression as history regressions lists it (the commit: its first bad, or a "
        "drift's last; a prefix will do)",
    )
    ack.add_argument("--all", action="store_true", help="every regression not yet acknowledged")
    ack.add_argument("--note", required=True, help="why it is acknowledged")
    dashboard = sub.add_parser("dashboard", help="write the run history as a static site")
    dashboard.add_argument("db", help="an SQLite history file or a postgresql:// URL")
    dashboard.add_argument(
        "out_dir", type=Path, help="a new or empty folder, or one a dashboard was written to"
    )
    dashboard.add_argument(
        "--since",
        default="",
        metavar="REV|DATE",
        help="only runs from this commit (the first run of it in the history) or this date on",
    )
    return parser


def main(
    argv: Sequence[str] | None = None,
    runner: Runner = run_pytest,
    ab_runner: AbRunner = run_side,
) -> int:
    args = parser().parse_args(argv)
    if isinstance(sys.stdout, io.TextIOWrapper):  # each progress line shown as it comes, in a
        sys.stdout.reconfigure(line_buffering=True)  # CI log or through `| tee` as at a terminal
    with sigterm_raises():
        return _command(args, runner, ab_runner)


def _paired(args: argparse.Namespace, ab_runner: AbRunner) -> int:
    """``ab`` or ``bisect``: the commands made of paired comparisons."""
    if args.command == "bisect":
        return cmd_bisect(_bisect_request(args), ab_runner)
    return cmd_ab(_ab_request(args), ab_runner)


def _command(args: argparse.Namespace, runner: Runner, ab_runner: AbRunner) -> int:
    try:
        if args.command == "record":
            if args.runs < 1:
                raise CliError(f"record: --runs must be at least 1, got {args.runs}")
            return cmd_record(args.runs, args.baseline_dir, args.pytest_args, runner)
        if args.command == "merge":
            return cmd_merge(args.out, args.inputs)
        if args.command in ("ab", "bisect"):
            return _paired(args, ab_runner)
        if args.command == "dashboard":
            return cmd_dashboard(args.db, args.out_dir, args.since)
        if args.command == "history":
            return cmd_history(args)
        try:
            tolerance = parse_fraction(args.tolerance)
        except ValueError as exc:
            raise CliError(f"--tolerance: {exc}") from None
        if args.command == "show":
            return cmd_show(args.file, tolerance)
        return cmd_compare(args.base, args.current, tolerance)
    except CliError as exc:
        print(f"cudaperf: {exc}", file=sys.stderr)
        return 2
    except Terminated:  # a KeyboardInterrupt too: before it
        print(f"cudaperf {args.command}: terminated", file=sys.stderr)
        return TERMINATED_EXIT
    except KeyboardInterrupt:  # record has written what its ended runs measured, if it could
        print(f"cudaperf {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `cudaperf show FILE | head`
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the flush at exit
        return 0
