"""Memory checks: the leak and peak protocol (:mod:`.protocol`), the allocator backends that
read memory (:mod:`.backends`), naming where a leak was allocated (:mod:`.attribution`) and
recovery after an out-of-memory error (:mod:`.oom`). The names below are the package's API."""

from __future__ import annotations

from pytest_cudaperf.memory.backends import CpuMemory, CudaMemory, device_type, make_backend
from pytest_cudaperf.memory.oom import is_oom, oom_summary, recover_after_oom, release_frames
from pytest_cudaperf.memory.protocol import (
    BlockCheck,
    LeakResult,
    MemoryBackend,
    PeakResult,
    PeakWindow,
    check_leaks,
    collect_garbage,
    series_of,
)

__all__ = [
    "BlockCheck",
    "CpuMemory",
    "CudaMemory",
    "LeakResult",
    "MemoryBackend",
    "PeakResult",
    "PeakWindow",
    "check_leaks",
    "collect_garbage",
    "device_type",
    "is_oom",
    "make_backend",
    "oom_summary",
    "recover_after_oom",
    "release_frames",
    "series_of",
]
