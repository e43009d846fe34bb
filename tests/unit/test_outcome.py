from __future__ import annotations

import json

from pytest_cudaperf.baselines import Record, Recording
from pytest_cudaperf.keys import SeriesKey
from pytest_cudaperf.outcome import (
    ComparisonOutcome,
    Failure,
    FailureKind,
    JudgedRecord,
    LeakOutcome,
    Other,
    TestOutcome,
)
from pytest_cudaperf.verdict import Kind, Verdict


def full_outcome() -> TestOutcome:
    nodeid = "t.py::test_ids[c#d]"  # a '#' in the id must survive the trip
    recording = Recording("2026-11-23", 1.25, 0.01, 40, (1.24, 1.26), 1980.0, ("u",), (1.2, 1.3))
    measured = Record(
        SeriesKey(nodeid, "fwd"), "time:device/cold", "GPU X", "ms", recording, {"torch": "2.13"}
    )
    record = JudgedRecord(
        record=measured,
        verdict=Verdict(Kind.REGRESSION, 1.25, (1.2, 1.3), 0.05, "slower", 0.05, ("ecc on → off",)),
        measurement={"samples_ms": [1.2, 1.25, 1.3], "warnings": ["w"], "ci_ms": (1.2, 1.3)},
        others=(Other("GPU Y", 2.0),),
        explanation=("+1.0 µs  gemm: a -> b",),
        explanation_data={"lines": ["+1.0 µs  gemm: a -> b"]},
    )
    return TestOutcome(
        nodeid=nodeid,
        records=(record,),
        failures=(Failure(FailureKind.REGRESSION, "slower"), Failure(FailureKind.LEAK, "leak")),
        details=("a detail",),
        leak=LeakOutcome(
            key=SeriesKey(nodeid, "guard2"),
            series={"cuda:0": [0, 1, 2]},
            leaks={"cuda:0": 2},
            tolerance=0,
            settle=("gc.collect x1",),
            sites=("x.py:1 in f",),
        ),
        comparisons=(
            ComparisonOutcome(SeriesKey(nodeid, "compare"), 1.5, (1.4, 1.6), {"rounds": 3}),
        ),
        body_passed=True,
        location=("t.py", 12),
    )


def test_outcome_round_trips_through_plain_json() -> None:
    outcome = full_outcome()
    payload = outcome.to_payload()
    wire = json.loads(json.dumps(payload, allow_nan=False))  # what execnet carries
    assert wire == payload
    back = TestOutcome.from_payload(wire)
    assert back.records[0].key == SeriesKey("t.py::test_ids[c#d]", "fwd")
    assert back.failures == outcome.failures
    assert back.leak == outcome.leak
    assert back.comparisons == outcome.comparisons
    assert back.location == ("t.py", 12)
    assert back.records[0].verdict == outcome.records[0].verdict
    assert back.records[0].others == outcome.records[0].others
    assert back.records[0].measured_ci_ms == (1.2, 1.3)
    assert back.to_payload() == payload


def test_failure_kinds_carry_their_status_letter() -> None:
    assert (FailureKind.LEAK.letter, FailureKind.LEAK.word) == ("L", "LEAKED")
    assert FailureKind.BUDGET.is_budget
    assert not FailureKind.REGRESSION.is_budget
    assert {kind.letter for kind in FailureKind} == {"R", "L", "B", "M", "S", "N"}
