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
import sys
import traceback
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from types import FrameType, TracebackType
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


@dataclass
class PeakWindow:
    """What ``peak_window()`` yields: its result once the window has closed (None on the CPU
    or before CUDA is initialised)."""

    result: PeakResult | None = None


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


def tensor_storages(
    torch_mod: Any, keep: Callable[[Any], bool] | None = None
) -> dict[int, tuple[int, str]]:
    """Live CPU tensors found through the garbage collector: storage address -> (bytes, a
    ``float32[1024]`` description), optionally only those ``keep`` accepts."""
    tensor_type = torch_mod.Tensor
    found: dict[int, tuple[int, str]] = {}
    for obj in gc.get_objects():
        try:
            # type(), not isinstance(): no __class__ lookups on proxies and deprecated names
            if not issubclass(type(obj), tensor_type) or obj.device.type != "cpu":
                continue
            storage = obj.untyped_storage()
            ptr = storage.data_ptr()
            if ptr and ptr not in found and (keep is None or keep(obj)):
                found[ptr] = (
                    storage.nbytes(),
                    f"{str(obj.dtype).replace('torch.', '')}{list(obj.shape)}",
                )
        # odd objects (proxies, sparse or meta tensors) cannot be measured: skip them
        except Exception:  # noqa: BLE001, S112
            continue
    return found


def group_storages(
    new: list[tuple[int, str, str]], label: str, error: str | None = None
) -> list[str]:
    """``4.0 MiB in 1 tensor at tests/test_x.py:12 in test_leak (float32[1048576])`` lines
    from (bytes, description, site), grouped by site, largest first; without descriptions
    (allocator blocks) no parentheses."""
    groups: dict[str, list[tuple[int, str]]] = {}
    for size, desc, site in new:
        groups.setdefault(site, []).append((size, desc))
    ordered = sorted(groups.items(), key=lambda kv: -sum(size for size, _ in kv[1]))
    lines = []
    for site, found in ordered[:10]:
        found.sort(reverse=True)
        plural = "s" if len(found) != 1 else ""
        shapes = ", ".join(desc for _, desc in found[:3] if desc)
        if shapes and len(found) > 3:
            shapes += ", …"
        total = format_size(sum(size for size, _ in found))
        described = f" ({shapes})" if shapes else ""
        lines.append(f"{total} in {len(found)} {label}{plural} at {site}{described}")
    if error:
        lines.append(f"({label} creation sites not traced: {error})")
    return lines


def kept_by_run(
    before: Collection[int], middle: dict[int, tuple[int, str]], after: Collection[int]
) -> list[tuple[int, int, str]]:
    """(address, bytes, description) of what the first traced run created and the second did
    not free (replaced state, such as new gradients each run, is not kept)."""
    return [
        (ptr, size, desc)
        for ptr, (size, desc) in middle.items()
        if ptr not in before and ptr in after
    ]


class CpuMemory:
    """Live torch tensors on the CPU found through the garbage collector, by storage."""

    #: the census walks gc.get_objects(), which does not list frozen objects: never freeze
    can_freeze = False

    def __init__(self) -> None:
        import torch

        self._torch = torch

    def settle(self) -> list[str]:
        return [f"gc.collect x{collect_garbage()}"]

    def read(self) -> dict[str, int]:
        return {"cpu tensors": sum(size for size, _ in tensor_storages(self._torch).values())}

    def sites(self, body: Callable[[], object], leaked: Collection[str]) -> list[str]:
        """Run ``body`` twice more, recording where tensors are created during the first; name
        the tensors the first run left alive that the second did not free, by creation site."""
        recorder = CreationSites()
        self.settle()
        before = set(tensor_storages(self._torch))
        if not recorder.run(body):
            self.settle()
            before = set(tensor_storages(self._torch))
            body()
        self.settle()
        middle = tensor_storages(self._torch)
        body()
        self.settle()
        after = set(tensor_storages(self._torch))
        new = [
            (size, desc, recorder.site(ptr))
            for ptr, size, desc in kept_by_run(before, middle, after)
        ]
        return group_storages(new, "tensor", recorder.error)

    def peak(self, fn: Callable[[], object]) -> PeakResult | None:
        return None

    @contextlib.contextmanager
    def peak_window(self) -> Iterator[PeakWindow]:
        """No peak on the CPU: the census cannot see transient allocations."""
        yield PeakWindow()


class CudaMemory:
    """The caching allocator's statistics on every initialised device, plus pinned host memory."""

    #: readings come from the allocator, not the gc: freezing the heap only makes settling cheap
    can_freeze = True

    def __init__(self, pinned: bool = True, outside_torch: bool = False) -> None:
        import torch

        self._torch = torch
        self.pinned = pinned and hasattr(torch.cuda, "host_memory_stats")
        self.outside_torch = outside_torch

    def devices(self) -> list[int]:
        """Devices this process has a CUDA context on: synchronizing or reading another would
        create one (~500 MiB of device memory each on every GPU of the machine)."""
        torch = self._torch
        if not torch.cuda.is_initialized():
            return []
        has_context = getattr(torch._C, "_cuda_hasPrimaryContext", None)
        return [
            index
            for index in range(torch.cuda.device_count())
            if has_context is None or has_context(index)
        ]

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

    def _pinned(self) -> dict[int, tuple[int, str]]:
        return tensor_storages(self._torch, keep=lambda tensor: bool(tensor.is_pinned()))

    def _outside_torch(self) -> int:
        """Memory outside torch's allocator, summed over devices (line tracing reads this)."""
        return sum(v for k, v in self.read().items() if k.startswith("outside torch"))

    def sites(self, body: Callable[[], object], leaked: Collection[str]) -> list[str]:
        """Trace two more runs of the body; name where what the first run allocated and the
        second did not free was allocated (replaced state such as gradients moves to new blocks
        each run and is not reported): allocator blocks from the memory history, pinned host
        tensors from their creation sites, memory outside torch by line tracing."""
        from torch.cuda import memory as cmem

        if not self.devices():
            return []
        notes: list[str] = []
        record = any(key.startswith("cuda:") for key in leaked)
        if record and _already_recording(self._torch):
            notes.append("(allocation sites not traced: memory history is already being recorded)")
            record = False
        pinned = "pinned host" in leaked
        creation = CreationSites()
        lines = (
            LineGrowth(self._outside_torch)
            if any(key.startswith("outside torch") for key in leaked)
            else None
        )
        if record:
            cmem._record_memory_history(enabled="state", context="state", stacks="python")
        try:
            self.settle()
            blocks_before = _blocks(cmem._snapshot()) if record else {}
            pinned_before = set(self._pinned()) if pinned else set()
            with contextlib.ExitStack() as stack:
                if lines is not None:
                    stack.enter_context(lines.tracing())
                if pinned:
                    ran = creation.run(body)
                else:
                    body()
                    ran = True
            if not ran:  # failed under the dispatch mode: run plain, sites unknown
                body()
            self.settle()
            blocks_middle = _blocks(cmem._snapshot()) if record else {}
            pinned_middle = self._pinned() if pinned else {}
            body()
            self.settle()
            blocks_after = _blocks(cmem._snapshot()) if record else {}
            pinned_after = set(self._pinned()) if pinned else set()
        finally:
            if record:
                cmem._record_memory_history(enabled=None)
        found = notes + group_storages(
            [
                (size, "", user_frame(frames))
                for key, (size, frames) in blocks_middle.items()
                if key not in blocks_before and key in blocks_after
            ],
            "block",
        )
        if pinned:
            kept = kept_by_run(pinned_before, pinned_middle, pinned_after)
            found += group_storages(
                [(size, desc, creation.site(ptr)) for ptr, size, desc in kept],
                "pinned host tensor",
                creation.error,
            )
        if lines is not None:
            found += [
                f"{format_size(size)} outside torch's allocator at {site} (by line tracing)"
                for size, site in lines.sites()[:5]
            ]
            if lines.error:
                found.append(f"(memory outside torch not traced: {lines.error})")
        return found

    def peak(self, fn: Callable[[], object]) -> PeakResult | None:
        """Requested-bytes peak of one run of ``fn`` above what was allocated at its start."""
        with self.peak_window() as window:
            fn()
        return window.result

    @contextlib.contextmanager
    def peak_window(self) -> Iterator[PeakWindow]:
        """Requested-bytes peak on the current device between entering and leaving, above
        what was allocated on entering; allocator retries and OOMs in between."""
        torch = self._torch
        window = PeakWindow()
        if not torch.cuda.is_initialized():  # never initialise CUDA to look
            yield window
            return
        torch.cuda.synchronize()
        index = torch.cuda.current_device()
        start = torch.cuda.memory_stats(index)
        base = int(start.get("requested_bytes.all.current", 0))
        torch.cuda.reset_peak_memory_stats(index)
        yield window
        torch.cuda.synchronize()
        end = torch.cuda.memory_stats(index)
        window.result = PeakResult(
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


UNKNOWN_SITE = "an unknown site (no Python frame outside torch)"


def _is_internal(filename: str) -> bool:
    return not filename or any(part in filename for part in _INTERNAL_PATHS)


def _site(filename: str, line: object, name: object) -> str:
    with contextlib.suppress(ValueError):  # another drive on Windows
        filename = os.path.relpath(filename)
    return f"{filename}:{line} in {name}"


def user_frame(frames: list[dict[str, Any]]) -> str:
    """The first frame (innermost first) outside torch, pytest and this plugin."""
    for frame in frames:
        filename = str(frame.get("filename", ""))
        if not _is_internal(filename):
            return _site(filename, frame.get("line"), frame.get("name"))
    return UNKNOWN_SITE


def calling_site(frame: FrameType | None) -> str:
    """The innermost live frame outside torch, pytest and this plugin, from ``frame`` out."""
    while frame is not None:
        if not _is_internal(frame.f_code.co_filename):
            return _site(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
        frame = frame.f_back
    return UNKNOWN_SITE


def _storage_ptrs(values: object, found: dict[int, Any] | None = None) -> dict[int, Any]:
    """Tensors in (nested tuples/lists/dicts of) ``values`` by storage address."""
    found = {} if found is None else found
    if isinstance(values, (tuple, list)):
        for value in values:
            _storage_ptrs(value, found)
    elif isinstance(values, dict):
        for value in values.values():
            _storage_ptrs(value, found)
    else:
        storage = getattr(values, "untyped_storage", None)
        if storage is not None:
            with contextlib.suppress(Exception):  # meta, sparse or odd tensors have no storage
                ptr = storage().data_ptr()
                if ptr:
                    found[ptr] = values
    return found


class CreationSites:
    """Where each host tensor storage was created, by address: a ``TorchDispatchMode`` sees
    every operator on this thread (factories, ``pin_memory()``, backward on the CPU) and notes
    the innermost frame outside torch for each output storage that is not one of its inputs'
    (views and in-place results keep the site of the storage they share)."""

    def __init__(self) -> None:
        self.sites: dict[int, str] = {}
        self.error: str | None = None

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        try:
            from torch.utils._python_dispatch import TorchDispatchMode
        except ImportError as exc:  # private module: feature-detected
            self.error = f"TorchDispatchMode unavailable ({exc})"
            yield
            return
        sites = self.sites

        class _Mode(TorchDispatchMode):  # type: ignore[misc]
            def __torch_dispatch__(  # type: ignore[no-untyped-def]
                self, func, types, args=(), kwargs=None
            ):
                out = func(*args, **(kwargs or {}))
                created = _storage_ptrs(out)
                if created:
                    inputs = _storage_ptrs((args, kwargs or {}))
                    site = None
                    for ptr, tensor in created.items():
                        if ptr in inputs or tensor.device.type != "cpu":
                            continue
                        site = site or calling_site(sys._getframe(1))
                        sites[ptr] = site
                return out

        with _Mode():
            yield

    def site(self, ptr: int) -> str:
        return self.sites.get(ptr, UNKNOWN_SITE)

    def run(self, body: Callable[[], object]) -> bool:
        """Run ``body`` recording; False (and :attr:`error` set) when it failed under the mode,
        which the caller answers by running it again without."""
        try:
            with self.recording():
                body()
        # a body that passed without the mode and fails under it: report, do not fail the test
        except Exception as exc:  # noqa: BLE001
            first = str(exc).splitlines()[0] if str(exc) else ""
            self.error = f"the body failed under TorchDispatchMode ({type(exc).__name__}: {first})"
            self.sites.clear()
            return False
        return True


class LineGrowth:
    """Attributes the growth of a byte count that has no per-block records (memory allocated
    outside torch's allocator) to source lines: ``sys.settrace`` on frames outside torch,
    pytest and this plugin reads the count at every line event, charges growth to the line
    that just ran (a library call counts as its caller's line) and matches each decrease with
    the latest growth of the same size, else the most recent growth (last allocated, first
    freed), so what is left at the end is what the run kept. One reading per traced line:
    only for attribution runs."""

    def __init__(self, read: Callable[[], int]) -> None:
        self._read = read
        self.kept: list[tuple[str, int]] = []
        self.error: str | None = None
        self._last = 0
        self._line: str | None = None

    def _observe(self) -> None:
        value = self._read()
        delta, self._last = value - self._last, value
        if delta > 0:
            self.kept.append((self._line or UNKNOWN_SITE, delta))
        elif delta < 0:
            # a free releases a whole allocation: the latest growth of exactly that size
            for index in range(len(self.kept) - 1, -1, -1):
                if self.kept[index][1] == -delta:
                    del self.kept[index]
                    return
        while delta < 0 and self.kept:
            site, size = self.kept.pop()
            if size > -delta:
                self.kept.append((site, size + delta))
            delta += size

    def _local(self, frame: FrameType, event: str, arg: object) -> Any:
        if event in ("line", "return"):
            self._observe()
            self._line = _site(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
        return self._local

    def _global(self, frame: FrameType, event: str, arg: object) -> Any:
        if event != "call" or _is_internal(frame.f_code.co_filename):
            return None
        self._observe()
        return self._local

    @contextlib.contextmanager
    def tracing(self) -> Iterator[None]:
        previous = sys.gettrace()
        if previous is not None:
            self.error = "another tracer (a debugger or coverage) is active"
            yield
            return
        self._last = self._read()
        sys.settrace(self._global)
        try:
            yield
        finally:
            sys.settrace(previous)
            self._observe()

    def sites(self) -> list[tuple[int, str]]:
        totals: dict[str, int] = {}
        for site, size in self.kept:
            totals[site] = totals.get(site, 0) + size
        return sorted(((size, site) for site, size in totals.items()), reverse=True)


MemoryBackend = CpuMemory | CudaMemory


def check_leaks(
    body: Callable[[], object],
    backend: MemoryBackend,
    warmup: int,
    iterations: int,
    tolerance: int,
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
    result = LeakResult(series=series_of(readings), tolerance=tolerance, settle_steps=steps)
    if result.leaks:
        result.sites = backend.sites(body, set(result.leaks))
    return result


def series_of(readings: list[dict[str, int]]) -> dict[str, list[int]]:
    """Readings (signal -> bytes) as one series per signal; a signal missing from a reading
    (a device initialised later) reads 0 there."""
    keys = sorted({key for reading in readings for key in reading})
    return {key: [reading.get(key, 0) for reading in readings] for key in keys}


@dataclass
class BlockCheck:
    """One guarded block: readings before and after (single-shot)."""

    backend: MemoryBackend
    tolerance: int
    before: dict[str, int] = field(default_factory=dict)

    def start(self) -> None:
        self.backend.settle()
        self.before = self.backend.read()

    def finish(self) -> LeakResult:
        self.backend.settle()
        series = series_of([self.before, self.backend.read()])
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
