"""Judging a measurement whose samples the test's own code took, in exactly the number it took
(a ``cuda_timer.region``, the rounds of ``benchmark.pedantic`` with a ``setup``): it cannot be
measured again in this process, so a change it reads is confirmed in a fresh process, as a
``cuda_timer`` measurement's is, and one read from too few samples is not judged a change at all
(why: docs/decisions.md, "Why is every entry point judged with the host's state?")."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from pytest_cudaperf.run.judged import JudgedMeasurement, Target, add_time
from pytest_cudaperf.run.judging import judge_time
from pytest_cudaperf.verdict import Kind, Verdict

if TYPE_CHECKING:
    from pytest_cudaperf.keys import SeriesKey
    from pytest_cudaperf.measure.measurement import Measurement
    from pytest_cudaperf.report.model import JudgedRecord
    from pytest_cudaperf.run.context import TestContext

#: an exact-rounds measurement with fewer samples than this reads no REGRESSION or IMPROVED:
#: the CI of a median of fewer samples spans most of them, and a slow stretch of the host that
#: holds a few rounds moves it (INCONCLUSIVE, saying so)
MIN_EXACT_SAMPLES = 10


def too_few(verdict: Verdict, n: int, minimum: int = MIN_EXACT_SAMPLES) -> Verdict:
    """``verdict`` as it is, unless it is a change read from fewer than ``minimum`` samples:
    then INCONCLUSIVE, saying that and what to do."""
    if verdict.kind not in (Kind.REGRESSION, Kind.IMPROVED) or n >= minimum:
        return verdict
    body = verdict.message.removeprefix("perf regression: ")
    why = (
        f"only {n} sample{'s' if n != 1 else ''}, too few for a confident verdict (at least "
        f"{minimum}: more rounds, or cuda_timer(fn) for the adaptive engine)"
    )
    return dataclasses.replace(
        verdict, kind=Kind.INCONCLUSIVE, message=f"inconclusive: {body}; {why}"
    )


def exact_judged(
    test: TestContext, key: SeriesKey, measurement: Measurement, device_class: str
) -> None:
    """A measurement of exact rounds, judged (:func:`too_few`), a change confirmed in a fresh
    process (:meth:`JudgedMeasurement.confirm_fresh`: nothing here is measured again), and
    recorded."""
    record = judge_time(test, key, measurement, device_class)
    record = dataclasses.replace(record, verdict=too_few(record.verdict, measurement.n))
    if record.verdict.kind in (Kind.REGRESSION, Kind.IMPROVED) and not test.settings.update:
        path = JudgedMeasurement(test, key, Target(_taken, measurement.device), device_class)
        record, measurement = path.confirm_fresh(record, measurement, _refined)
    add_time(test, record, measurement)


def _refined(record: JudgedRecord, measurement: Measurement) -> JudgedRecord:
    """A confirmed record of exact rounds, judged on too few samples where it has them."""
    return dataclasses.replace(record, verdict=too_few(record.verdict, measurement.n))


def _taken() -> None:
    """The test's own code took the samples: there is nothing here to call again."""
