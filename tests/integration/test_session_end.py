"""Session-end robustness and fraction arguments, end to end: an output that cannot be written
is one line naming the file and what to do, every other output is kept, the run exits with
pytest's usage-error code and never shows a traceback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from conftest import RecordOnce

FAST = ["--cudaperf-max-time=0.05", "--cudaperf-tolerance=30%", "-p", "no:cacheprovider"]

ONE_TEST = """
import time
import pytest

@pytest.mark.perf
def test_one():
    time.sleep(0.001)
"""


def _no_traceback(result: pytest.RunResult) -> None:
    text = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in text
    assert "INTERNALERROR" not in text


def test_baseline_folder_that_is_a_file(pytester: pytest.Pytester) -> None:
    """Found at start-up, before anything is measured: one line naming the path."""
    pytester.makepyfile(test_one=ONE_TEST)
    (pytester.path / ".cudaperf").write_text("not a folder")
    result = pytester.runpytest_subprocess(*FAST, "--cudaperf-update", "--cudaperf-json=out.json")
    _no_traceback(result)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: */.cudaperf: exists but is not a folder; move it away, or choose another "
            "baseline folder with --cudaperf-baseline-dir"
        ]
    )
    assert (pytester.path / ".cudaperf").read_text() == "not a folder"


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root ignores file modes"
)
def test_read_only_baseline_folder(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_one=ONE_TEST)
    folder = pytester.path / ".cudaperf"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        result = pytester.runpytest(*FAST, "--cudaperf-update")
    finally:
        folder.chmod(0o755)
    _no_traceback(result)
    result.stdout.fnmatch_lines(["cudaperf: baseline update: */.cudaperf: *(PermissionError)*"])
    assert result.ret == pytest.ExitCode.USAGE_ERROR


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ["--cudaperf-json=out"],
            "ERROR: --cudaperf-json: */out is a folder; point --cudaperf-json at a writable file",
        ),
        (
            ["--cudaperf-html=notes.txt/report.html"],
            "ERROR: --cudaperf-html: */notes.txt/report.html cannot be created: */notes.txt is a "
            "file, not a folder; point --cudaperf-html at a writable file",
        ),
        (
            ["--cudaperf-update", "--cudaperf-baseline-dir=notes.txt/base"],
            "ERROR: --cudaperf-update: the baseline folder */notes.txt/base cannot be created: "
            "*/notes.txt is a file, not a folder; make it a writable folder, or choose another "
            "with --cudaperf-baseline-dir",
        ),
        (
            ["--cudaperf-json=/proc/r.json"],
            "ERROR: --cudaperf-json: /proc/r.json cannot be created: the folder /proc takes no "
            "new files (*); point --cudaperf-json at a writable file",
        ),
        (
            ["--junitxml=notes.txt/junit.xml"],
            "ERROR: --junitxml: */notes.txt/junit.xml cannot be created: */notes.txt is a file, "
            "not a folder; point --junitxml to a writable file",
        ),
        (
            ["--cudaperf-history=notes.txt/hist.db"],
            "ERROR: --cudaperf-history: */notes.txt/hist.db cannot be created: *",
        ),
        (
            ["--cudaperf-history=notes.txt"],
            "ERROR: --cudaperf-history: */notes.txt exists and is not an SQLite history file; "
            "point --cudaperf-history at a history or a new file",
        ),
        (
            ["--cudaperf-json=.cudaperf/run.json"],
            "ERROR: --cudaperf-json: */.cudaperf/run.json lies in the baseline folder, whose "
            ".json files are read as baselines; write it outside that folder",
        ),
        (
            ["--cudaperf-json=r.json", "--cudaperf-html=r.json"],
            "ERROR: --cudaperf-html: */r.json is --cudaperf-json's file as well; give each "
            "output a file of its own",
        ),
        (
            ["GITHUB_STEP_SUMMARY=notes.txt/summary.md"],
            "ERROR: GITHUB_STEP_SUMMARY: notes.txt/summary.md cannot be created: notes.txt is a "
            "file, not a folder; set GITHUB_STEP_SUMMARY to a writable file",
        ),
    ],
    ids=[
        "json-folder",
        "html-under-a-file",
        "baselines-under-a-file",
        "json-in-proc",
        "junitxml",
        "history",
        "history-not-sqlite",
        "json-in-baselines",
        "one-file-twice",
        "step-summary",
    ],
)
def test_an_output_that_cannot_be_written_stops_the_run_before_any_test(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, args: list[str], said: str
) -> None:
    """Checked when the run starts: one line naming the option, the path and what to do; no
    test runs, nothing is written."""
    if args[0].startswith("GITHUB_STEP_SUMMARY="):
        monkeypatch.setenv("GITHUB_ACTIONS", "true")
        monkeypatch.setenv("GITHUB_STEP_SUMMARY", args[0].split("=", 1)[1])
        args = []
    pytester.makepyfile(test_one=ONE_TEST)
    (pytester.path / "out").mkdir()
    (pytester.path / "notes.txt").write_text("a file")
    result = pytester.runpytest_subprocess(*FAST, *args)
    _no_traceback(result)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([said])
    result.stdout.no_fnmatch_line("*passed*")
    assert not (pytester.path / ".cudaperf").exists()
    assert list((pytester.path / "out").iterdir()) == []


def test_github_summary_that_cannot_be_written(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_one=ONE_TEST)
    (pytester.path / "summary").mkdir()
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(pytester.path / "summary"))
    result = pytester.runpytest_subprocess(*FAST)
    _no_traceback(result)
    result.stderr.fnmatch_lines(
        [
            "ERROR: GITHUB_STEP_SUMMARY: */summary is a folder; set GITHUB_STEP_SUMMARY to a writable file"
        ]
    )
    result.stdout.no_fnmatch_line("*passed*")
    assert result.ret == pytest.ExitCode.USAGE_ERROR


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("value", float("inf"), "'value' must be a finite positive number, got inf"),
        ("value", float("nan"), "'value' must be a finite positive number, got nan"),
        ("value", -1, "'value' must be a finite positive number, got -1"),
        ("noise", -5, "'noise' must be a finite number >= 0, got -5"),
        ("env", "x", "'env' must be an object, got 'x'"),
        ("ci", "abc", "'ci' must be a pair [[]low, high[]]*"),
    ],
    ids=["Infinity", "NaN", "negative", "negative-noise", "env-string", "ci-string"],
)
def test_a_bad_baseline_field_is_a_usage_error_naming_the_file(
    pytester: pytest.Pytester,
    record_once: RecordOnce,
    field: str,
    value: object,
    said: str,
) -> None:
    """Each bad field was once a traceback, an AttributeError in the test, or a series that can
    never fail."""
    pytester.makepyfile(test_one=ONE_TEST)
    path = record_once("test_one.py", ONE_TEST, FAST).write(pytester.path)
    document = json.loads(path.read_text())
    entry = document["entries"]["test_one.py::test_one"][""]["time:wall"]
    (entry["recordings"][0] if field == "ci" else entry)[field] = value
    path.write_text(json.dumps(document))  # json writes Infinity and NaN as Python reads them
    result = pytester.runpytest_subprocess(
        *FAST, "--cudaperf-json=out.json", "--cudaperf-html=r.html"
    )
    _no_traceback(result)
    assert result.ret == pytest.ExitCode.USAGE_ERROR  # rejected at start-up, nothing measured
    result.stderr.fnmatch_lines([f"ERROR: *{path.name}: entry 'test_one.py::test_one'*{said}*"])
    assert [line for line in result.stderr.lines if line.strip()] == result.stderr.lines[:1]


@pytest.mark.parametrize(
    ("where", "value"),
    [("cli", "5"), ("cli", "2"), ("marker", "5"), ("marker", '"5"'), ("marker", "2")],
)
def test_a_bare_tolerance_above_one_is_an_error_suggesting_percent(
    pytester: pytest.Pytester, where: str, value: str
) -> None:
    marker = f"tolerance={value}" if where == "marker" else ""
    pytester.makepyfile(
        f"""
        import pytest

        @pytest.mark.perf({marker})
        def test_one():
            pass
        """
    )
    args = [f"--cudaperf-tolerance={value}"] if where == "cli" else []
    # -rN: no short test summary, whose copy of the message is cut or not by the terminal width
    result = pytester.runpytest("-p", "no:cacheprovider", "-rN", *args)
    _no_traceback(result)
    bare = value.strip('"')
    if where == "cli":
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines(
            [f"ERROR: --cudaperf-tolerance: a bare number is a fraction below 1 *'{bare}%'?*"]
        )
        assert len([line for line in result.stderr.lines if line.strip()]) == 1  # one line
    else:  # the offending test errors at setup, naming the marker argument
        result.assert_outcomes(errors=1)
        result.stdout.fnmatch_lines(
            [f"*@pytest.mark.perf: tolerance: a bare number is a fraction below 1*'{bare}%'?*"]
        )
        assert result.stdout.str().count("a bare number is a fraction below 1") == 1  # one line


def test_an_interrupted_update_keeps_the_finished_tests_and_prunes_nothing(
    pytester: pytest.Pytester,
) -> None:
    """Ctrl-C (a KeyboardInterrupt in the second test) during ``--cudaperf-update --cudaperf-prune``:
    the first test's recording is written, whole; nothing is pruned; one line says so."""
    pytester.makepyfile(
        test_two="""
        import time

        def test_first(cuda_timer):
            cuda_timer(lambda: time.sleep(0.001))

        def test_second():
            raise KeyboardInterrupt
        """
    )
    result = pytester.runpytest_subprocess(*FAST, "--cudaperf-update", "--cudaperf-prune")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        [
            "cudaperf: baselines *: 1 added, 0 updated, 0 kept",
            "cudaperf: the run was interrupted: the baselines keep what the tests that finished "
            "recorded; nothing was pruned",
        ]
    )
    (path,) = (pytester.path / ".cudaperf").glob("*.json")
    assert list(json.loads(path.read_text())["entries"]) == ["test_two.py::test_first"]


#: the first test's recording reaches the session (under xdist too) before the second starts
TERMINATED = """
import pathlib, time

def test_first(cuda_timer):
    cuda_timer(lambda: time.sleep(0.001))
    pathlib.Path("first-done").touch()

def test_second():
    while not pathlib.Path("first-done").exists():
        time.sleep(0.05)
    time.sleep(1.0)
    pathlib.Path("second-started").touch()
    time.sleep(60)
"""


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_terminated_session_writes_what_its_finished_tests_measured(
    pytester: pytest.Pytester, workers: list[str]
) -> None:
    """SIGTERM as ``timeout`` sends it, to the session's process and a moment later to its
    process group, during the second test of an update: the session ends as on Ctrl-C (exit 2,
    the finished test's recording and the JSON report written, marked interrupted), saying why;
    the second signal, the same stop, does not end it before that."""
    pytester.makepyfile(test_two=TERMINATED)
    run = subprocess.Popen(
        [sys.executable, "-m", "pytest", *FAST, "--cudaperf-update", "--cudaperf-json=out.json",
         "-p", "no:randomly", *workers],
        cwd=pytester.path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not (pytester.path / "second-started").exists():
        assert run.poll() is None, run.communicate()[0]  # ended before its second test began
        assert time.monotonic() < deadline, "the second test never began"
        time.sleep(0.1)
    os.kill(run.pid, signal.SIGTERM)
    time.sleep(0.05)
    os.killpg(run.pid, signal.SIGTERM)
    out, _ = run.communicate(timeout=60)
    assert run.returncode == pytest.ExitCode.INTERRUPTED, out
    assert "Terminated: SIGTERM: ended as on Ctrl-C, what had finished is written" in out
    report = json.loads((pytester.path / "out.json").read_text())
    assert report["interrupted"] is True
    assert [t["nodeid"] for t in report["tests"] if t["records"]] == ["test_two.py::test_first"]
    (path,) = (pytester.path / ".cudaperf").glob("*.json")
    assert list(json.loads(path.read_text())["entries"]) == ["test_two.py::test_first"]


def test_a_stop_while_the_session_writes_its_outputs_lets_it_finish_writing(
    pytester: pytest.Pytester,
) -> None:
    """SIGTERM during the session's end (here a conftest's own ``pytest_sessionfinish``; under
    xdist, the workers being stopped): the report and the baselines are written all the same,
    and the session ends as interrupted, with no traceback."""
    pytester.makepyfile(test_one=ONE_TEST)
    pytester.makeconftest(
        """
        import os, signal

        def pytest_sessionfinish(session):
            os.kill(os.getpid(), signal.SIGTERM)
        """
    )
    result = pytester.runpytest_subprocess(*FAST, "--cudaperf-update", "--cudaperf-json=out.json")
    _no_traceback(result)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert json.loads((pytester.path / "out.json").read_text())["tests"]
    (path,) = (pytester.path / ".cudaperf").glob("*.json")
    assert list(json.loads(path.read_text())["entries"]) == ["test_one.py::test_one"]
