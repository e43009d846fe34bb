"""Leak and peak-memory protocols over the caching allocator's statistics (CUDA) or a census of
live tensors (CPU).

Leak protocol (MEMORY.md): run the body ``warmup`` times unmeasured, then ``iterations`` times,
settling and reading before the first and after each measured run. Settling collects garbage until
nothing is freed, synchronizes every initialised device, clears cuBLAS workspaces, the cuFFT plan
cache and the pinned host cache (each private call feature-detected; what ran is recorded). The
verdict is growth of allocated bytes per device beyond the tolerance, still growing in the last run.
CUDA is never initialised just to look: devices that are not initialised read 0.
"""

from __future__ import annotations

import contextlib
import gc
import os
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from pytest_cudaperf.units import format_size

#: frames from these paths are skipped when naming where a leaked block was allocated
_INTERNAL_PATHS = (
    f"{os.sep}torch{os.sep}",
    f"{os.sep}_pytest{os.sep}",
    f"{os.sep}pluggy{os.sep}",
    f"{os.sep}pytest_cudaperf{os.sep}",
    "<frozen ",
)


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Collect once, then ``gc.freeze()`` what exists: later collections scan only the objects
    the body creates (a full collection of a large process costs ~100 ms). Only for allocator
    readings: ``gc.get_objects()`` omits frozen objects, so a census of CPU tensors would count
    state that a run replaces (new gradients) as growth."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def collect_garbage(limit: int = 5) -> int:
    """``gc.collect()`` until it frees nothing (at most ``limit`` rounds); rounds run."""
    for rounds in range(1, limit + 1):
        if gc.collect() == 0:
            return rounds
    return limit


@dataclass
class LeakResult:
    """Settled readings per signal (``cuda:0``, ``pinned host``, ``cpu tensors``, …)."""

    series: dict[str, list[int]]
    tolerance: int
    settle_steps: list[str] = field(default_factory=list)
    sites: list[str] = field(default_factory=list)

    @property
    def iterations(self) -> int:
        return max((len(s) - 1 for s in self.series.values()), default=0)

    @property
    def leaks(self) -> dict[str, int]:
        """Signals that grew beyond the tolerance and were still growing in the last run."""
        found = {}
        for key, values in self.series.items():
            total = values[-1] - values[0]
            if total > self.tolerance and len(values) > 1 and values[-1] > values[-2]:
                found[key] = total
        return found

    @property
    def leaked_bytes(self) -> int:
        return sum(self.leaks.values())

    def message(self) -> str | None:
        """``leak: +3.0 MiB over 3 runs (+1.0 MiB each) on cuda:0``, or None."""
        leaks = self.leaks
        if not leaks:
            return None
        runs = self.iterations
        parts = []
        for key, total in leaks.items():
            if runs == 1:
                parts.append(f"+{format_size(total)} in the guarded block on {key}")
                continue
            steps = [b - a for a, b in zip(self.series[key], self.series[key][1:], strict=False)]
            each = (
                f"+{format_size(total / runs)} each"
                if len(set(steps)) == 1
                else ("steps " + ", ".join(f"+{format_size(s)}" for s in steps))
            )
            parts.append(f"+{format_size(total)} over {runs} runs ({each}) on {key}")
        return "leak: " + "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "series": self.series,
            "leaks": self.leaks,
            "tolerance": self.tolerance,
            "settle": self.settle_steps,
            "sites": self.sites,
        }


@dataclass(frozen=True)
class PeakResult:
    peak_bytes: int
    alloc_retries: int = 0
    ooms: int = 0
    device: str = "cpu"

    def to_dict(self) -> dict[str, Any]:
        return {
            "peak_bytes": self.peak_bytes,
            "alloc_retries": self.alloc_retries,
            "ooms": self.ooms,
            "device": self.device,
        }


class CpuMemory:
    """Live torch tensors on the CPU found through the garbage collector, by storage."""

    name = "cpu"
    #: the census walks gc.get_objects(), which does not list frozen objects: never freeze
    can_freeze = False

    def __init__(self) -> None:
        import torch

        self._torch = torch

    def settle(self) -> list[str]:
        return [f"gc.collect x{collect_garbage()}"]

    def _storages(self) -> dict[int, tuple[int, str]]:
        tensor_type = self._torch.Tensor
        found: dict[int, tuple[int, str]] = {}
        for obj in gc.get_objects():
            try:
                # type(), not isinstance(): no __class__ lookups on proxies and deprecated names
                if not issubclass(type(obj), tensor_type) or obj.device.type != "cpu":
                    continue
                storage = obj.untyped_storage()
                ptr = storage.data_ptr()
                if ptr and ptr not in found:
                    found[ptr] = (
                        storage.nbytes(),
                        f"{str(obj.dtype).replace('torch.', '')}{list(obj.shape)}",
                    )
            # odd objects (proxies, sparse or meta tensors) cannot be measured: skip them
            except Exception:  # noqa: BLE001, S112
                continue
        return found

    def read(self) -> dict[str, int]:
        return {"cpu tensors": sum(size for size, _ in self._storages().values())}

    def sites(self, body: Callable[[], object]) -> list[str]:
        """Run ``body`` twice more; describe the tensors the first run left alive that the
        second did not free (replaced state, such as gradients, is not a leak)."""
        self.settle()
        before = set(self._storages())
        body()
        self.settle()
        middle = self._storages()
        body()
        self.settle()
        after = self._storages()
        new = [
            (size, desc)
            for ptr, (size, desc) in middle.items()
            if ptr not in before and ptr in after
        ]
        new.sort(reverse=True)
        return [
            f"{format_size(size)} in 1 tensor {desc} left alive by one run of the body"
            for size, desc in new[:5]
        ]

    def peak(self, fn: Callable[[], object]) -> PeakResult | None:
        return None


class CudaMemory:
    """The caching allocator's statistics on every initialised device, plus pinned host memory."""

    name = "cuda"
    #: readings come from the allocator, not the gc: freezing the heap only makes settling cheap
    can_freeze = True

    def __init__(self, pinned: bool = True, outside_torch: bool = False) -> None:
        import torch

        self._torch = torch
        self.pinned = pinned and hasattr(torch.cuda, "host_memory_stats")
        self.outside_torch = outside_torch

    def devices(self) -> list[int]:
        torch = self._torch
        if not torch.cuda.is_initialized():
            return []
        return list(range(torch.cuda.device_count()))

    def settle(self) -> list[str]:
        torch = self._torch
        steps = [f"gc.collect x{collect_garbage()}"]
        devices = self.devices()
        for index in devices:
            torch.cuda.synchronize(index)
        if devices:
            steps.append("synchronize")
            clear_ws = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
            if clear_ws is not None:
                clear_ws()
                steps.append("cublas workspaces cleared")
            cufft = getattr(getattr(torch.backends, "cuda", None), "cufft_plan_cache", None)
            if cufft is not None:
                for index in devices:
                    cufft[index].clear()
                steps.append("cufft plan cache cleared")
        host_empty = getattr(torch._C, "_host_emptyCache", None)
        if host_empty is not None and devices:
            host_empty()
            steps.append("pinned host cache emptied")
        return steps

    def read(self) -> dict[str, int]:
        torch = self._torch
        values: dict[str, int] = {}
        for index in self.devices():
            stats = torch.cuda.memory_stats(index)
            values[f"cuda:{index}"] = int(stats.get("allocated_bytes.all.current", 0))
            if self.outside_torch:
                free, total = torch.cuda.mem_get_info(index)
                reserved = int(stats.get("reserved_bytes.all.current", 0))
                values[f"outside torch on cuda:{index}"] = int(total - free) - reserved
        if self.pinned:
            host = torch.cuda.host_memory_stats()
            values["pinned host"] = int(host.get("allocated_bytes.current", 0))
        return values

    def sites(self, body: Callable[[], object]) -> list[str]:
        """Trace two more runs of the body; name where the blocks allocated by the first and
        still alive after the second were allocated (replaced state such as gradients moves to
        new blocks each run and is not reported)."""
        from torch.cuda import memory as cmem

        if not self.devices():
            return []
        if _already_recording(self._torch):
            return ["(allocation sites not traced: memory history is already being recorded)"]
        cmem._record_memory_history(enabled="state", context="state", stacks="python")
        try:
            self.settle()
            before = _blocks(cmem._snapshot())
            body()
            self.settle()
            middle = _blocks(cmem._snapshot())
            body()
            self.settle()
            after = _blocks(cmem._snapshot())
        finally:
            cmem._record_memory_history(enabled=None)
        return _group_sites(
            [
                (size, frames)
                for key, (size, frames) in middle.items()
                if key not in before and key in after
            ]
        )

    def peak(self, fn: Callable[[], object]) -> PeakResult | None:
        """Requested-bytes peak of one run of ``fn`` above what was allocated at its start."""
        torch = self._torch
        torch.cuda.synchronize()
        index = torch.cuda.current_device()
        start = torch.cuda.memory_stats(index)
        base = int(start.get("requested_bytes.all.current", 0))
        torch.cuda.reset_peak_memory_stats(index)
        fn()
        torch.cuda.synchronize()
        end = torch.cuda.memory_stats(index)
        return PeakResult(
            peak_bytes=int(end.get("requested_bytes.all.peak", 0)) - base,
            alloc_retries=int(end.get("num_alloc_retries", 0) - start.get("num_alloc_retries", 0)),
            ooms=int(end.get("num_ooms", 0) - start.get("num_ooms", 0)),
            device=f"cuda:{index}",
        )


def _already_recording(torch_mod: Any) -> bool:
    """Is memory history being recorded (by the user)? Blocks keep the frames of a finished
    recording, so only the allocator's own flag tells; without it, assume not."""
    enabled = getattr(torch_mod._C, "_cuda_isHistoryEnabled", None)
    return bool(enabled()) if enabled is not None else False


def _blocks(snapshot: dict[str, Any]) -> dict[tuple[int, int], tuple[int, list[dict[str, Any]]]]:
    """Allocated blocks by (device, address) with their requested size and frames."""
    found = {}
    for seg in snapshot.get("segments", []):
        address = int(seg.get("address", 0))
        for block in seg.get("blocks", []):
            if block.get("state") == "active_allocated":
                size = int(block.get("requested_size") or block.get("size", 0))
                key = (int(seg.get("device", 0)), int(block.get("address", address)))
                found[key] = (size, list(block.get("frames") or []))
            address += int(block.get("size", 0))
    return found


def user_frame(frames: list[dict[str, Any]]) -> str:
    """The first frame (innermost first) outside torch, pytest and this plugin."""
    for frame in frames:
        filename = str(frame.get("filename", ""))
        if not filename or any(part in filename for part in _INTERNAL_PATHS):
            continue
        with contextlib.suppress(ValueError):  # another drive on Windows
            filename = os.path.relpath(filename)
        return f"{filename}:{frame.get('line')} in {frame.get('name')}"
    return "an unknown site (no Python frame outside torch)"


def _group_sites(blocks: list[tuple[int, list[dict[str, Any]]]]) -> list[str]:
    groups: dict[str, list[int]] = {}
    for size, frames in blocks:
        groups.setdefault(user_frame(frames), []).append(size)
    ordered = sorted(groups.items(), key=lambda kv: -sum(kv[1]))
    return [
        f"{format_size(sum(sizes))} in {len(sizes)} block{'s' if len(sizes) != 1 else ''} at {site}"
        for site, sizes in ordered[:10]
    ]


MemoryBackend = CpuMemory | CudaMemory


def check_leaks(
    body: Callable[[], object],
    backend: MemoryBackend,
    warmup: int,
    iterations: int,
    tolerance: int,
    attribute: bool = True,
) -> LeakResult:
    """The repeat protocol; ``body`` has usually run once already (that run counts as warm-up)."""
    for _ in range(warmup):
        body()
    with frozen_heap() if backend.can_freeze else contextlib.nullcontext():
        steps = backend.settle()
        readings = [backend.read()]
        for _ in range(iterations):
            body()
            backend.settle()
            readings.append(backend.read())
    keys = sorted({key for reading in readings for key in reading})
    series = {key: [reading.get(key, 0) for reading in readings] for key in keys}
    result = LeakResult(series=series, tolerance=tolerance, settle_steps=steps)
    if result.leaks and attribute:
        result.sites = backend.sites(body)
    return result


@dataclass
class BlockCheck:
    """One guarded block: readings before and after (single-shot)."""

    backend: MemoryBackend
    tolerance: int
    before: dict[str, int] = field(default_factory=dict)
    after: dict[str, int] = field(default_factory=dict)
    peak: PeakResult | None = None

    def start(self) -> None:
        self.backend.settle()
        self.before = self.backend.read()

    def finish(self) -> LeakResult:
        self.backend.settle()
        self.after = self.backend.read()
        keys = sorted(set(self.before) | set(self.after))
        series = {k: [self.before.get(k, 0), self.after.get(k, 0)] for k in keys}
        return LeakResult(series=series, tolerance=self.tolerance)


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


def device_type() -> str:
    """``cuda`` when this process can use CUDA (leak checks read the allocator), else ``cpu``."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def make_backend(
    device_type: str, pinned: bool = True, outside_torch: bool = False
) -> MemoryBackend:
    if device_type == "cuda":
        return CudaMemory(pinned=pinned, outside_torch=outside_torch)
    return CpuMemory()
