"""A re-run test is one test: with pytest-rerunfailures each attempt measures afresh under the same
keys, the last attempt's measurement is the test's, a failed attempt never reaches the baseline,
and the extra series an earlier version stored for a re-run (``"2"``) are obsolete."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from conftest import RecordOnce

pytest.importorskip("pytest_rerunfailures")

FAST = ["--cudaperf-max-time=0.05", "--cudaperf-tolerance=90%", "-p", "no:cacheprovider"]

#: fails its first attempt after measuring 10 ms; the re-run measures 1 ms and passes (a
#: measurement's cost follows its callable's time: 30 and 3 ms cost three times as much)
FLAKY = """
import time
from pathlib import Path

def test_flaky(cuda_timer):
    marker = Path(__file__).with_name("attempted")
    first = not marker.exists()
    marker.write_text("x")
    cuda_timer(lambda: time.sleep(0.01 if first else 0.001))
    assert not first, "the first attempt fails"
"""

SLEEPY = """
import os, time

def test_sleepy(cuda_timer):
    cuda_timer(lambda: time.sleep(0.001 * float(os.environ.get("SLOW", "1"))))
"""


def _entries(pytester: pytest.Pytester) -> dict[str, Any]:
    (path,) = (pytester.path / ".cudaperf").glob("*.json")
    return json.loads(path.read_text())["entries"]  # type: ignore[no-any-return]


def test_a_flaky_test_stores_its_passing_attempt_only(
    pytester: pytest.Pytester, mode: list[str]
) -> None:
    pytester.makepyfile(test_flaky=FLAKY)
    result = pytester.runpytest(*mode, *FAST, "--reruns=2", "--cudaperf-update")
    assert result.parseoutcomes() == {"passed": 1, "rerun": 1}
    entries = _entries(pytester)
    assert list(entries) == ["test_flaky.py::test_flaky"]
    assert list(entries["test_flaky.py::test_flaky"]) == [""]  # not a second series "2"
    (recording,) = entries["test_flaky.py::test_flaky"][""]["time:wall"]["recordings"]
    assert recording["median"] < 5  # ms: the passing attempt's 1 ms, not the failed one's 10 ms


def test_a_regressed_test_under_reruns_is_judged_by_its_last_attempt(
    pytester: pytest.Pytester,
    mode: list[str],
    monkeypatch: pytest.MonkeyPatch,
    record_once: RecordOnce,
) -> None:
    pytester.makepyfile(test_sleepy=SLEEPY)
    record_once("test_sleepy.py", SLEEPY, FAST).write(pytester.path)
    monkeypatch.setenv("SLOW", "10")
    slow = pytester.runpytest(*mode, *FAST, "--reruns=1", "--cudaperf-json=out.json")
    assert {k: v for k, v in slow.parseoutcomes().items() if k != "regressed"} == {
        "failed": 1,
        "rerun": 1,
    }
    slow.stdout.fnmatch_lines(["*perf regression: median *"])
    (test,) = json.loads((pytester.path / "out.json").read_text())["tests"]
    assert [r["name"] for r in test["records"]] == [""]  # the last attempt's one series
    assert test["records"][0]["verdict"]["kind"] == "regression"
    assert list(_entries(pytester)["test_sleepy.py::test_sleepy"]) == [""]


def test_an_extra_series_of_a_re_run_is_obsolete_and_pruned(
    pytester: pytest.Pytester, mode: list[str], record_once: RecordOnce
) -> None:
    """A baseline holding ``""`` and ``"2"`` for one test (what a re-run stored before): the
    test measures one series, so ``"2"`` is reported obsolete and ``--cudaperf-prune`` removes
    it; the test's own series is kept."""
    pytester.makepyfile(test_sleepy=SLEEPY)
    path = record_once("test_sleepy.py", SLEEPY, FAST).write(pytester.path)
    document = json.loads(path.read_text())
    by_name = document["entries"]["test_sleepy.py::test_sleepy"]
    by_name["2"] = by_name[""]
    path.write_text(json.dumps(document))
    seen = pytester.runpytest(*mode, *FAST)
    seen.assert_outcomes(passed=1)
    seen.stdout.fnmatch_lines(["OBSOLETE in *", "  test_sleepy.py::test_sleepy [[]2[]]"])
    pruned = pytester.runpytest(*mode, *FAST, "--cudaperf-update", "--cudaperf-prune")
    pruned.stdout.fnmatch_lines(["cudaperf: baselines *: 0 added, 1 updated, 0 kept, 1 pruned"])
    assert list(_entries(pytester)["test_sleepy.py::test_sleepy"]) == [""]
