"""A CPU regression is measured again in a fresh pytest process before it fails its test: a slow
state of one process (planted here: only the first process to run the test is slow) reads
INCONCLUSIVE, a real slowdown still fails and says it was confirmed there."""

from __future__ import annotations

import json
import os
import signal
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from conftest import RecordOnce

FAST = ["--cudaperf-max-time=0.2", "--cudaperf-tolerance=30%", "-p", "no:cacheprovider"]

# After a run planted slow-once-TEST, the first process to run that test is slow in every call of
# it; any later process (the fresh one) is not. slow-always-TEST or SLOW=1 makes every process
# slow: a real regression. FAST=1 makes every process fast (0.1 ms naps): a real speed-up.
# A slow nap is ten times a fast one (10 ms, 1 ms): a measurement's warm-up and samples cost
# in proportion to the nap, in each of its three rounds, and each slow test is measured twice
# (re-measured) in the parent and again in the fresh process.
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
    fast = os.environ.get("FAST") == "1"
    time.sleep(0.01 if _slow[test] else 0.0001 if fast else 0.001)

@pytest.mark.perf
def test_nap():
    nap("nap")

def test_timed_nap(cuda_timer, cuda_device):  # cuda_device holds the device's lock all along
    cuda_timer(lambda: nap("timed"), name="inner")
"""


@pytest.fixture
def recorded(pytester: pytest.Pytester, record_once: RecordOnce) -> pytest.Pytester:
    """NAPPER with its baseline of 1 ms naps (recorded once for every test here)."""
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
    assert nap["measurement"]["median_ms"] < 5  # the fresh process's: 1 ms naps, not 10


def test_off_judges_in_this_process_only(recorded: pytest.Pytester) -> None:
    _plant(recorded)
    result = recorded.runpytest(*FAST, "--cudaperf-confirm-process=off")
    result.assert_outcomes(failed=2)
    result.stdout.no_fnmatch_line("*fresh process*")


def test_a_speed_up_alone_starts_no_fresh_process(
    recorded: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The speed-up is left INCONCLUSIVE in its own process and says how to have it confirmed.
    Where other processes took the CPU from the run, its threshold is raised by that contention
    and it may be measured again in its process instead, which its line says; neither starts a
    fresh process."""
    monkeypatch.setenv("FAST", "1")
    result = recorded.runpytest(*FAST, "-k", "not timed")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "test_napper.py::test_nap: inconclusive: *",
            "cudaperf: 1 measured, 0 regressions, 0 improved, 0 new, 1 inconclusive",
        ]
    )
    (line,) = [n for n in result.outlines if n.startswith("test_napper.py::test_nap: incon")]
    if " not confirmed in a fresh process " in line:
        assert "test_nap: inconclusive: -" in line, line
        assert "% not confirmed in a fresh process (a speed-up starts none: " in line, line
        assert "--cudaperf-confirm-process=all) — " in line, line
    else:  # measured again in its own process: only where contention raised its threshold
        assert "test_nap: inconclusive: median " in line, line
        assert "by this run's CPU contention" in line, line
    result.stdout.no_fnmatch_line("cudaperf: confirming *")


BUDGETED = """
import os, time
import pytest

@pytest.mark.perf(max_ms=0.5)
def test_nap_over_budget():
    time.sleep(0.01 if os.environ.get("SLOW") == "1" else 0.001)
"""


def test_a_regression_of_a_test_that_fails_anyway_starts_no_fresh_process(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # over its max_ms whatever a fresh process would find: its regression is not confirmed
    pytester.makepyfile(test_budgeted=BUDGETED)
    pytester.runpytest(*FAST, "--cudaperf-update").assert_outcomes(failed=1)  # the budget
    monkeypatch.setenv("SLOW", "1")
    result = pytester.runpytest(*FAST)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "perf: test_nap_over_budget median * > max_ms 0.5 ms *",
            "test_budgeted.py::test_nap_over_budget: inconclusive: +*% not confirmed in a fresh"
            " process (its test fails anyway: --cudaperf-confirm-process=all) — *",
        ]
    )
    result.stdout.no_fnmatch_line("cudaperf: confirming *")


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
    # its own after, at its end), and appends no job summary of its own. Nor does it print the
    # suite's report header, whose hooks may run subprocesses (kornia's runs lscpu, nvidia-smi
    # and gcc), though the addopts make it verbose
    ini = "[pytest]\naddopts = -v --junitxml=junit.xml --cudaperf-html=report.html\n"
    recorded.makeini(ini)
    recorded.makeconftest("""
        import os, pathlib

        def pytest_report_header(config):
            if os.environ.get("PYTEST_CUDAPERF_FRESH_PROCESS"):
                pathlib.Path("fresh-header").write_text("printed")
            return "the suite's own header"

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
    assert not (recorded.path / "fresh-header").exists()
    result.stdout.fnmatch_lines(["the suite's own header"])  # the parent's
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
    # in this process, started in sub/ (the inner run's invocation folder is the current one)
    pytester.runpytest(*args, "--cudaperf-update").assert_outcomes(passed=1)
    (pytester.path / "slow-once-nap").touch()
    result = pytester.runpytest(*args)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["*test_nap[[]big[]]: inconclusive: +*% not confirmed in a fresh process*"]
    )


# Four tests; each fresh process notes its pid once. slow-always-I makes test I slow in every
# process (a real regression), slow-once-I only in the first that runs it (a slow state),
# slow-fresh every test in a fresh process (a host that runs all code slower there).
BATCH = """
import os, pathlib, time
import pytest

HERE = pathlib.Path(__file__).parent
_slow = {}
if os.environ.get("PYTEST_CUDAPERF_FRESH_PROCESS"):
    with open(HERE / "fresh-pids", "a") as pids:
        pids.write(f"{os.getpid()}\\n")
    if (HERE / "interrupt").exists():  # Ctrl-C while the batch runs, until the parent kills it
        import signal
        for _ in range(120):
            os.kill(os.getppid(), signal.SIGINT)
            time.sleep(0.5)

@pytest.mark.perf
@pytest.mark.parametrize("i", range(4))
def test_nap(i):
    if i not in _slow:
        once = HERE / f"slow-once-{i}"
        _slow[i] = (HERE / f"slow-always-{i}").exists() or once.exists()
        once.unlink(missing_ok=True)
        if os.environ.get("PYTEST_CUDAPERF_FRESH_PROCESS") and (HERE / "slow-fresh").exists():
            _slow[i] = True
    time.sleep(0.02 if _slow[i] else 0.001)
"""


@pytest.fixture
def batch(pytester: pytest.Pytester, record_once: RecordOnce) -> pytest.Pytester:
    """BATCH with its baseline of 1 ms naps."""
    pytester.makepyfile(test_batch=BATCH)
    record_once("test_batch.py", BATCH, FAST).write(pytester.path)
    return pytester


def _fresh_pids(pytester: pytest.Pytester) -> list[int]:
    found = pytester.path / "fresh-pids"
    return [int(n) for n in found.read_text().split()] if found.exists() else []


def test_the_suspects_of_a_loop_are_confirmed_together_in_one_fresh_process(
    batch: pytest.Pytester, mode: list[str]
) -> None:
    for plant in ("slow-always-1", "slow-always-2", "slow-once-3"):
        (batch.path / plant).touch()
    # under -n2 a process of its own: the workers say what they confirm on its stderr
    run = batch.runpytest_subprocess if mode == ["-n2"] else batch.runpytest
    # a tolerance of 300%, which the 20x naps still clear: [0]'s pass rules out a change beyond
    # it (its CI, from a baseline of one process, reaches about +50%, and past +100% on a loaded
    # runner), so it serves as a control
    result = run(
        *mode,
        *FAST,
        "--cudaperf-tolerance=300%",
        "--cudaperf-json=out.json",
        "--junitxml=junit.xml",
    )
    result.assert_outcomes(passed=2, failed=2)
    pids = _fresh_pids(batch)
    if mode == ["-n2"]:  # one fresh process per worker that had suspects
        assert 1 <= len(pids) <= 2
        assert "suspected regression" in result.stderr.str()
    else:
        assert len(pids) == 1
        result.stdout.fnmatch_lines(  # [0] passed: the controls' test
            [
                "cudaperf: confirming 3 suspected regressions in a fresh process, beside 1 test that passed"
            ]
        )
    tests = json.loads((batch.path / "out.json").read_text())["tests"]
    kinds = {t["nodeid"][-3:]: t["records"][0]["verdict"]["kind"] for t in tests}
    assert kinds == {"[0]": "pass", "[1]": "regression", "[2]": "regression", "[3]": "inconclusive"}
    junit = (batch.path / "junit.xml").read_text()
    assert junit.count("<failure") == 2
    assert junit.count('name="cudaperf time:') == 4  # each test's once, as confirmed
    assert junit.count("(inconclusive)") == 1


def test_a_regression_that_the_fresh_process_runs_its_controls_as_slow_as_is_withdrawn(
    batch: pytest.Pytester, mode: list[str]
) -> None:
    # [1] is 20x slower everywhere, and the fresh process runs every test 20x slower: the
    # tests that passed here, measured there beside it, read so too. Under -n2 the four tests go
    # to one worker (--dist loadfile): its own passed tests are a worker's controls. A tolerance
    # of 300% (a 20x slowdown still fails here, by a CI that a loaded runner widens): a pass
    # rules out a change beyond it, so it serves as a control (at 100%, a loaded 2-core runner
    # widened some passes' CIs past it); and the controls' shift is taken at the low end of its
    # CI, which the load widens too: at 30%, one loaded CI run read it low enough that [1]
    # stood confirmed
    for plant in ("slow-always-1", "slow-fresh"):
        (batch.path / plant).touch()
    xdist = [*mode, "--dist", "loadfile"] if mode == ["-n2"] else mode
    run = batch.runpytest_subprocess if mode == ["-n2"] else batch.runpytest
    result = run(*xdist, *FAST, "--cudaperf-tolerance=300%", "--cudaperf-json=out.json")
    result.assert_outcomes(passed=4)
    said = result.stderr.str() if mode == ["-n2"] else result.stdout.str()
    assert (
        "confirming 1 suspected regression in a fresh process, beside 2 tests that passed" in said
    )
    tests = json.loads((batch.path / "out.json").read_text())["tests"]
    (record,) = next(t for t in tests if t["nodeid"].endswith("[1]"))["records"]
    assert record["verdict"]["kind"] == "inconclusive"
    assert ", which passed in this run, read at least +" in record["verdict"]["message"]


def test_maxfail_confirms_at_once_and_stops_where_it_would_have(batch: pytest.Pytester) -> None:
    for plant in ("slow-always-1", "slow-always-2"):
        (batch.path / plant).touch()
    result = batch.runpytest(*FAST, "--cudaperf-tolerance=300%", "-x")  # [0] a control
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "cudaperf: confirming 1 suspected regression in a fresh process, beside 1 test that passed",
            "*stopping after 1 failures*",
        ]
    )


def test_ctrl_c_during_the_batch_reports_the_held_tests_unconfirmed(
    batch: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    for plant in ("slow-always-1", "interrupt"):
        (batch.path / plant).touch()
    tmp = batch.mkdir("tmp")
    monkeypatch.setenv("TMPDIR", str(tmp))
    # the run takes Ctrl-C as at a terminal, also where this one was started in the background
    # of a shell, with SIGINT ignored: an ignored signal stays ignored in the processes started
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        result = batch.runpytest_subprocess(*FAST)  # the fresh process signals its parent
    finally:
        signal.signal(signal.SIGINT, previous)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(
        [
            "perf regression: median *",
            "    not re-measured in a fresh process: the run was interrupted",
        ]
    )
    (pid,) = _fresh_pids(batch)
    with pytest.raises(ProcessLookupError):  # the fresh process was killed, and reaped
        os.kill(pid, 0)
    assert not [p for p in tmp.iterdir() if p.name.startswith("cudaperf-fresh-")]


def test_a_test_that_pytest_rerunfailures_reruns_is_confirmed_inside_its_call(
    batch: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("pytest_rerunfailures")
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p no:benchmark")  # rerunfailures loaded
    (batch.path / "slow-always-1").touch()
    result = batch.runpytest(*FAST, "--reruns=1", "-k", "test_nap[1]")
    assert result.parseoutcomes() == {"failed": 1, "deselected": 3, "rerun": 1}
    result.stdout.fnmatch_lines(["*perf regression: *; confirmed in a fresh process"])
    result.stdout.no_fnmatch_line("cudaperf: confirming *")
    assert len(_fresh_pids(batch)) == 1  # inside the first call; the rerun reads its result


def test_a_fresh_process_notes_each_finished_test_for_its_parents_progress(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parent names a file in the fresh process's environment; each test that finishes
    there, failed or passed, is appended to it, which the parent counts for its progress line."""
    finished = pytester.path / "finished.txt"
    monkeypatch.setenv("PYTEST_CUDAPERF_FRESH_PROGRESS", str(finished))
    pytester.makepyfile(test_two="def test_a():\n    pass\n\ndef test_b():\n    assert False\n")
    pytester.runpytest("-p", "no:randomly").assert_outcomes(passed=1, failed=1)
    assert finished.read_text().splitlines() == ["test_two.py::test_a", "test_two.py::test_b"]
