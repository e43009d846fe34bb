"""The adaptive sampling loop: the budget, the samplers' protocol, and measure() in rounds.

A *sampler* produces batches of per-call times in milliseconds; :func:`run_adaptive` warms it up
until two consecutive batch medians agree (and torch.compile stopped compiling), then samples
until the distribution-free CI of the median is tight enough (bounded by a minimum sample count
and a time budget). :func:`measure` does that in independent rounds and records what the
samples say about the measurement's stability (:mod:`pytest_cudaperf.measure.instability`).
The backends live in :mod:`pytest_cudaperf.measure.cuda` and :mod:`pytest_cudaperf.measure.cpu`;
the result type in :mod:`pytest_cudaperf.measure.measurement`, the same-run comparison in
:mod:`pytest_cudaperf.measure.comparison`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from pytest_cudaperf.measure import instability, stats
from pytest_cudaperf.measure.dynamo import CompileWatch
from pytest_cudaperf.measure.measurement import MAX_KEPT_SAMPLES, Measurement
from pytest_cudaperf.measure.tracing import active_tracer

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
    loops); without it, the samples themselves. A sampler's ``budget_clock`` (seconds: the
    distributed sampler's, which the ranks agree on) replaces ``clock``."""
    judge = judged or (lambda taken: taken)
    clock = getattr(sampler, "budget_clock", clock)  # [distributed] ranks agree on the clock
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
    with held(backend):
        measured, results, rounds, samples = _rounds(backend, fn, budget, graph, name)
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


def held(backend: Backend) -> AbstractContextManager[object]:
    """The state a backend measures in (the CPU backend's intra-op threads), held while it does."""
    hold = getattr(backend, "hold", None)
    return hold() if hold is not None else contextlib.nullcontext()


def _rounds(
    backend: Backend,
    fn: Callable[[], object],
    budget: Budget,
    graph: bool,
    name: str | None,
) -> tuple[Measurement, list[AdaptiveResult], list[list[float]], list[float]]:
    """The rounds of one measurement and the backend's measurement of their pooled samples,
    labelled with the tracer it ran under (:func:`active_tracer`), if any."""
    traced = active_tracer()
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
