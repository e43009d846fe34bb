"""Measurement in a rank: samples aligned across ranks (:class:`RankSampler`), so that every
rank takes the same stop decisions and a collective inside the timed code never waits for a rank
that stopped; the backend ``cuda_timer`` uses in a rank (:class:`RankBackend`)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pytest_cudaperf.distributed.rank import control_group

if TYPE_CHECKING:
    from pytest_cudaperf.measure.measurement import Measurement
    from pytest_cudaperf.measure.timing import Sampled


def _all_max(values: list[float]) -> list[float]:
    import torch
    import torch.distributed as dist

    tensor = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=control_group())
    return [float(v) for v in tensor.tolist()]


class RankSampler:
    """Samples aligned across ranks: a barrier starts each batch, every rank times the same
    number of calls per sample, and each sample returned is the slowest rank's.
    ``budget_clock`` is the agreed (max) elapsed time, so every rank's measurement loop stops at
    the same batch."""

    def __init__(self, fn: Callable[[], object], cuda: bool, per_batch: int = 5) -> None:
        self.fn = fn
        self.cuda = cuda
        self.per_batch = per_batch
        self.group = 0
        self.local: list[float] = []
        self._start = time.perf_counter()
        self._agreed = 0.0

    def budget_clock(self) -> float:
        return self._agreed

    def _timed(self, calls: int) -> float:
        fn = self.fn
        if self.cuda:
            import torch

            torch.cuda.synchronize()
            cuda: Any = torch.cuda
            start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
            start.record()
            for _ in range(calls):
                fn()
            end.record()
            end.synchronize()
            return float(start.elapsed_time(end)) / calls
        began = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        return (time.perf_counter_ns() - began) / 1e6 / calls

    def batch(self) -> list[float]:
        import torch.distributed as dist

        dist.barrier(group=control_group())
        if not self.group:
            # calibrate on the fastest of three calls, not the first (why: docs/decisions.md, "How
            # is a distributed sample's size calibrated?")
            once = min(self._timed(1) for _ in range(3))
            group = max(1, min(10_000, math.ceil(0.02 / max(once / 1e3, 1e-6))))
            self.group = int(_all_max([float(group)])[0])
        local = [self._timed(self.group) for _ in range(self.per_batch)]
        self.local.extend(local)
        agreed = _all_max([*local, time.perf_counter() - self._start])
        self._agreed = agreed[-1]
        return agreed[:-1]


class RankBackend:
    """The measurement backend of a rank (see :class:`RankSampler`): ``metric`` ``dist``,
    timed with CUDA events on a GPU and the host clock on the CPU, hot cache."""

    def __init__(self, device: str) -> None:
        self.device = device

    def sampler(self, fn: Callable[[], object], graph: bool) -> RankSampler:
        return RankSampler(fn, self.device.startswith("cuda"))

    def recover(  # pragma: no cover - no stream blocker here
        self, sampler: Any, restart: bool = False
    ) -> None:
        raise AssertionError("the distributed backend never blocks")

    def finish(self, sampler: Any, fn: Callable[[], object], sampled: Sampled) -> Measurement:
        from pytest_cudaperf.measure.measurement import Measurement

        return Measurement.from_samples(
            sampled.samples,
            metric="dist",
            device=self.device,
            warnings=tuple(sampled.warnings),
            cost_s=sampled.cost_s,
            name=sampled.name,
            round_medians_ms=sampled.round_medians_ms,
        )

    def reset(self) -> None:
        pass

    def close(self) -> None:
        pass


def rank_body(body: Callable[[], object], runs: int) -> Callable[[], object]:
    """The body for a leak check's repeat protocol in a rank: its first ``runs`` calls run it;
    later calls (allocation-site tracing, which re-runs the body on the leaking rank only) do
    nothing there, since the body's collectives would wait for ranks that are done."""
    count = 0

    def run() -> object:
        nonlocal count
        count += 1
        return body() if count <= runs else None

    return run
