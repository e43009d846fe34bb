"""The same-run comparison: a candidate and a reference measured in alternating batches on one
backend until the CI of the speedup (reference time / candidate time) is tight enough.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pytest_cudaperf.measure import stats
from pytest_cudaperf.measure.measurement import Measurement
from pytest_cudaperf.measure.timing import (
    Backend,
    Budget,
    Sampled,
    Sampler,
    SynchronizesInside,
    held,
)
from pytest_cudaperf.units import format_ms

#: the two callables of a same-run comparison: (candidate, reference)
Pair = tuple[Callable[[], object], Callable[[], object]]


def compare(
    backend: Backend,
    pair: Pair,
    budget: Budget,
    graph: bool = False,
    name: str | None = None,
) -> Comparison:
    """Interleaved same-run measurement of both callables of ``pair`` (candidate, reference);
    speedup = reference / candidate."""
    with held(backend):
        return _compared(backend, pair, budget, graph, name)


def _compared(
    backend: Backend, pair: Pair, budget: Budget, graph: bool, name: str | None
) -> Comparison:
    candidate, reference = pair
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
    clock = getattr(reference, "budget_clock", clock)  # [distributed] ranks agree on the clock
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
