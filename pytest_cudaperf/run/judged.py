"""One judged measurement, start to end: :class:`JudgedMeasurement` measures a callable
(:class:`Target`) on its backend, judges it against the baseline, re-measures an inconclusive
result, confirms a regression (again, in cycle space, and where a process's state can move it in
a fresh process), attaches the kernel breakdown (on an update) or what it says changed (on a
non-pass verdict), and records it in the test's state. The fixtures build one and call
:meth:`JudgedMeasurement.run`; the policy is :mod:`pytest_cudaperf.verdict`'s, the judged record
:mod:`pytest_cudaperf.run.judging`'s, the sampling the backends' below (why: docs/decisions.md,
"Why is one judged measurement one object?"); the record and its failures join the test's state
here, once the path has settled it (:func:`add_time`, :func:`add_peak`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from pytest_cudaperf.keys import SeriesKey
from pytest_cudaperf.locks import Hold, free
from pytest_cudaperf.markers import PerfOptions
from pytest_cudaperf.report.model import FailureKind, JudgedRecord
from pytest_cudaperf.run.confirm import EXPLAINED, confirm_now, defer_host, defers_host, host_back
from pytest_cudaperf.run.context import Suspect, TestContext
from pytest_cudaperf.run.controls import offer
from pytest_cudaperf.run.hoststate import DEFER_AFTER_S, HostWait
from pytest_cudaperf.run.judging import (
    add_comparison,
    confirm_time,
    judge_measured,
    judge_time,
    measured_again,
    process_dependent,
    remeasures,
    tolerance,
    visible_device,
)
from pytest_cudaperf.run.speed_of_light import Declared, Measured, after_measurement
from pytest_cudaperf.verdict import Kind, budget_failure, kernels_clause

if TYPE_CHECKING:
    from pytest_cudaperf.devices.placement import DeviceContext
    from pytest_cudaperf.measure.comparison import Comparison
    from pytest_cudaperf.measure.measurement import Measurement
    from pytest_cudaperf.measure.timing import Backend, Budget
    from pytest_cudaperf.memory.protocol import PeakResult
    from pytest_cudaperf.settings import Settings

#: a host-bound call's kernels are profiled in a second pass over the same seeded calls when
#: the first pass's median is less precise than this (relative CI half-width): calls that draw
#: their operations at random (kornia's AutoAugment) differ from each other by ±40…90% while each
#: does the same work in every pass and process (why: docs/decisions.md, "How are the kernels of
#: calls that draw their work at random judged?")
REPEAT_KERNELS_ABOVE = 0.025


class PeakReader(Protocol):
    """What reads a callable's peak memory (:meth:`pytest_cudaperf.memory.CudaMemory.peak`)."""

    def peak(self, fn: Callable[[], object]) -> PeakResult | None: ...


class Backends:
    """A test's timing backends: on a CUDA device one per cache mode, built at first use (under
    the GPU's lock, as every use) and reused by each later measurement of the test, so that
    re-measuring does not rebuild the flush buffer and the blocker; elsewhere the one ``given``
    (the CPU's, a rank's; a test without ``cuda_device`` has only that). Beside them the
    reader of a measured callable's peak memory: on a CUDA device the caching allocator's
    (:class:`pytest_cudaperf.memory.CudaMemory`, built at first use), else the one given as
    ``memory`` (anything with ``peak(fn)``), else none."""

    def __init__(
        self,
        device: DeviceContext | None,
        given: Backend | None = None,
        memory: PeakReader | None = None,
    ) -> None:
        self._device = device
        self._given = given
        self._cuda: dict[str, Backend] = {}
        self._memory = memory
        #: whether a measurement on these backends reads its peak memory (:meth:`memory`): set
        #: here, so that a measurement reads a field and enters no module for it
        self.reads_peak = memory is not None or (device is not None and device.is_cuda)

    def get(self, cache: str) -> Backend:
        """The backend for a new measurement in ``cache`` mode: a CUDA one built at its first
        (new, nothing to reset), else the one kept, reset (the previous measurement's warnings
        and clock readings dropped)."""
        if self._given is not None:
            self._given.reset()
            return self._given
        if cache in self._cuda:
            self._cuda[cache].reset()
            return self._cuda[cache]
        from pytest_cudaperf.measure.cuda import CudaBackend

        ctx = self._device
        assert ctx is not None, "a CUDA backend needs the test's device"
        self._cuda[cache] = CudaBackend(ctx.device, cache, ctx.l2_bytes, ctx.uuid)
        return self._cuda[cache]

    def memory(self) -> PeakReader:
        """The peak memory's reader (:attr:`reads_peak`)."""
        if self._memory is None:
            from pytest_cudaperf.memory import CudaMemory

            self._memory = CudaMemory(pinned=False)
        return self._memory

    def built(self) -> dict[str, Backend]:
        """The CUDA backends built so far, by cache mode."""
        return dict(self._cuda)

    def close(self) -> None:
        """Release the CUDA backends' flush buffers and graph pools."""
        built, self._cuda = self._cuda, {}
        for backend in built.values():
            backend.close()


@dataclass(frozen=True)
class Times:
    """A measurement's time budget as its caller gave it (``cuda_timer(fn, warmup=...)``), in
    seconds; None: the marker's, else the run's (:func:`budget_for`)."""

    warmup: float | None = None
    min_time: float | None = None
    max_time: float | None = None


@dataclass(frozen=True)
class Target:
    """What a judged measurement times: ``fn`` on ``device``, sampled by the test's ``backends``
    in ``cache`` mode (``graph``: replayed as a CUDA graph), with the device to itself under
    ``lock``. ``profiled``: its kernels may be profiled (the breakdown; a host-bound call's
    kernels timed apart); ``peak``: its peak memory is read after its first time is measured
    (:meth:`read_peak`) and judged with it; ``probe``:
    the host's state now (the launch reference timed back to back, ms) for a host-bound change
    read in another state, None where there is none (the CPU, a rank); ``declared``: the work
    per call the caller declared, for its speed of light and energy where asked (None: neither,
    as for a whole test body); ``uuid``: the GPU's, as NVML knows it (the energy counter);
    ``times``: the time budget its caller gave (:meth:`JudgedMeasurement.run` derives the
    budget from them)."""

    fn: Callable[[], object]
    device: str
    lock: Hold = free
    backends: Backends | None = None
    cache: str = "hot"
    graph: bool = False
    name: str | None = None
    profiled: bool = True
    peak: bool = False
    probe: Callable[[], float] | None = None
    declared: Declared | None = None
    uuid: str = ""
    times: Times = Times()

    def measure(self, budget: Budget) -> Measurement:
        """One measurement within ``budget``, the device held (:func:`measure.timing.measure`)."""
        from pytest_cudaperf.measure.timing import measure

        assert self.backends is not None, "a target to measure needs its backends"
        with self.lock():
            backend = self.backends.get(self.cache)
            return measure(backend, self.fn, budget, self.graph, self.name)

    def read_peak(self) -> PeakResult | None:
        """The callable's peak memory, where asked (``peak``), read by the backends' reader
        (:meth:`Backends.memory`: the requested CUDA bytes of one call)."""
        if not self.peak:
            return None
        assert self.backends is not None, "a target that reads its peak needs its backends"
        return self.backends.memory().peak(self.fn)


def budget_for(
    settings: Settings,
    perf: PerfOptions,
    warmup: float | None = None,
    min_time: float | None = None,
    max_time: float | None = None,
) -> Budget:
    """A measurement's budget: explicit arguments, else the marker's, else the run's settings;
    the precision follows the tolerance (a host-bound measurement's, the host tolerance). With
    ``--cudaperf-round-of=N``, one round's share of an N-round budget (``Budget.per_round``)."""
    from pytest_cudaperf.measure.timing import Budget

    budget = Budget.for_tolerance(
        tolerance(settings, perf),
        host_tolerance=tolerance(settings, perf, "host"),
        warmup=warmup if warmup is not None else (perf.warmup or 0.05),
        min_time=min_time if min_time is not None else (perf.min_time or 0.0),
        max_time=max_time if max_time is not None else (perf.max_time or settings.max_time),
        rounds=perf.rounds or settings.rounds,
    )
    if settings.round_of:
        return dataclasses.replace(budget, rounds=settings.round_of).per_round()
    return budget


class JudgedMeasurement:
    """The path of one measured callable of one test (``key``, on ``device_class``): measure ->
    confirm -> judge -> record (:meth:`run`)."""

    def __init__(
        self, test: TestContext, key: SeriesKey, target: Target, device_class: str
    ) -> None:
        self.test = test
        self.key = key
        self.target = target
        self.device_class = device_class
        #: a host-bound call's kernels, judged as a series of their own (once)
        self._kernels: tuple[JudgedRecord, Measurement] | None = None
        self._timed_apart = False

    @functools.cached_property
    def wait(self) -> HostWait | None:
        """The host's state wait: None without a probe, with ``--cudaperf-state-wait=off`` and
        on an update (nothing is judged)."""
        settings = self.test.settings
        if self.target.probe is None or settings.state_wait <= 0 or settings.update:
            return None
        return HostWait(
            self.target.probe,
            settings.state_wait,
            spell=self.test.run.host_spell,
            device=self.target.lock,
        )

    @property
    def _may_profile(self) -> bool:
        """Breakdowns are profiled unless switched off, and never in a rank (its profiled calls
        could differ from the other ranks')."""
        test = self.test
        return self.target.profiled and test.run.rank is None and test.settings.breakdown != "off"

    def budget(self) -> Budget:
        """The budget the test's marker and settings give with the target's times
        (:func:`budget_for`)."""
        times, perf = self.target.times, self.test.perf or PerfOptions()
        return budget_for(self.test.settings, perf, times.warmup, times.min_time, times.max_time)

    # --- the path ------------------------------------------------------------------------------

    def run(self, budget: Budget | None = None) -> Measurement:
        """Measure within ``budget`` (by default the one the test's marker and settings give with
        the target's :attr:`Target.times`: :func:`budget_for`) and judge against the baseline;
        re-measure an inconclusive result (twice the time budget each time, at most
        :func:`~pytest_cudaperf.run.judging.remeasures` times; one left undecided for the host's
        state with the same budget, as often as the state wait allows); confirm a regression or
        an improvement by measuring again (in a fresh process too, where the process's state can
        move it); then attach the breakdown (update) or what it says changed (non-pass verdict),
        and record it. With
        ``--cudaperf-remeasure=off`` (``cudaperf record``'s measuring runs) nothing is measured
        again in this process: the first measurement's verdict stands as it reads (a regression
        still goes to the fresh process where one confirms). With the target's
        ``peak``, the callable's peak memory is read once, after the first time is measured, and
        judged as a series of its own in the same call of the verdict as that time
        (:func:`judge_measured`); it is recorded after the time. With a
        ``probe``, a host-bound change read while the host ran in another state than at recording
        waits for it before it is measured again (:meth:`host_back`), within
        ``--cudaperf-state-wait`` in all (measurements included): the host's states last seconds,
        and a re-measurement that meets the other state again is no less precise than the one before
        it, only unlucky.

        GPU code that synchronizes inside (``metric == "host"``) has its kernels timed apart
        after its first measurement and before its verdict: they are a series of their own
        (``time:kernels``), and the host time's verdict takes their time as the part of each
        call that does not follow the host's speed (:attr:`Measurement.fixed_ms`). Kernels that
        are not a pass say what changed as any verdict does, unless the host time's verdict
        already said it: one profile, one set of lines."""
        test = self.test
        budget = self.budget() if budget is None else budget
        measurement = self._measured(budget)
        found = self.target.read_peak()
        record, peak_judged = judge_measured(test, self.key, measurement, self.device_class, found)
        attempt, reads = 0, [(1, record.verdict)]
        while record.verdict.kind is Kind.INCONCLUSIVE and not measurement.traced:
            again = self._again(record, measurement, attempt)
            if again is None:
                break
            attempt = again  # the same budget again where it was for the host's state
            measurement = self._measured(
                dataclasses.replace(budget, max_time=budget.max_time * 2**attempt)
            )
            record = self.judge(measurement)
            reads.append((2**attempt, record.verdict))
        if len(reads) > 1:
            test.state.details.append(self.key.label() + measured_again(reads))
        if record.verdict.kind in (Kind.REGRESSION, Kind.IMPROVED) and not test.settings.update:
            record, measurement = self._confirmed(record, measurement, budget)
        if self._may_profile:
            record = self._with_breakdown(record)
        kernels = self._kernels if measurement.metric == "host" else None
        if kernels is not None:
            record = _with_kernels(record, kernels[0])
            if self._may_profile and not test.settings.update and not record.explanation:
                kernels = (self._with_breakdown(kernels[0], record.series), kernels[1])
        add_time(test, record, measurement)
        if kernels is not None:
            add_time(test, *kernels)
        if peak_judged is not None:
            add_peak(test, peak_judged, test.perf.max_peak if test.perf is not None else None)
        target = self.target
        if target.declared is not None:
            where = Measured(target.fn, target.device, self.device_class, target.uuid, target.lock)
            after_measurement(test, self.key, where, measurement, target.declared)
        return measurement

    def _measured(self, budget: Budget) -> Measurement:
        """One measurement, CUPTI attached first where a profile would leave it so
        (:func:`~pytest_cudaperf.breakdown.capture.attach_kept_cupti`); a host-bound one with
        its kernels' time (timed apart once)."""
        from pytest_cudaperf.breakdown.capture import attach_kept_cupti

        if profiled := (self.target.profiled and self.test.run.rank is None):
            attach_kept_cupti(self.target.device, self.target.lock)
        found = self.target.measure(budget)
        if found.metric != "host" or not profiled:
            return found
        if not self._timed_apart:
            self._timed_apart = True
            self._kernels = self.kernels(found.median_ms)
        if self._kernels is None:
            return found
        return dataclasses.replace(found, fixed_ms=self._kernels[1].median_ms)

    def judge(self, measurement: Measurement) -> JudgedRecord:
        """``measurement``'s record and verdict against the baseline."""
        return judge_time(self.test, self.key, measurement, self.device_class)

    def _confirmed(
        self, first: JudgedRecord, measured: Measurement, budget: Budget
    ) -> tuple[JudgedRecord, Measurement]:
        """A regression or an improvement (``first``, of ``measured``) measured again (again
        once the host is back where the re-measurement met it in another state), then in a fresh
        process; with ``--cudaperf-remeasure=off``, in a fresh process only."""
        if self.test.settings.remeasure == "off":
            return self.confirm_fresh(first, measured)
        tries = 0
        while True:
            record, measurement = confirm_time(self.test, first, self._measured(budget))
            if not record.verdict.other_state:
                break
            again = self._again(record, measurement, tries)
            if again is None:
                break
            tries = again
        return self.confirm_fresh(record, measurement)

    def _again(self, record: JudgedRecord, measurement: Measurement, spent: int) -> int | None:
        """Whether to measure ``record`` again, having spent ``spent`` of its re-measurements
        (:func:`~pytest_cudaperf.run.judging.remeasures`): None not to; else how many it will
        have spent. One that awaits the host (:attr:`Verdict.awaits_host`, with a wait) is
        measured again once the host is back (:meth:`host_back`) and spends none: the wait's
        deadline bounds those; where the test loop's fresh process can measure it instead
        (:func:`~pytest_cudaperf.run.confirm.defers_host`), the wait lasts at most
        ``DEFER_AFTER_S`` and, in vain, leaves it to that process
        (:func:`~pytest_cudaperf.run.confirm.defer_host`). Any other is measured again at once
        and spends one. None with
        ``--cudaperf-remeasure=off``, and for a host clock's time (``metric == "wall"``: the
        CPU's) whose verdict only the series' own noise holds (:attr:`Verdict.series_bound`): a
        more precise measurement of the same median cannot decide it, another draw of it would
        only be a second chance to pass (why: docs/decisions.md, "Why is a verdict that only the
        series' noise holds not measured again?")."""
        if self.test.settings.remeasure == "off":
            return None
        if record.verdict.series_bound and measurement.metric == "wall":
            return None
        awaits = self.wait is not None and record.verdict.awaits_host
        if not awaits and spent >= remeasures(record.verdict):
            return None
        defer = awaits and defers_host(self.test)
        if not self.host_back(record, measurement, DEFER_AFTER_S if defer else None):
            if defer:  # its test's fresh process measures it instead
                defer_host(self.test, record, measurement, self.target.lock, self.target.probe)
            return None
        return spent if awaits else spent + 1

    def host_back(
        self, record: JudgedRecord, measured: Measurement, within_s: float | None = None
    ) -> bool:
        """Whether to measure ``record`` again (:func:`pytest_cudaperf.run.confirm.host_back`:
        at once, unless it awaits the host and the wait can wait)."""
        return host_back(self.test.state.details, self.wait, record, measured, within_s)

    def confirm_fresh(
        self,
        first: JudgedRecord,
        measured: Measurement,
        refine: Callable[[JudgedRecord, Measurement], JudgedRecord] | None = None,
    ) -> tuple[JudgedRecord, Measurement]:
        """A regression (or improvement) of a measurement that a state of its process can move
        (the CPU's, GPU code that synchronizes inside and its kernels, device time of several
        launches: :func:`pytest_cudaperf.run.judging.process_dependent`) that held in this
        process stands only if a fresh process measures one too
        (:class:`pytest_cudaperf.run.child.FreshProcess`), on the same GPU: a slow (or fast)
        state of one process is not the code's. The fresh process measures under the target's
        lock (the device to itself, as any measurement). Where no fresh measurement can be had,
        the regression stands and a line under it says why. A fresh process that met the host
        in another state than at recording (:attr:`Verdict.other_state`) is followed by another,
        up to :data:`FRESH_STATE_TRIES`, once the wait saw the host come back (:meth:`host_back`).

        Where the test loop defers (:class:`pytest_cudaperf.run.context.Deferred`), the verdict
        of this process is returned as it is and the suspect waits for the loop's one fresh
        process (:func:`pytest_cudaperf.run.confirm.confirm_deferred`), which then applies the
        same rule and ``refine`` (what the caller does to a confirmed record) to the record;
        elsewhere :func:`pytest_cudaperf.run.confirm.confirm_now` applies it at once."""
        test = self.test
        fresh = test.run.fresh
        judged = first.verdict.kind in (Kind.REGRESSION, Kind.IMPROVED)
        if fresh is None or not judged or not process_dependent(test, first, measured):
            return first, measured
        target = self.target
        env = visible_device(measured.device)
        suspect = Suspect(test, first, measured, env, target.lock, target.probe, refine)
        deferred = test.run.deferred
        if deferred is not None and deferred.defers(test.nodeid):
            deferred.suspects.append(suspect)
            return first, measured
        return confirm_now(suspect, fresh, self.host_back)

    # --- kernels and breakdowns ----------------------------------------------------------------

    def kernels(self, each_ms: float | None = None) -> tuple[JudgedRecord, Measurement] | None:
        """The kernels of GPU code that synchronizes inside, judged as a series of their own
        (``time:kernels``): the device time each profiled call ran, precise where the host time
        around it is not (two passes where the calls differ from each other:
        :func:`~pytest_cudaperf.measure.measurement.kernels_of_passes`); a regression confirmed
        by profiling again and in a fresh process (:attr:`Measurement.process_dependent`). None
        (and a line
        saying why) where the profiler cannot run. ``each_ms``: one call's time, where measured
        (it sizes the profiled pass; else a call is timed for it)."""
        found = self._kernel_pass(each_ms)
        if isinstance(found, str):
            self.test.state.details.append(f"{self.key.label()}kernels not timed apart: {found}")
            return None
        record = self.judge(found)
        if record.verdict.kind not in (Kind.REGRESSION, Kind.IMPROVED) or self.test.settings.update:
            return record, found
        again = self._kernel_pass(each_ms)
        if isinstance(again, str):
            return record, found
        record, found = confirm_time(self.test, record, again)
        return self.confirm_fresh(record, found)

    def _kernel_pass(self, each_ms: float | None = None) -> Measurement | str:
        """The kernels' time of the profiled calls (two passes where the first is imprecise; the
        first alone where the second lost a call or read no work), or why there is none."""
        from pytest_cudaperf.breakdown.model import BreakdownUnavailable
        from pytest_cudaperf.breakdown.percall import kernel_times
        from pytest_cudaperf.measure.measurement import kernels_measured, kernels_of_passes

        fn, device = self.target.fn, self.target.device
        try:
            with self.target.lock():
                each_s = each_ms / 1e3 if each_ms else None
                times = kernel_times(fn, device, each_s=each_s)
                first = kernels_measured(times, device)
                if first is None or first.rel_halfwidth <= REPEAT_KERNELS_ABOVE:
                    return first or "the profiler saw no call"
                try:
                    again = kernel_times(fn, device, len(times), exact=True)
                except BreakdownUnavailable:  # the second pass read no work: the first alone
                    return first
        except BreakdownUnavailable as exc:
            return str(exc)
        if len(again) != len(times):  # the profiler lost a call's range: the first pass alone
            return first
        return kernels_of_passes(times, again, device)

    def _with_breakdown(self, record: JudgedRecord, stored_with: str | None = None) -> JudgedRecord:
        """On an update (and with ``--cudaperf-breakdown=always`` in any run), the breakdown the
        baseline keeps, on the record; on a non-pass verdict of a run that does not update, the
        diff against the stored one, ``record``'s series' or ``stored_with``'s (a host-bound
        call's kernels diff their host time's and keep none): one profile for both. Green runs
        profile nothing unless ``always``, nor do calls that ran no torch op (``ran_no_op``)."""
        from pytest_cudaperf.breakdown import explain

        test, fn, device = self.test, self.target.fn, self.target.device
        if explain.ran_no_op(device):
            return record
        settings = test.settings
        keeps = stored_with is None and (settings.update or settings.breakdown == "always")
        stored: object = None
        diffs = not settings.update and record.verdict.kind in EXPLAINED
        if diffs:
            series = stored_with or record.series
            entry = test.run.store.lookup(record.device_class, record.key, series)
            stored = entry.breakdown if entry is not None else None
            diffs = stored is not None or record.verdict.kind is not Kind.INCONCLUSIVE
        if not keeps and not diffs:
            return record
        with self.target.lock():
            current = explain.taken(fn, device)
        if keeps and isinstance(current, str):
            test.state.details.append(f"{record.key.label()}no kernel breakdown: {current}")
        elif keeps and not isinstance(current, str):
            kept = dataclasses.replace(record.record, breakdown=current.to_json())
            record = dataclasses.replace(record, record=kept)
        if not diffs:
            return record
        found = explain.explain(stored, current)
        return dataclasses.replace(record, explanation=found.lines, compared=found.compared)


def _with_kernels(record: JudgedRecord, kernels: JudgedRecord) -> JudgedRecord:
    """A host-bound verdict that is not a pass says what the kernels did meanwhile: that they
    are unchanged (the host time moved), or how far they moved."""
    verdict = record.verdict
    clause = kernels_clause(kernels.verdict)
    if verdict.kind in (Kind.PASS, Kind.NEW) or clause is None:
        return record
    message = verdict.message + clause
    return dataclasses.replace(record, verdict=dataclasses.replace(verdict, message=message))


def add_time(test: TestContext, record: JudgedRecord, m: Measurement) -> None:
    """Record a judged time; a regression, a missing baseline under --cudaperf-strict, or a
    median over ``max_ms`` fails the test. A pass may serve the loop's fresh process as a control
    (:func:`pytest_cudaperf.run.controls.offer`)."""
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
    over = budget_failure(m.median_ms, perf.max_ms if perf else None, "ms", m.how(), subject)
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
    offer(test, record, m)  # a pass: a control for the loop's fresh process


def add_peak(test: TestContext, record: JudgedRecord, max_peak: int | None) -> None:
    """Record a judged peak (:func:`judge_measured`); a regression or a peak over ``max_peak``
    fails the test."""
    state, key, peak = test.state, record.key, record.peak
    assert peak is not None, "a peak's record keeps its reading"
    state.records.append(record)
    if record.verdict.kind is Kind.REGRESSION and not test.settings.update:
        state.fail(FailureKind.REGRESSION, f"{key.label()}{record.verdict.message}")
    check_peak(test, key, peak, max_peak)
    if peak.alloc_retries or peak.ooms:
        state.details.append(
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
    over = budget_failure(peak.peak_bytes, limit, "bytes", where)
    if over:
        test.state.fail(FailureKind.MEMORY, f"{key.label()}{over}")


def compare_judged(
    test: TestContext,
    key: SeriesKey,
    comparison: Comparison,
    min_speedup: float | None,
    sides: tuple[Target, Target],
) -> None:
    """A same-run comparison judged against ``min_speedup``; a miss says which kernels differ
    between the two sides (candidate, reference), profiled then."""

    def explain() -> tuple[str, ...]:
        from pytest_cudaperf.breakdown.explain import explain_pair, ran_no_op

        candidate, reference = sides
        if ran_no_op(candidate.device):
            return ()
        with candidate.lock():
            return explain_pair(candidate.fn, reference.fn, candidate.device).lines

    may = test.run.rank is None and test.settings.breakdown != "off"
    add_comparison(test, key, comparison, min_speedup, explain if may else None)
