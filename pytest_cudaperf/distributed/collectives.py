"""Collectives in a rank: the ``dist_rank`` fixture's object (:class:`DistRank`), with
``bench_collective`` timing all-reduce, all-gather and reduce-scatter through ``cuda_timer``, and
their bandwidth as nccl-tests defines it."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pytest_cudaperf.distributed.bandwidth import BUS_FACTORS, bus_bandwidth, collective_size
from pytest_cudaperf.distributed.result import Collective
from pytest_cudaperf.rank_env import RankEnv

if TYPE_CHECKING:
    import torch


class DistRank:
    """The ``dist_rank`` fixture: ``rank``, ``world_size``, ``local_rank``, ``device``,
    ``backend``, ``is_main``; ``barrier()``; ``bench_collective(op, tensor)``."""

    def __init__(
        self,
        env: RankEnv,
        device: torch.device,
        timer: Callable[[], Any],
        record: Callable[[Collective], object] | None = None,
    ) -> None:
        self.rank = env.rank
        self.world_size = env.world_size
        self.local_rank = env.rank
        self.backend = env.backend
        self.device = device
        self._timer = timer
        #: where a timed collective goes: the rank's result, for its launcher
        self._record = record

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        import torch.distributed as dist

        dist.barrier()

    def __repr__(self) -> str:
        return f"DistRank(rank={self.rank}, world_size={self.world_size}, device={self.device})"

    def bench_collective(
        self, op: str, tensor: Any, *, name: str | None = None, **timer_kwargs: Any
    ) -> Collective:
        """Time ``op`` (all_reduce, all_gather, reduce_scatter) on ``tensor`` (this rank's
        input; for reduce_scatter the full input) through ``cuda_timer``, recorded as
        ``<op>/ws<N>`` (a time, lower is better; baselines per device class and world size),
        and return the algorithm and bus bandwidth of the slowest rank's median."""
        import torch
        import torch.distributed as dist

        n = self.world_size
        if op == "all_reduce":

            def run() -> None:
                dist.all_reduce(tensor)
        elif op == "all_gather":
            out = torch.empty((n * tensor.numel(),), dtype=tensor.dtype, device=tensor.device)

            def run() -> None:
                dist.all_gather_into_tensor(out, tensor.reshape(-1))
        elif op == "reduce_scatter":
            if tensor.numel() % n:
                raise ValueError(f"reduce_scatter: {tensor.numel()} elements do not split in {n}")
            out = torch.empty((tensor.numel() // n,), dtype=tensor.dtype, device=tensor.device)

            def run() -> None:
                dist.reduce_scatter_tensor(out, tensor.reshape(-1))
        else:
            raise ValueError(
                f"bench_collective: op must be one of {', '.join(BUS_FACTORS)}, got {op!r}"
            )
        series = name or f"{op}/ws{n}"
        measurement = self._timer()(run, name=series, **timer_kwargs)
        size = collective_size(op, tensor.numel() * tensor.element_size(), n)
        algbw, busbw = bus_bandwidth(op, size, measurement.median_ms, n)
        result = Collective(series, op, size, n, measurement.median_ms, algbw, busbw)
        if self._record is not None:
            self._record(result)
        return result
