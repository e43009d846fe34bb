"""run/child.py: the arguments and settings of a child pytest process, and the fresh-process
re-measurement's bookkeeping (its real runs are in tests/integration/test_fresh_process.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from pytest_cudaperf.keys import SeriesKey
from pytest_cudaperf.measure.measurement import Measurement
from pytest_cudaperf.report.document import Report
from pytest_cudaperf.report.model import JudgedRecord, TestOutcome
from pytest_cudaperf.run import child
from pytest_cudaperf.run.child import (
    PROGRESS_ENV,
    Fresh,
    FreshProcess,
    finished_count,
    item_args,
    items_args,
    note_finished,
    passed_args,
    read_times,
    settings_env,
)
from pytest_cudaperf.series import Record, Recording
from pytest_cudaperf.settings import Settings
from pytest_cudaperf.verdict import Kind, Verdict


def test_settings_reach_ranks_through_the_environment(tmp_path: Path) -> None:
    settings = Settings(
        update=True,
        prune=True,
        tolerance=0.1,
        max_time=0.5,
        json="out.json",
        history="h.sqlite",
        roofline=True,
        energy=True,
    )
    env = settings_env(settings, tmp_path)
    assert env["PYTEST_CUDAPERF_UPDATE"] == "1"
    assert env["PYTEST_CUDAPERF_PRUNE"] == "0"  # ranks write nothing
    assert env["PYTEST_CUDAPERF_TOLERANCE"] == "0.1"
    assert env["PYTEST_CUDAPERF_MAX_TIME"] == "0.5"
    assert env["PYTEST_CUDAPERF_BASELINE_DIR"] == str(tmp_path)
    assert "PYTEST_CUDAPERF_JSON" not in env
    assert "PYTEST_CUDAPERF_HISTORY" not in env  # a child appends no run of its own
    assert env["PYTEST_CUDAPERF_ROOFLINE"] == env["PYTEST_CUDAPERF_ENERGY"] == "0"  # times only


def test_every_setting_a_child_gets_reads_back_as_it_was(tmp_path: Path) -> None:
    """The environment a child gets is read by the child's own settings resolution: each value
    parses back to the parent's (a default written as ``0`` that its parser refused made every
    rank and fresh process a usage error)."""
    from pytest_cudaperf.settings import resolve

    class NoConfig:
        def getoption(self, name: str) -> None:
            return None

        def getini(self, name: str) -> str:
            return ""

    others = Settings(round_of=3, rounds=1, cpu_threads=0, remeasure="off", seed=None)
    for settings in (Settings(), others, Settings(seed=7)):
        env = settings_env(settings, tmp_path)
        child = resolve(NoConfig(), env, str(tmp_path))
        for name in env:
            option = name.removeprefix("PYTEST_CUDAPERF_").lower()
            assert getattr(child, option) == getattr(settings, option) or option == "baseline_dir"
    # a seed left off reaches the child as off, not as the default seed
    assert resolve(NoConfig(), settings_env(others, tmp_path), "x").seed is None


def test_a_list_setting_reaches_a_child_as_its_variable_reads_it(tmp_path: Path) -> None:
    from pytest_cudaperf.settings import parse_names

    assert "PYTEST_CUDAPERF_LEAK_SWEEP_UNSAFE_FIXTURES" not in settings_env(Settings(), tmp_path)
    given = Settings(leak_sweep="fail", leak_sweep_unsafe_fixtures=("db", "server"))
    env = settings_env(given, tmp_path)
    assert parse_names(env["PYTEST_CUDAPERF_LEAK_SWEEP_UNSAFE_FIXTURES"]) == ("db", "server")
    assert env["PYTEST_CUDAPERF_LEAK_SWEEP"] == "off"  # a child re-measures times only


def test_item_args_select_exactly_the_item(tmp_path: Path) -> None:
    args = item_args(
        "tests/test_x.py::TestA::test_b[1-x]",
        tmp_path / "tests/test_x.py",
        (tmp_path, tmp_path / "pytest.ini"),
        tmp_path / "tmp",
    )
    assert args[0] == f"{tmp_path}/tests/test_x.py::TestA::test_b[1-x]"
    assert "-n0" in args  # parses under a suite's addopts = -n auto
    assert "--no-header" in args  # a suite's header hooks are not run again
    assert "--tb=short" in args
    assert args[args.index("-c") + 1] == str(tmp_path / "pytest.ini")
    assert args[args.index("--basetemp") + 1] == str(tmp_path / "tmp")
    assert f"--junitxml={tmp_path}/tmp-junit.xml" in args  # not the suite's addopts' file
    assert "--tb=line" in item_args(
        "t.py::f", tmp_path / "t.py", (tmp_path, None), tmp_path, "line"
    )


def test_passed_args_keep_the_parents_options_but_paths_and_its_own_outputs() -> None:
    invocation = [
        "-p", "pytest_cudaperf.plugin", "tests/test_a.py", "-pno:randomly", "--tb=short", "-n2",
        "--device", "cuda", "--cudaperf-benchmark", "--cudaperf-json", "out.json",
        "--junitxml=j.xml", "--benchmark-json", "b.json", "--cov=src", "--cov-report", "xml",
        "--lf", "-k", "color", "tests/test_b.py", "--dist", "loadfile", "--pdb",
    ]  # fmt: skip
    assert passed_args(invocation, ["tests/test_a.py", "tests/test_b.py"]) == [
        "-p", "pytest_cudaperf.plugin", "-pno:randomly", "--tb=short", "--device", "cuda",
        "--cudaperf-benchmark", "-k", "color",
    ]  # fmt: skip
    # a path that is not a test path given is an option's value, kept
    assert passed_args(["--data", "tests"], []) == ["--data", "tests"]
    assert passed_args(["-p"]) == ["-p"]  # a dangling -p is left to pytest's own error


def _report(nodeid: str, *records: tuple[str, str, float]) -> Report:
    """A report with one test whose records are (name, series, median ms)."""
    judged = []
    for name, series, ms in records:
        time = series.startswith("time:")
        record = Record(
            SeriesKey(nodeid, name),
            series,
            "cpu-x",
            "ms" if time else "bytes",
            Recording("2026-11-23", ms, 0.01, 10),
            {},
        )
        measured = Measurement.from_samples([ms] * 10) if time else None
        judged.append(JudgedRecord(record, Verdict(Kind.PASS), measurement=measured))
    return Report(tests=(TestOutcome(nodeid, records=tuple(judged)),))


def test_read_times_takes_the_tests_time_measurements_by_key_and_series() -> None:
    report = _report(
        "t.py::test_a", ("", "time:wall", 2.0), ("inner", "time:wall", 3.0), ("", "memory:peak", 1)
    )
    found = read_times(report, "t.py::test_a")
    assert set(found) == {("t.py::test_a", "time:wall"), ("t.py::test_a [inner]", "time:wall")}
    assert found[("t.py::test_a [inner]", "time:wall")].median_ms == pytest.approx(3.0)
    assert read_times(report, "t.py::test_b") == {}


def test_fresh_process_runs_once_per_test_and_stops_at_its_limit(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fresh = FreshProcess(tmp_path, None, {}, limit=2)
    ran: list[str] = []

    def run(
        nodeids: Sequence[str], env: Mapping[str, str], progress: object = None
    ) -> dict[str, Fresh]:
        ran.extend(nodeids)
        return {nodeid: {} for nodeid in nodeids}

    monkeypatch.setattr(fresh, "batch", run)
    assert fresh.measurements("t.py::a") == {}
    assert fresh.measurements("t.py::a") == {}  # a second measurement of the same test
    assert fresh.measurements("t.py::b") == {}
    assert fresh.measurements("t.py::c") == (
        "2 tests were already re-measured in fresh processes of their own in this one"
    )
    assert ran == ["t.py::a", "t.py::b"]
    # another fresh process for the same test (the one before met the host in another state)
    assert fresh.measurements("t.py::a", again=True) == {}
    assert ran == ["t.py::a", "t.py::b", "t.py::a"]


def test_a_batch_runs_every_test_in_one_process_whatever_the_limit(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A batch starts one process, so the limit of tests in processes of their own does not cut
    it: its five tests all run in one child past a limit of 2 (here a child that measures
    nothing), and a test it ran still counts as new for a process of its own."""
    fresh = FreshProcess(tmp_path, None, {}, limit=2)
    started: list[tuple[list[str], str | None]] = []

    def completed(
        args: Sequence[str], cwd: Path, env: Mapping[str, str], timeout_s: float, told: object
    ) -> subprocess.CompletedProcess[str]:
        started.append((list(args), env.get("CUDA_VISIBLE_DEVICES")))
        return subprocess.CompletedProcess(args, 5, "", "no tests ran")

    monkeypatch.setattr(child, "_completed", completed)
    five = [f"t.py::{name}" for name in "abcde"]
    found = fresh.batch(five, {"CUDA_VISIBLE_DEVICES": "1"})
    assert found == dict.fromkeys(five, "pytest exited 5 without measuring it (no tests ran)")
    ((args, visible),) = started
    assert [f"{tmp_path}/{nodeid}" for nodeid in five] == [a for a in args if "::" in a]
    assert visible == "1"
    for nodeid in ("t.py::a", "t.py::b"):
        assert str(fresh.measurements(nodeid)).startswith("pytest exited 5")
    assert fresh.measurements("t.py::c") == (
        "2 tests were already re-measured in fresh processes of their own in this one"
    )
    assert len(started) == 3


def test_items_args_select_each_item_in_one_process(tmp_path: Path) -> None:
    items = [("t.py::test_a[1]", tmp_path / "t.py"), ("u.py::K::test_b", tmp_path / "u.py")]
    args = items_args(items, (tmp_path, None), tmp_path / "bt")
    assert args[:3] == [f"{tmp_path}/t.py::test_a[1]", f"{tmp_path}/u.py::K::test_b", "-n0"]
    assert args[3:].count(str(tmp_path / "t.py")) == 0


def test_fresh_process_says_why_it_has_no_measurement(tmp_path: Path) -> None:
    # no such test file under the root: the child pytest exits without writing its report
    fresh = FreshProcess(tmp_path, None, {"PYTEST_CUDAPERF_MAX_TIME": "0.05"}, timeout_s=120)
    why = fresh.measurements("missing.py::test_x")
    assert isinstance(why, str)
    assert why.startswith("pytest exited 4 without measuring it (")


def test_a_fresh_process_takes_its_locks_in_its_own_folder_and_confirms_nothing(
    tmp_path: Path,
) -> None:
    from pytest_cudaperf.run.child import FRESH_ENV
    from pytest_cudaperf.run.context import RunContext

    class Config:
        def getoption(self, name: str) -> object:
            return None

        def getini(self, name: str) -> object:
            return None

    def create(environ: dict[str, str]) -> RunContext:
        return RunContext.create(tmp_path, "pytest.ini", Config(), environ, None, tmp_path)

    parent = create({})
    assert parent.fresh is not None
    assert parent.fresh.root == tmp_path
    child = create({FRESH_ENV: str(tmp_path / "locks")})
    assert child.fresh is None
    assert child.locks.folder == tmp_path / "locks"
    assert create({"PYTEST_CUDAPERF_CONFIRM_PROCESS": "off"}).fresh is None


def test_a_fresh_process_notes_each_finished_test_where_its_parent_asked(tmp_path: Path) -> None:
    path = tmp_path / "finished.txt"
    assert finished_count(path) == 0  # nothing noted yet
    note_finished("t.py::a", {})  # not a fresh process: nothing written
    assert not path.exists()
    env = {PROGRESS_ENV: str(path)}
    for nodeid in ("t.py::a", "t.py::b", "t.py::b"):  # a rank may note its test again
        note_finished(nodeid, env)
    assert finished_count(path) == 2


def test_progress_is_told_when_more_tests_finished_at_most_every_interval(tmp_path: Path) -> None:
    path = tmp_path / "finished.txt"
    lines: list[str] = []
    told = child._Told(path, 3, lines.append, last=0.0)
    path.write_text("t.py::a\n")
    told.poll(child.PROGRESS_EVERY_S - 1)  # too soon
    told.poll(child.PROGRESS_EVERY_S)
    told.poll(2 * child.PROGRESS_EVERY_S)  # no more finished: nothing to say
    path.write_text("t.py::a\nt.py::b\nt.py::b\nt.py::c\nt.py::d\n")
    told.poll(3 * child.PROGRESS_EVERY_S)
    assert lines == [
        "cudaperf: the fresh process has measured 1 of 3 tests",
        "cudaperf: the fresh process has measured 3 of 3 tests",
    ]


CHILD = """
import os, sys, time
with open(os.environ["PYTEST_CUDAPERF_FRESH_PROGRESS"], "a") as f:
    f.write("t.py::a\\nt.py::b\\n")
print("x" * 200_000)  # more than a pipe holds: read while it runs
time.sleep(float(sys.argv[1]))
print("done", file=sys.stderr)
"""


def test_a_fresh_process_runs_to_its_end_telling_its_progress(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(child, "PROGRESS_EVERY_S", 0.0)
    path = tmp_path / "finished.txt"
    lines: list[str] = []
    told = child._Told(path, 3, lines.append)
    args = [sys.executable, "-c", CHILD, "1.5"]
    done = child._completed(args, tmp_path, {PROGRESS_ENV: str(path)}, 60.0, told)
    assert done.returncode == 0
    assert len(done.stdout) > 200_000
    assert done.stderr.strip() == "done"
    assert lines[0] == "cudaperf: the fresh process has measured 2 of 3 tests"
    # told again only when more finished, and once it has ended: in how long, the first when
    assert len(lines) == 2
    assert re.fullmatch(
        r"cudaperf: the fresh process measured 2 of 3 tests in [12] s \(the first after [01] s\)",
        lines[1],
    )


def test_a_fresh_process_that_measured_nothing_ends_without_a_line(tmp_path: Path) -> None:
    lines: list[str] = []
    told = child._Told(tmp_path / "finished.txt", 2, lines.append, started=0.0)
    told.close(5.0)
    assert lines == []
    (tmp_path / "finished.txt").write_text("t.py::a\n")
    told.close(5.0)  # never polled: when the first finished is not known
    assert lines == ["cudaperf: the fresh process measured 1 of 2 tests in 5 s"]


def test_a_fresh_process_past_its_timeout_is_killed(tmp_path: Path) -> None:
    told = child._Told(tmp_path / "finished.txt", 1, None)
    args = [sys.executable, "-c", CHILD, "60"]
    env = {PROGRESS_ENV: str(tmp_path / "finished.txt")}
    with pytest.raises(subprocess.TimeoutExpired):
        child._completed(args, tmp_path, env, 1.5, told)
