from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from pytest_cudaperf.breakdown.model import Breakdown, Kernel
from pytest_cudaperf.keys import SeriesKey
from pytest_cudaperf.measure.ceilings import Peaks, datasheet
from pytest_cudaperf.measure.comparison import Comparison
from pytest_cudaperf.measure.energy import Energy, Resolution
from pytest_cudaperf.measure.measurement import Measurement
from pytest_cudaperf.measure.roofline import Roofline
from pytest_cudaperf.measure.work import Work
from pytest_cudaperf.memory.protocol import PeakResult
from pytest_cudaperf.report.document import Report, dumps, merge_reports, read_report
from pytest_cudaperf.report.fields import ReportError
from pytest_cudaperf.report.model import (
    Bandwidth,
    ComparisonOutcome,
    Failure,
    FailureKind,
    JudgedRecord,
    LeakOutcome,
    OtherDevice,
    TestOutcome,
    record_from_json,
    record_to_json,
)
from pytest_cudaperf.report.terminal import summary_line
from pytest_cudaperf.series import Record, Recording
from pytest_cudaperf.store.baselines import UpdateSummary
from pytest_cudaperf.verdict import Kind, Verdict

NODEID = "t.py::test_ids[c#d]"  # a '#' in the id must survive the trip


def _record(name: str = "fwd", unit: str = "ms", series: str = "time:device/cold") -> Record:
    recording = Recording("2026-11-23", 1.25, 0.01, 40, (1.24, 1.26), 1980.0, ("u",), (1.2, 1.3))
    return Record(SeriesKey(NODEID, name), series, "GPU X", unit, recording, {"torch": "2.13"})


def _breakdown(*kernels: tuple[str, float]) -> Breakdown:
    found = tuple(Kernel(name, name, 1.0, us) for name, us in kernels)
    total = sum(us for _, us in kernels)
    return Breakdown("cuda", 5, total, total, found)


def full_outcome() -> TestOutcome:
    """A test outcome with every field set, typed leaves included."""
    measured = Measurement.from_samples([1.2, 1.25, 1.3], warnings=("w",), device="cuda:0")
    time_record = JudgedRecord(
        record=_record(),
        verdict=Verdict(Kind.REGRESSION, 1.25, (1.2, 1.3), 0.05, "slower", 0.05, ("ecc on → off",)),
        measurement=measured,
        others=(OtherDevice("GPU Y", 2.0),),
        explanation=("+1.0 µs  gemm: a -> b",),
        compared=(_breakdown(("gemm", 9.0)), _breakdown(("gemm", 10.0))),
        rank=1,
        ranks={"0": 1.2, "1": 1.25},
        bandwidth=Bandwidth("all_reduce", 1 << 20, 100.0, 150.0),
        roofline=Roofline(
            Work(10**9, 4096, 2048, {"bf16": 10**9}, 3, ("flops",)),
            1.25,
            Peaks(2.9e12, {"bf16": 7.5e14}, "measured"),
            datasheet("NVIDIA H100 80GB HBM3"),
        ),
    )
    energy_record = JudgedRecord(
        record=dataclasses.replace(
            _record(),
            series="energy:call",
            unit="J",
            recording=Recording("2026-11-23", 0.25, 0.01, 4000, ci=(0.2475, 0.2525)),
        ),
        verdict=Verdict(Kind.NEW),
        energy=Energy(0.25, 410.0, 4000, 1.0, Resolution(0.005, 1)),
    )
    peak_record = JudgedRecord(
        record=dataclasses.replace(
            _record(),
            series="memory:peak",
            unit="bytes",
            recording=Recording("2026-11-23", 4096, 0.0, 1, ci=(4096, 4096)),
        ),
        verdict=Verdict(Kind.PASS, 1.0),
        peak=PeakResult(4096, alloc_retries=1, ooms=0, device="cuda:0"),
    )
    fast = Measurement.from_samples([1.0, 1.1])
    slow = Measurement.from_samples([2.0, 2.1])
    return TestOutcome(
        nodeid=NODEID,
        records=(time_record, peak_record, energy_record),
        failures=(Failure(FailureKind.REGRESSION, "slower"), Failure(FailureKind.LEAK, "leak")),
        details=("a detail",),
        leak=LeakOutcome(
            key=SeriesKey(NODEID, "guard2"),
            series={"cuda:0": [0, 1, 2]},
            leaks={"cuda:0": 2},
            tolerance=0,
            settle=("gc.collect x1",),
            sites=("x.py:1 in f",),
        ),
        comparisons=(
            ComparisonOutcome(
                SeriesKey(NODEID, "compare"), Comparison(1.9, (1.8, 2.0), fast, slow, 3)
            ),
        ),
        body_passed=True,
        location=("t.py", 12),
    )


def test_an_outcome_round_trips_through_plain_json() -> None:
    """What rides on the TestReport (through execnet under xdist) comes back equal, every typed
    leaf included."""
    outcome = full_outcome()
    payload = outcome.to_json()
    wire = json.loads(json.dumps(payload, allow_nan=False))
    assert wire == payload
    assert TestOutcome.from_json(wire) == outcome


def test_a_report_round_trips_and_counts_its_verdicts(tmp_path: Path) -> None:
    update = UpdateSummary(Path("b/gpu-x.json"), added=["a"], changed=["b"], afresh=["b"])
    report = Report(
        tests=(full_outcome(),),
        run_id="abc",
        baseline_dir="/b",
        environment={"torch": "2.13"},
        updates=(update,),
        obsolete={"GPU X": ("t.py::gone",)},
        drifting=("t.py::a {time:wall}: drifting +9.0% since 2026-11-01 (4 recordings)",),
        complete_run=False,
        pruned_refused=True,
        failed_bodies=2,
    )
    path = tmp_path / "r.json"
    path.write_text(dumps(report))
    assert read_report(path) == report
    summary = json.loads(path.read_text())["summary"]
    assert summary["measured"] == 3
    assert (summary["times"], summary["peaks"], summary["energies"]) == (1, 1, 1)
    assert summary["regression"] == 1
    assert summary["leak"] == 1


def test_a_version_2_report_is_read() -> None:
    """The layout before this one kept the peak, the rank and the bandwidth in ``measurement``
    and a rendered HTML fragment in ``explanation_data``."""
    peak = {**record_to_json(_record("", "bytes", "memory:peak")), "verdict": {"kind": "pass"}}
    peak["measurement"] = {"peak_bytes": 4096, "alloc_retries": 0, "ooms": 0, "device": "cuda:0"}
    time = {**record_to_json(_record()), "verdict": {"kind": "new"}}
    samples = Measurement.from_samples([1.0, 1.2]).to_dict()
    bandwidth = {"op": "all_reduce", "bytes": 8, "algbw_gbps": 1.0, "busbw_gbps": 1.5}
    time["measurement"] = {**samples, "rank": 1, "ranks": {"0": 1.0}, "bandwidth": bandwidth}
    time["explanation_data"] = {"html": "<table></table>"}
    document = {"schema": 2, "tests": [{"nodeid": NODEID, "records": [peak, time]}]}
    [test] = Report.from_json(document).tests
    assert test.records[0].peak == PeakResult(4096, device="cuda:0")
    assert test.records[0].measurement is None
    assert test.records[1].rank == 1
    assert test.records[1].ranks == {"0": 1.0}
    assert test.records[1].bandwidth == Bandwidth("all_reduce", 8, 1.0, 1.5)
    assert test.records[1].compared is None


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(schema=9), "report schema 9 was written by a newer pytest-cudaperf"),
        (lambda d: d.update(schema="x"), r"not a --cudaperf-json report \(schema 'x'\)"),
        (lambda d: d.update(tests={}), r"report.tests: expected a list"),
        (lambda d: d["tests"][0].pop("nodeid"), r"report.tests\[0\].nodeid: expected a string"),
        (
            lambda d: d["tests"][0]["records"][0].update(verdict={"kind": "slow"}),
            r"records\[0\].verdict.kind: expected one of",
        ),
        (
            lambda d: d["tests"][0]["records"][0]["recording"].update(noise=-1),
            r"records\[0\]: recording: 'noise' must be",
        ),
        (
            lambda d: d["tests"][0]["failures"].append(["odd", "x"]),
            r"failures\[2\]: unknown failure kind 'odd'",
        ),
        (
            lambda d: d["tests"][0]["records"][0].update(measurement={"median_ms": 1}),
            r"records\[0\].measurement: unreadable",
        ),
    ],
)
def test_reading_is_strict_and_says_where(change: object, message: str) -> None:
    document = Report(tests=(full_outcome(),)).to_json()
    change(document)  # type: ignore[operator]
    with pytest.raises(ReportError, match=message):
        Report.from_json(document)


def test_a_baseline_file_is_named_as_such_not_read_as_an_empty_report() -> None:
    """``cudaperf history ingest`` of a baseline file added a run of no series."""
    baseline = {"schema": 2, "device_class": "cpu", "entries": {}}
    with pytest.raises(ReportError) as excinfo:
        Report.from_json(baseline, "base.json")
    assert str(excinfo.value) == "base.json: a baseline file, not a --cudaperf-json report"


def test_a_record_alone_round_trips_and_is_strict() -> None:
    rec = dataclasses.replace(_record("inner"), breakdown={"k": 1}, tolerance=0.02)
    data = json.loads(json.dumps(record_to_json(rec)))
    assert (data["nodeid"], data["name"]) == (NODEID, "inner")
    assert record_from_json({**data, "verdict": {"kind": "pass"}}) == rec
    data["recording"]["noise"] = -1
    with pytest.raises(ReportError, match=r"run 3: recording: 'noise' must be"):
        record_from_json(data, "run 3")


def test_shard_reports_merge_into_one() -> None:
    a = Report(tests=(TestOutcome("t.py::a"),), obsolete={"X": ("t.py::old",)}, failed_bodies=1)
    b = Report(tests=(TestOutcome("t.py::b"),), complete_run=False, failed_bodies=2)
    merged = merge_reports([b, a])
    assert [t.nodeid for t in merged.tests] == ["t.py::a", "t.py::b"]
    assert merged.obsolete == {"X": ("t.py::old",)}
    assert merged.failed_bodies == 3
    assert not merged.complete_run


def test_failure_kinds_carry_their_status_letter() -> None:
    assert (FailureKind.LEAK.letter, FailureKind.LEAK.word) == ("L", "LEAKED")
    assert {kind.letter for kind in FailureKind} == {"R", "L", "B", "M", "S", "N"}


def test_each_limit_a_test_broke_is_counted_by_its_own_name() -> None:
    """``max_ms`` over budget, ``min_speedup`` too slow, ``max_peak`` over it: three counts."""
    tests = [
        TestOutcome(f"t.py::{kind.value}", failures=(Failure(kind, "x"),))
        for kind in (FailureKind.BUDGET, FailureKind.SPEEDUP, FailureKind.SPEEDUP)
    ]
    tests.append(TestOutcome("t.py::leak", failures=(Failure(FailureKind.LEAK, "x"),)))
    counts = Report(tests=tuple(tests)).counts()
    assert (counts["over budget"], counts["too slow"], counts["over max_peak"]) == (1, 2, 0)
    assert summary_line(counts).endswith(", 1 leak, 1 over budget, 2 too slow")
