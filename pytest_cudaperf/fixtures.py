"""The objects behind the fixtures: ``cuda_device``, ``pinned_batch``, ``cuda_timer``,
``memory_guard``, and the re-runs of a test body for ``@perf`` alone and ``@no_leak``.

They import torch lazily and report through :class:`~pytest_cudaperf.session.Judge`;
:mod:`pytest_cudaperf.plugin` only wires them to pytest.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

from pytest_cudaperf import _torch_compat, memory
from pytest_cudaperf.devices import choose_device, device_class, is_sticky_cuda_error
from pytest_cudaperf.locks import DeviceLock, LockRegistry
from pytest_cudaperf.markers import LeakOptions, PerfOptions
from pytest_cudaperf.measure.timing import Backend, Budget, Comparison, CpuBackend, Measurement
from pytest_cudaperf.measure.timing import compare as compare_backend
from pytest_cudaperf.measure.timing import measure as measure_backend
from pytest_cudaperf.session import REMEASURE, ItemState, Judge, record_key
from pytest_cudaperf.verdict import Kind

if TYPE_CHECKING:
    import torch


@dataclass
class DeviceContext:
    """The device a test runs on, and its lock."""

    device: torch.device
    device_class: str
    lock: DeviceLock
    l2_bytes: int = 0
    uuid: str = ""

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"


def lock_key(ctx_device: str, uuid: str) -> str:
    return f"gpu-{uuid}" if uuid else ctx_device.replace(":", "")


def open_device(side: Judge, locks: LockRegistry, worker: int, nodeid: str) -> DeviceContext:
    """Choose the test's device (skip with the reason if it cannot have one), make it current."""
    import torch

    probe = side.probe
    name, skip = choose_device(side.settings.device, probe, worker)
    if skip:
        pytest.skip(skip)
    fault = side.faults.message()
    if name.startswith("cuda") and fault:
        pytest.fail(fault, pytrace=False)
    device = torch.device(name)
    l2, uuid = 0, ""
    if device.type == "cuda":
        torch.cuda.set_device(device)
        facts = probe.gpus[device.index or 0]
        l2, uuid = facts.l2_bytes, facts.uuid
    lock = locks.get(lock_key(name, uuid))
    lock.acquire_shared()
    return DeviceContext(device, device_class(device, probe), lock, l2, uuid)


def close_device(ctx: DeviceContext, side: Judge, nodeid: str) -> None:
    """Synchronize, so an asynchronous CUDA error is an error of *this* test, not the next."""
    try:
        if ctx.is_cuda:
            import torch

            try:
                torch.cuda.synchronize(ctx.device)
            except RuntimeError as exc:
                first = str(exc).strip().splitlines()[0]
                if is_sticky_cuda_error(str(exc)):
                    side.faults.record(nodeid, first)
                pytest.fail(f"asynchronous CUDA error raised by this test: {first}", pytrace=False)
    finally:
        ctx.lock.release_shared()


# --- pinned_batch --------------------------------------------------------------------------

FILLS = ("randn", "rand", "zeros", "ones", "arange")


class PinnedBatches:
    """``pinned_batch(shape, dtype=torch.float32, *, fill="randn", seed=0)``: a deterministic
    host tensor, page-locked when CUDA is available, reused within a test."""

    def __init__(self) -> None:
        import torch

        self._torch = torch
        self._cache: dict[tuple[Any, ...], torch.Tensor] = {}
        self.pinned = torch.cuda.is_available()

    def __call__(
        self,
        shape: int | tuple[int, ...] | list[int],
        dtype: Any = None,
        *,
        fill: str = "randn",
        seed: int = 0,
    ) -> torch.Tensor:
        torch = self._torch
        dtype = torch.float32 if dtype is None else dtype
        dims = (shape,) if isinstance(shape, int) else tuple(shape)
        if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in dims):
            raise ValueError(f"pinned_batch: shape must be non-negative integers, got {shape!r}")
        if fill not in FILLS:
            raise ValueError(f"pinned_batch: fill must be one of {', '.join(FILLS)}, got {fill!r}")
        if not isinstance(dtype, torch.dtype):
            raise TypeError(f"pinned_batch: dtype must be a torch.dtype, got {dtype!r}")
        key = (dims, dtype, fill, seed)
        if key not in self._cache:
            self._cache[key] = self._make(dims, dtype, fill, seed)
        return self._cache[key]

    def _make(self, dims: tuple[int, ...], dtype: Any, fill: str, seed: int) -> Any:
        torch = self._torch
        gen = torch.Generator().manual_seed(seed)
        numel = 1
        for d in dims:
            numel *= d
        floating = dtype.is_floating_point or dtype.is_complex
        if fill == "zeros":
            values = torch.zeros(dims, dtype=dtype)
        elif fill == "ones":
            values = torch.ones(dims, dtype=dtype)
        elif fill == "arange":
            values = torch.arange(numel).reshape(dims).to(dtype)
        elif dtype == torch.bool:
            values = torch.randint(0, 2, dims, generator=gen).bool()
        elif floating:
            make = torch.randn if fill == "randn" else torch.rand
            values = make(dims, generator=gen, dtype=torch.float32).to(dtype)
        else:
            low, high = (-100, 100) if fill == "randn" and dtype != torch.uint8 else (0, 100)
            values = torch.randint(low, high, dims, generator=gen).to(dtype)
        if not self.pinned:
            return values
        pinned = torch.empty(dims, dtype=dtype, pin_memory=True)
        pinned.copy_(values)
        return pinned

    def release(self) -> None:
        """Drop this test's tensors and return pinned host memory to where it was."""
        self._cache.clear()
        if self.pinned:
            memory.collect_garbage()
            _torch_compat.empty_host_cache()


# --- cuda_timer ----------------------------------------------------------------------------


@dataclass
class _Region:
    name: str
    samples: list[float] = field(default_factory=list)
    pending: list[tuple[Any, Any]] = field(default_factory=list)


class Timer:
    """The ``cuda_timer`` fixture: ``cuda_timer(fn, *args, **kwargs) -> Measurement``,
    ``with cuda_timer.region(name):`` and ``cuda_timer.compare(candidate, reference)``."""

    def __init__(
        self,
        side: Judge,
        state: ItemState,
        nodeid: str,
        ctx: DeviceContext,
        perf: PerfOptions | None,
    ) -> None:
        self._side = side
        self._state = state
        self._nodeid = nodeid
        self._ctx = ctx
        self._perf = perf or PerfOptions()
        self._regions: dict[str, _Region] = {}
        #: one backend per cache mode for the test: re-measuring an inconclusive result or
        #: measuring several callables does not rebuild the flush buffer and the blocker
        self._backends: dict[str, Backend] = {}

    @property
    def disabled(self) -> bool:
        return self._side.settings.disable

    def _backend(self, cache: str | None) -> Backend:
        if not self._ctx.is_cuda:
            return CpuBackend()
        from pytest_cudaperf.measure.cuda import CudaBackend

        chosen = cache or self._perf.cache or self._side.settings.cache
        if chosen not in self._backends:
            self._backends[chosen] = CudaBackend(
                self._ctx.device, chosen, self._ctx.l2_bytes, self._ctx.uuid
            )
        return self._backends[chosen]

    def _run(self, work: Callable[[Backend], Any], cache: str | None) -> Any:
        with self._ctx.lock.exclusive():
            backend = self._backend(cache)
            backend.reset()
            return work(backend)

    def close(self) -> None:
        """Release the backends' flush buffers and graph pools."""
        backends, self._backends = self._backends, {}
        for backend in backends.values():
            backend.close()

    def __call__(
        self,
        fn: Callable[..., object],
        *args: Any,
        name: str | None = None,
        cache: str | None = None,
        graph: bool | None = None,
        warmup: float | None = None,
        min_time: float | None = None,
        max_time: float | None = None,
        **kwargs: Any,
    ) -> Measurement:
        call = functools.partial(fn, *args, **kwargs) if args or kwargs else fn
        if self.disabled or self._state.replaying:
            began = time.perf_counter()
            call()
            why = "measurement disabled" if self.disabled else "not measured: the body re-run"
            return Measurement.from_samples(
                [(time.perf_counter() - began) * 1e3],
                warnings=(why,),
                name=name,
                device=str(self._ctx.device),
            )
        use_graph = self._perf.graph if graph is None else graph
        key = record_key(self._nodeid, name, self._state)
        base = budget_for(self._side, self._perf, warmup, min_time, max_time)

        def run_once(budget: Budget) -> Measurement:
            work = functools.partial(
                measure_backend, fn=call, budget=budget, graph=use_graph, name=name
            )
            result: Measurement = self._run(work, cache)
            return result

        measurement = measure_judged(
            self._side,
            self._state,
            key,
            run_once,
            base,
            self._perf,
            self._ctx.device_class,
        )
        if self._ctx.is_cuda:
            peak = memory.CudaMemory(pinned=False).peak(call)
            if peak is not None:
                self._side.add_peak(
                    self._state, key, peak, self._ctx.device_class, self._perf.max_peak
                )
        return measurement

    def compare(
        self,
        candidate: Callable[[], object],
        reference: Callable[[], object],
        *,
        name: str | None = None,
        cache: str | None = None,
        graph: bool | None = None,
        max_time: float | None = None,
    ) -> Comparison:
        """Measure both interleaved in this run; ``speedup`` = reference time / candidate time."""
        use_graph = self._perf.graph if graph is None else graph
        budget = budget_for(self._side, self._perf, max_time=max_time)
        skip = self.disabled or self._state.replaying
        if skip:
            budget = Budget(warmup=0.0, max_time=1e-9, min_samples=1)
        comparison: Comparison = self._run(
            lambda b: compare_backend(b, candidate, reference, budget, use_graph, name), cache
        )
        if not skip:
            key = f"{self._nodeid}#{name or 'compare'}"
            self._side.add_comparison(self._state, key, comparison, self._perf.min_speedup)
        return comparison

    @contextlib.contextmanager
    def region(self, name: str) -> Iterator[None]:
        """Time a region each time it runs (events on CUDA, the host clock on CPU)."""
        if self._state.replaying:  # its runs in the test's own call are the region's samples
            yield
            return
        region = self._regions.setdefault(name, _Region(name))
        if self._ctx.is_cuda:
            import torch

            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            yield
            end.record()
            region.pending.append((start, end))
        else:
            began = time.perf_counter_ns()
            yield
            region.samples.append((time.perf_counter_ns() - began) / 1e6)

    def result(self, name: str) -> Measurement:
        """The Measurement of a region so far (also recorded at the end of the test)."""
        return self._measured(self._regions[name])

    def _measured(self, region: _Region) -> Measurement:
        if region.pending:
            region.pending[-1][1].synchronize()
            region.samples.extend(s.elapsed_time(e) for s, e in region.pending)
            region.pending.clear()
        return Measurement.from_samples(
            list(region.samples), metric="region", device=str(self._ctx.device), name=region.name
        )

    def finish(self) -> None:
        """Record every region's Measurement, once (before the test's call report is built)."""
        self.close()
        regions, self._regions = self._regions, {}
        if self.disabled:
            return
        for name, region in regions.items():
            if not (region.samples or region.pending):
                continue
            measurement = self._measured(region)
            key = record_key(self._nodeid, name, self._state)
            record, verdict = self._side.judge_time(
                key, measurement, self._perf, self._ctx.device_class
            )
            self._side.add_time(self._state, record, verdict, measurement, self._perf)


# --- memory_guard --------------------------------------------------------------------------


@dataclass
class Guard:
    """What ``with memory_guard(...) as g`` yields: ``g.peak_bytes``, ``g.leaked_bytes``."""

    peak_bytes: int | None = None
    leaked_bytes: int = 0
    leak: memory.LeakResult | None = None


class MemoryGuard:
    """The ``memory_guard`` fixture: a context manager for a block, ``check`` for a callable."""

    def __init__(self, side: Judge, state: ItemState, nodeid: str, device_type: str) -> None:
        self._side = side
        self._state = state
        self._nodeid = nodeid
        self._device_type = device_type
        self._count = 0

    def _backend(self, pinned: bool = True, outside_torch: bool = False) -> memory.MemoryBackend:
        return memory.make_backend(self._device_type, pinned, outside_torch)

    def _key(self) -> str:
        self._count += 1
        return self._nodeid if self._count == 1 else f"{self._nodeid}#guard{self._count}"

    @contextlib.contextmanager
    def __call__(
        self,
        max_peak: int | str | None = None,
        leak_tolerance: int | str = 0,
        pinned: bool = True,
        outside_torch: bool = False,
    ) -> Iterator[Guard]:
        """Single-shot: readings before and after the block (prone to look-alikes such as lazy
        caches filled inside the block; prefer ``check`` or ``@no_leak``)."""
        from pytest_cudaperf.markers import parse

        opts: LeakOptions = parse(
            "no_leak", (), {"tolerance": leak_tolerance, "max_peak": max_peak}
        )
        guard = Guard()
        if self._side.settings.disable or self._state.replaying:
            yield guard
            return
        backend = self._backend(pinned, outside_torch)
        check = memory.BlockCheck(backend, opts.tolerance)
        check.start()
        with backend.peak_window() as window:
            yield guard
        peak = window.result
        guard.peak_bytes = peak.peak_bytes if peak else None
        result = check.finish()
        guard.leak, guard.leaked_bytes = result, result.leaked_bytes
        key = self._key()
        self._side.add_leak(self._state, key, result)
        self._side.check_peak(self._state, key, peak, opts.max_peak)

    def check(
        self,
        fn: Callable[..., object],
        *args: Any,
        warmup: int = 2,
        iterations: int = 3,
        tolerance: int | str = 0,
        max_peak: int | str | None = None,
        **kwargs: Any,
    ) -> Guard:
        """Repeat mode on a callable: warm-up runs, then settled readings after each run."""
        from pytest_cudaperf.markers import parse

        opts: LeakOptions = parse(
            "no_leak",
            (),
            {
                "tolerance": tolerance,
                "warmup": warmup,
                "iterations": iterations,
                "max_peak": max_peak,
            },
        )
        call = functools.partial(fn, *args, **kwargs)
        guard = Guard()
        if self._side.settings.disable or self._state.replaying:
            call()
            return guard
        backend = self._backend()
        result = memory.check_leaks(call, backend, opts.warmup, opts.iterations, opts.tolerance)
        key = self._key()
        self._side.add_leak(self._state, key, result)
        guard.leak, guard.leaked_bytes = result, result.leaked_bytes
        peak = backend.peak(call)
        guard.peak_bytes = peak.peak_bytes if peak else None
        self._side.check_peak(self._state, key, peak, opts.max_peak)
        return guard


def budget_for(
    side: Judge,
    perf: PerfOptions,
    warmup: float | None = None,
    min_time: float | None = None,
    max_time: float | None = None,
) -> Budget:
    """A measurement's budget: explicit arguments, else the marker's, else the run's settings;
    the precision follows the tolerance."""
    settings = side.settings
    return Budget.for_tolerance(
        side.tolerance(perf),
        warmup=warmup if warmup is not None else (perf.warmup or 0.05),
        min_time=min_time if min_time is not None else (perf.min_time or 0.0),
        max_time=max_time if max_time is not None else (perf.max_time or settings.max_time),
        rounds=perf.rounds or settings.rounds,
    )


def measure_judged(
    side: Judge,
    state: ItemState,
    key: str,
    run_once: Callable[[Budget], Measurement],
    budget: Budget,
    perf: PerfOptions | None,
    device_class_name: str,
) -> Measurement:
    """Measure, judge against the baseline, and re-measure an inconclusive result (twice the
    time budget each time, at most REMEASURE times) before recording it."""
    for attempt in range(REMEASURE + 1):
        measurement = run_once(dataclasses.replace(budget, max_time=budget.max_time * 2**attempt))
        record, verdict = side.judge_time(key, measurement, perf, device_class_name)
        if verdict.kind is not Kind.INCONCLUSIVE:
            break
    side.add_time(state, record, verdict, measurement, perf)
    return measurement


# --- re-running the test body ----------------------------------------------------------------


def body_of(function: Callable[..., object], funcargs: dict[str, Any]) -> Callable[[], object]:
    """The test function bound to its fixture values (function-scoped fixtures are set up once
    and shared by every re-run)."""
    names = [name for name in inspect.signature(function).parameters if name in funcargs]
    return functools.partial(function, **{name: funcargs[name] for name in names})


def measure_body(
    side: Judge,
    state: ItemState,
    nodeid: str,
    body: Callable[[], object],
    perf: PerfOptions,
    ctx: DeviceContext | None,
    device_class_name: str,
) -> None:
    """``@perf`` without ``cuda_timer``: synchronized wall time of the whole test function."""
    import torch

    cuda = torch.cuda.is_initialized()
    backend = CpuBackend(
        sync=torch.cuda.synchronize if cuda else None,
        metric="wall",
        device=str(ctx.device) if ctx else "cpu",
    )
    key = record_key(nodeid, None, state)

    def run_once(budget: Budget) -> Measurement:
        with ctx.lock.exclusive() if ctx else contextlib.nullcontext(), replaying(state):
            return measure_backend(backend, body, budget)

    measure_judged(
        side,
        state,
        key,
        run_once,
        budget_for(side, perf),
        perf,
        device_class_name,
    )


@contextlib.contextmanager
def replaying(state: ItemState) -> Iterator[None]:
    """While the plugin re-runs a test's body, its cuda_timer and memory_guard calls only run
    their code: the first call's measurements and checks stand, none is recorded again."""
    state.replaying = True
    try:
        yield
    finally:
        state.replaying = False


def leak_check_body(
    side: Judge,
    state: ItemState,
    nodeid: str,
    body: Callable[[], object],
    opts: LeakOptions,
    device_type: str,
) -> None:
    """``@no_leak``: the body already ran once (the first warm-up run)."""
    backend = memory.make_backend(device_type, opts.pinned, opts.outside_torch)
    with replaying(state):
        result = memory.check_leaks(
            body, backend, max(0, opts.warmup - 1), opts.iterations, opts.tolerance
        )
    side.add_leak(state, nodeid, result)
    if opts.max_peak is not None:
        with replaying(state):
            peak = backend.peak(body)
        side.check_peak(state, nodeid, peak, opts.max_peak)


def after_body(
    side: Judge,
    state: ItemState,
    nodeid: str,
    marks: dict[str, Any],
    body: Callable[[], object],
    ctx: DeviceContext | None,
    has_timer: bool,
) -> None:
    """After a passing body: ``@no_leak``'s repeat protocol, then ``@perf`` alone (without
    ``cuda_timer`` in the test) timing the whole function."""
    if "no_leak" in marks:
        leak_check_body(side, state, nodeid, body, marks["no_leak"], memory.device_type())
    if "perf" in marks and not has_timer:
        device_class_name = ctx.device_class if ctx else device_class("cpu", side.probe)
        measure_body(side, state, nodeid, body, marks["perf"], ctx, device_class_name)
