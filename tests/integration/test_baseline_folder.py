"""The baseline folder end to end: a ``#`` in a test id is an ordinary character, the
folder users commit stays clean in ``git status`` (after an update, after a killed update, under
xdist), and a rewritten baseline keeps its file mode."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from conftest import RecordOnce

# these tests are about files, not verdicts: a wide tolerance keeps a busy machine's noise from
# failing the unchanged reruns, and sleeps barely move with the load
FAST = ["--cudaperf-max-time=0.05", "--cudaperf-tolerance=90%", "-p", "no:cacheprovider"]

IDS = """
import time
import pytest

@pytest.mark.perf(max_time=0.05)
@pytest.mark.parametrize("x", ["a", "c#d"], ids=["a", "c#d"])
def test_ids(x):
    time.sleep(0.001)
"""

MANY = """
import time
import pytest

@pytest.mark.perf(max_time=0.05)
@pytest.mark.parametrize("i", range(6))
def test_many(i):
    time.sleep(0.001)
"""


def test_a_hash_in_a_test_id_is_not_obsolete_and_survives_prune(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_ids=IDS)
    first = pytester.runpytest(*FAST, "--cudaperf-update")
    first.assert_outcomes(passed=2)
    first.stdout.fnmatch_lines(["cudaperf: baselines *: 2 added, 0 updated, 0 kept"])
    again = pytester.runpytest(*FAST)
    again.assert_outcomes(passed=2)
    again.stdout.no_fnmatch_line("*OBSOLETE*")
    pruned = pytester.runpytest(*FAST, "--cudaperf-update", "--cudaperf-prune")
    pruned.assert_outcomes(passed=2)
    pruned.stdout.fnmatch_lines(["cudaperf: baselines *: 0 added, 2 updated*, 0 kept"])
    pruned.stdout.no_fnmatch_line("*pruned*")
    (path,) = (pytester.path / ".cudaperf").glob("*.json")
    entries = json.loads(path.read_text())["entries"]
    assert sorted(entries) == ["test_ids.py::test_ids[a]", "test_ids.py::test_ids[c#d]"]
    assert list(entries["test_ids.py::test_ids[c#d]"]) == [""]  # no name split off the id
    assert len(entries["test_ids.py::test_ids[c#d]"][""]["time:wall"]["recordings"]) == 2


def _git(cwd: os.PathLike[str], *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True
    ).stdout


def _untracked(project: Path) -> list[str]:
    """What ``git status`` shows: every untracked file, one per line."""
    lines = _git(project, "status", "--porcelain", "--untracked-files=all").splitlines()
    assert all(line.startswith("?? ") for line in lines), lines  # nothing was ever committed
    return sorted(line[3:] for line in lines)


def _only_the_baseline_and_the_test(project: Path) -> list[str]:
    untracked = _untracked(project)
    assert len(untracked) == 2, untracked
    assert untracked[0].startswith(".cudaperf/cpu-"), untracked
    assert untracked[0].endswith(".json"), untracked
    assert untracked[1] == "test_many.py", untracked
    return untracked


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A git work tree (its own folder: pytester keeps its files beside it) holding one test
    file, the current directory of the inner runs; no bytecode, so that only what the plugin
    writes can show up beside the test file."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")  # the xdist workers
    root = pytester.mkdir("project")
    _git(root, "init", "-q")
    (root / "test_many.py").write_text(MANY)
    monkeypatch.chdir(root)
    return root


def test_git_status_after_an_update_shows_only_the_json(
    pytester: pytest.Pytester, project: Path
) -> None:
    pytester.runpytest(*FAST, "--cudaperf-update").assert_outcomes(passed=6)
    _only_the_baseline_and_the_test(project)
    # what keeps the lock and temporary files out: the folder's own .gitignore
    assert (project / ".cudaperf" / ".lock").exists()
    assert _git(project, "check-ignore", ".cudaperf/.lock").strip() == ".cudaperf/.lock"


def test_git_status_after_a_killed_update(pytester: pytest.Pytester, project: Path) -> None:
    pytester.runpytest(*FAST, "--cudaperf-update").assert_outcomes(passed=6)
    before = _only_the_baseline_and_the_test(project)
    folder = project / ".cudaperf"
    (baseline,) = folder.glob("*.json")
    # what a writer killed between writing its temporary file and the rename leaves behind
    stale = folder / f".{baseline.name}.dead.tmp"
    stale.write_text(baseline.read_text()[:100])
    old = time.time() - 3600
    os.utime(stale, (old, old))
    fresh = folder / f".{baseline.name}.live.tmp"  # another writer's, still being written
    fresh.write_text("{")
    assert _untracked(project) == before  # ignored even before it is cleaned up
    pytester.runpytest(*FAST, "--cudaperf-update").assert_outcomes(passed=6)
    assert not stale.exists(), "a stale temporary file is removed by the next update"
    assert fresh.exists(), "a recent one may belong to a writer still running"
    assert _untracked(project) == before


def test_git_status_after_an_update_under_xdist(pytester: pytest.Pytester, project: Path) -> None:
    # three workers on a 2-core machine, two tests each: each holds the device lock, the
    # controller alone writes the baseline
    result = pytester.runpytest("-n", "3", *FAST, "--cudaperf-update")
    result.assert_outcomes(passed=6)
    result.stdout.fnmatch_lines(["cudaperf: baselines *: 6 added, 0 updated, 0 kept"])
    _only_the_baseline_and_the_test(project)


@pytest.mark.parametrize("mode", [0o644, 0o640])
def test_a_rewritten_baseline_keeps_its_mode(
    pytester: pytest.Pytester, record_once: RecordOnce, mode: int
) -> None:
    pytester.makepyfile(test_many=MANY)
    baseline = record_once("test_many.py", MANY, FAST).write(pytester.path)
    baseline.chmod(mode)
    before = baseline.read_text()
    pytester.runpytest(*FAST, "--cudaperf-update").assert_outcomes(passed=6)
    assert baseline.read_text() != before, "the update rewrote the file"
    assert baseline.stat().st_mode & 0o7777 == mode
