"""The run history end to end: ``--cudaperf-history`` appends each run (under xdist too, from the
controller only), ``cudaperf history ingest`` adds reports, ``cudaperf history regressions``
lists slowdowns; errors name the file or option."""

from __future__ import annotations

import pytest

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
    pytester.makepyfile(test_suite=SUITE)
    for _ in range(2):
        result = pytester.runpytest(*FAST, *xdist, "--cudaperf-history=h/runs.sqlite")
        result.assert_outcomes(passed=2)
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


def test_a_history_that_is_not_one_is_one_error_line_after_the_run(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_suite=SUITE)
    (pytester.path / "notes.sqlite").write_text("my notes, not a database " * 50)
    result = pytester.runpytest(*FAST, "--cudaperf-history=notes.sqlite")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        ["cudaperf: --cudaperf-history: *notes.sqlite: not a cudaperf history (*"]
    )
