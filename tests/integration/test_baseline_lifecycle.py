"""Baselines from several processes, end to end on the CPU: ``cudaperf record`` writes
schema-2 series of K recordings, ``cudaperf show`` says how many, and an intentional change is
followed: the update starts the series afresh, the new level passes, the old one reads IMPROVED.

Sleeps, not busy loops: on two shared cores a sleep's median barely moves with the load. The
changes are large (20x) because a baseline recorded on loaded cores may honestly carry noise
above 100% (samples bimodal from oversleeping), which widens both the change-point rule and the
verdict's band; a 20x change is beyond any noise seen here.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_cudaperf import turns

FAST = ["--cudaperf-max-time=0.2", "--cudaperf-tolerance=30%", "-p", "no:cacheprovider"]

LEVEL = """
import os, time
import pytest

@pytest.mark.perf
def test_level():
    time.sleep(float(os.environ["SLEEP_MS"]) / 1000)
"""

RECORDED = """
import time
import pytest

@pytest.mark.perf
def test_own():
    time.sleep(0.002)

def test_timed(cuda_timer):
    cuda_timer(lambda: time.sleep(0.001), name="nap")
"""


def _document(pytester: pytest.Pytester) -> tuple[Path, dict[str, Any]]:
    (path,) = (pytester.path / ".cudaperf").glob("*.json")
    document = json.loads(path.read_text())
    assert document["schema"] == 2
    return path, document


def _entry(pytester: pytest.Pytester, nodeid: str, name: str = "") -> dict[str, Any]:
    _, document = _document(pytester)
    return document["entries"][nodeid][name]["time:wall"]  # type: ignore[no-any-return]


def test_an_intentional_change_is_followed(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_level=LEVEL)
    monkeypatch.setenv("SLEEP_MS", "2")
    pytester.runpytest(*FAST, "--cudaperf-update").assert_outcomes(passed=1)
    second = pytester.runpytest(*FAST, "--cudaperf-update")
    second.assert_outcomes(passed=1)
    second.stdout.fnmatch_lines(["cudaperf: baselines *: 0 added, 1 updated, 0 kept"])
    old = _entry(pytester, "test_level.py::test_level")
    assert len(old["recordings"]) == 2  # the second update added evidence
    assert 1.5 < old["value"] < 5.0

    monkeypatch.setenv("SLEEP_MS", "40")  # the code changed on purpose
    changed = pytester.runpytest(*FAST, "--cudaperf-update")
    changed.assert_outcomes(passed=1)
    changed.stdout.fnmatch_lines(
        ["cudaperf: baselines *: 0 added, 1 updated (1 started afresh), 0 kept"]
    )
    new = _entry(pytester, "test_level.py::test_level")
    assert len(new["recordings"]) == 1  # the old level is not averaged in
    assert new["value"] > 30.0

    same = pytester.runpytest(*FAST)
    same.assert_outcomes(passed=1)
    same.stdout.fnmatch_lines(
        [
            "test_level.py::test_level  *PASS*",
            "cudaperf: 1 measured, 0 regressions, 0 improved, 0 new, 0 inconclusive",
        ]
    )

    monkeypatch.setenv("SLEEP_MS", "2")  # the old code again: faster than the baseline
    back = pytester.runpytest(*FAST)
    back.assert_outcomes(passed=1)
    back.stdout.fnmatch_lines(
        [
            "test_level.py::test_level  *IMPROVED*",
            "cudaperf: 1 measured, 0 regressions, 1 improved, 0 new, 0 inconclusive",
        ]
    )


def test_record_writes_series_of_k_recordings_and_show_says_so(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_rec=RECORDED)
    result = pytester.run(
        sys.executable, "-m", "pytest_cudaperf.cli", "record", "--runs", "3",
        "--", "-q", "--cudaperf-max-time=0.1", "-p", "no:cacheprovider",
    )  # fmt: skip
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    result.stdout.fnmatch_lines(
        [
            "cudaperf record: 3 pytest processes started together, each measuring in its turn",
            "cudaperf record: run ?/3 ended: exit 0, * s after the start",
            "*run 1/3: pytest exited 0, 2 series*",
            "*run 2/3: pytest exited 0, 2 series*",
            "*run 3/3: pytest exited 0, 2 series*",
            "cudaperf record: breakdowns: 0 series profiled (in the last run)",
            "cudaperf: baselines *.cudaperf/cpu-*.json: 2 added, 0 updated, 0 kept",
        ]
    )
    path, document = _document(pytester)
    assert sorted((n, name) for n, names in document["entries"].items() for name in names) == [
        ("test_rec.py::test_own", ""),
        ("test_rec.py::test_timed", "nap"),
    ]
    for nodeid, name in [("test_rec.py::test_own", ""), ("test_rec.py::test_timed", "nap")]:
        entry = _entry(pytester, nodeid, name)
        assert len(entry["recordings"]) == 3, entry
        medians = sorted(r["median"] for r in entry["recordings"])
        assert entry["value"] == pytest.approx(medians[1], rel=1e-5)  # median of the medians
    shown = pytester.run(sys.executable, "-m", "pytest_cudaperf.cli", "show", str(path))
    assert shown.ret == 0, shown.stderr.str()
    shown.stdout.fnmatch_lines_random(
        [
            "*processes*",
            "test_rec.py::test_own  * time:wall * 3 *",
            "test_rec.py::test_timed * nap * time:wall * 3 *",
        ]
    )
    # a later run is judged against them
    judged = pytester.runpytest("--cudaperf-max-time=0.1", "-p", "no:cacheprovider")
    judged.assert_outcomes(passed=2)
    judged.stdout.fnmatch_lines(["cudaperf: 2 measured, 0 regressions, *, 0 new, *"])


@pytest.mark.skipif(not turns.AVAILABLE, reason="turns need fcntl")
def test_a_run_handed_a_turn_marks_itself_ready_and_hands_it_no_further(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run of ``cudaperf record`` (the turn folder in its environment) marks itself ready once
    collected and waits for the turn; the environment it leaves to the processes it starts (a
    fresh process, xdist's workers) no longer hands the turn on."""
    pytester.makepyfile(test_rec=RECORDED)
    folder = pytester.path / "turns"
    gate = turns.Gate(folder)
    monkeypatch.setenv(turns.ENV, str(folder))
    gate.open()  # the run would wait for it here
    result = pytester.runpytest("-q", *FAST)
    result.assert_outcomes(passed=2)
    assert turns.ready_mark(folder, os.getpid()).exists()
    assert turns.ENV not in os.environ


@pytest.mark.skipif(not turns.AVAILABLE, reason="turns need fcntl")
def test_under_xdist_only_the_controller_takes_the_turn(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``-n 2`` the controller holds the turn for the whole run; a worker that waited for
    it too would never get it (the run would hang, cut by the timeout)."""
    pytester.makepyfile(test_rec=RECORDED)
    folder = pytester.path / "turns"
    turns.Gate(folder).open()
    monkeypatch.setenv(turns.ENV, str(folder))
    result = pytester.runpytest_subprocess("-n", "2", *FAST, timeout=120)
    result.assert_outcomes(passed=2)
    assert len(list(folder.glob("ready-*"))) == 1
