"""A CPU regression is measured again in a fresh pytest process before it fails its test: a slow
state of one process (planted here: only the first process to run the test is slow) reads
INCONCLUSIVE, a real slowdown still fails and says it was confirmed there."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from conftest import RecordOnce

FAST = ["--cudaperf-max-time=0.2", "--cudaperf-tolerance=30%", "-p", "no:cacheprovider"]

# After a run planted slow-once-TEST, the first process to run that test is slow in every call of
# it; any later process (the fresh one) is not. slow-always-TEST or SLOW=1 makes every process
# slow: a real regression.
NAPPER = """
import os, pathlib, time
import pytest

_slow = {}

def nap(test):
    if test not in _slow:
        flag = pathlib.Path(__file__).with_name(f"slow-once-{test}")
        always = pathlib.Path(__file__).with_name(f"slow-always-{test}").exists()
        _slow[test] = os.environ.get("SLOW") == "1" or always or flag.exists()
        flag.unlink(missing_ok=True)
    time.sleep(0.02 if _slow[test] else 0.002)

@pytest.mark.perf
def test_nap():
    nap("nap")

def test_timed_nap(cuda_timer, cuda_device):  # cuda_device holds the device's lock all along
    cuda_timer(lambda: nap("timed"), name="inner")
"""


@pytest.fixture
def recorded(pytester: pytest.Pytester, record_once: RecordOnce) -> pytest.Pytester:
    """NAPPER with its baseline of 2 ms naps (recorded once for every test here)."""
    pytester.makepyfile(test_napper=NAPPER)
    record_once("test_napper.py", NAPPER, FAST).write(pytester.path)
    return pytester


def _plant(pytester: pytest.Pytester) -> None:
    for test in ("nap", "timed"):
        (pytester.path / f"slow-once-{test}").touch()


def test_a_slow_state_of_one_process_passes_and_a_real_slowdown_fails(
    recorded: pytest.Pytester, mode: list[str]
) -> None:
    # test_nap: slow in this process only; test_timed_nap (cuda_timer under cuda_device's
    # lock): slow in every process, so the fresh process confirms it
    (recorded.path / "slow-once-nap").touch()
    (recorded.path / "slow-always-timed").touch()
    result = recorded.runpytest(*mode, *FAST, "--cudaperf-json=out.json")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines_random(
        [
            "test_napper.py::test_nap: inconclusive: +*% not confirmed in a fresh process,"
            " re-measured *",
            "[[]inner[]] perf regression: median * (+*%*; confirmed in a fresh process",
            "cudaperf: 2 measured, 1 regression, 0 improved, 0 new, 1 inconclusive",
        ]
    )
    tests = json.loads((recorded.path / "out.json").read_text())["tests"]
    (nap,) = next(t for t in tests if t["nodeid"].endswith("::test_nap"))["records"]
    assert nap["verdict"]["kind"] == "inconclusive"
    assert nap["measurement"]["median_ms"] < 10  # the fresh process's: 2 ms naps


def test_off_judges_in_this_process_only(recorded: pytest.Pytester) -> None:
    _plant(recorded)
    result = recorded.runpytest(*FAST, "--cudaperf-confirm-process=off")
    result.assert_outcomes(failed=2)
    result.stdout.no_fnmatch_line("*fresh process*")


def test_a_fresh_process_that_cannot_measure_leaves_the_regression_standing(
    recorded: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorded.makeconftest("""
        import os
        if os.environ.get("PYTEST_CUDAPERF_FRESH_PROCESS"):
            raise RuntimeError("this suite runs only as a whole")
    """)
    monkeypatch.setenv("SLOW", "1")
    result = recorded.runpytest(*FAST, "-k", "not timed")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "perf regression: median *",
            "    not re-measured in a fresh process: pytest exited 4 without measuring it"
            " (*RuntimeError: this suite runs only as a whole)",
        ]
    )


def test_a_suite_with_xdist_in_its_addopts_is_confirmed_too(
    recorded: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorded.makeini("[pytest]\naddopts = -n 1\n")
    monkeypatch.setenv("SLOW", "1")
    result = recorded.runpytest(*FAST, "-k", "not timed")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["perf regression: *; confirmed in a fresh process"])


def test_a_fresh_process_writes_none_of_the_suites_outputs(
    recorded: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the suite's addopts name a JUnit file and an HTML report, and the run is a GitHub job: the
    # fresh process notes which of them exist once it has written its outputs (the parent writes
    # its own after, at its end), and appends no job summary of its own
    recorded.makeini("[pytest]\naddopts = --junitxml=junit.xml --cudaperf-html=report.html\n")
    recorded.makeconftest("""
        import os, pathlib

        def pytest_unconfigure(config):
            if os.environ.get("PYTEST_CUDAPERF_FRESH_PROCESS"):
                seen = [n for n in ("junit.xml", "report.html") if pathlib.Path(n).exists()]
                pathlib.Path("fresh-saw").write_text(" ".join(seen) or "nothing")
    """)
    summary = recorded.path / "summary.md"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    (recorded.path / "slow-once-nap").touch()
    result = recorded.runpytest(*FAST, "-k", "not timed")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*inconclusive: +*% not confirmed in a fresh process*"])
    assert (recorded.path / "fresh-saw").read_text() == "nothing"
    assert summary.read_text().count("### cudaperf") == 1
    assert "test_nap" in (recorded.path / "junit.xml").read_text()
    assert (recorded.path / "report.html").exists()


SIZED = """
import os, pathlib, time
import pytest

def pytest_addoption(parser):
    parser.addoption("--size", default="small")

def pytest_generate_tests(metafunc):
    if "size" in metafunc.fixturenames:
        metafunc.parametrize("size", [metafunc.config.getoption("size")])
"""


def test_a_fresh_process_gets_the_suites_own_options(pytester: pytest.Pytester) -> None:
    # the item exists only with the parent's `--size big`: without it, the fresh process would
    # find no test_nap[big] and the slow state of this process would fail the test
    pytester.makeconftest(SIZED)
    pytester.makepyfile(test_napper=NAPPER.replace("def test_nap():", "def test_nap(size):"))
    args = ["test_napper.py", "--size", "big", "-k", "not timed", *FAST]
    pytester.runpytest(*args, "--cudaperf-update").assert_outcomes(passed=1)
    (pytester.path / "slow-once-nap").touch()
    result = pytester.runpytest(*args)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["test_napper.py::test_nap[[]big[]]: inconclusive: +*% not confirmed in a fresh process*"]
    )


def test_a_fresh_process_starts_where_the_parent_was_started(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `--size-file size.txt` is relative to the folder pytest was started in (sub/), not to the
    # rootdir: the fresh process must start there to find the same item
    pytester.makeconftest("""
import pathlib

def pytest_addoption(parser):
    parser.addoption("--size-file")

def pytest_generate_tests(metafunc):
    if "size" in metafunc.fixturenames:
        size = pathlib.Path(metafunc.config.getoption("size_file")).read_text().strip()
        metafunc.parametrize("size", [size])
""")
    pytester.makepyfile(test_napper=NAPPER.replace("def test_nap():", "def test_nap(size):"))
    sub = pytester.mkdir("sub")
    (sub / "size.txt").write_text("big\n")
    monkeypatch.chdir(sub)
    args = ["../test_napper.py", "--size-file", "size.txt", "-k", "not timed", *FAST]
    first = pytester.run(sys.executable, "-m", "pytest", *args, "--cudaperf-update")
    assert first.ret == 0, first.stdout.str()
    (pytester.path / "slow-once-nap").touch()
    result = pytester.run(sys.executable, "-m", "pytest", *args)
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(
        ["*test_nap[[]big[]]: inconclusive: +*% not confirmed in a fresh process*"]
    )
