"""Judging a measurement whose samples the test's own code took, in exactly the number it took
(a ``cuda_timer.region``, the rounds of ``benchmark.pedantic`` with a ``setup`` or
``teardown``): a change it reads is confirmed in a fresh process, as a ``cuda_timer``
measurement's is, and one read from too few samples is not judged a change at all. Rounds that
can be taken again (pedantic's: its ``setup`` makes fresh arguments for every round, and
without one every round calls the target with the same arguments) are, when their verdict is
INCONCLUSIVE: twice as many each time, at most :data:`REMEASURE` times, once other processes
left the CPU where they shared it (:class:`pytest_cudaperf.run.hoststate.CpuWait`). A region's
samples are the test body's own: it is not (why: docs/decisions.md, "Why is every entry point
judged with the host's state?", "Why are pedantic's exact rounds taken again when
inconclusive?")."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

from pytest_cudaperf.measure import instability
from pytest_cudaperf.run.hoststate import CpuWait
from pytest_cudaperf.run.judged import JudgedMeasurement, Target, add_time
from pytest_cudaperf.run.judging import REMEASURE, judge_time, remeasures
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

#: takes this many rounds again and returns their measurement (pedantic's rounds)
Again = Callable[[int], "Measurement"]


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
    test: TestContext,
    key: SeriesKey,
    measurement: Measurement,
    device_class: str,
    again: Again | None = None,
) -> Measurement:
    """A measurement of exact rounds, judged (:func:`too_few`), taken again while INCONCLUSIVE
    where ``again`` can (:func:`taken_again`), a change confirmed in a fresh process
    (:meth:`JudgedMeasurement.confirm_fresh`: nothing here is measured again), and recorded.
    Returns the measurement recorded."""
    record = _judged(test, key, measurement, device_class)
    if again is not None and not test.settings.update:
        record, measurement = taken_again(test, record, measurement, again)
    if record.verdict.kind in (Kind.REGRESSION, Kind.IMPROVED) and not test.settings.update:
        path = JudgedMeasurement(test, key, Target(_taken, measurement.device), device_class)
        record, measurement = path.confirm_fresh(record, measurement, _refined)
    add_time(test, record, measurement)
    return measurement


def taken_again(
    test: TestContext,
    record: JudgedRecord,
    measurement: Measurement,
    again: Again,
    wait: CpuWait | None = None,
) -> tuple[JudgedRecord, Measurement]:
    """An INCONCLUSIVE verdict of rounds that ``again`` can take anew: taken again with twice
    the rounds each time, at most :func:`pytest_cudaperf.run.judging.remeasures` times, until
    the verdict is not INCONCLUSIVE; each new measurement replaces the one before (rounds under
    contention pooled with quiet ones would keep the contention's threshold). A measurement that
    met other processes on the CPU (a contention finding) is taken again once they left it, within
    ``--cudaperf-state-wait`` in all (``wait``; a line in the test's details says how long it
    waited); a wait that runs out leaves the verdict as it is. Not taken again: one taken under
    a tracer (it would be under it too), one of fewer than :data:`MIN_EXACT_SAMPLES` rounds
    (the user's count: its verdict says to give more), and rounds whose double would outlast
    the time the adaptive engine gives its own re-measurement (:func:`affordable`), and none
    with ``--cudaperf-remeasure=off``."""
    if test.settings.remeasure == "off":
        return record, measurement
    limit = test.settings.state_wait
    if wait is None and limit > 0:
        wait = CpuWait(limit, spell=test.run.cpu_spell)
    label = record.key.label()
    for attempt in range(1, REMEASURE + 1):
        if record.verdict.kind is not Kind.INCONCLUSIVE or measurement.traced:
            break
        if attempt > remeasures(record.verdict):
            break
        if measurement.n < MIN_EXACT_SAMPLES or not affordable(test, measurement, attempt):
            break
        if wait is not None and any(map(instability.is_contention, measurement.instability)):
            waited = wait.until_free()
            test.state.details.append(label + waited.describe())
            if not waited.free:
                break
        measurement = again(measurement.n * 2)
        record = _judged(test, record.key, measurement, record.device_class)
    return record, measurement


def affordable(test: TestContext, measurement: Measurement, attempt: int) -> bool:
    """Whether twice ``measurement``'s rounds (their median time each) fit in the time the
    adaptive engine gives its ``attempt``-th re-measurement: the marker's or the run's
    ``max_time`` times ``2 ** attempt``."""
    perf = test.perf
    max_time = perf.max_time if perf is not None and perf.max_time else test.settings.max_time
    return 2 * measurement.n * measurement.median_ms / 1e3 <= max_time * 2.0**attempt


def _judged(
    test: TestContext, key: SeriesKey, measurement: Measurement, device_class: str
) -> JudgedRecord:
    """``measurement``'s record, its verdict held back where it has too few samples."""
    record = judge_time(test, key, measurement, device_class)
    return dataclasses.replace(record, verdict=too_few(record.verdict, measurement.n))


def _refined(record: JudgedRecord, measurement: Measurement) -> JudgedRecord:
    """A confirmed record of exact rounds, judged on too few samples where it has them."""
    return dataclasses.replace(record, verdict=too_few(record.verdict, measurement.n))


def _taken() -> None:
    """The test's own code took the samples: there is nothing here to call again."""
