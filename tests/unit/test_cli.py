from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_cudaperf import cli, signals, turns
from pytest_cudaperf.breakdown.model import Breakdown, Kernel
from pytest_cudaperf.cli import main
from pytest_cudaperf.cli.record import one_by_one, run_pytest, uneven_host
from pytest_cudaperf.cli.sources import read_report, report_records
from pytest_cudaperf.keys import SeriesKey
from pytest_cudaperf.report.document import Report, dumps
from pytest_cudaperf.report.model import JudgedRecord, TestOutcome
from pytest_cudaperf.series import Record, Recording
from pytest_cudaperf.store.baselines import BaselineStore
from pytest_cudaperf.verdict import Kind, Verdict

if TYPE_CHECKING:
    from conftest import Stop


def _record(nodeid: str, value: float, cls: str = "GPU X", name: str = "") -> Record:
    return Record(
        SeriesKey(nodeid, name),
        "time:device/cold",
        cls,
        "ms",
        Recording("2026-11-22", value, 0.002, 50, rounds=(value, value, value)),
        {"torch": "2.11"},
    )


def _baseline(folder: Path, *values: float, cls: str = "GPU X") -> Path:
    store = BaselineStore.load(folder)
    store.replace(cls, [_record("t.py::a", v, cls) for v in values])
    return store.path_for(cls)


def _report_text(items: Sequence[tuple[Record, bool]], failed_bodies: int = 0) -> str:
    """A report of ``items`` (record, its body passed), each test's records judged NEW."""
    by_test: dict[str, list[tuple[Record, bool]]] = {}
    for record, passed in items:
        by_test.setdefault(record.key.nodeid, []).append((record, passed))
    tests = tuple(
        TestOutcome(
            nodeid,
            records=tuple(JudgedRecord(r, Verdict(Kind.NEW)) for r, _ in found),
            body_passed=all(passed for _, passed in found),
        )
        for nodeid, found in by_test.items()
    )
    return dumps(Report(tests=tests, failed_bodies=failed_bodies))


def _report(path: Path, nodeid: str, value: float, cls: str = "GPU X", passed: bool = True) -> Path:
    path.write_text(_report_text([(_record(nodeid, value, cls), passed)]))
    return path


def test_report_records_reads_each_tests_records(tmp_path: Path) -> None:
    [(record, passed)] = report_records(
        read_report(_report(tmp_path / "r.json", "t.py::a[c#d]", 1.0))
    )
    assert record.key == SeriesKey("t.py::a[c#d]")
    assert passed is True
    failed = _report(tmp_path / "f.json", "t.py::a", 1.0, passed=False)
    assert report_records(read_report(failed))[0][1] is False


def test_show(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", str(_baseline(tmp_path, 1.0, 1.1, 0.9))]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:6] == ["test", "name", "series", "value", "noise", "processes"]
    assert out[1].split()[:6] == ["t.py::a", "time:device/cold", "1.000", "ms", "±15.00%", "3"]
    assert "2026-11-22" in out[1]


def test_show_says_drifting(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = BaselineStore.load(tmp_path)
    for day, value in enumerate((1.0, 1.03, 1.06, 1.09), start=1):
        rec = _record("t.py::a", value)
        rec = Record(
            rec.key, rec.series, rec.device_class, rec.unit,
            Recording(f"2026-11-0{day}", value, 0.002, 50), rec.env,
        )  # fmt: skip
        store.update("GPU X", [rec])
    assert main(["show", str(store.path_for("GPU X"))]) == 0
    assert "drifting +9.0% since 2026-11-01" in capsys.readouterr().out


def test_show_reads_a_schema_1_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    v1 = {
        "schema": 1,
        "device_class": "GPU X",
        "entries": {
            "t.py::a#inner": {
                "time:device/cold": {"value": 1.0, "unit": "ms", "noise": 0.01, "n": 5, "env": {}}
            }
        },
    }
    path = tmp_path / "old.json"
    path.write_text(json.dumps(v1))
    assert main(["show", str(path)]) == 0
    assert re.search(r"t\.py::a\s+inner\s+time:device/cold", capsys.readouterr().out)


def test_compare_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = _baseline(tmp_path / "b", 1.0, 1.0, 1.0)
    assert main(["compare", str(base), str(_report(tmp_path / "same.json", "t.py::a", 1.01))]) == 0
    assert main(["compare", str(base), str(_report(tmp_path / "slow.json", "t.py::a", 1.3))]) == 1
    assert "1 regression (tolerance 5.0%)" in capsys.readouterr().out
    other = _report(tmp_path / "other.json", "t.py::a", 3.0, cls="GPU Y")
    assert main(["compare", str(base), str(other)]) == 0
    assert "OTHER CLASS (GPU X), not enforced" in capsys.readouterr().out


def test_merge_reports_and_baselines(tmp_path: Path) -> None:
    a = _report(tmp_path / "a.json", "t.py::a", 1.0)
    b = _report(tmp_path / "b.json", "t.py::b", 2.0)
    assert main(["merge", str(tmp_path / "all.json"), str(a), str(b)]) == 0
    merged = json.loads((tmp_path / "all.json").read_text())
    assert [t["nodeid"] for t in merged["tests"]] == ["t.py::a", "t.py::b"]
    assert [r["nodeid"] for t in merged["tests"] for r in t["records"]] == ["t.py::a", "t.py::b"]
    assert merged["summary"]["measured"] == 2
    one = _baseline(tmp_path / "x", 1.0)
    store = BaselineStore.load(tmp_path / "y")
    store.update("GPU X", [_record("t.py::c", 2.0)])
    assert main(["merge", str(tmp_path / "m.json"), str(one), str(store.path_for("GPU X"))]) == 0
    document = json.loads((tmp_path / "m.json").read_text())
    assert document["schema"] == 2
    assert sorted(document["entries"]) == ["t.py::a", "t.py::c"]


def test_merge_of_two_shards_without_the_merged_file_overwrites_neither(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = _report(tmp_path / "a.json", "t.py::a", 1.0)
    b = _report(tmp_path / "b.json", "t.py::b", 2.0)
    before = a.read_text()
    assert main(["merge", str(a), str(b)]) == 2
    assert capsys.readouterr().err == (
        f"cudaperf: merge: {a} exists and would be overwritten by {b} alone: the first file "
        "named is the one written (cudaperf merge MERGED INPUT...)\n"
    )
    assert a.read_text() == before
    assert main(["merge", str(tmp_path / "copy.json"), str(b)]) == 0  # a new file: a copy


def test_bad_files_give_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{oops")
    assert main(["show", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"cudaperf: {bad}: not valid JSON (")
    assert err.count("\n") == 1
    assert main(["compare", str(bad), str(bad), "--tolerance", "fast"]) == 2
    assert main(["show", str(tmp_path / "missing.json")]) == 2
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"schema": 3, "tests": [{"nodeid": "t::a", "records": [{}]}]}))
    capsys.readouterr()
    assert main(["show", str(broken)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"cudaperf: {broken}.tests[0] t::a.records[0].nodeid: expected a string, got None\n"
    )


# --- cudaperf record ----------------------------------------------------------------------------------


#: the breakdown a run with ``--cudaperf-breakdown=always`` profiles (:class:`FakePytest`)
GEMM = Breakdown("cuda", 5, 900.0, 900.0, (Kernel("gemm", "gemm", 1, 900.0),)).to_json()


class FakePytest:
    """Writes a report per run: ``values[run]`` per test id, ``failing`` bodies, each record with
    :data:`GEMM` where the run profiles; returns ``rc``."""

    def __init__(
        self,
        values: dict[str, list[float]],
        failing: set[str] = frozenset(),  # type: ignore[assignment]
        rc: int = 0,
        failed_bodies: int = 0,
        tolerance: float | None = None,
    ):
        self.values = values
        self.failing = failing
        self.rc = rc
        self.failed_bodies = failed_bodies
        self.tolerance = tolerance
        self.calls: list[list[str]] = []

    def __call__(self, args: Sequence[str]) -> int:
        self.calls.append(list(args))
        run = len(self.calls) - 1
        out = Path(next(a for a in args if a.startswith("--cudaperf-json=")).split("=", 1)[1])
        profiled = GEMM if "--cudaperf-breakdown=always" in args else None
        items = [
            (
                dataclasses.replace(
                    _record(nodeid, values[run]), tolerance=self.tolerance, breakdown=profiled
                ),
                nodeid not in self.failing,
            )
            for nodeid, values in self.values.items()
            if run < len(values)
        ]
        out.write_text(_report_text(items, self.failed_bodies))
        return self.rc


def test_record_merges_every_run_as_a_fresh_series(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / ".cudaperf"
    _baseline(folder, 9.0)  # an old level: replaced, not averaged in
    fake = FakePytest({"t.py::a": [1.0, 1.1, 0.9, 1.0, 1.0], "t.py::b[c#d]": [2.0] * 5})
    rc = main(
        ["record", "--runs", "5", "--baseline-dir", str(folder), "--", "-q", "tests"],
        one_by_one(fake),
    )
    assert rc == 0
    assert len(fake.calls) == 5  # five runs; the last also profiles each series' breakdown
    assert all("--cudaperf-breakdown=off" in call for call in fake.calls[:4])
    assert "--cudaperf-breakdown=always" in fake.calls[4]
    assert not any("--cudaperf-breakdown=off" in a for a in fake.calls[4])
    # nothing is measured again (here or in a fresh process), and nothing waits for the host, in
    # a recording run: its verdict against the old baseline counts for nothing
    for call in fake.calls:
        assert call.index("--cudaperf-confirm-process=off") > call.index("tests")
        assert "--cudaperf-state-wait=off" in call
        assert "--cudaperf-remeasure=off" in call
    assert not any(a.startswith("--cudaperf-max-time") for call in fake.calls for a in call)
    assert fake.calls[0][:3] == ["-q", "tests", f"--cudaperf-baseline-dir={folder}"]
    # five processes are the series' rounds: each measures one round of a three-round measurement
    assert all("--cudaperf-round-of=3" in call for call in fake.calls[:5])
    # the runs compare (and write nothing)
    assert not any("--cudaperf-update" in call for call in fake.calls)
    out = capsys.readouterr().out
    assert out.count("cudaperf record: run ") == 5
    assert "cudaperf record: breakdowns: 2 series profiled (in the last run)" in out
    assert "run 5/5: pytest exited 0, 2 series" in out
    assert "1 added, 1 updated (1 started afresh), 0 kept" in out
    store = BaselineStore.load(folder)
    a = store.lookup("GPU X", SeriesKey("t.py::a"), "time:device/cold")
    assert a is not None
    assert a.processes == 5
    assert a.value == 1.0
    assert a.noise == pytest.approx(0.15)
    assert a.breakdown == GEMM  # the last run's
    b = store.lookup("GPU X", SeriesKey("t.py::b[c#d]"), "time:device/cold")
    assert b is not None
    assert b.processes == 5


@pytest.mark.parametrize(
    ("runs", "args", "env", "rounds"),
    [
        (3, [], {}, ["--cudaperf-round-of=3"]),
        (2, [], {}, []),  # fewer than MIN_PROCESSES: each recording keeps its rounds
        (3, ["--cudaperf-rounds=2"], {}, ["--cudaperf-rounds=2"]),
        (3, ["--cudaperf-rounds", "2"], {}, ["--cudaperf-rounds", "2"]),
        (3, ["--cudaperf-round-of=5"], {}, ["--cudaperf-round-of=5"]),
        (3, [], {"PYTEST_CUDAPERF_ROUNDS": "2"}, []),
        (3, [], {"PYTEST_CUDAPERF_ROUND_OF": "off"}, []),
    ],
    ids=[
        "three-runs", "two-runs", "rounds-given", "rounds-given-apart", "round-of-given",
        "rounds-in-env", "round-of-in-env",
    ],
)  # fmt: skip
def test_record_measures_one_round_of_three_unless_told_otherwise(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    runs: int,
    args: list[str],
    env: dict[str, str],
    rounds: list[str],
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    fake = FakePytest({"t.py::a": [1.0] * runs})
    folder = str(tmp_path / ".cudaperf")
    assert (
        main(
            ["record", "--runs", str(runs), "--baseline-dir", folder, "--", *args], one_by_one(fake)
        )
        == 0
    )
    for call in fake.calls[:runs]:
        given = [a for i, a in enumerate(call) if a.startswith("--cudaperf-round") or (
            i and call[i - 1] == "--cudaperf-rounds")]  # fmt: skip
        assert given == rounds


@pytest.mark.parametrize("where", ["argument", "environment"])
def test_record_with_breakdowns_off_profiles_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    """Breakdowns switched off in the pytest arguments or the environment: the last run
    profiles nothing either."""
    args = ["--cudaperf-breakdown", "off"] if where == "argument" else []
    if where == "environment":
        monkeypatch.setenv("PYTEST_CUDAPERF_BREAKDOWN", "off")
    fake = FakePytest({"t.py::a": [1.0] * 3})
    folder = str(tmp_path / ".cudaperf")
    assert (
        main(["record", "--runs", "3", "--baseline-dir", folder, "--", *args], one_by_one(fake))
        == 0
    )
    assert len(fake.calls) == 3
    assert not any("--cudaperf-breakdown=always" in call for call in fake.calls)
    assert "breakdowns: off (--cudaperf-breakdown=off), none profiled" in capsys.readouterr().out
    entry = BaselineStore.load(Path(folder)).lookup(
        "GPU X", SeriesKey("t.py::a"), "time:device/cold"
    )
    assert entry is not None
    assert entry.breakdown is None


def test_record_says_when_the_host_ran_at_different_speeds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    loops = iter([0.49, 0.36, 0.41, 0.36])

    def runner(args: Sequence[str]) -> int:
        out = Path(next(a for a in args if a.startswith("--cudaperf-json=")).split("=", 1)[1])
        record = _record("t.py::a", 1.0)
        recording = dataclasses.replace(record.recording, reference_ms=next(loops, None))
        out.write_text(_report_text([(dataclasses.replace(record, recording=recording), True)]))
        return 0

    assert main(["record", "--runs", "3", "--baseline-dir", str(tmp_path)], one_by_one(runner)) == 0
    out = capsys.readouterr().out
    assert (
        "cudaperf record: the host ran at different speeds during the runs (the reference timed "
        "beside the samples took 360.00 µs-490.00 µs, median per run)" in out
    )
    assert uneven_host([0.40, 0.45, None]) is None  # within 25%: nothing to say
    assert uneven_host([0.40]) is None
    assert uneven_host([]) is None


def test_record_skips_series_that_failed_or_went_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakePytest(
        {"t.py::ok": [1.0] * 3, "t.py::flaky": [1.0, 1.0], "t.py::broken": [1.0] * 3},
        failing={"t.py::broken"},
        rc=1,
    )
    rc = main(["record", "--runs", "3", "--baseline-dir", str(tmp_path), "tests"], one_by_one(fake))
    assert rc == 1  # a test body failed: pytest's exit code
    out = capsys.readouterr().out
    assert "2 series not recorded" in out
    assert "1 with a failed test body" in out
    store = BaselineStore.load(tmp_path)
    assert store.keys("GPU X") == [SeriesKey("t.py::ok")]


def test_record_ignores_perf_verdict_failures(tmp_path: Path) -> None:
    fake = FakePytest({"t.py::a": [1.0] * 2}, rc=1)  # exit 1 from REGRESSION verdicts only
    assert main(["record", "--runs", "2", "--baseline-dir", str(tmp_path)], one_by_one(fake)) == 0


def test_record_counts_unmeasured_failures_from_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A test that failed without measuring anything is in the report's ``failed_bodies``: the
    run failed for a reason other than perf verdicts."""
    fake = FakePytest({"t.py::a": [1.0] * 2}, rc=1, failed_bodies=2)
    assert main(["record", "--runs", "2", "--baseline-dir", str(tmp_path)], one_by_one(fake)) == 1
    assert "2 with a failed test body" in capsys.readouterr().out


def test_record_refuses_its_own_options_and_bad_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakePytest({})
    assert main(["record", "--", "--cudaperf-json=x.json"], one_by_one(fake)) == 2
    assert "leave --cudaperf-json out" in capsys.readouterr().err
    assert main(["record", "--", "--cudaperf-update"], one_by_one(fake)) == 2
    assert "leave --cudaperf-update out" in capsys.readouterr().err
    assert main(["record", "--runs", "0"], one_by_one(fake)) == 2
    capsys.readouterr()
    for nothing in ("--cudaperf-disable", "--collect-only", "--co"):  # 0 series, exit 0 before
        assert main(["record", "--", nothing], one_by_one(fake)) == 2
        assert capsys.readouterr().err == (
            f"cudaperf: record: {nothing} in the pytest arguments would record nothing\n"
        )
    both = ["record", "--baseline-dir", "a", "--", "--cudaperf-baseline-dir=b"]
    assert main(both, one_by_one(fake)) == 2
    assert "--baseline-dir and --cudaperf-baseline-dir in the pytest arguments both" in (
        capsys.readouterr().err
    )
    with pytest.raises(SystemExit):  # argparse's usage error, exit 2
        main(["record", "--baseline-dir", ""], one_by_one(fake))
    assert "expected a folder, got an empty string" in capsys.readouterr().err
    assert fake.calls == []


def test_record_without_a_report_stops(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def no_report(args: Sequence[str]) -> int:
        return 4

    assert main(["record", "--baseline-dir", str(tmp_path)], one_by_one(no_report)) == 4
    out = capsys.readouterr().out
    assert (
        out
        == "cudaperf record: run 1/5: pytest exited 4 (a usage error); stopped, nothing recorded\n"
    )


@pytest.mark.parametrize(
    ("rc", "why"), [(2, "interrupted"), (4, "a usage error"), (5, "no tests collected")]
)
def test_record_records_nothing_when_a_run_failed_for_another_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], rc: int, why: str
) -> None:
    """A run that ends with a report but exit code 2, 4 or 5 stops the recording at it: nothing
    recorded, pytest's code."""
    fake = FakePytest({"t.py::a": [1.0] * 5})
    codes = iter([0, rc, 0, 0, 0, 0])
    second_fails = lambda args: (fake(args), next(codes))[1]  # noqa: E731
    assert main(["record", "--baseline-dir", str(tmp_path / "b")], one_by_one(second_fails)) == rc
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"cudaperf record: run 2/5: pytest exited {rc} ({why}); stopped, nothing recorded"
    )
    assert not (tmp_path / "b").exists()


def _stopped_after(fake: FakePytest, ended: int, stop: BaseException) -> cli.record.Runner:
    """A runner whose first ``ended`` runs end (``fake`` writes their reports) before ``stop``
    (Ctrl-C, SIGTERM) reaches the command."""

    def runs(cmds: Sequence[Sequence[str]], folder: Path) -> list[int]:
        for cmd in cmds[:ended]:
            fake(cmd)
        raise stop

    return runs


@pytest.mark.parametrize(
    ("stop", "rc", "said"),
    [(KeyboardInterrupt(), 130, "interrupted"), (signals.Terminated(), 143, "terminated")],
    ids=["ctrl-c", "sigterm"],
)
def test_a_stopped_record_keeps_what_three_or_more_ended_runs_measured(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], stop: BaseException, rc: int, said: str
) -> None:
    folder = tmp_path / ".cudaperf"
    _baseline(folder, 9.0)  # an old level: replaced by the four runs that ended
    fake = FakePytest({"t.py::a": [1.0, 1.1, 0.9, 1.0, 1.0]})
    runner = _stopped_after(fake, 4, stop)
    assert main(["record", "--baseline-dir", str(folder)], runner) == rc
    out, err = capsys.readouterr()
    assert "cudaperf record: 4 of 5 runs had ended: their series are recorded from those 4" in out
    assert "cudaperf record: breakdowns: the last run had not ended; none kept" in out
    assert "run 4/4: pytest exited 0, 1 series" in out
    assert err == f"cudaperf record: {said}\n"
    entry = BaselineStore.load(folder).lookup("GPU X", SeriesKey("t.py::a"), "time:device/cold")
    assert entry is not None
    assert entry.processes == 4
    assert entry.value == pytest.approx(1.0, rel=0.06)


@pytest.mark.parametrize(
    ("last", "said", "kept"),
    [
        ("ended", "1 series profiled (in the last run)", GEMM),
        ("stopped", "the last run had not ended; none kept", None),
    ],
)
def test_a_stopped_record_keeps_the_breakdowns_only_where_the_last_run_had_ended(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], last: str, said: str, kept: object
) -> None:
    """Stopped once three runs had ended: the series are those three runs' recordings, with the
    last run's breakdowns where it was one of them. A last run stopped midway left a report of
    the tests it had finished, marked interrupted: its recordings and its breakdowns count for
    nothing."""
    fake = FakePytest({"t.py::a": [1.0] * 5})

    def runner(cmds: Sequence[Sequence[str]], folder: Path) -> list[int]:
        for cmd in [*cmds[:2], cmds[-1]] if last == "ended" else cmds[:3]:
            fake(cmd)
        if last == "stopped":
            profiled = dataclasses.replace(_record("t.py::a", 1.0), breakdown=GEMM)
            finished = TestOutcome("t.py::a", records=(JudgedRecord(profiled, Verdict(Kind.NEW)),))
            report = next(a for a in cmds[-1] if a.startswith("--cudaperf-json=")).split("=")[1]
            Path(report).write_text(dumps(Report((finished,), interrupted=True)))
        raise KeyboardInterrupt

    assert main(["record", "--baseline-dir", str(tmp_path / "b")], runner) == 130
    out = capsys.readouterr().out
    assert "cudaperf record: 3 of 5 runs had ended: their series are recorded from those 3" in out
    assert f"cudaperf record: breakdowns: {said}" in out
    entry = BaselineStore.load(tmp_path / "b").lookup(
        "GPU X", SeriesKey("t.py::a"), "time:device/cold"
    )
    assert entry is not None
    assert entry.processes == 3
    assert entry.breakdown == kept


def test_a_record_stopped_before_three_runs_ended_records_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / ".cudaperf"
    before = _baseline(folder, 9.0).read_text()
    runner = _stopped_after(FakePytest({"t.py::a": [1.0] * 5}), 2, KeyboardInterrupt())
    assert main(["record", "--baseline-dir", str(folder)], runner) == 130
    out = capsys.readouterr().out
    assert out == "cudaperf record: 2 of 5 runs had ended (3 needed): nothing recorded\n"
    assert BaselineStore.load(folder).path_for("GPU X").read_text() == before


def test_record_checks_its_baseline_folder_before_the_first_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "notes.txt").write_text("a file")
    fake = FakePytest({"t.py::a": [1.0] * 5})
    assert main(["record", "--baseline-dir", str(tmp_path / "notes.txt")], one_by_one(fake)) == 2
    assert fake.calls == []
    assert capsys.readouterr().err == (
        f"cudaperf: record: --baseline-dir {tmp_path / 'notes.txt'} exists but is not a folder\n"
    )


def test_a_stopped_record_is_one_line_writes_nothing_and_stops_its_run(
    tmp_path: Path, interruptible_cudaperf: list[str], stop: Stop
) -> None:
    """SIGINT (Ctrl-C) or SIGTERM (a cancelled CI job) while a run is under way: the run is
    stopped, one line says so, no traceback, no baseline, exit 130 or 143."""
    (tmp_path / "test_slow.py").write_text(
        "import time\n\ndef test_slow(cuda_timer):\n    time.sleep(30)\n"
    )
    record = _recording(tmp_path, interruptible_cudaperf, "--runs", "2", "--", "-q")
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob("test_slow.py")) or not _pytest_started(record.pid):
        assert time.monotonic() < deadline, "the first run never started"
        time.sleep(0.2)
    record.send_signal(stop.sig)
    out, err = record.communicate(timeout=60)
    assert record.returncode == stop.rc, out + err
    assert "Traceback" not in out + err
    assert err == f"cudaperf record: {stop.said}\n"
    assert not (tmp_path / ".cudaperf").exists()
    assert not _pytest_started(record.pid)  # its run was stopped too


#: the first four processes to take their turn end at once; the others wait in theirs
FOUR_THEN_SLOW = """
import os, time

def test_call(cuda_timer):
    for slot in range(4):
        try:
            os.close(os.open(f"slot-{slot}", os.O_CREAT | os.O_EXCL))
            break
        except FileExistsError:
            continue
    else:
        time.sleep(60)
    cuda_timer(lambda: sum(range(100)))
"""


def test_a_terminated_record_writes_what_its_ended_runs_measured(
    tmp_path: Path, interruptible_cudaperf: list[str]
) -> None:
    """SIGTERM once four of the five runs have ended: three or more of them measured, so their
    series are written from those runs before exit 143."""
    (tmp_path / "test_calls.py").write_text(FOUR_THEN_SLOW)
    record = _recording(tmp_path, interruptible_cudaperf, "--", "-q", "--cudaperf-max-time=0.02")
    assert record.stdout is not None
    seen: list[str] = []
    while sum("ended: exit 0" in line for line in seen) < 4:
        line = record.stdout.readline()
        assert line, "".join(seen)
        seen.append(line)
    record.send_signal(signal.SIGTERM)
    out, err = record.communicate(timeout=60)
    out = "".join(seen) + out
    assert record.returncode == 143, out + err
    assert re.search(r"cudaperf record: [34] of 5 runs had ended: their series are recorded", out)
    assert err == "cudaperf record: terminated\n"
    store = BaselineStore.load(tmp_path / ".cudaperf")
    processes = {
        entry.processes
        for entries in store.entries.values()
        for by_series in entries.values()
        for series, entry in by_series.items()
        if series.startswith("time:")
    }
    assert len(processes) == 1
    assert processes <= {3, 4}


def _recording(tmp_path: Path, cudaperf: list[str], *args: str) -> subprocess.Popen[str]:
    """``cudaperf record ARGS -p no:cacheprovider`` started in ``tmp_path`` with this checkout's
    plugin, its output in pipes."""
    root = Path(__file__).parents[2]
    return subprocess.Popen(
        [*cudaperf, "record", *args, "-p", "no:cacheprovider"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin", **_plugins_env()},
    )


def _pytest_started(parent: int) -> bool:
    """Is a child process of ``parent`` running pytest?"""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == parent and b"pytest\x00" in cmdline:
            return True
    return False


def _plugins_env() -> dict[str, str]:
    return (
        {"PYTEST_PLUGINS": os.environ["PYTEST_PLUGINS"]} if "PYTEST_PLUGINS" in os.environ else {}
    )


def test_record_end_to_end_in_real_processes(tmp_path: Path) -> None:
    """``cudaperf record`` runs real pytest processes with the real plugin: each run's JSON report
    carries its records, and the merged series has one recording per process."""
    (tmp_path / "test_tiny.py").write_text(
        textwrap.dedent("""
            def test_sum(cuda_timer):
                cuda_timer(lambda: sum(range(2000)))
        """)
    )
    root = Path(__file__).parents[2]
    # the shortest budget, one round: what is asserted is the recordings' count, not their value
    result = subprocess.run(
        [sys.executable, "-m", "pytest_cudaperf.cli", "record", "--runs", "2", "--", "-q", "-p",
         "no:cacheprovider", "--cudaperf-max-time=0.05", "--cudaperf-rounds=1"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        # PYTEST_PLUGINS: where the plugin is loaded from a checkout, not its entry point;
        # PYTEST_ADDOPTS: the plugins these processes do without, left out (tests/conftest.py)
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin", **_plugins_env(),
             "PYTEST_ADDOPTS": os.environ.get("PYTEST_ADDOPTS", "")},
        timeout=300,
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    store = BaselineStore.load(tmp_path / ".cudaperf")
    [device_class] = store.entries
    [key] = store.keys(device_class)
    assert key.nodeid == "test_tiny.py::test_sum"
    entry = store.lookup(device_class, key, "time:wall")
    assert entry is not None
    assert entry.processes == 2


def test_record_runs_real_pytest_processes(tmp_path: Path) -> None:
    """The subprocess path of ``cudaperf record``, with a stand-in for the plugin's report: a
    conftest that writes each process's id as the measured median."""
    (tmp_path / "conftest.py").write_text(
        textwrap.dedent("""
            import json, os

            def pytest_addoption(parser):
                parser.addoption("--cudaperf-json")
                parser.addoption("--cudaperf-baseline-dir")
                parser.addoption("--cudaperf-update", action="store_true")
                parser.addoption("--cudaperf-breakdown")
                for name in ("confirm-process", "state-wait", "remeasure", "max-time", "rounds",
                             "round-of"):
                    parser.addoption(f"--cudaperf-{name}")

            def pytest_sessionfinish(session):
                record = {
                    "nodeid": "test_tiny.py::test_one", "name": "", "series": "time:wall",
                    "device_class": "CPU T", "unit": "ms", "env": {"pid": os.getpid()},
                    "recording": {"date": "2026-11-23", "median": float(os.getpid()),
                                  "noise": 0.0, "n": 1},
                    "verdict": {"kind": "new"},
                }
                test = {"nodeid": record["nodeid"], "records": [record],
                        "body_passed": session.testsfailed == 0}
                with open(session.config.getoption("--cudaperf-json"), "w") as f:
                    json.dump({"schema": 3, "tests": [test]}, f)
        """)
    )
    (tmp_path / "test_tiny.py").write_text("def test_one():\n    pass\n")
    root = Path(__file__).parents[2]
    result = subprocess.run(
        [sys.executable, "-m", "pytest_cudaperf.cli", "record", "--runs", "3",
         "--baseline-dir", "base", "--", "-q", "-p", "no:cudaperf", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        timeout=120,
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("pytest exited 0, 1 series") == 3
    store = BaselineStore.load(tmp_path / "base")
    entry = store.lookup("CPU T", SeriesKey("test_tiny.py::test_one"), "time:wall")
    assert entry is not None
    assert len({r.median for r in entry.recordings}) == 3  # three processes
    assert sorted(p.name for p in (tmp_path / "base").iterdir()) == [
        ".gitignore",
        ".lock",
        "cpu-t.json",
    ]


def test_compare_prints_the_breakdown_diff_of_a_flagged_series(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from dataclasses import replace

    def kernels(*entries: tuple[str, float, float]) -> dict[str, object]:
        found = tuple(Kernel(name, name, launches, us) for name, launches, us in entries)
        total = sum(e.time_us for e in found)
        return Breakdown("cuda", 5, total, total, found).to_json()

    store = BaselineStore.load(tmp_path / "b")
    base = replace(_record("t.py::a", 1.0), breakdown=kernels(("gemm_a", 1, 900.0)))
    store.replace("GPU X", [base, base, base])
    slow = replace(
        _record("t.py::a", 1.3), breakdown=kernels(("gemm_a", 1, 900.0), ("exp_kernel", 1, 300.0))
    )
    report = tmp_path / "slow.json"
    report.write_text(_report_text([(slow, True)]))
    assert main(["compare", str(store.path_for("GPU X")), str(report)]) == 1
    out = capsys.readouterr().out
    assert "t.py::a {time:device/cold}:" in out
    assert "new: exp_kernel (1x per call)" in out


def test_record_and_show_name_a_series_too_noisy_to_fail(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / ".cudaperf"
    fake = FakePytest({"t.py::wild": [1.0, 4.0, 1.0], "t.py::calm": [1.0, 1.01, 0.99]})
    out = _recorded_thrice(folder, fake, capsys)
    assert (
        "BLIND t.py::wild {time:device/cold}: ±300% (series moves ±300% between processes (3 "
        "recordings)): no slowdown under 4.0x can fail it; record it again on a quiet machine "
        "(cudaperf record)"
    ) in out
    assert "BLIND t.py::calm" not in out
    assert main(["show", str(folder / "gpu-x.json")]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert "±300.00% BLIND" in rows["t.py::wild"]
    assert "BLIND" not in rows["t.py::calm"]


def test_record_names_the_series_that_move_more_than_their_tolerance(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / ".cudaperf"
    values = {"t.py::wide": [1.0, 1.2, 0.9], "t.py::calm": [1.0, 1.01, 0.99]}
    out = _recorded_thrice(folder, FakePytest(values, tolerance=0.05), capsys)
    assert (
        "cudaperf record: 1 of 2 time series move between processes by more than their "
        "tolerance, so a change within that movement reads INCONCLUSIVE; record them again on a "
        "quiet machine (cudaperf show lists each series' noise):\n"
        "  ±22% (tolerance 5%) t.py::wide {time:device/cold}\n"
    ) in out
    assert "t.py::calm" not in out
    quiet = _recorded_thrice(folder, FakePytest(values, tolerance=0.25), capsys)
    assert "time series move between processes" not in quiet


def _recorded_thrice(folder: Path, fake: FakePytest, capsys: pytest.CaptureFixture[str]) -> str:
    """What ``cudaperf record --runs 3`` into ``folder`` printed, ``fake`` running its pytest."""
    assert main(["record", "--runs", "3", "--baseline-dir", str(folder)], one_by_one(fake)) == 0
    return capsys.readouterr().out


def _subparsers(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    """Every (sub)command's parser, by its command line, the nested ones too."""
    found = [(parser.prog, parser)]
    for action in parser._actions:  # argparse keeps its subcommands there only
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                found += _subparsers(child)
    return found


def test_every_positional_and_option_of_every_command_has_a_help_line() -> None:
    commands = _subparsers(cli.parser())
    assert {prog for prog, _ in commands} >= {
        "cudaperf compare",
        "cudaperf history ack",
        "cudaperf dashboard",
        "cudaperf merge",
    }
    missing = [
        f"{prog}: {action.dest}"
        for prog, parser in commands
        for action in parser._actions
        if not isinstance(action, (argparse._HelpAction, argparse._SubParsersAction))
        and not (action.help or "").strip()
    ]
    assert missing == []


def test_record_names_a_series_recorded_while_the_cpu_was_shared(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Whatever measured it: a series most of whose recordings met other processes on the CPU
    is named when ``cudaperf record`` writes it."""
    busy = iter([("waited for a CPU 91% of the time",), (), ("load average 8.0 on 2 CPU cores",)])

    def runner(args: Sequence[str]) -> int:
        out = Path(next(a for a in args if a.startswith("--cudaperf-json=")).split("=", 1)[1])
        items = []
        unstable = next(busy, ())
        for nodeid, series in (("t.py::a", "time:wall"), ("t.py::b", "time:device/cold")):
            record = dataclasses.replace(_record(nodeid, 1.0), series=series)
            quiet = series != "time:wall"
            recording = dataclasses.replace(record.recording, unstable=() if quiet else unstable)
            items.append((dataclasses.replace(record, recording=recording), True))
        out.write_text(_report_text(items))
        return 0

    assert main(["record", "--runs", "3", "--baseline-dir", str(tmp_path)], one_by_one(runner)) == 0
    out = capsys.readouterr().out
    assert (
        "cudaperf record: t.py::a {time:wall}: 2 of 3 recordings taken while other processes "
        "shared the CPU (e.g. waited for a CPU 91% of the time)" in out
    )
    assert out.count("shared the CPU") == 1


def test_record_runs_one_after_another_where_processes_cannot_take_turns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without ``fcntl`` (Windows) the default runner starts no run before the one before it
    ended, and says nothing of turns; exit codes in order."""
    monkeypatch.setattr(turns, "AVAILABLE", False)
    assert run_pytest([["--version"], ["--no-such-option"]], tmp_path) == [0, 4]
    assert "together" not in capsys.readouterr().out
    assert not (tmp_path / "turns").exists()


def test_a_run_that_could_not_run_its_tests_shows_its_last_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The runs' output goes to files; one that ends without a report shows its last lines
    under the line that stops the recording (here pytest's own usage error)."""
    monkeypatch.chdir(tmp_path)
    assert main(["record", "--runs", "1", "--", "--no-such-option"]) == 4
    out = capsys.readouterr().out
    assert "    python -m pytest: error: unrecognized arguments: --no-such-option\n" in out, out
    assert out.rstrip().endswith(
        "run 1/1: pytest exited 4 (a usage error); stopped, nothing recorded"
    )
