"""The two allocator backends of the memory checks: live CPU tensors found through the garbage
collector, and the CUDA caching allocator's statistics (plus pinned host memory).

Settling collects garbage until nothing is freed, synchronizes every initialised device, clears
cuBLAS workspaces, the cuFFT plan cache and the pinned host cache (each private call
feature-detected in :mod:`pytest_cudaperf._torch_compat`; what ran is recorded). CUDA is never
initialised just to look: devices that are not initialised read 0.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Collection, Iterator

from pytest_cudaperf import _torch_compat
from pytest_cudaperf.memory import attribution
from pytest_cudaperf.memory.protocol import MemoryBackend, PeakResult, PeakWindow, collect_garbage
from pytest_cudaperf.seeding import same_draws


class CpuMemory:
    """Live torch tensors on the CPU found through the garbage collector, by storage."""

    #: the census walks gc.get_objects(), which does not list frozen objects: never freeze
    can_freeze = False

    def __init__(self) -> None:
        import torch

        self._torch = torch

    def settle(self) -> list[str]:
        return [f"gc.collect x{collect_garbage()}"]

    def settle_devices(self) -> list[str]:
        """The settling that is not garbage collection: none on the CPU."""
        return []

    def allocations(self) -> int | None:
        """How many allocations were made so far: the census cannot count them (None)."""
        return None

    def read(self) -> dict[str, int]:
        return {
            "cpu tensors": sum(
                size for size, _ in attribution.tensor_storages(self._torch).values()
            )
        }

    def sites(self, body: Callable[[], object], leaked: Collection[str]) -> list[str]:
        """Run ``body`` twice more, recording where tensors are created during the first; name
        the tensors the first run left alive that the second did not free, by creation site."""
        recorder = attribution.CreationSites()
        self.settle()
        before = set(attribution.tensor_storages(self._torch))
        if not recorder.run(body):
            self.settle()
            before = set(attribution.tensor_storages(self._torch))
            body()
        self.settle()
        middle = attribution.tensor_storages(self._torch)
        body()
        self.settle()
        after = set(attribution.tensor_storages(self._torch))
        new = [
            (size, desc, recorder.site(ptr))
            for ptr, size, desc in attribution.kept_by_run(before, middle, after)
        ]
        return attribution.group_storages(new, "tensor", recorder.error)

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
        return [
            index
            for index in range(torch.cuda.device_count())
            if _torch_compat.has_primary_context(index)
        ]

    def settle(self) -> list[str]:
        return [f"gc.collect x{collect_garbage()}", *self.settle_devices()]

    def settle_devices(self) -> list[str]:
        """Every initialised device synchronized, cuBLAS workspaces, the cuFFT plan cache and
        the pinned host cache cleared: the settling that is not garbage collection."""
        torch = self._torch
        steps: list[str] = []
        devices = self.devices()
        for index in devices:
            torch.cuda.synchronize(index)
        if devices:
            steps.append("synchronize")
            if _torch_compat.clear_cublas_workspaces():
                steps.append("cublas workspaces cleared")
            cufft = getattr(getattr(torch.backends, "cuda", None), "cufft_plan_cache", None)
            if cufft is not None:
                for index in devices:
                    cufft[index].clear()
                steps.append("cufft plan cache cleared")
            if _torch_compat.empty_host_cache():
                steps.append("pinned host cache emptied")
        return steps

    def allocations(self) -> int | None:
        """Allocations made so far on every initialised device and of pinned host blocks (a
        count that only grows: a test that allocated anything moved it)."""
        torch = self._torch
        count = sum(
            int(torch.cuda.memory_stats(index).get("allocation.all.allocated", 0))
            for index in self.devices()
        )
        if self.pinned:
            count += int(torch.cuda.host_memory_stats().get("allocations.allocated", 0))
        return count

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

    def _outside_torch(self) -> int:
        """Memory outside torch's allocator, summed over devices (line tracing reads this)."""
        return sum(v for k, v in self.read().items() if k.startswith("outside torch"))

    def sites(self, body: Callable[[], object], leaked: Collection[str]) -> list[str]:
        """Trace two more runs of the body and name where what the first run allocated and the
        second did not free was allocated, for each leaked signal: allocator blocks (memory
        history), pinned host tensors (creation sites), memory outside torch (line tracing)."""
        if not self.devices():
            return []
        tracers = attribution.cuda_tracers(
            self._torch, leaked, self._outside_torch, attribution.creation_reader(self._torch)
        )
        return attribution.trace_two_runs(body, self.settle, tracers)

    def peak(self, fn: Callable[[], object]) -> PeakResult | None:
        """Requested-bytes peak of one run of ``fn`` above what was allocated at its start, the
        run drawing the same random numbers in every process (:func:`seeding.same_draws`)."""
        torch = self._torch
        index = torch.cuda.current_device() if torch.cuda.is_initialized() else None
        with same_draws(index), self.peak_window() as window:
            fn()
        return window.result

    @contextlib.contextmanager
    def peak_window(self) -> Iterator[PeakWindow]:
        """Requested-bytes peak on the current device between entering and leaving, above
        what was allocated on entering (never below zero: memory freed in between lowers the
        peak's start, not the entry's count); allocator retries and OOMs in between."""
        torch = self._torch
        window = PeakWindow()
        if not torch.cuda.is_initialized():  # never initialise CUDA to look
            yield window
            return
        torch.cuda.synchronize()
        index = torch.cuda.current_device()
        with _no_collection():  # a collection between the two would free below the base
            start = torch.cuda.memory_stats(index)
            torch.cuda.reset_peak_memory_stats(index)
        base = int(start.get("requested_bytes.all.current", 0))
        yield window
        torch.cuda.synchronize()
        end = torch.cuda.memory_stats(index)
        window.result = PeakResult(
            # another thread's free between them still can: the window allocated nothing above
            peak_bytes=max(0, int(end.get("requested_bytes.all.peak", 0)) - base),
            alloc_retries=int(end.get("num_alloc_retries", 0) - start.get("num_alloc_retries", 0)),
            ooms=int(end.get("num_ooms", 0) - start.get("num_ooms", 0)),
            device=f"cuda:{index}",
        )


@contextlib.contextmanager
def _no_collection() -> Iterator[None]:
    """Python's garbage collector held off (a cycle it frees may hold a CUDA tensor)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def device_type(setting: str = "auto", test_device: str | None = None) -> str:
    """Which allocator a leak check reads: the test's own device when it has one
    (``cuda_device``); else ``cpu`` under ``--cudaperf-device=cpu`` (a GPU host's CPU run), else
    ``cuda`` when this process can use CUDA, else ``cpu``."""
    if test_device is not None:
        return "cuda" if test_device.startswith("cuda") else "cpu"
    if setting == "cpu":
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def make_backend(
    device_type: str, pinned: bool = True, outside_torch: bool = False
) -> MemoryBackend:
    if device_type == "cuda":
        return CudaMemory(pinned=pinned, outside_torch=outside_torch)
    return CpuMemory()
