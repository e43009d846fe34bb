"""Judging: a measurement, the baseline and the test's limits become a judged record and, when
the test's body passed, the failures of that test (in its :class:`ItemState`).

The comparison itself is :func:`pytest_cudaperf.verdict.judge_all`, called in one place
(:func:`_judge_all`): the series one measurement of a callable measured (its time and, on CUDA,
its peak memory) are judged together (:func:`judge_measured`); a confirmation calls
:func:`pytest_cudaperf.verdict.confirm` in one (:func:`confirm_time`). The path of one measured
callable that calls them (measure, judge, confirm, record) is
:class:`pytest_cudaperf.run.judged.JudgedMeasurement`, which records a time and a peak and their
failures at the end of that path (:func:`pytest_cudaperf.run.judged.add_time`,
:func:`pytest_cudaperf.run.judged.add_peak`); a comparison and a leak are recorded here. The
functions here run in the process that runs the test.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple

from pytest_cudaperf.devices.probe import environment
from pytest_cudaperf.keys import SeriesKey
from pytest_cudaperf.markers import PerfOptions
from pytest_cudaperf.observation import Observation, as_recorded, queued_launches
from pytest_cudaperf.report.model import (
    ComparisonOutcome,
    FailureKind,
    JudgedRecord,
    LeakOutcome,
    OtherDevice,
)
from pytest_cudaperf.run.context import TestContext
from pytest_cudaperf.seeding import written
from pytest_cudaperf.series import Record, Recording, metric_of
from pytest_cudaperf.units import LOOPS, format_pct
from pytest_cudaperf.verdict import Verdict, confirm, judge_all

if TYPE_CHECKING:
    from pytest_cudaperf.measure.comparison import Comparison
    from pytest_cudaperf.measure.measurement import Measurement
    from pytest_cudaperf.memory import LeakResult, PeakResult
    from pytest_cudaperf.settings import Settings

#: default tolerance for peak memory: the requested-bytes peak is bit-identical across runs
MEMORY_TOLERANCE = 0.01


#: how often an inconclusive measurement is re-measured (with twice the time budget each time)
REMEASURE = 2
#: how often one that can only be a speed-up is (``Verdict.speed_up_only``; why: docs/decisions.md,
#: "Why is an undecided speed-up measured again only once?")
REMEASURE_SPEED_UP = 1


def remeasures(verdict: Verdict) -> int:
    """How often an INCONCLUSIVE ``verdict`` is measured again at most (a measured callable's
    time, pedantic's rounds): :data:`REMEASURE`, a speed-up whose CI rules out a regression
    (:attr:`Verdict.speed_up_only`) :data:`REMEASURE_SPEED_UP`."""
    return REMEASURE_SPEED_UP if verdict.speed_up_only else REMEASURE


def tolerance(settings: Settings, perf: PerfOptions | None, metric: str = "device") -> float:
    """The marker's tolerance, else the run's: its host tolerance for a host-bound time
    (``metric == "host"``: GPU code that synchronizes inside), its tolerance otherwise."""
    if perf is not None and perf.tolerance is not None:
        return perf.tolerance
    return settings.host_tolerance if metric == "host" else settings.tolerance


def _device_of(test: TestContext) -> str:
    return test.device.name if test.device is not None else "cpu"


def record_env(test: TestContext) -> dict[str, object]:
    """The environment of the test's records (:func:`pytest_cudaperf.devices.probe.environment`
    on its device), with the seed its random draws started from."""
    return environment(test.run.probe, _device_of(test), seed=written(test.settings.seed))


def observation(m: Measurement, env: Mapping[str, object]) -> Observation:
    """The current side of a time's verdict: the median, its CI half-width, the noise the
    measurement's instability implies (the verdict takes the larger of the two) and why, the
    SM clock while it sampled, and the host's reference-loop time (CPU). A host-bound GPU
    measurement is compared in reference loops: its time over the loop beside each call, with
    that ratio's CI; the host's speed is in it already."""
    if m.metric == "host" and m.in_loops is not None and m.in_loops_ci is not None:
        halfwidth = (m.in_loops_ci[1] - m.in_loops_ci[0]) / 2 / m.in_loops
        return Observation(
            m.in_loops,
            halfwidth,
            env=env,
            unit=LOOPS,
            reference_ms=m.reference_ms,
            traced=m.traced,
            fixed_ms=m.fixed_ms,
        )
    return Observation(
        m.median_ms,
        m.rel_halfwidth,
        m.instability_noise,
        m.instability,
        m.sm_mhz,
        env,
        reference_ms=m.reference_ms,
        traced=m.traced,
        launch_gap_us=m.launch_gap_us,
    )


class _Observed(NamedTuple):
    """One series of a measurement as measured, before its verdict: its record, the current
    side of the verdict and the tolerance it is judged at."""

    record: Record
    obs: Observation
    allowed: float


def _judge_all(test: TestContext, measured: Sequence[_Observed]) -> list[JudgedRecord]:
    """The one call of the verdict (:func:`pytest_cudaperf.verdict.judge_all`): each measured
    record against its baseline entry, in order, with the same series on other device classes
    beside it. A host-bound time measured with the host as at its recording ends the run's
    spell of the other state (:meth:`pytest_cudaperf.run.hoststate.Spell.met_back`)."""
    store = test.run.store
    asked = []
    for m in measured:
        klass, key, series = m.record.device_class, m.record.key, m.record.series
        entry = store.lookup(klass, key, series)
        if as_recorded(m.obs, entry):
            test.run.host_spell.met_back()
        asked.append((m.obs, entry, m.allowed, klass))
    judged = []
    for m, verdict in zip(measured, judge_all(asked), strict=True):
        klass, key, series = m.record.device_class, m.record.key, m.record.series
        others = tuple(OtherDevice(c, float(e.value)) for c, e in store.others(klass, key, series))
        judged.append(JudgedRecord(m.record, verdict, others=others))
    return judged


def _time_observed(
    test: TestContext,
    key: SeriesKey,
    m: Measurement,
    device_class: str,
    env: Mapping[str, object],
) -> _Observed:
    """A time's record and the current side of its verdict (``env``: the record's environment,
    before the measurement's threads join it)."""
    env = dict(env)
    if m.threads is not None:  # the threads it was measured with, not the process's
        env["torch_threads"] = str(m.threads)
    obs = observation(m, env)
    series = f"time:{m.mode}"
    allowed = tolerance(test.settings, test.perf, metric_of(series, obs.unit))
    # a host-bound time is recorded in loops: its value, noise and CI are the observation's, and
    # its rounds and clock (in ms) are not kept
    loops = obs.unit == LOOPS
    assert not loops or m.in_loops_ci is not None  # what made the observation one in loops
    recording = Recording(
        date=str(env["date"]),
        median=obs.value if loops else m.median_ms,
        noise=obs.noise if loops else m.noise,
        n=m.n,
        rounds=() if loops else m.round_medians_ms,
        sm_mhz=None if loops else m.sm_mhz,
        unstable=() if loops else m.instability,
        ci=m.in_loops_ci if loops else m.ci_ms,
        reference_ms=m.reference_ms,
        launch_gap_us=m.launch_gap_us,
        fixed_ms=m.fixed_ms if loops else None,
    )
    record = Record(key, series, device_class, obs.unit, recording, env, None, allowed)
    return _Observed(record, obs, allowed)


def _peak_observed(
    key: SeriesKey, peak: PeakResult, device_class: str, env: Mapping[str, object]
) -> _Observed:
    """A peak's record (``memory:peak``, bytes) and the current side of its verdict: exact, at
    :data:`MEMORY_TOLERANCE`."""
    size = peak.peak_bytes
    recording = Recording(str(env["date"]), size, 0.0, 1, ci=(size, size))
    record = Record(key, "memory:peak", device_class, "bytes", recording, dict(env))
    obs = Observation(float(size), env=dict(env), unit="bytes")
    return _Observed(record, obs, MEMORY_TOLERANCE)


def judge_measured(
    test: TestContext,
    key: SeriesKey,
    m: Measurement,
    device_class: str,
    peak: PeakResult | None = None,
) -> tuple[JudgedRecord, JudgedRecord | None]:
    """The series one measurement of a callable measured, judged together in one call of the
    verdict: its time (the record keeps the measurement's fields for the reports) and, where
    it was read, its peak memory (a ``memory:peak`` series; None where not read)."""
    env = record_env(test)
    measured = [_time_observed(test, key, m, device_class, env)]
    if peak is not None:
        measured.append(_peak_observed(key, peak, device_class, env))
    judged = _judge_all(test, measured)
    time = dataclasses.replace(judged[0], measurement=m)
    return time, (dataclasses.replace(judged[1], peak=peak) if peak is not None else None)


def measured_again(reads: Sequence[tuple[int, Verdict]]) -> str:
    """What an INCONCLUSIVE time read each time it was measured, the first measurement first,
    each with its budget as a multiple of the first's: ``measured again twice: +6.2%
    inconclusive, then +4.0% inconclusive (2x the budget), +3.1% pass (4x the budget)``."""

    def read(factor: int, verdict: Verdict) -> str:
        change = format_pct(verdict.ratio - 1) if verdict.ratio is not None else "no ratio"
        budget = f" ({factor}x the budget)" if factor > 1 else ""
        return f"{change} {verdict.kind.value}{budget}"

    times = {1: "once", 2: "twice"}.get(len(reads) - 1, f"{len(reads) - 1} times")
    first, *later = reads
    return f"measured again {times}: {read(*first)}, then {', '.join(read(*r) for r in later)}"


def judge_time(
    test: TestContext, key: SeriesKey, m: Measurement, device_class: str
) -> JudgedRecord:
    """A time's record and verdict (the measurement's fields kept for the reports)."""
    return judge_measured(test, key, m, device_class)[0]


def judge_peak(
    test: TestContext, key: SeriesKey, peak: PeakResult, device_class: str
) -> JudgedRecord:
    """A peak's record and verdict alone (a ``memory:peak`` series)."""
    env = record_env(test)
    (judged,) = _judge_all(test, [_peak_observed(key, peak, device_class, env)])
    return dataclasses.replace(judged, peak=peak)


def confirm_time(
    test: TestContext, first: JudgedRecord, again: Measurement, where: str = ""
) -> tuple[JudgedRecord, Measurement]:
    """A regression (or an improvement) stands only if a re-measurement is one too, and in cycle
    space where both sides know their SM clock (:func:`pytest_cudaperf.verdict.confirm`). The
    record keeps the re-measurement either way: the verdict's ratio and CI are its (the table's
    baseline column is the value over that ratio). ``where``: where the re-measurement was taken,
    when not here."""
    entry = test.run.store.lookup(first.device_class, first.key, first.series)
    verdict = confirm(
        first.verdict, observation(again, first.env), entry, first.device_class, where
    )
    second = judge_time(test, first.key, again, first.device_class)
    return dataclasses.replace(second, verdict=verdict), again


#: the launches per call (kernels and copies, by the recorded breakdown) from which device time's
#: regression must hold in a fresh process too (:func:`process_dependent`)
FRESH_MIN_LAUNCHES = 2


def process_dependent(test: TestContext, first: JudgedRecord, measured: Measurement) -> bool:
    """Whether a state of its process can move ``measured`` (of ``first``'s series), so that a
    regression (or improvement) must hold in a fresh process: :attr:`Measurement.process_dependent`,
    or device time of a call whose recorded breakdown launches :data:`FRESH_MIN_LAUNCHES` or
    more kernels and copies (the GPU's time between queued launches moves for a whole process:
    docs/decisions.md, "Why must device time of several launches regress in a fresh process
    too?"). A series recorded without a breakdown is confirmed where it was measured."""
    if measured.process_dependent:
        return True
    if measured.metric != "device":
        return False
    entry = test.run.store.lookup(first.device_class, first.key, first.series)
    launches = None if entry is None else queued_launches(entry)
    return launches is not None and launches >= FRESH_MIN_LAUNCHES


def visible_device(device: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment that shows a fresh process this process's GPU as its only one (an xdist
    worker measures on GPU *i mod n*; a child without xdist would take GPU 0): ``cuda:N`` ->
    ``CUDA_VISIBLE_DEVICES`` = the N-th visible device. Nothing for the CPU."""
    if not device.startswith("cuda"):
        return {}
    index = int(device.partition(":")[2] or 0)
    visible = (os.environ if environ is None else environ).get("CUDA_VISIBLE_DEVICES")
    listed = [v.strip() for v in visible.split(",")] if visible else []
    return {"CUDA_VISIBLE_DEVICES": listed[index] if index < len(listed) else str(index)}


def add_comparison(
    test: TestContext,
    key: SeriesKey,
    comparison: Comparison,
    min_speedup: float | None,
    explain: Callable[[], Sequence[str]] | None = None,
) -> None:
    """A same-run comparison; a ``min_speedup`` miss fails the test and, with ``explain``, says
    which kernels differ between the two sides (the lines it returns)."""
    test.state.comparisons.append(ComparisonOutcome(key, comparison))
    if min_speedup is None:
        return
    text = f"{key.label()}{comparison.describe()}"
    if comparison.ci[1] < min_speedup:
        test.state.fail(FailureKind.SPEEDUP, f"{text} < min_speedup {min_speedup:g}")
        if explain is not None:
            test.state.details.extend(f"{key.label()}{line}" for line in explain())
    elif comparison.ci[0] < min_speedup:
        test.state.details.append(
            f"{key.label()}inconclusive against min_speedup {min_speedup:g}: "
            f"{comparison.describe()}"
        )


def add_leak(test: TestContext, key: SeriesKey, result: LeakResult, fail: bool = True) -> None:
    """Record a leak check's readings; a leak fails the test with its one line and its sites
    (unless ``fail`` is false: the leak sweep's report mode only lists it)."""
    test.state.leak = LeakOutcome(
        key=key,
        series=result.series,
        leaks=result.leaks,
        tolerance=result.tolerance,
        settle=tuple(result.settle_steps),
        sites=tuple(result.sites),
    )
    message = result.message()
    if message and fail:
        test.state.fail(FailureKind.LEAK, message)
        test.state.details.extend(result.sites)
