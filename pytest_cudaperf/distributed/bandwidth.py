"""A collective's algorithm and bus bandwidth, as nccl-tests defines them (pure arithmetic, used
on both sides: the rank's ``bench_collective`` and the launcher's merged record)."""

from __future__ import annotations

from collections.abc import Callable

#: bus bandwidth factor per collective (nccl-tests PERFORMANCE.md), n = world size
BUS_FACTORS: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
}


def bus_bandwidth(op: str, size_bytes: int, time_ms: float, world_size: int) -> tuple[float, float]:
    """(algorithm bandwidth, bus bandwidth) in GB/s as nccl-tests defines them: algbw = S / t
    with S the operation's full size (all-gather: the gathered output, reduce-scatter: the
    input), busbw = algbw x 2(n-1)/n for all-reduce, x (n-1)/n for all-gather and
    reduce-scatter."""
    if op not in BUS_FACTORS:
        raise ValueError(f"collective must be one of {', '.join(BUS_FACTORS)}, got {op!r}")
    if time_ms <= 0 or world_size < 1:
        raise ValueError("time and world size must be positive")
    algbw = size_bytes / (time_ms / 1e3) / 1e9
    return algbw, algbw * BUS_FACTORS[op](world_size)


def collective_size(op: str, tensor_bytes: int, world_size: int) -> int:
    """nccl-tests' S for a per-rank tensor: all-gather gathers ``world_size`` of them; the
    all-reduce and reduce-scatter input is the tensor itself."""
    return tensor_bytes * world_size if op == "all_gather" else tensor_bytes
