"""``cudaperf bisect`` over git repositories made here: real worktrees, ab's real comparisons and
confirmation, and a stand-in for each pytest process (a real one takes seconds on the CI host, and
a bisection starts dozens; ab's own tests run real ones): it reads the side's checked-out code as
the test would run it. A 3x slowdown named in at most 6 steps, a commit that does not import
skipped, no change, the run history's step confirmed, and no worktree left after success,
failure, Ctrl-C or SIGTERM."""

from __future__ import annotations

import random
import re
import shutil
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from gitrepo import git
from history_reports import fill

from pytest_cudaperf.ab.sides import Side
from pytest_cudaperf.cli import main
from pytest_cudaperf.cli.bisect import commits_between
from pytest_cudaperf.keys import SeriesKey
from pytest_cudaperf.report.document import Report, write_report
from pytest_cudaperf.report.model import JudgedRecord, TestOutcome
from pytest_cudaperf.series import Record, Recording
from pytest_cudaperf.verdict import Kind, Verdict

if TYPE_CHECKING:
    from conftest import Stop

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")

LIGHT = "tests/test_work.py::test_light"
STEADY = "tests/test_work.py::test_steady"
#: ab's knobs for the stand-in processes: three pairs decide a 3x change against 10%
KNOBS = ["--pairs", "3", "--min-effect", "10%", "--no-kernels"]


def _repository(
    tmp_path: Path, commits: int, slow_at: int | None, broken: int | None = None
) -> tuple[Path, list[str]]:
    """``commits`` commits (1-based): ``light`` does three times the work from ``slow_at`` on;
    ``broken``'s ``work.py`` does not compile (the next commit mends it). Their shas, in order."""
    repo = tmp_path / "project"
    (repo / "demo").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "demo" / "__init__.py").write_text("")
    (repo / "tests" / "test_work.py").write_text("from demo.work import light, steady\n")
    git(repo, "init", "-q")
    shas = []
    for i in range(1, commits + 1):
        work = 300 if slow_at is not None and i >= slow_at else 100
        body = f"WORK = {work}\nSTEADY = 100\n"
        if i == broken:
            body += "def light(:\n"
        (repo / "demo" / "work.py").write_text(body)
        (repo / "README.md").write_text(f"release {i}\n")
        git(repo, "add", ".")
        subject = "light does three times the work" if i == slow_at else f"release {i}"
        git(repo, "commit", "-q", "-m", subject)
        shas.append(git(repo, "rev-parse", "HEAD"))
    return repo, shas


class CheckedOutCode:
    """Stands in for one pytest process of a side: compiles the side's ``demo/work.py`` (a
    syntax error exits 2 with the message, as pytest's collection error does) and measures each
    selected test at the microseconds its checkout names (``WORK``, ``STEADY``), with 1% noise;
    writes the report ab asked for. ``stop``: a signal it sends this process on its n-th call."""

    def __init__(
        self, stop: tuple[int, signal.Signals] | None = None, series: str = "time:wall"
    ) -> None:
        self.series = series
        self.rng = random.Random(7)
        self.calls = 0
        self.stop = stop

    def __call__(self, side: Side, args: Sequence[str]) -> tuple[int, str]:
        self.calls += 1
        if self.stop is not None and self.calls == self.stop[0]:
            signal.raise_signal(self.stop[1])
        source = (side.root / "demo" / "work.py").read_text()
        try:
            compile(source, str(side.root / "demo" / "work.py"), "exec")
        except SyntaxError as exc:
            return 2, f"ERROR collecting tests/test_work.py\nE   SyntaxError: {exc.msg}"
        target = next(a.split("=", 1)[1] for a in args if a.startswith("--cudaperf-json="))
        skip = {a.split("=", 1)[1] for a in args if a.startswith("--cudaperf-deselect=")}
        chosen = [a for a in args if "::" in a and not a.startswith("-")] or [LIGHT, STEADY]
        tests = []
        for nodeid in chosen:
            if nodeid in skip:
                continue
            name = "WORK" if nodeid == LIGHT else "STEADY"
            found = re.search(rf"^{name} = (\d+)$", source, re.MULTILINE)
            assert found is not None
            ms = int(found.group(1)) / 1000 * self.rng.gauss(1, 0.01)
            record = Record(
                SeriesKey(nodeid, ""), self.series, "cpu-x", "ms",
                Recording("2026-11-27", ms, 0.01, 20), {},
            )  # fmt: skip
            tests.append(TestOutcome(nodeid, records=(JudgedRecord(record, Verdict(Kind.NEW)),)))
        write_report(Path(target), Report(tests=tuple(tests)))
        return 0, ""


@pytest.fixture
def inside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The test's folder, the current one."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _bisect(repo: Path, runner: CheckedOutCode, *args: str) -> int:
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(repo)
        return main(["bisect", *args], ab_runner=runner)


def _worktrees(repo: Path) -> list[str]:
    return [line for line in git(repo, "worktree", "list").splitlines() if line]


def _steps(out: str) -> list[str]:
    return re.findall(r"^cudaperf bisect: step \d+\S*( \(about \d+ left\))?: (\w+)", out, re.M)


def test_a_3x_slowdown_entering_at_commit_21_of_33_is_named_in_at_most_6_steps(
    inside: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo, shas = _repository(inside, 33, slow_at=21)
    rc = _bisect(repo, CheckedOutCode(), "--good", shas[0], "--bad", shas[32], *KNOBS, "--", LIGHT)
    out = capsys.readouterr().out
    assert rc == 1, out
    assert f"cudaperf bisect: first bad commit: {shas[20]} light does three times the work" in out
    steps = re.findall(r"^cudaperf bisect: step (\d+)", out, re.MULTILINE)
    assert 1 <= int(steps[-1]) <= 6
    (change,) = re.findall(r"the change at it: SLOWER \+(\d+\.\d)% \(\S+\) against", out)
    assert 150 < float(change) < 250  # three times the work: +200%
    assert len(_worktrees(repo)) == 1  # only the main checkout is left


def test_a_commit_that_does_not_import_is_skipped_and_the_slowdown_still_found(
    inside: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo, shas = _repository(inside, 20, slow_at=15, broken=10)
    rc = _bisect(repo, CheckedOutCode(), "--good", shas[0], "--bad", shas[19], *KNOBS)
    out = capsys.readouterr().out
    assert rc == 1, out
    assert f"{shas[9][:9]} skipped (its run failed)" in out
    assert "SyntaxError" in out  # the failed side's output, as ab names it
    assert f"cudaperf bisect: first bad commit: {shas[14]} " in out
    assert len(_worktrees(repo)) == 1


def test_no_slowdown_between_good_and_bad_is_no_change(
    inside: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo, shas = _repository(inside, 9, slow_at=None)
    runner = CheckedOutCode()
    rc = _bisect(repo, runner, "--good", shas[0], "--bad", shas[8], *KNOBS, "--", LIGHT)
    out = capsys.readouterr().out
    assert rc == 0, out
    assert f"cudaperf bisect: no change: {shas[8][:9]} is not slower than {shas[0][:9]}" in out
    assert "first bad commit" not in out
    assert runner.calls == 6  # one step: three pairs, nothing to confirm
    assert len(_worktrees(repo)) == 1


def test_a_good_end_that_fails_is_named_and_leaves_no_worktree(
    inside: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo, shas = _repository(inside, 5, slow_at=4, broken=1)
    rc = _bisect(repo, CheckedOutCode(), "--good", shas[0], "--bad", shas[4], *KNOBS)
    out = capsys.readouterr().out
    assert rc == 3, out
    assert f"the good commit {shas[0][:9]}'s run failed" in out
    assert len(_worktrees(repo)) == 1


def test_a_stopped_bisection_says_where_it_stood_and_leaves_no_worktree(
    inside: Path, capsys: pytest.CaptureFixture[str], stop: Stop
) -> None:
    repo, shas = _repository(inside, 9, slow_at=5)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as at a terminal
    try:
        runner = CheckedOutCode(stop=(27, stop.sig))  # steps 1 and 2 ran 12 each: in step 3
        rc = _bisect(repo, runner, "--good", shas[0], "--bad", shas[8], *KNOBS)
    finally:
        signal.signal(signal.SIGINT, previous)
    captured = capsys.readouterr()
    assert rc == stop.rc, captured.out + captured.err
    assert captured.err == f"cudaperf bisect: {stop.said}\n"
    assert f"cudaperf bisect: step 2: {shas[4][:9]} bad" in captured.out
    assert captured.out.splitlines()[-1] == (
        f"cudaperf bisect: stopped at step 3: the first bad commit is after {shas[0][:9]}, at or "
        f"before {shas[4][:9]} (4 commits); to go on from there: --good {shas[0]} --bad {shas[4]}"
    )
    assert len(_worktrees(repo)) == 1
    assert not list((repo / ".git").glob("worktrees/*"))  # none left for git to prune


def test_a_step_of_the_history_is_bisected_and_marked_confirmed(
    inside: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo, shas = _repository(inside, 9, slow_at=6)
    db = str(inside / "history.sqlite")
    nights = [shas[0]] * 5 + [shas[8]] * 5  # the nightly runs saw only the ends
    fill(db, [0.1 * random.Random(i).gauss(1, 0.005) for i in range(5)] + [0.3] * 5, LIGHT, nights)
    assert main(["history", "regressions", db, "--confirmed"]) == 0
    assert "no confirmed regression" in capsys.readouterr().out
    # the history's series (history_reports writes device time) decides each step
    cold = CheckedOutCode(series="time:device/cold")
    rc = _bisect(repo, cold, "--history", db, "--test", LIGHT, *KNOBS)
    out = capsys.readouterr().out
    assert rc == 1, out
    assert f"(the step of {LIGHT} in the history)" in out
    assert f"first bad commit: {shas[5]} light does three times the work" in out
    assert f"marked confirmed at {shas[5][:10]} in the history" in out
    assert main(["history", "regressions", db, "--confirmed"]) == 1
    listed = capsys.readouterr().out
    assert f"{shas[0][:10]} → {shas[8][:10]}" in listed
    assert f"at {shas[5][:10]}" in listed
    assert "1 regression, 1 confirmed" in listed
    again = _bisect(repo, CheckedOutCode(), "--history", db, "--test", LIGHT, *KNOBS)
    assert again == 2  # nothing left to confirm
    assert "every one is confirmed already" in capsys.readouterr().err


def test_bad_input_is_one_line_before_anything_runs(
    inside: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo, shas = _repository(inside, 3, slow_at=None)
    runner = CheckedOutCode()
    assert _bisect(repo, runner, "--good", shas[0]) == 2
    assert _bisect(repo, runner, "--good", "nope", "--bad", shas[2]) == 2
    assert _bisect(repo, runner, "--good", shas[2], "--bad", shas[0]) == 2
    assert _bisect(repo, runner, "--history", "missing.sqlite", "--test", LIGHT) == 2
    assert _bisect(repo, runner, "--good", shas[0], "--bad", shas[2], "--pairs", "1") == 2
    assert _bisect(repo, runner, "--good", shas[1], "--bad", shas[1]) == 2
    assert _bisect(repo, runner, "--good", shas[0], "--bad", shas[2], "--series", "wall") == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "cudaperf: bisect: give --good REV and --bad REV, or --history DB --test NODEID",
        f"cudaperf: bisect: unknown revision 'nope' in {repo}",
        f"cudaperf: bisect: the good commit {shas[2][:9]} is not an ancestor of the bad one "
        f"{shas[0][:9]}",
        "cudaperf: bisect: --history: missing.sqlite: no such history file",
        "cudaperf: bisect: --pairs must be at least 3, got 1",
        f"cudaperf: bisect: --good and --bad are the same commit ({shas[1][:9]}): nothing to "
        "bisect",
        "cudaperf: bisect: --series: expected a series such as time:device/cold, time:host or "
        "memory:peak, got 'wall'",
    ]
    assert runner.calls == 0


def test_a_series_the_tests_do_not_have_is_named_with_the_ones_they_have(
    inside: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The first step measures no such series on either side: the message says which series
    the tests have, not that the bad commit cannot be measured."""
    repo, shas = _repository(inside, 3, slow_at=None)
    args = ["--good", shas[0], "--bad", shas[2], "--series", "time:device", *KNOBS, "--", LIGHT]
    assert _bisect(repo, CheckedOutCode(), *args) == 3
    assert (
        "cudaperf bisect: no series time:device was measured on both sides (they measured "
        "time:wall): nothing to bisect; --series chooses one"
    ) in capsys.readouterr().out


def test_a_merge_is_one_commit_on_the_first_parent_line(tmp_path: Path) -> None:
    repo, shas = _repository(tmp_path, 2, slow_at=None)
    git(repo, "checkout", "-q", "-b", "side", shas[0])
    for name in ("s1", "s2"):
        (repo / f"{name}.txt").write_text(name)
        git(repo, "add", ".")
        git(repo, "commit", "-q", "-m", name)
    side = git(repo, "rev-list", "--reverse", f"{shas[0]}..side").splitlines()
    git(repo, "checkout", "-q", "-")
    git(repo, "merge", "-q", "--no-ff", "-m", "merge side", "side")
    merge = git(repo, "rev-parse", "HEAD")
    assert commits_between(repo, shas[0], merge, first_parent=True) == (shas[0], shas[1], merge)
    every = commits_between(repo, shas[0], merge, first_parent=False)
    assert set(every) == {shas[0], shas[1], *side, merge}
    assert every[0] == shas[0]
    assert every[-1] == merge
