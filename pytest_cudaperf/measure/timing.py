"""Measurement: the result type and the adaptive sampling loop.

A *sampler* produces batches of per-call times in milliseconds; :func:`run_adaptive` warms it up
until two consecutive batch medians agree (and torch.compile stopped compiling), then samples
until the distribution-free CI of the median is tight enough (bounded by a minimum sample count
and a time budget). :func:`measure` does that in independent rounds and records what the
samples say about the measurement's stability (:mod:`pytest_cudaperf.measure.instability`).
The backends live in :mod:`pytest_cudaperf.measure.cuda` and :mod:`pytest_cudaperf.measure.cpu`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from pytest_cudaperf.measure import instability, stats
from pytest_cudaperf.measure.dynamo import CompileWatch
from pytest_cudaperf.measure.tracing import active_tracer
from pytest_cudaperf.units import format_ms

#: samples kept in a Measurement (and so in reports and JSON); all are used for statistics
MAX_KEPT_SAMPLES = 2000
#: host time per call above this multiple of the device time is flagged ``host-bound``
HOST_BOUND_RATIO = 1.5
#: a host-bound measurement (GPU code that synchronizes inside) samples until the median of its
#: calls in reference loops is within :attr:`Budget.host_precision`, for at most this multiple
#: of the time budget: its verdict is judged at the host tolerance, so a call of 0.1 ms gets
#: there in a few hundredths of a second and one of 70 ms needs its seconds (why:
#: docs/decisions.md, "How long does a host-bound measurement sample?")
HOST_TIME_CAP = 2.0
#: the fewest calls a host-bound round stops at for its precision
HOST_MIN_SAMPLES = 20


@dataclass(frozen=True)
class Budget:
    """How long to warm up and sample, and how precise the median must get."""

    warmup: float = 0.05
    min_time: float = 0.0
    max_time: float = 1.0
    min_samples: int = 10
    precision: float = 0.005
    #: independent rounds (a fresh sampler each) whose samples are pooled; the CI of the median
    #: is widened to cover every round's median, so a state that holds for a whole round shows
    #: as noise instead of a false regression (why: docs/decisions.md, "Why does a measurement take
    #: three rounds?")
    rounds: int = 3
    #: the precision (relative CI half-width) of a host-bound measurement's median in
    #: reference loops: a fifth of the tolerance it is judged at
    host_precision: float = 0.02

    def per_round(self) -> Budget:
        """One round's share: the time split, the precisions relaxed by sqrt(rounds) (the
        pooled median is that much tighter), the minimum sample count split."""
        if self.rounds <= 1:
            return self
        return dataclasses.replace(
            self,
            min_time=self.min_time / self.rounds,
            max_time=self.max_time / self.rounds,
            min_samples=max(1, math.ceil(self.min_samples / self.rounds)),
            precision=self.precision * math.sqrt(self.rounds),
            host_precision=self.host_precision * math.sqrt(self.rounds),
            rounds=1,
        )

    def host_bound(self) -> Budget:
        """This budget for a host-bound measurement: the precision is :attr:`host_precision`
        (of the median in reference loops), at least :data:`HOST_MIN_SAMPLES` calls, at most
        :data:`HOST_TIME_CAP` times the time."""
        return dataclasses.replace(
            self,
            precision=self.host_precision,
            min_samples=max(self.min_samples, HOST_MIN_SAMPLES),
            max_time=self.max_time * HOST_TIME_CAP,
        )

    @classmethod
    def for_tolerance(
        cls, tolerance: float, host_tolerance: float | None = None, **kwargs: Any
    ) -> Budget:
        """Precision target: a tenth of the tolerance, between 0.05% and 1%; a host-bound
        measurement's, a fifth of ``host_tolerance`` (default: ``tolerance``)."""
        kwargs.setdefault("precision", min(0.01, max(0.0005, tolerance / 10)))
        kwargs.setdefault("host_precision", (host_tolerance or tolerance) / 5)
        return cls(**kwargs)


@dataclass(frozen=True)
class Measurement:
    """One measured quantity: per-call time statistics in milliseconds and how they were taken."""

    median_ms: float
    mean_ms: float
    min_ms: float
    max_ms: float
    iqr_ms: float
    ci_ms: tuple[float, float]
    samples_ms: tuple[float, ...]
    n: int
    metric: str = "wall"
    cache: str = "n/a"
    graph: bool = False
    host_ms_per_call: float | None = None
    device: str = "cpu"
    blocking: str = "none"
    #: how L2 was flushed before each sample: ``read+discard``, ``read``, ``torch.sum``, ``none``
    flush: str = "none"
    clocks: Mapping[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    cost_s: float = 0.0
    name: str | None = None
    #: the median of each independent round (see :attr:`Budget.rounds`)
    round_medians_ms: tuple[float, ...] = ()
    #: why this measurement's median may sit elsewhere in another process, one short reason
    #: each (:mod:`pytest_cudaperf.measure.instability`)
    instability: tuple[str, ...] = ()
    #: the relative spread those reasons imply; a verdict takes the larger of it and
    #: :attr:`rel_halfwidth` (:attr:`noise`)
    instability_noise: float = 0.0
    #: the SM clock (MHz) the CUDA stream blocker measured, median over the measurement's
    #: batches; None without the clocked Triton blocker (and on the CPU)
    sm_mhz: float | None = None
    #: frames torch.compile compiled while samples were taken (not during warm-up)
    recompiles: int = 0
    #: the time of a fixed reference beside the samples: how fast the host ran while measuring.
    #: The CPU backend's loop on the CPU (median of one timing per round and one at the end;
    #: :class:`pytest_cudaperf.measure.cpu.ReferenceProbe`); for GPU code that synchronizes
    #: inside (``metric == "host"``) the median launch reference timed before each call
    #: (:func:`pytest_cudaperf.measure.cuda.launch_reference`); None elsewhere
    reference_ms: float | None = None
    #: a tracer or profiler that ran while the samples were taken (``coverage's trace
    #: function``): the measurement is not the code's speed, and is neither judged nor recorded
    traced: str | None = None
    #: torch's intra-op threads while a CPU callable was measured (None: not set, not known)
    threads: int | None = None
    #: ``metric == "host"`` (GPU code that synchronizes inside): the per-call time in reference
    #: loops timed right beside each call (median, and its CI widened to every round's median),
    #: the quantity its verdict compares; None for any other metric
    in_loops: float | None = None
    in_loops_ci: tuple[float, float] | None = None
    #: ``metric == "host"``: the launch reference (ms) timed right before each sample kept in
    #: :attr:`samples_ms`, in the same order (which state of the host each call met); empty
    #: elsewhere
    references_ms: tuple[float, ...] = ()
    #: ``metric == "host"``: the part of each call (ms) that does not follow the host's speed,
    #: its kernels' device time timed apart (the call waits for them inside); None for any other
    #: metric and where the kernels could not be timed
    fixed_ms: float | None = None
    #: ``metric == "device"`` (CUDA): the GPU's time per launch of tiny kernels queued back to
    #: back in this process (:func:`pytest_cudaperf.measure.cuda.launch_gap_us`); None elsewhere
    launch_gap_us: float | None = None
    #: ``metric == "kernels"``: passes over the same seeded calls (2 where the calls differ from
    #: each other: the CI is how the passes agree, :func:`stats.repeated_median`)
    seeded_passes: int = 1

    @classmethod
    def from_samples(cls, samples_ms: list[float], **kwargs: Any) -> Measurement:
        """Statistics of ``samples_ms``; with ``round_medians_ms`` the CI of the median is
        widened to cover every round's median."""
        summary = stats.summarize(samples_ms)
        kept = samples_ms if len(samples_ms) <= MAX_KEPT_SAMPLES else samples_ms[-MAX_KEPT_SAMPLES:]
        low, high = summary.ci
        rounds = tuple(kwargs.get("round_medians_ms", ()))
        if rounds:
            low, high = min(low, *rounds), max(high, *rounds)
        return cls(
            median_ms=summary.median,
            mean_ms=summary.mean,
            min_ms=summary.min,
            max_ms=summary.max,
            iqr_ms=summary.iqr,
            ci_ms=(low, high),
            samples_ms=tuple(kept),
            n=summary.n,
            **kwargs,
        )

    @property
    def mode(self) -> str:
        """The comparison key part that says how it was measured: ``device/cold``, ``wall``."""
        if self.cache not in ("cold", "hot"):
            return self.metric
        return f"{self.metric}/{self.cache}"

    @property
    def rel_iqr(self) -> float:
        return stats.relative_iqr(self.iqr_ms, self.median_ms)

    @property
    def rel_halfwidth(self) -> float:
        """Half the CI's width relative to the median (the CI covers every round's median)."""
        return stats.relative_halfwidth(self.ci_ms, self.median_ms)

    @property
    def noise(self) -> float:
        """What a verdict should take as this measurement's relative half-width: the larger of
        :attr:`rel_halfwidth` and :attr:`instability_noise`. Not their sum: the CI already
        covers every round's median, so rounds that disagree would count twice (why:
        docs/decisions.md, "Why is a measurement's noise the larger of its CI half-width and its
        instability, not the sum?")."""
        return max(self.rel_halfwidth, self.instability_noise)

    @property
    def host_dominated(self) -> bool:
        """Whether the host's state can move this measurement between processes: a CPU
        measurement, a synchronized wall (or region) time, the time of GPU code that synchronizes
        inside (``host``) or device time whose launch latency could not be hidden. Device time
        behind the stream blocker, graph replays and the kernels' time time the GPU alone."""
        if self.device == "cpu" or self.metric in ("wall", "region", "host"):
            return True
        return self.metric == "device" and self.blocking == "none"

    @property
    def process_dependent(self) -> bool:
        """Whether a state of its process can move this measurement, so that a regression must
        hold in a fresh process: a host-dominated one, or kernels of calls that draw their work
        at random (two seeded passes), where a draw that is not seeded differs by process."""
        return self.host_dominated or self.seeded_passes > 1

    def how(self) -> str:
        """``device time, 40 samples, cold L2``."""
        what = {
            "device": "device time",
            "graph": "graph throughput",
            "wall": "wall time",
            "region": "region time",
            "host": "host-bound time in reference loops",
            "kernels": "kernels' device time",
        }.get(self.metric, self.metric)
        cache = f", {self.cache} L2" if self.cache in ("cold", "hot") else ""
        return f"{what}, {self.n} samples{cache}"

    def describe(self) -> str:
        """``1.234 ms median (device time, 40 samples, cold L2)``."""
        return f"{format_ms(self.median_ms)} median ({self.how()})"

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["ci_ms"] = list(self.ci_ms)
        data["samples_ms"] = list(self.samples_ms)
        data["warnings"] = list(self.warnings)
        data["clocks"] = dict(self.clocks)
        data["round_medians_ms"] = list(self.round_medians_ms)
        data["instability"] = list(self.instability)
        data["references_ms"] = list(self.references_ms)
        if self.in_loops_ci is not None:
            data["in_loops_ci"] = list(self.in_loops_ci)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Measurement:
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["ci_ms"] = tuple(values["ci_ms"])
        values["samples_ms"] = tuple(values["samples_ms"])
        values["warnings"] = tuple(values.get("warnings", ()))
        values["round_medians_ms"] = tuple(values.get("round_medians_ms", ()))
        values["instability"] = tuple(values.get("instability", ()))
        values["references_ms"] = tuple(values.get("references_ms", ()))
        if values.get("in_loops_ci") is not None:
            low, high = values["in_loops_ci"]
            values["in_loops_ci"] = (float(low), float(high))
        return cls(**values)


class SynchronizesInside(RuntimeError):  # noqa: N818
    """The callable waited for the GPU while the stream was blocked (CUDA backend)."""


class Sampler(Protocol):
    def batch(self) -> list[float]:
        """Take a batch of samples; each is milliseconds per call."""
        ...


#: batches the warm-up may add while torch.compile keeps compiling (dynamo stops recompiling a
#: frame after its recompile limit, 8 by default, so this bounds a callable that recompiles on
#: every call)
MAX_COMPILE_WARMUP_BATCHES = 20


@dataclass
class AdaptiveResult:
    samples: list[float]
    warmup_batches: int
    cost_s: float
    #: the last two warm-up batch medians when the warm-up ran out of time before they agreed
    unsettled: tuple[float, float] | None = None
    #: frames torch.compile compiled while the samples were taken
    recompiles: int = 0
    #: the precision of the median (relative CI half-width) the samples had reached when the
    #: time budget ran out short of the target; None when it was reached
    spent_at: float | None = None


def run_adaptive(
    sampler: Sampler,
    budget: Budget,
    clock: Callable[[], float] = time.perf_counter,
    compiles: CompileWatch | None = None,
    judged: Callable[[list[float]], list[float]] | None = None,
) -> AdaptiveResult:
    """Warm up until stable (and, with ``compiles``, until torch.compile stopped compiling),
    then sample until precise enough or out of time. ``judged`` maps the samples taken to the
    values whose median's precision is the target (a host-bound call's time in reference
    loops); without it, the samples themselves."""
    judge = judged or (lambda taken: taken)
    clock = getattr(sampler, "clock", clock)  # [distributed] ranks agree on the clock
    unsettled: tuple[float, float] | None = None
    begin = clock()
    previous: float | None = None
    warmup_batches = 0
    compiling_batches = 0
    while True:
        batch = sampler.batch()
        warmup_batches += 1
        summary = stats.summarize(batch)
        current = summary.median
        if compiles is not None and compiles.changed():
            compiling_batches += 1
            if compiling_batches <= MAX_COMPILE_WARMUP_BATCHES:
                previous = None  # a batch that compiled is no reference for the next one
                continue
        # stable: within 2%, or within the batch's own spread for noisy µs kernels
        if previous is not None and stats.stable(previous, current, max(0.02, summary.rel_iqr)):
            break
        if clock() - begin >= budget.warmup and warmup_batches >= 2 and previous is not None:
            if budget.warmup > 0:  # a warm-up asked for (not skipped) that ran out of time
                unsettled = (previous, current)
            break
        previous = current
    compiled_before = compiles.compiles() if compiles is not None else 0
    samples: list[float] = []
    spent_at: float | None = None
    start = clock()
    while True:
        samples.extend(sampler.batch())
        elapsed = clock() - start
        if elapsed >= budget.min_time and stats.precise_enough(
            stats.summarize(judge(samples)), budget.precision, budget.min_samples
        ):
            break
        if elapsed >= budget.max_time and len(samples) >= 3:
            reached = stats.summarize(judge(samples)).rel_halfwidth
            spent_at = reached if reached > budget.precision else None
            break
    recompiles = compiles.compiles() - compiled_before if compiles is not None else 0
    if compiles is not None:
        compiles.changed()  # the next round's warm-up starts from here
    return AdaptiveResult(
        samples, warmup_batches, clock() - begin, unsettled, max(0, recompiles), spent_at
    )


def _span(values: Sequence[float], fmt: Callable[[float], str]) -> str:
    low, high = fmt(min(values)), fmt(max(values))
    return low if low == high else f"{low}…{high}"


def budget_spent(budget: Budget, rounds: Sequence[AdaptiveResult], unit: str = "") -> str | None:
    """One line for the rounds (``budget`` is one round's) whose time budget ran out before
    their median (``unit``: of what, if not the samples) was as precise as asked, or None when
    every round got there."""
    short = [r for r in rounds if r.spent_at is not None]
    if not short:
        return None
    precision = _span([r.spent_at or 0.0 for r in short], lambda x: f"±{x:.2%}")
    samples = _span([len(r.samples) for r in short], lambda x: f"{x:.0f}")
    several = len(rounds) > 1
    return (
        f"time budget {budget.max_time:.3g} s{' per round' if several else ''} spent at "
        f"{precision} precision of the median{f' {unit}' if unit else ''}"
        f"{f' in {len(short)} of {len(rounds)} rounds' if several else ''} "
        f"(target ±{budget.precision:.2%}, {samples} samples)"
    )


@dataclass(frozen=True)
class Sampled:
    """What the sampling loop hands a backend to make a :class:`Measurement` of: the pooled
    samples (ms per call), the loop's warnings, its cost, the measurement's name and, with
    several rounds, each round's median."""

    samples: list[float]
    warnings: list[str]
    cost_s: float
    name: str | None
    round_medians_ms: tuple[float, ...] = ()
    #: the reference loop's time (ms) taken right before each sample, in the samples' order,
    #: where the sampler takes one (``references``: GPU code that synchronizes inside); the
    #: references of each round, beside its samples
    references: tuple[tuple[float, ...], ...] = ()


def over_references(samples: Sequence[float], references: Sequence[float]) -> list[float]:
    """Each sample over the reference timed right before it (the references as many as the
    samples; a reference that read no time is left out with its sample)."""
    return [t / r for t, r in zip(samples, references, strict=True) if r > 0]


def paired_references(sampled: Sampled) -> tuple[float, ...]:
    """The reference timed before each sample, in the samples' order; empty where the
    references do not pair with the samples one to one (a round that found out late took
    none)."""
    flat = tuple(r for round_refs in sampled.references for r in round_refs)
    return flat if len(flat) == len(sampled.samples) else ()


def kept_references(sampled: Sampled) -> tuple[float, ...]:
    """:func:`paired_references` of the samples :meth:`Measurement.from_samples` keeps (the
    last :data:`MAX_KEPT_SAMPLES`)."""
    return paired_references(sampled)[-MAX_KEPT_SAMPLES:]


def in_loops(sampled: Sampled) -> tuple[float, tuple[float, float]] | None:
    """The per-call time in reference loops: each sample over the reference loop timed right
    before it, their median and its CI widened to every round's median (as
    :meth:`Measurement.from_samples` widens the time's). None without references. The host's
    speed moves within and between processes; a loop beside each call moves with it (why:
    docs/decisions.md, "How is GPU code that synchronizes inside judged?")."""
    flat = paired_references(sampled)
    if not flat:
        return None
    ratios = over_references(sampled.samples, flat)
    if not ratios:
        return None
    summary = stats.summarize(ratios)
    low, high = summary.ci
    start, medians = 0, []
    for round_refs in sampled.references:
        part = over_references(sampled.samples[start : start + len(round_refs)], round_refs)
        start += len(round_refs)
        if part and len(sampled.references) > 1:
            medians.append(stats.summarize(part).median)
    return summary.median, (min([low, *medians]), max([high, *medians]))


class Backend(Protocol):
    def sampler(self, fn: Callable[[], object], graph: bool) -> Any: ...

    def recover(self, sampler: Any, restart: bool = False) -> None: ...

    def finish(self, sampler: Any, fn: Callable[[], object], sampled: Sampled) -> Measurement: ...

    def reset(self) -> None: ...

    def close(self) -> None: ...


def measure(
    backend: Backend,
    fn: Callable[[], object],
    budget: Budget,
    graph: bool = False,
    name: str | None = None,
) -> Measurement:
    """Adaptive measurement of ``fn`` on ``backend`` in ``budget.rounds`` independent rounds
    (each a fresh sampler, so each warms up and starts from the state the previous left), with
    what the rounds, the warm-up, the pooled samples and torch.compile say about its stability
    added to the backend's own findings."""
    traced = active_tracer()
    with _held(backend):
        measured, results, rounds, samples = _rounds(backend, fn, budget, graph, name, traced)
    worst_warmup = max(
        (f for r in results if (f := instability.warmup_unsettled(r.unsettled)) is not None),
        key=lambda f: f.noise,
        default=None,
    )
    return with_findings(
        measured,
        [
            instability.rounds_disagree(rounds),
            worst_warmup,
            instability.bimodal(samples),
            instability.recompiled(sum(r.recompiles for r in results)),
        ],
        recompiles=sum(r.recompiles for r in results),
    )


def _held(backend: Backend) -> AbstractContextManager[object]:
    """The state a backend measures in (the CPU backend's intra-op threads), held while it does."""
    hold = getattr(backend, "hold", None)
    return hold() if hold is not None else contextlib.nullcontext()


def _rounds(  # noqa: PLR0913 - measure()'s arguments, passed on
    backend: Backend,
    fn: Callable[[], object],
    budget: Budget,
    graph: bool,
    name: str | None,
    traced: str | None,
) -> tuple[Measurement, list[AdaptiveResult], list[list[float]], list[float]]:
    """The rounds of one measurement and the backend's measurement of their pooled samples."""
    per_round = budget.per_round()
    results: list[AdaptiveResult] = []
    compiles = CompileWatch.if_loaded()
    references: list[tuple[float, ...]] = []
    restarted = False
    while len(results) < max(1, budget.rounds):
        sampler = backend.sampler(fn, graph)
        beside = getattr(sampler, "references", None)
        this_round, judged = per_round, None
        if beside is not None:
            this_round, judged = per_round.host_bound(), _in_loops_of(sampler)
        try:
            results.append(run_adaptive(sampler, this_round, compiles=compiles, judged=judged))
        except SynchronizesInside:
            if not restarted and not getattr(sampler, "graph", False):
                # it synchronizes after all (the dry run drew a call that did not): every round
                # is measured host-bound, from the first, so that one series holds them all
                backend.recover(sampler, restart=True)
                restarted = True
                results.clear()
                references.clear()
                continue
            backend.recover(sampler)
            results.append(run_adaptive(sampler, this_round, compiles=compiles))
        beside = getattr(sampler, "references", None)
        if beside is not None:  # the samples are the last batches the sampler took
            references.append(tuple(beside[len(beside) - len(results[-1].samples) :]))
    if len(references) != len(results):  # a round that found out late: no loops to compare
        references = []
    rounds = [r.samples for r in results]
    spent = budget_spent(this_round, results, "in reference loops" if references else "")
    warnings = [spent] if spent else []
    if traced:
        warnings.append(f"measured under {traced}: not judged, not recorded")
    cost = sum(r.cost_s for r in results)
    samples = [x for r in rounds for x in r]
    medians = tuple(stats.summarize(r).median for r in rounds) if len(rounds) > 1 else ()
    sampled = Sampled(samples, warnings, cost, name, medians, tuple(references))
    measured = backend.finish(sampler, fn, sampled)
    return dataclasses.replace(measured, traced=traced), results, rounds, samples


def _in_loops_of(sampler: Any) -> Callable[[list[float]], list[float]]:
    """The samples taken so far over the references timed before them (the sampler's last)."""

    def judged(taken: list[float]) -> list[float]:
        refs = sampler.references[len(sampler.references) - len(taken) :]
        return over_references(taken, refs) or taken

    return judged


def with_findings(
    measured: Measurement,
    findings: list[instability.Finding | None],
    recompiles: int | None = None,
) -> Measurement:
    """``measured`` with ``findings`` added to its instability (after the backend's own)."""
    reasons, noise = instability.combine(findings)
    return dataclasses.replace(
        measured,
        instability=tuple(dict.fromkeys(measured.instability + reasons)),
        instability_noise=max(measured.instability_noise, noise),
        recompiles=measured.recompiles if recompiles is None else recompiles,
    )


def compare(  # noqa: PLR0913 - both callables and the cuda_timer.compare options
    backend: Backend,
    candidate: Callable[[], object],
    reference: Callable[[], object],
    budget: Budget,
    graph: bool = False,
    name: str | None = None,
) -> Comparison:
    """Interleaved same-run measurement of both; speedup = reference / candidate."""
    with _held(backend):
        return _compared(backend, candidate, reference, budget, graph, name)


def _compared(  # noqa: PLR0913 - compare()'s arguments, passed on
    backend: Backend,
    candidate: Callable[[], object],
    reference: Callable[[], object],
    budget: Budget,
    graph: bool,
    name: str | None,
) -> Comparison:
    cand_sampler = backend.sampler(candidate, graph)
    ref_sampler = backend.sampler(reference, graph)
    begin = time.perf_counter()
    try:
        cand_rounds, ref_rounds, warnings = run_interleaved(cand_sampler, ref_sampler, budget)
    except SynchronizesInside:
        backend.recover(cand_sampler)
        backend.recover(ref_sampler)
        cand_rounds, ref_rounds, warnings = run_interleaved(cand_sampler, ref_sampler, budget)
    cost = time.perf_counter() - begin
    speedup, low, high = speedup_of(cand_rounds, ref_rounds)
    cand, ref = (
        backend.finish(
            sampler,
            fn,
            Sampled(
                [x for r in rounds for x in r],
                warnings,
                cost / 2,
                f"{name}:{role}" if name else role,
            ),
        )
        for sampler, fn, rounds, role in (
            (cand_sampler, candidate, cand_rounds, "candidate"),
            (ref_sampler, reference, ref_rounds, "reference"),
        )
    )
    return Comparison(speedup, (low, high), cand, ref, len(cand_rounds))


@dataclass(frozen=True)
class Comparison:
    """Same-run speedup of a candidate over a reference: reference time / candidate time."""

    speedup: float
    ci: tuple[float, float]
    candidate: Measurement
    reference: Measurement
    rounds: int

    def describe(self) -> str:
        return (
            f"speedup {self.speedup:.3f}x (95% CI {self.ci[0]:.3f}…{self.ci[1]:.3f}, "
            f"{self.rounds} rounds): candidate {format_ms(self.candidate.median_ms)}, "
            f"reference {format_ms(self.reference.median_ms)}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "speedup": self.speedup,
            "ci": list(self.ci),
            "rounds": self.rounds,
            "candidate": self.candidate.to_dict(),
            "reference": self.reference.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Comparison:
        return cls(
            speedup=float(data["speedup"]),
            ci=(float(data["ci"][0]), float(data["ci"][1])),
            candidate=Measurement.from_dict(data["candidate"]),
            reference=Measurement.from_dict(data["reference"]),
            rounds=int(data["rounds"]),
        )


def run_interleaved(
    candidate: Sampler,
    reference: Sampler,
    budget: Budget,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[list[list[float]], list[list[float]], list[str]]:
    """Alternate batches of both samplers (warm-up first) until the speedup CI is tight."""
    clock = getattr(reference, "clock", clock)  # [distributed] ranks agree on the clock
    warnings: list[str] = []
    begin = clock()
    while clock() - begin < budget.warmup:
        candidate.batch()
        reference.batch()
    cand_rounds: list[list[float]] = []
    ref_rounds: list[list[float]] = []
    start = clock()
    while True:
        cand_rounds.append(candidate.batch())
        ref_rounds.append(reference.batch())
        elapsed = clock() - start
        if len(cand_rounds) >= max(5, budget.min_samples // 2) and elapsed >= budget.min_time:
            _, low, high = speedup_of(cand_rounds, ref_rounds)
            mid = (low + high) / 2
            if (high - low) / 2 / mid <= budget.precision:
                break
        if elapsed >= budget.max_time and len(cand_rounds) >= 3:
            warnings.append(
                f"time budget {budget.max_time:g} s spent before the speedup's "
                f"CI reached ±{budget.precision:.2%}"
            )
            break
    return cand_rounds, ref_rounds, warnings


def speedup_of(
    cand_rounds: list[list[float]], ref_rounds: list[list[float]]
) -> tuple[float, float, float]:
    cand = [stats.summarize(r).median for r in cand_rounds]
    ref = [stats.summarize(r).median for r in ref_rounds]
    return stats.paired_ratio(ref, cand)
