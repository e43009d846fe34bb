"""Does ``cudaperf bisect`` name the commit that slowed one kernel, from a history that saw only
the ends of the range, and name none where nothing changed?

The repository is the history benchmark's (``bench_history_commits.py``: 22 GPU kernels, one test
each): a first commit, then ``--commits`` more, each a neutral change (a docstring, a comment, the
README, an unused helper) except ``--slow-at``, which pads ``--kernel``'s input by ``--slowdown``.
The history gets ``--history-runs`` runs of that kernel's test at each end of the range only, as a
nightly job that saw many merges at once would; ``cudaperf history regressions`` then names the
whole range as one step, and:

1. **found**: ``cudaperf bisect --history DB --test NODEID`` bisects the step: the padding commit
   should be named, with the change and its interval at it, and the kernel diff; the history's
   step is then listed by ``history regressions --confirmed``.
2. **no change**: ``--tries`` bisections of a range of neutral commits only (after the padding
   commit): none should name a commit.

    python benchmarks/bench_bisect.py --out out/bisect-found --case found        # a GPU, for real
    python benchmarks/bench_bisect.py --out out/bisect-nochange --case nochange  # (two calls)
    python benchmarks/bench_bisect.py --out out/bisect-smoke --smoke             # a CPU, tiny

``--out`` is emptied first. On an H100 a pytest process of one kernel's test takes a few seconds
(torch, CUDA, the plugin); ``found`` starts about 60 (6 history runs; 5 steps: 14 processes
for a step that finds a slowdown, 6 for one that does not), ``nochange`` about 30 (5 tries of
one step).

Writes, under ``--out``: ``repo/``, ``history.db``, ``found.txt``, ``nochange-N.txt`` (each
command's output and exit status) and ``summary.json`` (per case: steps, seconds, outcome), and
prints the summary. ``--smoke`` shrinks the kernels' sizes, the range (4 commits) and the tries
(1), plants a 3x slowdown judged against a 50% minimum effect, and stands in for every pytest
process (``_bisect_stand_in.py``: a real one imports torch, and a bisection starts dozens): the
stand-in reads the checked-out kernel sizes, the history's runs go in through ``cudaperf history
ingest``, and everything else is the real ``cudaperf``. Its outcome is then known, so the smoke
fails (exit 1, one line) unless the padding commit is named with its change and kernel diff, the
history's step is confirmed, and the no-change range names none.
"""

from __future__ import annotations

import argparse
import datetime
import json
import random
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from _bisect_stand_in import history_report
from bench_history_commits import create, git, neutral_change, plugin_env, slowing_change

from pytest_cudaperf.report.document import write_report

HERE = Path(__file__).resolve().parent
#: the ``cudaperf`` command line; ``--smoke``'s stands in for the pytest processes
CLI = [sys.executable, "-m", "pytest_cudaperf.cli"]
STAND_IN_CLI = [sys.executable, str(HERE / "_bisect_stand_in.py")]

#: the pytest arguments of every process (the history's runs and each side's)
PYTEST = ["-q", "-p", "no:randomly", "-p", "no:cacheprovider"]


def shrink(repo: Path) -> None:
    """Smoke mode: every kernel's size cut to 2^16 elements (a CPU runs them in microseconds)."""
    path = repo / "kernels" / "ops.py"
    path.write_text(re.sub(r"1 << \d+", "1 << 16", path.read_text()))
    git(repo, "commit", "-qam", "kernels: small sizes for a CPU")


def build(repo: Path, args: argparse.Namespace) -> list[str]:
    """The repository: its first commit, then ``args.commits`` more; their shas, in order."""
    create(repo)
    if args.smoke:
        shrink(repo)
    shas = [git(repo, "rev-parse", "HEAD")]
    for index in range(2, args.commits + 2):
        if index == args.slow_at:
            message = slowing_change(repo, args.kernel, args.slowdown)
        else:
            message = neutral_change(repo, index)
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", message)
        shas.append(git(repo, "rev-parse", "HEAD"))
    return shas


def history_runs(repo: Path, db: Path, commit: str, args: argparse.Namespace) -> None:
    """``args.history_runs`` runs of the kernel's test at ``commit``, into the history
    (``--smoke``: stood-in runs' reports, ingested)."""
    git(repo, "checkout", "-q", commit)
    if args.smoke:
        stood_in_history(repo, db, commit, args)
        git(repo, "checkout", "-q", "main")
        return
    for _ in range(args.history_runs):
        cmd = [
            sys.executable, "-m", "pytest", f"tests/test_kernels.py::test_{args.kernel}",
            f"--cudaperf-history={db}", f"--cudaperf-max-time={args.max_time}", *PYTEST,
            *args.extra,
        ]  # fmt: skip
        done = subprocess.run(
            cmd, cwd=repo, env=plugin_env(), capture_output=True, text=True, check=False
        )
        if done.returncode not in (0, 1):
            raise SystemExit(f"bench_bisect: a history run failed:\n{done.stdout[-3000:]}")
    git(repo, "checkout", "-q", "main")


def stood_in_history(repo: Path, db: Path, commit: str, args: argparse.Namespace) -> None:
    """The smoke's history runs at ``commit`` (checked out): each a stand-in's report, a minute
    after the history's last run, added by ``cudaperf history ingest``."""
    folder = repo.parent / "history-reports"
    folder.mkdir(exist_ok=True)
    done = len(list(folder.glob("*.json")))
    start = datetime.datetime(2026, 11, 27, tzinfo=datetime.timezone.utc)
    test = f"tests/test_kernels.py::test_{args.kernel}"
    reports = []
    for i in range(done, done + args.history_runs):
        when = (start + datetime.timedelta(minutes=i)).isoformat()
        reports.append(folder / f"run-{i:02d}.json")
        write_report(reports[-1], history_report(repo, test, commit, when, args.rng))
    rc, text, _ = cudaperf(repo, folder / f"ingest-{commit[:10]}.txt", "history", "ingest",
                           str(db), *map(str, reports), cli=STAND_IN_CLI)  # fmt: skip
    if rc != 0:
        raise SystemExit(f"bench_bisect: cudaperf history ingest failed:\n{text[-3000:]}")


def cudaperf(repo: Path, out: Path, *args: str, cli: list[str] = CLI) -> tuple[int, str, float]:
    """``cudaperf ARGS`` (``cli``) in the repository, its output kept in ``out``; (exit, output,
    s)."""
    began = time.monotonic()
    done = subprocess.run(
        [*cli, *args],
        cwd=repo,
        env=plugin_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.monotonic() - began
    text = done.stdout + done.stderr
    out.write_text(f"$ cudaperf {' '.join(args)}\n{text}exit {done.returncode}\n")
    print(f"cudaperf {args[0]}: exit {done.returncode} in {seconds:.0f} s ({out.name})", flush=True)
    return done.returncode, text, seconds


def steps(text: str) -> int:
    found = re.findall(r"^cudaperf bisect: step (\d+)", text, re.MULTILINE)
    return max(map(int, found), default=0)


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--smoke", action="store_true", help="a CPU: tiny sizes, a 3x slowdown")
    parser.add_argument("--commits", type=int, default=None, help="the range (default 16; smoke 4)")
    parser.add_argument("--slow-at", type=int, default=None, help="the padding commit, 1-based")
    parser.add_argument("--kernel", default="copy")
    parser.add_argument("--slowdown", type=float, default=None, help="default 0.05; smoke 2.0")
    parser.add_argument("--tries", type=int, default=None, help="no-change tries (default 5)")
    parser.add_argument(
        "--history-runs", type=int, default=None, help="runs at each end (default 3; smoke 4)"
    )
    parser.add_argument("--pairs", default=None, help="ab's --pairs per step (default 6)")
    parser.add_argument(
        "--case", choices=["found", "nochange", "both"], default="both", help="which to run"
    )
    parser.add_argument("--max-time", default="0.2", help="--cudaperf-max-time per process")
    parser.add_argument("--min-effect", default=None, help="default 2%%; smoke 50%%")
    parser.add_argument("--extra", nargs="*", default=[], help="more pytest arguments")
    args = parser.parse_args()
    args.commits = args.commits or (4 if args.smoke else 16)
    args.slow_at = args.slow_at or (3 if args.smoke else 12)
    args.slowdown = args.slowdown or (2.0 if args.smoke else 0.05)
    args.tries = args.tries or (1 if args.smoke else 5)
    args.min_effect = args.min_effect or ("50%" if args.smoke else "2%")
    args.pairs = args.pairs or "6"
    # a CPU's runs scatter more: three at each end leave a 3x step short of p < 0.001
    args.history_runs = args.history_runs or (4 if args.smoke else 3)
    args.rng = random.Random(3)  # the smoke's stand-in history runs' noise
    if not 2 <= args.slow_at <= args.commits:
        raise SystemExit(
            "bench_bisect: --slow-at must name a commit of the range before its last (2..N)"
        )
    return args


def main() -> None:
    args = arguments()
    began = time.monotonic()
    out: Path = args.out.resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    repo, db = out / "repo", out / "history.db"
    shas = build(repo, args)
    slowing = shas[args.slow_at - 1]
    print(f"bench_bisect: {len(shas)} commits, the padding one {slowing[:10]}", flush=True)
    test = ["--test", f"tests/test_kernels.py::test_{args.kernel}"]
    knobs = ["--pairs", args.pairs, "--min-effect", args.min_effect]
    pytest_args = ["--", f"--cudaperf-max-time={args.max_time}", *PYTEST, *args.extra]
    summary: dict[str, object] = {}
    cli = STAND_IN_CLI if args.smoke else CLI
    if args.case in ("found", "both"):
        history_runs(repo, db, shas[0], args)
        history_runs(repo, db, shas[-1], args)
        summary["history_s"] = round(time.monotonic() - began, 1)
        summary["found"] = found(repo, db, [*test, *knobs, *pytest_args], slowing, cli)
    if args.case in ("nochange", "both"):
        tries = []
        for i in range(1, args.tries + 1):
            tries.append(nochange(repo, out / f"nochange-{i}.txt", (slowing, shas[-1]),
                                  [*test, *knobs, *pytest_args], cli))  # fmt: skip
        summary["nochange"] = tries
        summary["nochange_named"] = sum(1 for t in tries if t["named"])
    summary["total_s"] = round(time.monotonic() - began, 1)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    if args.smoke and (wrong := smoke_wrong(summary)):
        raise SystemExit(f"bench_bisect --smoke: {wrong} (the stand-in's outcome is known)")


def smoke_wrong(summary: dict[str, object]) -> str:
    """What a smoke's summary got wrong (the stand-in's processes decide every step): empty
    when the padding commit was named with its change, the kernel diff and the history's step
    confirmed, and the no-change range named none."""
    found = summary.get("found")
    if isinstance(found, dict):
        missed = [k for k in ("right", "interval_shown", "kernel_diff", "history_confirmed")
                  if not found[k]]  # fmt: skip
        if missed:
            return f"found: not {', '.join(missed)} (see found.txt, confirmed.txt)"
    if summary.get("nochange_named"):
        return "nochange: a commit was named in a range of neutral commits"
    return ""


def found(repo: Path, db: Path, rest: list[str], slowing: str, cli: list[str]) -> dict[str, object]:
    """The history's step bisected (``rest``: ``--test NODEID``, ab's knobs, ``--
    PYTEST_ARGS``): the padding commit named, its interval, the kernel diff, the step confirmed
    in the history."""
    out = repo.parent
    cudaperf(repo, out / "regressions.txt", "history", "regressions", str(db), cli=cli)
    rc, text, seconds = cudaperf(
        repo, out / "found.txt", "bisect", "--history", str(db), *rest, cli=cli
    )
    named = re.search(r"^cudaperf bisect: first bad commit: ([0-9a-f]{40})", text, re.MULTILINE)
    confirmed, listed, _ = cudaperf(
        repo, out / "confirmed.txt", "history", "regressions", str(db), "--confirmed", cli=cli
    )
    return {
        "exit": rc,
        "steps": steps(text),
        "seconds": round(seconds, 1),
        "named": named.group(1) if named else None,
        "right": bool(named and named.group(1) == slowing),
        "interval_shown": "the change at it: SLOWER" in text,
        "kernel_diff": bool(re.search(r"^\s+(kernels|ops): .* per call", text, re.MULTILINE)),
        "history_confirmed": confirmed == 1 and f"at {slowing[:10]}" in listed,
    }


def nochange(
    repo: Path, out: Path, ends: tuple[str, str], rest: list[str], cli: list[str]
) -> dict[str, object]:
    """A bisection of neutral commits only: no commit should be named."""
    rc, text, seconds = cudaperf(
        repo, out, "bisect", "--good", ends[0], "--bad", ends[1], *rest, cli=cli
    )
    said = [line for line in text.splitlines() if "no change" in line or "UNDECIDED" in line]
    return {
        "exit": rc,
        "steps": steps(text),
        "seconds": round(seconds, 1),
        "named": "first bad commit" in text,
        "outcome": said[0] if said else text.strip().splitlines()[-1:],
    }


if __name__ == "__main__":
    main()
