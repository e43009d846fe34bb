"""The measure-judge loop of one measured callable: measure, judge against the baseline,
re-measure an inconclusive result, confirm a regression (again, in cycle space, and on the CPU in
a fresh process), then attach the kernel breakdown (on an update) or what it says changed (on a
non-pass verdict)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pytest_cudaperf.keys import SeriesKey
from pytest_cudaperf.markers import PerfOptions
from pytest_cudaperf.report.model import JudgedRecord
from pytest_cudaperf.run.context import TestContext
from pytest_cudaperf.run.judging import (
    add_comparison,
    add_peak,
    add_time,
    confirm_fresh,
    confirm_time,
    host_back,
    judge_time,
    state_wait,
    tolerance,
)
from pytest_cudaperf.verdict import Kind

if TYPE_CHECKING:
    from pytest_cudaperf.measure.comparison import Comparison
    from pytest_cudaperf.measure.measurement import Measurement
    from pytest_cudaperf.measure.timing import Budget
    from pytest_cudaperf.memory.protocol import PeakResult
    from pytest_cudaperf.run.hoststate import HostWait
    from pytest_cudaperf.settings import Settings

#: how often an inconclusive measurement is re-measured (with twice the time budget each time)
REMEASURE = 2


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


#: a host-bound call's kernels are profiled in a second pass over the same seeded calls when
#: the first pass's median is less precise than this (relative CI half-width): calls that draw
#: their operations at random (kornia's AutoAugment) differ from each other by ±40…90% while each
#: does the same work in every pass and process (why: docs/decisions.md, "How are the kernels of
#: calls that draw their work at random judged?")
REPEAT_KERNELS_ABOVE = 0.025


def budget_for(
    settings: Settings,
    perf: PerfOptions,
    warmup: float | None = None,
    min_time: float | None = None,
    max_time: float | None = None,
) -> Budget:
    """A measurement's budget: explicit arguments, else the marker's, else the run's settings;
    the precision follows the tolerance (a host-bound measurement's, the host tolerance)."""
    from pytest_cudaperf.measure.timing import Budget

    return Budget.for_tolerance(
        tolerance(settings, perf),
        host_tolerance=tolerance(settings, perf, "host"),
        warmup=warmup if warmup is not None else (perf.warmup or 0.05),
        min_time=min_time if min_time is not None else (perf.min_time or 0.0),
        max_time=max_time if max_time is not None else (perf.max_time or settings.max_time),
        rounds=perf.rounds or settings.rounds,
    )


def measure_judged(  # noqa: PLR0913 - the measurement loop's parts, passed by two fixtures
    test: TestContext,
    key: SeriesKey,
    run_once: Callable[[Budget], Measurement],
    budget: Budget,
    device_class: str,
    profiled: Profiled | None = None,
    peak: Callable[[], PeakResult | None] | None = None,
    state_probe: Callable[[], float] | None = None,
) -> Measurement:
    """Measure and judge against the baseline; re-measure an inconclusive result (twice the
    time budget each time, at most REMEASURE times; one left undecided for the host's state with
    the same budget, as often as the state wait allows); confirm a regression or an improvement by
    measuring again (on the CPU in a fresh process too);
    then attach the breakdown (update) or what it says changed (non-pass verdict). With
    ``peak``, the callable's peak memory is read after and judged as a series of its own.
    With ``state_probe`` (the launch reference timed now, ms), a host-bound change read while
    the host ran in another state than at recording waits for it before it is measured again
    (:func:`pytest_cudaperf.run.judging.host_back`), within ``--cudaperf-state-wait`` in all
    (measurements included): the host's states last seconds, and a re-measurement that meets
    the other state again is no less precise than the one before it, only unlucky.

    GPU code that synchronizes inside (``metric == "host"``) has its kernels timed apart after
    its first measurement and before its verdict: they are a series of their own
    (``time:kernels``), and the host time's verdict takes their time as the part of each call
    that does not follow the host's speed (:attr:`Measurement.fixed_ms`)."""
    kernels: tuple[JudgedRecord, Measurement] | None = None
    timed_apart = False

    def measured(given: Budget) -> Measurement:
        nonlocal kernels, timed_apart
        found = run_once(given)
        if found.metric != "host" or profiled is None or test.run.rank is not None:
            return found
        if not timed_apart:
            timed_apart = True
            kernels = kernels_judged(test, key, profiled, device_class)
        if kernels is None:
            return found
        return dataclasses.replace(found, fixed_ms=kernels[1].median_ms)

    wait = state_wait(test, state_probe)
    attempt = 0
    while True:
        measurement = measured(dataclasses.replace(budget, max_time=budget.max_time * 2**attempt))
        record = judge_time(test, key, measurement, device_class)
        if record.verdict.kind is not Kind.INCONCLUSIVE or measurement.traced:
            break
        again = _again(test, wait, record, measurement, attempt)
        if again is None:
            break
        attempt = again  # the same budget again where it was for the host's state
    if record.verdict.kind in (Kind.REGRESSION, Kind.IMPROVED) and not test.settings.update:
        first = record
        tries = 0
        while True:  # it may meet the host in another state: again, once the host is back
            record, measurement = confirm_time(test, first, measured(budget))
            if not record.verdict.other_state:
                break
            again = _again(test, wait, record, measurement, tries)
            if again is None:
                break
            tries = again
        lock = profiled.lock if profiled is not None else contextlib.nullcontext
        record, measurement = confirm_fresh(test, record, measurement, lock, wait)
    if profiled is not None and _may_profile(test):
        record = _with_breakdown(test, record, profiled)
    if kernels is not None and measurement.metric == "host":
        record = _with_kernels(record, kernels[0])
    add_time(test, record, measurement)
    if kernels is not None and measurement.metric == "host":
        add_time(test, *kernels)
    found = peak() if peak is not None else None
    if found is not None:
        perf = test.perf
        add_peak(test, key, found, device_class, perf.max_peak if perf is not None else None)
    return measurement


def _again(
    test: TestContext,
    wait: HostWait | None,
    record: JudgedRecord,
    measurement: Measurement,
    spent: int,
) -> int | None:
    """Whether to measure ``record`` again, having spent ``spent`` of the :data:`REMEASURE`
    re-measurements: None not to; else how many it will have spent. One that awaits the host
    (:attr:`Verdict.awaits_host`, with a ``wait``) is measured again once the host is back
    (:func:`pytest_cudaperf.run.judging.host_back`) and spends none: the wait's deadline bounds
    those; any other is measured again at once and spends one."""
    awaits = wait is not None and record.verdict.awaits_host
    if not awaits and spent == REMEASURE:
        return None
    if not host_back(test, wait, record, measurement):
        return None
    return spent if awaits else spent + 1


def kernels_judged(
    test: TestContext, key: SeriesKey, profiled: Profiled, device_class: str
) -> tuple[JudgedRecord, Measurement] | None:
    """The kernels of GPU code that synchronizes inside, judged as a series of their own
    (``time:kernels``): the device time each profiled call ran, precise where the host time
    around it is not; a regression confirmed by profiling again and, where the calls differ from
    each other (two passes: :func:`kernels_of_passes`), in a fresh process too: what such calls
    draw can differ between processes where it is not seeded. None (and a line saying why)
    where the profiler cannot run."""
    from pytest_cudaperf.breakdown.model import BreakdownUnavailable

    def once() -> Measurement | str:
        from pytest_cudaperf.breakdown.capture import kernel_times

        try:
            with profiled.lock():
                times = kernel_times(profiled.fn, profiled.device)
                first = kernels_measured(times, profiled.device)
                if first is None or first.rel_halfwidth <= REPEAT_KERNELS_ABOVE:
                    return first or "the profiler saw no call"
                again = kernel_times(profiled.fn, profiled.device, len(times), exact=True)
        except BreakdownUnavailable as exc:
            return str(exc)
        if len(again) != len(times):  # the profiler lost a call's range: the first pass alone
            return first
        return kernels_of_passes(times, again, profiled.device)

    found = once()
    if isinstance(found, str):
        test.state.details.append(f"{key.label()}kernels not timed apart: {found}")
        return None
    record = judge_time(test, key, found, device_class)
    if record.verdict.kind not in (Kind.REGRESSION, Kind.IMPROVED) or test.settings.update:
        return record, found
    again = once()
    if isinstance(again, str):
        return record, found
    record, found = confirm_time(test, record, again)
    return confirm_fresh(test, record, found, profiled.lock)


def kernels_measured(times: list[float], device: str) -> Measurement | None:
    """The kernels' measurement of one pass of profiled calls (``times``, ms); None without
    calls."""
    from pytest_cudaperf.measure.measurement import Measurement

    return Measurement.from_samples(times, metric="kernels", device=device) if times else None


def kernels_of_passes(first: list[float], second: list[float], device: str) -> Measurement:
    """The kernels' measurement of two passes over the same seeded calls, whose CI is how the
    passes agree (:func:`stats.repeated_median`): calls that draw their work at random differ
    from each other by far more than they differ from themselves."""
    from pytest_cudaperf.measure import stats
    from pytest_cudaperf.measure.measurement import Measurement

    median, ci = stats.repeated_median(first, second)
    pooled = Measurement.from_samples([*first, *second], metric="kernels", device=device)
    return dataclasses.replace(pooled, median_ms=median, ci_ms=ci, seeded_passes=2)


def _with_kernels(record: JudgedRecord, kernels: JudgedRecord) -> JudgedRecord:
    """A host-bound verdict that is not a pass says what the kernels did meanwhile: that they
    are unchanged (the host time moved), or how far they moved."""
    verdict, theirs = record.verdict, kernels.verdict
    if verdict.kind in (Kind.PASS, Kind.NEW) or theirs.ratio is None:
        return record
    from pytest_cudaperf.units import format_pct

    moved = format_pct(theirs.ratio - 1)
    said = "unchanged" if theirs.kind is Kind.PASS else theirs.kind.value
    message = f"{verdict.message}; kernels {said} ({moved} per call)"
    return dataclasses.replace(record, verdict=dataclasses.replace(verdict, message=message))


def compare_judged(
    test: TestContext,
    key: SeriesKey,
    comparison: Comparison,
    min_speedup: float | None,
    sides: tuple[Profiled, Profiled],
) -> None:
    """A same-run comparison judged against ``min_speedup``; a miss says which kernels differ
    between the two sides (candidate, reference), profiled then."""

    def explain() -> tuple[str, ...]:
        from pytest_cudaperf.breakdown.explain import explain_pair

        candidate, reference = sides
        with candidate.lock():
            return explain_pair(candidate.fn, reference.fn, candidate.device).lines

    may = _may_profile(test)
    add_comparison(test, key, comparison, min_speedup, explain if may else None)


def region_judged(
    test: TestContext, key: SeriesKey, measurement: Measurement, device_class: str
) -> None:
    """A timed region's measurement (taken by the test's own calls), judged and recorded."""
    add_time(test, judge_time(test, key, measurement, device_class), measurement)


#: verdicts whose failure (or report) says which kernels explain the change
_EXPLAINED = frozenset({Kind.REGRESSION, Kind.IMPROVED, Kind.INCONCLUSIVE})


def _with_breakdown(test: TestContext, record: JudgedRecord, profiled: Profiled) -> JudgedRecord:
    """On an update, the breakdown the baseline keeps; on a non-pass verdict, the diff against
    the stored one. Green runs profile nothing."""
    from pytest_cudaperf.breakdown import explain

    if test.settings.update:
        with profiled.lock():
            data, note = explain.record(profiled.fn, profiled.device)
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
        found = explain.explain(stored, profiled.fn, profiled.device)
    return dataclasses.replace(record, explanation=found.lines, compared=found.compared)
