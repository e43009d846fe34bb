"""Verdict policy and record building: a measurement, the baseline and the test's limits
become a judged record and, when the test's body passed, the failures of that test.

The comparison itself is :func:`pytest_cudaperf.verdict.judge`, called in one place
(:func:`_judge`). The functions here run in the process that runs the test.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

from pytest_cudaperf import report
from pytest_cudaperf.baselines import Record, Recording
from pytest_cudaperf.context import RunContext, TestContext, environment
from pytest_cudaperf.keys import SeriesKey
from pytest_cudaperf.markers import PerfOptions
from pytest_cudaperf.outcome import (
    ComparisonOutcome,
    FailureKind,
    JudgedRecord,
    LeakOutcome,
    Other,
)
from pytest_cudaperf.verdict import Kind, Observation, budget_failure, confirm, judge

if TYPE_CHECKING:
    from pytest_cudaperf.measure.timing import Budget, Comparison, Measurement
    from pytest_cudaperf.memory import LeakResult, PeakResult
    from pytest_cudaperf.settings import Settings

#: default tolerance for peak memory: the requested-bytes peak is bit-identical across runs
MEMORY_TOLERANCE = 0.01
#: how often an inconclusive measurement is re-measured (with twice the time budget each time)
REMEASURE = 2


def tolerance(settings: Settings, perf: PerfOptions | None) -> float:
    """The marker's tolerance, else the run's."""
    if perf is not None and perf.tolerance is not None:
        return perf.tolerance
    return settings.tolerance


def budget_for(
    settings: Settings,
    perf: PerfOptions,
    warmup: float | None = None,
    min_time: float | None = None,
    max_time: float | None = None,
) -> Budget:
    """A measurement's budget: explicit arguments, else the marker's, else the run's settings;
    the precision follows the tolerance."""
    from pytest_cudaperf.measure.timing import Budget

    return Budget.for_tolerance(
        tolerance(settings, perf),
        warmup=warmup if warmup is not None else (perf.warmup or 0.05),
        min_time=min_time if min_time is not None else (perf.min_time or 0.0),
        max_time=max_time if max_time is not None else (perf.max_time or settings.max_time),
        rounds=perf.rounds or settings.rounds,
    )


def _device_of(test: TestContext) -> str:
    return str(test.device.device) if test.device is not None else "cpu"


def observation(m: Measurement, env: Mapping[str, object]) -> Observation:
    """The current side of a time's verdict: the median, its CI half-width, the noise the
    measurement's instability implies (the verdict takes the larger of the two) and why, the
    SM clock while it sampled, and the host's reference-loop time (CPU)."""
    return Observation(
        m.median_ms,
        m.rel_halfwidth,
        m.instability_noise,
        m.instability,
        m.sm_mhz,
        env,
        reference_ms=m.reference_ms,
    )


def _judge(test: TestContext, record: Record, obs: Observation, allowed: float) -> JudgedRecord:
    """The one call of the verdict: a measured record against its baseline entry, with the
    same series on other device classes beside it."""
    store = test.run.store
    klass, key, series = record.device_class, record.key, record.series
    entry = store.lookup(klass, key, series)
    verdict = judge(obs, entry, allowed, klass)
    others = tuple(Other(c, float(e.value)) for c, e in store.others(klass, key, series))
    return JudgedRecord(record, verdict, others=others)


def judge_time(
    test: TestContext, key: SeriesKey, m: Measurement, device_class: str
) -> JudgedRecord:
    """A time's record and verdict (the measurement's fields kept for the reports)."""
    allowed = tolerance(test.settings, test.perf)
    env = environment(test.run.probe, _device_of(test))
    recording = Recording(
        date=str(env["date"]),
        median=m.median_ms,
        noise=m.noise,
        n=m.n,
        rounds=m.round_medians_ms,
        sm_mhz=m.sm_mhz,
        unstable=m.instability,
        ci=m.ci_ms,
        reference_ms=m.reference_ms,
    )
    perf_tolerance = test.perf.tolerance if test.perf else None
    record = Record(key, f"time:{m.mode}", device_class, "ms", recording, env, None, perf_tolerance)
    judged = _judge(test, record, observation(m, env), allowed)
    return dataclasses.replace(judged, measurement=m.to_dict())


def confirm_time(
    test: TestContext, first: JudgedRecord, again: Measurement, where: str = ""
) -> tuple[JudgedRecord, Measurement]:
    """A regression stands only if a re-measurement is one too, and in cycle space where both
    sides know their SM clock (:func:`pytest_cudaperf.verdict.confirm`). The record keeps the
    re-measurement either way: the verdict's ratio and CI are its (the table's baseline column is
    the value over that ratio). ``where``: where the re-measurement was taken, when not here."""
    allowed = tolerance(test.settings, test.perf)
    entry = test.run.store.lookup(first.device_class, first.key, first.series)
    verdict = confirm(
        first.verdict, observation(again, first.env), entry, allowed, first.device_class, where
    )
    second = judge_time(test, first.key, again, first.device_class)
    return dataclasses.replace(second, verdict=verdict), again


def confirm_fresh(
    test: TestContext,
    first: JudgedRecord,
    measured: Measurement,
    lock: Callable[[], AbstractContextManager[object]] = contextlib.nullcontext,
) -> tuple[JudgedRecord, Measurement]:
    """A CPU regression that held in this process stands only if a fresh process measures one too
    (:class:`pytest_cudaperf.child.FreshProcess`): a slow state of one process is not the code's.
    The fresh process measures under this process's ``lock`` (the device to itself, as any
    measurement). Where no fresh measurement can be had, the regression stands and a line under
    it says why."""
    fresh = test.run.fresh
    if fresh is None or first.verdict.kind is not Kind.REGRESSION or measured.device != "cpu":
        return first, measured
    with lock():
        found = fresh.measurements(test.nodeid)
    again = None if isinstance(found, str) else found.get((str(first.key), first.series))
    if again is None:
        why = found if isinstance(found, str) else "it took no such measurement"
        test.state.details.append(f"{first.key.label()}not re-measured in a fresh process: {why}")
        return first, measured
    return confirm_time(test, first, again, " in a fresh process")


def add_time(test: TestContext, record: JudgedRecord, m: Measurement) -> None:
    """Record a judged time; a regression, a missing baseline under --cudaperf-strict, or a
    median over ``max_ms`` fails the test."""
    state, settings, label = test.state, test.settings, record.key.label()
    state.records.append(record)
    if record.verdict.kind is Kind.REGRESSION and not settings.update:
        state.fail(FailureKind.REGRESSION, f"{label}{record.verdict.message}")
    if record.verdict.kind is Kind.NEW and settings.strict and not settings.update:
        state.fail(
            FailureKind.MISSING,
            f"{label}no baseline for {record.series} on {record.device_class} "
            "(--cudaperf-strict); record one with pytest --cudaperf-update",
        )
    perf = test.perf
    subject = record.key.nodeid.rsplit("::", 1)[-1]
    over = budget_failure(
        m.median_ms, perf.max_ms if perf else None, "ms", "max_ms", m.how(), subject=subject
    )
    if over:
        state.fail(FailureKind.BUDGET, f"{label}{over}")
    if perf is not None and perf.max_recompiles is not None and m.recompiles > perf.max_recompiles:
        state.fail(
            FailureKind.BUDGET,
            f"{label}perf: {subject} recompiled {m.recompiles} times while sampling > "
            f"max_recompiles {perf.max_recompiles}",
        )
    state.details.extend(f"{label}{line}" for line in record.explanation)
    state.details.extend(f"{label}unstable: {why}" for why in m.instability)
    state.details.extend(f"{label}{w}" for w in m.warnings)


def add_peak(
    test: TestContext,
    key: SeriesKey,
    peak: PeakResult,
    device_class: str,
    max_peak: int | None,
) -> None:
    """Record a judged peak; a regression or a peak over ``max_peak`` fails the test."""
    size = peak.peak_bytes
    env = environment(test.run.probe, _device_of(test))
    recording = Recording(str(env["date"]), size, 0.0, 1, ci=(size, size))
    measured = Record(key, "memory:peak", device_class, "bytes", recording, env)
    obs = Observation(float(size), env=env, unit="bytes")
    judged = _judge(test, measured, obs, MEMORY_TOLERANCE)
    record = dataclasses.replace(judged, measurement=peak.to_dict())
    test.state.records.append(record)
    if record.verdict.kind is Kind.REGRESSION and not test.settings.update:
        test.state.fail(FailureKind.REGRESSION, f"{key.label()}{record.verdict.message}")
    check_peak(test, key, peak, max_peak)
    if peak.alloc_retries or peak.ooms:
        test.state.details.append(
            f"{key.label()}allocator retried {peak.alloc_retries} times, "
            f"{peak.ooms} OOMs (near the memory limit)"
        )


def check_peak(
    test: TestContext, key: SeriesKey, peak: PeakResult | None, limit: int | None
) -> None:
    """The ``max_peak`` budget of a marker or ``memory_guard`` (no peak: nothing to check)."""
    if peak is None:
        return
    where = f"requested bytes on {peak.device}"
    over = budget_failure(peak.peak_bytes, limit, "bytes", "max_peak", where)
    if over:
        test.state.fail(FailureKind.MEMORY, f"{key.label()}{over}")


def add_comparison(
    test: TestContext,
    key: SeriesKey,
    comparison: Comparison,
    min_speedup: float | None,
    pair: tuple[Profiled, Profiled] | None = None,
) -> None:
    """A same-run comparison; a ``min_speedup`` miss fails the test and, where the two sides
    (candidate, reference) are given, says which kernels differ between them."""
    detail = comparison.to_dict()
    test.state.comparisons.append(ComparisonOutcome(key, comparison.speedup, comparison.ci, detail))
    if min_speedup is None:
        return
    text = f"{key.label()}{comparison.describe()}"
    if comparison.ci[1] < min_speedup:
        test.state.fail(FailureKind.SPEEDUP, f"{text} < min_speedup {min_speedup:g}")
        if pair is not None and _may_profile(test):
            from pytest_cudaperf import breakdown

            candidate, reference = pair
            with candidate.lock():
                found = breakdown.explain_pair(candidate.fn, reference.fn, candidate.device)
            test.state.details.extend(f"{key.label()}{line}" for line in found.lines)
    elif comparison.ci[0] < min_speedup:
        test.state.details.append(
            f"{key.label()}inconclusive against min_speedup {min_speedup:g}: "
            f"{comparison.describe()}"
        )


def add_leak(test: TestContext, key: SeriesKey, result: LeakResult) -> None:
    test.state.leak = LeakOutcome(
        key=key,
        series=result.series,
        leaks=result.leaks,
        tolerance=result.tolerance,
        settle=tuple(result.settle_steps),
        sites=tuple(result.sites),
    )
    message = result.message()
    if message:
        test.state.fail(FailureKind.LEAK, message)
        test.state.details.extend(result.sites)


@dataclass(frozen=True)
class Profiled:
    """What a measurement timed, for its kernel (or op) breakdown: the callable, its device and
    the lock to profile under. Profiled only on an update or a non-pass verdict."""

    fn: Callable[[], object]
    device: str
    lock: Callable[[], AbstractContextManager[object]] = contextlib.nullcontext


def _may_profile(test: TestContext) -> bool:
    """Breakdowns are profiled unless switched off, and never in a rank (its profiled calls
    could differ from the other ranks')."""
    return test.run.rank is None and test.settings.breakdown != "off"


def measure_judged(  # noqa: PLR0913 - the measurement loop's parts, passed by two fixtures
    test: TestContext,
    key: SeriesKey,
    run_once: Callable[[Budget], Measurement],
    budget: Budget,
    device_class: str,
    profiled: Profiled | None = None,
) -> Measurement:
    """Measure and judge against the baseline; re-measure an inconclusive result (twice the
    time budget each time, at most REMEASURE times); confirm a regression by measuring again;
    then attach the breakdown (update) or what it says changed (non-pass verdict)."""
    for attempt in range(REMEASURE + 1):
        measurement = run_once(dataclasses.replace(budget, max_time=budget.max_time * 2**attempt))
        record = judge_time(test, key, measurement, device_class)
        if record.verdict.kind is not Kind.INCONCLUSIVE:
            break
    if record.verdict.kind is Kind.REGRESSION and not test.settings.update:
        record, measurement = confirm_time(test, record, run_once(budget))
        lock = profiled.lock if profiled is not None else contextlib.nullcontext
        record, measurement = confirm_fresh(test, record, measurement, lock)
    if profiled is not None and _may_profile(test):
        record = _with_breakdown(test, record, profiled)
    add_time(test, record, measurement)
    return measurement


#: verdicts whose failure (or report) says which kernels explain the change
_EXPLAINED = frozenset({Kind.REGRESSION, Kind.IMPROVED, Kind.INCONCLUSIVE})


def _with_breakdown(test: TestContext, record: JudgedRecord, profiled: Profiled) -> JudgedRecord:
    """On an update, the breakdown the baseline keeps; on a non-pass verdict, the diff against
    the stored one. Green runs profile nothing."""
    from pytest_cudaperf import breakdown

    if test.settings.update:
        with profiled.lock():
            data, note = breakdown.record(profiled.fn, profiled.device)
        if data is None:
            test.state.details.append(f"{record.key.label()}no kernel breakdown: {note}")
            return record
        return dataclasses.replace(
            record, record=dataclasses.replace(record.record, breakdown=data)
        )
    if record.verdict.kind not in _EXPLAINED:
        return record
    entry = test.run.store.lookup(record.device_class, record.key, record.series)
    stored = entry.breakdown if entry is not None else None
    if stored is None and record.verdict.kind is Kind.INCONCLUSIVE:
        return record
    with profiled.lock():
        found = breakdown.explain(stored, profiled.fn, profiled.device)
    data = {**found.data, "html": found.html} if found.data is not None else None
    return dataclasses.replace(record, explanation=tuple(found.lines), explanation_data=data)


def finish_call_report(
    run: RunContext,
    test: TestContext | None,
    item: pytest.Item,
    rep: pytest.TestReport,
    call: pytest.CallInfo[None],
) -> None:
    """Apply a test's outcome to its call report: the payload for the controller, JUnit
    properties, and a passed body with failures turned into a one-line failure. A sticky CUDA
    error poisons the process; after a CUDA OOM, summarise and clean up."""
    body_passed = rep.passed
    if call.excinfo is not None:
        run.note_error(item.nodeid, call.excinfo.value)
        _after_oom(rep, call)
    if test is None or test.state.empty:
        return
    outcome = test.state.outcome(body_passed, (rep.location[0], (rep.location[1] or 0) + 1))
    rep.cudaperf = outcome.to_payload()  # type: ignore[attr-defined]
    for prop in report.junit_properties(outcome):
        rep.user_properties.append(prop)
        # junitxml writes the properties of the teardown report, which copies the item's
        item.user_properties.append(prop)
    if body_passed and outcome.failures:
        rep.outcome = "failed"
        rep.longrepr = report.failure_text(outcome)
        rep.cudaperf_failure = outcome.failures[0].kind.value  # type: ignore[attr-defined]


def _after_oom(rep: pytest.TestReport, call: pytest.CallInfo[None]) -> None:
    from pytest_cudaperf import memory

    assert call.excinfo is not None
    if memory.is_oom(call.excinfo.value):
        rep.sections.append(("cudaperf memory at OOM", memory.oom_summary()))
        memory.release_frames(call.excinfo.tb)
        memory.recover_after_oom()
