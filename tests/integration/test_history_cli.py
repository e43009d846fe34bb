"""The run history end to end: ``--cudaperf-history`` appends each run (under xdist too, from the
controller only), ``cudaperf history ingest`` adds reports, ``cudaperf history regressions``
lists slowdowns (steps and drifts) and ``cudaperf history ack`` acknowledges them; errors are one
line naming the file, URL or option (PostgreSQL itself: test_history_postgres.py)."""

from __future__ import annotations

import getpass
import random
import re
import sqlite3
import sys
from contextlib import closing
from pathlib import Path

import pytest
from history_reports import fill, shas, stepped_pair

from pytest_cudaperf.cli import main
from pytest_cudaperf.history.store import open_store

SUITE = """
import pytest

@pytest.mark.perf
def test_sum(cuda_timer):
    cuda_timer(lambda: sum(range(2000)))

@pytest.mark.perf
def test_sorted(cuda_timer):
    cuda_timer(lambda: sorted(range(3000, 0, -1)))
"""

FAST = ["--cudaperf-max-time=0.05", "-p", "no:cacheprovider", "--cudaperf-device=cpu"]


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]])
def test_every_run_is_appended_to_the_history(pytester: pytest.Pytester, xdist: list[str]) -> None:
    """The first run in each xdist mode: the records the workers send reach the controller,
    which writes the history. The second appends to it without workers (appending is the
    controller's alone; a run with -n 2 starts two workers that each import torch)."""
    pytester.makepyfile(test_suite=SUITE)
    for args in (xdist, []):
        result = pytester.runpytest(*FAST, *args, "--cudaperf-history=h/runs.sqlite")
        result.assert_outcomes(passed=2)
        result.stdout.fnmatch_lines(
            ["cudaperf: history */h/runs.sqlite: this run added, 2 series measured, commit *"]
        )
    with open_store(pytester.path / "h" / "runs.sqlite") as store:
        assert store.runs() == 2
        series = {s[1].rsplit("::", 1)[-1] for s in store.series_ids()}
        assert series == {"test_sum", "test_sorted"}


def test_reports_are_ingested_once_and_regressions_listed(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    pytester.makepyfile(test_suite=SUITE)
    pytester.runpytest(*FAST, "--cudaperf-json=r1.json").assert_outcomes(passed=2)
    db = pytester.path / "h.sqlite"
    report = pytester.path / "r1.json"
    assert main(["history", "ingest", str(db), str(report)]) == 0
    assert main(["history", "ingest", str(db), str(report)]) == 0
    out = capsys.readouterr().out
    assert "r1.json: 2 series (" in out
    assert "r1.json: already in the history" in out
    assert main(["history", "regressions", str(db)]) == 0
    assert "no regression in" in capsys.readouterr().out


def test_bad_input_is_one_line_naming_the_file(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = pytester.path / "missing.sqlite"
    assert main(["history", "regressions", str(missing)]) == 2
    assert f"cudaperf: history: {missing}: no such history file" in capsys.readouterr().err
    junk = pytester.path / "junk.json"
    junk.write_text("{not json")
    assert main(["history", "ingest", str(pytester.path / "h.sqlite"), str(junk)]) == 2
    err = capsys.readouterr().err
    assert f"{junk}: not valid JSON" in err
    assert not (pytester.path / "h.sqlite").exists()  # every report is read before a write


def test_a_folder_for_a_history_is_refused_before_any_test_runs(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_suite=SUITE)
    (pytester.path / "taken").mkdir()
    result = pytester.runpytest(*FAST, "--cudaperf-history=taken")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: --cudaperf-history: *taken is a folder; point --cudaperf-history at a writable*"]
    )


def test_an_acknowledged_regression_no_longer_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "h.sqlite")
    rng = random.Random(1)
    fill(db, [(1.1 if i >= 12 else 1.0) * rng.gauss(1, 0.005) for i in range(24)])
    assert main(["history", "regressions", db]) == 1
    out = capsys.readouterr().out
    assert "t.py::s  time:device/cold  step  c11 → c12  +10." in out
    assert "cudaperf history: 1 regression\n" in out
    assert main(["history", "ack", db, "t.py::s", "time:device/cold", "c13", "--note", "x"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"cudaperf: history ack: no regression of t.py::s time:device/cold at commit c13 in {db} "
        "(cudaperf history regressions lists them)\n"
    )
    assert main(["history", "ack", db, "--note", "x"]) == 2
    assert "give TEST SERIES COMMIT (as history regressions lists them), or --all" in (
        capsys.readouterr().err
    )
    note = "softmax made exact on purpose"
    assert main(["history", "ack", db, "t.py::s", "time:device/cold", "c1", "--note", note]) == 0
    out = capsys.readouterr().out
    assert "acknowledged: t.py::s time:device/cold step at c12 (GPU X)" in out
    assert main(["history", "regressions", db]) == 0
    out = capsys.readouterr().out
    assert f"{note} ({getpass.getuser()}, 20" in out
    assert "cudaperf history: 1 regression, 1 acknowledged" in out


def test_a_drift_is_listed_with_its_pace_and_acknowledged_with_all(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "h.sqlite")
    rng = random.Random(2)
    fill(db, [1.005**i * rng.gauss(1, 0.015) for i in range(30)])
    assert main(["history", "regressions", db]) == 1
    out = capsys.readouterr().out
    assert re.search(
        r"t\.py::s  time:device/cold  drift  c00 → c29  \+1\d\.\d% \(\+0\.\d\d%/run\)", out
    )
    assert "cudaperf history: 1 regression (0 steps, 1 drift)" in out
    fill(db, [1.0] * 10 + [1.2] * 10, nodeid="t.py::step")
    assert (
        main(["history", "ack", db, "t.py::step", "time:device/cold", "c10", "--note", "ok"]) == 0
    )
    capsys.readouterr()
    assert main(["history", "regressions", db]) == 1  # the drift is not acknowledged
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("class  acknowledged")
    assert re.search(r"t\.py::s  .* drift .*  GPU X$", lines[1])
    assert re.search(r"t\.py::step  .* step .*  GPU X  ok \(.*, 20\d\d-\d\d-\d\d\)$", lines[2])
    assert lines[3] == "cudaperf history: 2 regressions (1 step, 1 drift), 1 acknowledged"
    assert main(["history", "ack", db, "--all", "--note", "a bigger model each night"]) == 0
    out = capsys.readouterr().out
    assert "acknowledged: t.py::s time:device/cold drift at c29" in out
    assert "cudaperf history: 1 acknowledged by " in out  # not the step again
    assert main(["history", "regressions", db]) == 0


def test_since_a_commit_keeps_the_runs_from_its_first_run_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "h.sqlite")
    commits = shas(30)
    stepped_pair(db, commits)
    assert main(["history", "regressions", db]) == 1
    out = capsys.readouterr().out
    assert re.search(r"t\.py::early +time:device/cold +step +c0de05\w* → c0de06", out)
    assert re.search(r"t\.py::late +time:device/cold +step +c0de19\w* → c0de20", out)
    assert "cudaperf history: 2 regressions\n" in out
    listed = []
    for since in ("c0de10", commits[10], "C0DE10", "2026-11-11"):  # a prefix, the sha, the date
        assert main(["history", "regressions", db, "--since", since]) == 1
        listed.append(capsys.readouterr().out)
    assert "t.py::early" not in listed[0]  # its step came before the cut
    assert re.search(r"t\.py::late +time:device/cold +step +c0de19\w* → c0de20", listed[0])
    assert "cudaperf history: 1 regression\n" in listed[0]
    assert listed == [listed[0]] * 4
    assert main(["history", "regressions", db, "--since", "c0de21"]) == 0
    assert capsys.readouterr().out == f"cudaperf history: no regression in {db} since c0de21\n"


def test_a_since_that_names_no_one_commit_nor_a_date_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "h.sqlite")
    commits = shas(30)
    stepped_pair(db, commits)

    def error(since: str) -> str:
        assert main(["history", "regressions", db, "--since", since]) == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        assert captured.err.count("\n") == 1
        assert "Traceback" not in captured.err
        return captured.err

    assert error("beef") == (
        f"cudaperf: history: {db}: no run of commit beef is in the history (--since takes a "
        "commit recorded in the history or a date such as 2026-11-01)\n"
    )
    candidates = ", ".join(c[:12] for c in commits[10:13])
    assert error("c0de1") == (
        f"cudaperf: history: {db}: --since c0de1 is ambiguous: 10 commits of the history start "
        f"with it ({candidates} and 7 more); give more of the sha\n"
    )
    assert "--since c0de is ambiguous: 30 commits " in error("c0de")
    for value in ("yesterday", "c0d", "2026-13-01", "c0de10 c0de11", commits[0] * 2):
        assert error(value) == (
            "cudaperf: history: --since takes a commit (4 or more hex digits of its sha) or an "
            f"ISO date such as 2026-11-01, not {value!r}\n"
        )


def test_each_unusable_history_or_report_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def error(*args: str) -> str:
        assert main(list(args)) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1
        return err

    assert error("history", "regressions", "mysql://u:pw@db/perf") == (
        "cudaperf: history: mysql://u:***@db/perf: unsupported URL scheme 'mysql': a history is "
        "an SQLite file path or a postgresql:// URL\n"
    )
    monkeypatch.setitem(sys.modules, "psycopg", None)  # the driver is not installed
    assert error("history", "ingest", "postgresql://ci@db/perf", str(tmp_path / "r.json")) != ""
    assert error("history", "regressions", "postgresql://ci@db/perf") == (
        "cudaperf: history: postgresql://ci@db/perf: a PostgreSQL history needs the psycopg "
        "driver: pip install pytest-cudaperf[postgres]\n"
    )
    newer = tmp_path / "newer.sqlite"
    fill(str(newer), [1.0])
    with closing(sqlite3.connect(newer)) as raw, raw:
        raw.execute("UPDATE meta SET value = '4' WHERE key = 'schema'")
    assert "history schema 4 was written by a newer pytest-cudaperf (this one reads up to 3)" in (
        error("history", "regressions", str(newer))
    )
    future = tmp_path / "future.json"
    future.write_text('{"schema": 99, "tests": []}')
    assert "future.json: report schema 99 was written by a newer pytest-cudaperf" in error(
        "history", "ingest", str(tmp_path / "h.sqlite"), str(future)
    )


def test_a_history_url_the_plugin_cannot_use_is_refused_before_any_test_runs(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest(*FAST, "--cudaperf-history=mysql://ci:pw@db/perf")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: --cudaperf-history: mysql://ci:***@db/perf: unsupported URL scheme 'mysql'*"]
    )


def test_a_step_in_too_few_runs_says_how_many_a_change_point_needs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One run per commit and a 3x step after two of them: no regression can be told yet, and
    the command says why instead of a bare 'no regression'."""
    db = str(tmp_path / "h.sqlite")
    fill(db, [1.0, 1.01, 3.0, 3.02])
    fill(db, [1.0] * 6, nodeid="t.py::long")
    assert main(["history", "regressions", db]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"cudaperf history: no regression in {db}",
        "cudaperf history: 1 of 2 series cannot be judged yet: a change point needs 3 runs on "
        "each side (6 in all), it has 4",
    ]
