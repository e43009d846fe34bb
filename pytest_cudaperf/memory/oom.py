"""After a CUDA out-of-memory error: what the allocator held, and a clean state for the next
test."""

from __future__ import annotations

import traceback
from types import TracebackType

from pytest_cudaperf.memory.protocol import collect_garbage
from pytest_cudaperf.units import format_size


def is_oom(exc: BaseException) -> bool:
    """Is ``exc`` torch's out-of-memory error (by name: torch need not be imported)?"""
    return type(exc).__name__ == "OutOfMemoryError" or "CUDA out of memory" in str(exc)


def release_frames(tb: TracebackType | None) -> None:
    """Drop the locals of a failed test's frames (pytest keeps them until the next test).

    ``frame.clear()`` leaves the snapshot dict that an earlier ``f_locals`` read cached on the
    frame (Python <= 3.12); reading ``f_locals`` again re-syncs it with the cleared frame.
    """
    traceback.clear_frames(tb)
    while tb is not None:
        _ = tb.tb_frame.f_locals
        tb = tb.tb_next


def oom_summary() -> str:
    """Allocated, reserved and largest free block on the current device, after an OOM."""
    import torch

    if not torch.cuda.is_initialized():
        return "CUDA not initialised"
    index = torch.cuda.current_device()
    stats = torch.cuda.memory_stats(index)
    free, total = torch.cuda.mem_get_info(index)
    largest_cached = 0
    for seg in torch.cuda.memory_snapshot():
        if seg.get("device") == index:
            for block in seg.get("blocks", []):
                if block.get("state") == "inactive":
                    largest_cached = max(largest_cached, int(block.get("size", 0)))
    return (
        f"cuda:{index}: allocated {format_size(stats.get('allocated_bytes.all.current', 0))}, "
        f"reserved {format_size(stats.get('reserved_bytes.all.current', 0))}, "
        f"largest free cached block {format_size(largest_cached)}, device free "
        f"{format_size(free)} of {format_size(total)}"
    )


def recover_after_oom() -> None:
    """Return the allocator to a clean state so the next test runs normally."""
    import torch

    collect_garbage()
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
