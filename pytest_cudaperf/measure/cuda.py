"""The CUDA backend: event timing with launch latency hidden, explicit L2 state, graph mode.

Every sample is queued behind a *blocker* on the stream: a Triton kernel spinning on its own slot
of a pinned host flag array, released by the host as soon as the sample (flush, start event, the
callable's launches, stop event) is queued; ``torch.cuda._sleep`` sized to the host's enqueue time
stands in when Triton is missing. The GPU therefore starts each sample with all its launches
queued, so the events measure device time, not launch latency, and never holds more than one
sample's launches behind a blocker (a full launch queue would stall the host that must release
it). One synchronize per batch of samples. In ``cold`` mode a read-only pass over twice
the L2 size precedes every sample (reads leave no dirty lines to write back inside the timed
region). A callable that synchronizes inside cannot be queued behind a blocker: a dry run detects
it and the measurement becomes a host-bound one (:mod:`pytest_cudaperf.measure.hostbound`): each
call is timed on the host with a synchronize after it, beside a reference of tiny torch calls
timed right before it, and judged in reference loops (the host's speed moves within a process and
between processes, the reference beside each call moves with it); the kernels' own time is judged
apart from it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pytest_cudaperf import _torch_compat
from pytest_cudaperf.measure.hostbound import (
    HostSampler,
    launch_gap_us,
    launch_reference,
    launch_wake,
)
from pytest_cudaperf.measure.measurement import Measurement
from pytest_cudaperf.measure.nvml import BatchClocks, clock_readers, clock_report
from pytest_cudaperf.measure.timing import (
    HOST_BOUND_RATIO,
    Sampled,
    SynchronizesInside,
    in_loops,
    kept_references,
    paired_references,
)
from pytest_cudaperf.units import format_ms

if TYPE_CHECKING:
    import torch

#: spin iterations before the blocker gives up (each is one PCIe read, ~1 µs on the H100): a
#: deadlock bound of ~0.2 s
SPIN_MAX_ITERS = 200_000
#: a batch (samples between two synchronizations) aims at this much device time
BATCH_TARGET_MS = 2.0
MAX_BATCH = 64


class SpinBlocker:
    """Blocks the stream with a one-warp Triton kernel spinning on a pinned flag slot; the
    ``clocked`` kernel also reads the SM clock while it spins (``sm_mhz``)."""

    name = "spin"

    def __init__(
        self, torch_mod: Any, device: torch.device, slots: int = 0, clocked: bool = True
    ) -> None:
        from pytest_cudaperf.measure import _spin

        slots = slots or MAX_BATCH
        self.clocked = clocked
        self._kernel = _spin.spin_until_released
        self._flags = torch_mod.zeros(slots, dtype=torch_mod.int32, pin_memory=True)
        self._host = self._flags.numpy()  # writes through numpy cost ~0.1 µs
        self._counts = torch_mod.zeros(slots, dtype=torch_mod.int32, device=device)
        #: SM cycles and nanoseconds spun, per slot (the clocked kernel)
        self._stamps = torch_mod.zeros(2 * slots, dtype=torch_mod.int64, device=device)
        self._used = 0

    def block(self, slot: int, enqueue_s: float) -> None:
        if slot == 0:
            self._host[:] = 0  # the previous batch has been synchronized
        self._used = slot + 1
        self._kernel[(1,)](
            self._flags, self._counts, self._stamps, slot, SPIN_MAX_ITERS, self.clocked, num_warps=1
        )

    def release(self, slot: int) -> None:
        self._host[slot] = 1

    def release_all(self) -> None:
        self._host[:] = 1

    def timed_out(self) -> bool:
        return bool((self._counts[: self._used] >= SPIN_MAX_ITERS).any().item())

    def sm_mhz(self) -> list[float]:
        """The SM clock while each slot of the last batch spun (after its synchronize)."""
        if not self.clocked:
            return []
        return spin_mhz(self._stamps[: 2 * self._used].tolist())


def spin_mhz(stamps: list[int]) -> list[float]:
    """MHz from (cycles, nanoseconds) pairs laid out flat; pairs without time are skipped."""
    pairs = zip(stamps[0::2], stamps[1::2], strict=True)
    return [cycles / ns * 1e3 for cycles, ns in pairs if ns > 0 and cycles > 0]


class SleepBlocker:
    """Fallback: a sleep kernel (``sleep``: :func:`pytest_cudaperf._torch_compat.cuda_sleeper`'s)
    three times as long as the host needed to queue a sample."""

    name = "sleep"

    def __init__(self, sleep: Callable[[int], object], cycles_per_ms: float) -> None:
        self._sleep = sleep
        self._cycles_per_ms = cycles_per_ms

    def block(self, slot: int, enqueue_s: float) -> None:
        ms = max(0.02, 3 * enqueue_s * 1e3)
        self._sleep(int(ms * self._cycles_per_ms))

    def release(self, slot: int) -> None:
        pass

    def release_all(self) -> None:
        pass

    def timed_out(self) -> bool:
        return False

    def sm_mhz(self) -> list[float]:
        return []


def sleep_cycles_per_ms(torch_mod: Any, sleep: Callable[[int], object] | None = None) -> float:
    """Calibrate ``torch.cuda._sleep`` (``sleep``, else :mod:`pytest_cudaperf._torch_compat`'s):
    cycles per millisecond on the current device."""
    sleep = sleep or _torch_compat.cuda_sleeper()
    start = torch_mod.cuda.Event(enable_timing=True)
    end = torch_mod.cuda.Event(enable_timing=True)
    sleep(1000)
    cycles = 2_000_000
    start.record()
    sleep(cycles)
    end.record()
    end.synchronize()
    return float(cycles / max(start.elapsed_time(end), 1e-3))


class L2Flush:
    """Evicts L2 by reading a buffer twice its size (a read leaves no dirty lines behind), then
    discards the buffer's lines (``discard.global.L2``), so that every sample starts from an L2
    whose lines are invalid rather than full of whatever the replacement policy kept (why:
    docs/decisions.md, "Which L2 flush does cold mode use?"). Falls back to the read alone where the
    discard does not compile (before
    sm_80, or a Triton without inline PTX), and to ``torch.sum`` without Triton.
    """

    BLOCK = 4096
    #: lines discarded per program; the buffer is a whole number of programs' lines
    DISCARD_BLOCK = 1024
    FLOATS_PER_LINE = 32

    def __init__(
        self, torch_mod: Any, device: torch.device, l2_bytes: int, discard: bool = True
    ) -> None:
        chunk = self.DISCARD_BLOCK * self.FLOATS_PER_LINE
        self.n = -(-max(2 * l2_bytes, 8 << 20) // 4 // chunk) * chunk
        self.buffer = torch_mod.ones(self.n, dtype=torch_mod.float32, device=device)
        programs = -(-self.n // self.BLOCK)
        self._partial = torch_mod.empty(programs, dtype=torch_mod.float32, device=device)
        self._out = torch_mod.empty((), dtype=torch_mod.float32, device=device)
        self._sum = torch_mod.sum
        self._kernel: Any = None
        self._discard: Any = None
        #: how this flush works: ``read+discard``, ``read`` or ``torch.sum``
        self.method = "torch.sum"
        try:
            from pytest_cudaperf.measure._spin import read_flush

            read_flush[(programs,)](self.buffer, self._partial, self.n, block=self.BLOCK)
            self._kernel, self._grid = read_flush, (programs,)
            self.method = "read"
        # Triton missing or failing here: flush with torch.sum.
        except Exception:  # noqa: BLE001
            self._kernel = None
        if self._kernel is not None and discard:
            try:
                from pytest_cudaperf.measure._spin import discard_lines

                grid = (self.n // chunk,)
                discard_lines[grid](self.buffer, block=self.DISCARD_BLOCK)
                torch_mod.cuda.synchronize()
                self._discard, self._discard_grid = discard_lines, grid
                self.method = "read+discard"
            # no discard.global.L2 here (before sm_80, or no inline PTX): the read alone
            except Exception:  # noqa: BLE001
                self._discard = None

    def __call__(self) -> None:
        if self._kernel is not None:
            self._kernel[self._grid](self.buffer, self._partial, self.n, block=self.BLOCK)
            if self._discard is not None:
                self._discard[self._discard_grid](self.buffer, block=self.DISCARD_BLOCK)
        else:
            self._sum(self.buffer, dim=0, out=self._out)


class CudaEventSampler:
    """Batches of event-timed samples queued behind a blocker: ``run`` (``calls_per_sample``
    calls, or one replay of the CUDA graph they were captured in: ``graph``) on ``backend``'s
    blocker, L2 flush and timing events. Each batch appends its clock readings to the backend's
    (:attr:`CudaBackend.clock_batches`, :attr:`CudaBackend.spin_mhz`: NVML's raw readings through
    the readers bound at the build, the blocker's SM clock) and enters no other module: the
    finish has them summarised once."""

    def __init__(
        self, backend: CudaBackend, run: Callable[[], object], calls_per_sample: int, graph: bool
    ) -> None:
        self._torch = backend.torch
        self.graph = graph
        self.run = run
        self.calls = calls_per_sample
        self.blocker: SpinBlocker | SleepBlocker | None = backend.blocker
        self._flush = backend.flush
        self._nvml = backend.nvml
        self._clock_batches = backend.clock_batches
        self._spin_mhz = backend.spin_mhz
        self._size = 8
        self._enqueue_s = 1e-3
        self._events = backend.events

    def batch(self) -> list[float]:
        size, run, flush, blocker = self._size, self.run, self._flush, self.blocker
        events = self._events[:size]
        began = time.perf_counter()
        try:
            for slot, (start, end) in enumerate(events):
                if blocker is not None:
                    blocker.block(slot, self._enqueue_s)
                if flush is not None:
                    flush()
                start.record()
                run()
                end.record()
                if blocker is not None:
                    blocker.release(slot)
        finally:
            self._enqueue_s = (time.perf_counter() - began) / size
            if blocker is not None:
                blocker.release_all()  # never leave the stream blocked, whatever happened
        events[-1][1].synchronize()
        if blocker is not None and blocker.timed_out():
            # the host could not release a sample: the callable waited for the GPU
            raise SynchronizesInside("the stream blocker timed out")
        times = [start.elapsed_time(end) / self.calls for start, end in events]
        nvml = self._nvml  # NVML's SM clock and reasons readers (None: no NVML)
        clocks = (size, nvml[0](), nvml[1]()) if nvml is not None else (size, None, None)
        self._clock_batches.append(clocks)
        if blocker is not None:
            self._spin_mhz.extend(blocker.sm_mhz())
        per_sample = max(sum(times) / size * self.calls, 1e-3)
        self._size = max(2, min(MAX_BATCH, int(BATCH_TARGET_MS / per_sample)))
        return times


def event_pairs(torch_mod: Any) -> list[tuple[Any, Any]]:
    """:data:`MAX_BATCH` (start, stop) timing events (created in the driver at first record)."""
    return [
        (torch_mod.cuda.Event(enable_timing=True), torch_mod.cuda.Event(enable_timing=True))
        for _ in range(MAX_BATCH)
    ]


def _synchronizes(
    torch_mod: Any, fn: Callable[[], object], sleep: Callable[[int], object], cycles_per_ms: float
) -> bool:
    """True when ``fn`` waits for the GPU: it takes as long as a 20 ms sleep (``sleep``) queued
    before it."""
    torch_mod.cuda.synchronize()
    sleep(int(20 * cycles_per_ms))
    began = time.perf_counter()
    fn()
    waited = time.perf_counter() - began
    torch_mod.cuda.synchronize()
    return waited >= 0.015


def _make_blocker(
    torch_mod: Any,
    device: torch.device,
    sleep: Callable[[int], object],
    cycles_per_ms: float,
    warnings: list[str],
) -> SpinBlocker | SleepBlocker:
    """The clocked spin blocker, else the plain one (a Triton that cannot read the SM clock),
    else the sleep kernel (no Triton, or it cannot launch on this device)."""
    failure: Exception | None = None
    for clocked in (True, False):
        blocker: SpinBlocker | None = None
        try:
            blocker = SpinBlocker(torch_mod, device, clocked=clocked)
            blocker.block(0, 0.0)
            blocker.release(0)
            torch_mod.cuda.synchronize()
            return blocker
        except Exception as exc:  # noqa: BLE001
            failure = failure or exc
            if blocker is not None:
                blocker.release_all()  # never leave the stream blocked
    assert failure is not None
    warnings.append(
        f"spin blocker unavailable ({type(failure).__name__}: "
        f"{str(failure).splitlines()[0] if str(failure) else ''}); used torch.cuda._sleep"
    )
    return SleepBlocker(sleep, cycles_per_ms)


def _capture_graph(torch_mod: Any, fn: Callable[[], object], calls: int) -> Any:
    side = torch_mod.cuda.Stream()
    side.wait_stream(torch_mod.cuda.current_stream())
    with torch_mod.cuda.stream(side):
        for _ in range(3):
            fn()
    torch_mod.cuda.current_stream().wait_stream(side)
    graph = torch_mod.cuda.CUDAGraph()
    with torch_mod.cuda.graph(graph):
        for _ in range(calls):
            fn()
    torch_mod.cuda.synchronize()
    return graph


def host_ms_per_call(torch_mod: Any, fn: Callable[[], object], device_ms: float) -> float:
    """Host-inclusive time: N back-to-back calls, one synchronize, divided by N."""
    calls = max(3, min(1000, math.ceil(10.0 / max(device_ms, 1e-3))))
    torch_mod.cuda.synchronize()
    began = time.perf_counter_ns()
    for _ in range(calls):
        fn()
    torch_mod.cuda.synchronize()
    return (time.perf_counter_ns() - began) / 1e6 / calls


class CudaBackend:
    """Times callables on ``device`` (the current device) with events, per the protocol above.

    What its build resolves (the sleep kernel's torch function, NVML's clock readers) and what a
    measurement's batches read (:attr:`clock_batches`, :attr:`spin_mhz`) are its own, so that
    of one measurement only the build and the finish enter other modules of the package: a
    reset, a round's sampler (its dry run included; a callable that synchronizes inside gets
    :mod:`pytest_cudaperf.measure.hostbound`'s) and each batch stay in this one (why:
    docs/decisions.md, "Why does a measurement on CUDA enter the backend's module once?").
    """

    def __init__(self, device: torch.device, cache: str, l2_bytes: int, uuid: str) -> None:
        import torch

        self.torch = torch
        self.device = device
        self.cache = cache
        #: what holds for every measurement of this backend (the blocker's fallback)
        self.lasting: list[str] = []
        #: what holds for the current measurement only (cleared by :meth:`reset`)
        self.warnings: list[str] = []
        self.flush = L2Flush(torch, device, l2_bytes) if cache == "cold" else None
        #: NVML's SM clock and reasons readers of this GPU (None: no NVML)
        self.nvml = clock_readers(uuid)
        #: this measurement's NVML readings, one per batch (cleared by :meth:`reset`)
        self.clock_batches: list[BatchClocks] = []
        #: this measurement's SM clock before each sample, as the spin blocker measured it
        #: (MHz; cleared by :meth:`reset`)
        self.spin_mhz: list[float] = []
        #: ``torch.cuda._sleep``, resolved once: the dry run and the sleep blocker call it
        self.sleep = _torch_compat.cuda_sleeper()
        self.cycles_per_ms = sleep_cycles_per_ms(torch, self.sleep)
        self.blocker = _make_blocker(torch, device, self.sleep, self.cycles_per_ms, self.lasting)
        self._graphs: list[Any] = []
        #: one set of timing events for every sampler (round) of this backend, so that no round
        #: gets its event slots recycled in another order than the others (why:
        #: docs/decisions.md, "What does the plugin do with a round that runs high?"). Samplers
        #: never interleave
        #: within a batch, so sharing is safe.
        self.events = event_pairs(torch)
        #: the dry run's answer per callable during one measurement (each round asks again);
        #: emptied by :meth:`finish`, so no callable outlives its measurement here
        self._synchronizing: list[tuple[Callable[[], object], bool]] = []

    def synchronizes(self, fn: Callable[[], object]) -> bool:
        """Whether ``fn`` waits for the GPU (a 20 ms dry run, once per callable and
        measurement)."""
        for known, answer in reversed(self._synchronizing):
            if known is fn:
                return answer
        answer = _synchronizes(self.torch, fn, self.sleep, self.cycles_per_ms)
        self._synchronizing.append((fn, answer))
        return answer

    def sampler(self, fn: Callable[[], object], graph: bool) -> CudaEventSampler | HostSampler:
        torch = self.torch
        began = time.perf_counter()
        fn()  # first call outside the blocker: JIT, handles, allocator growth
        torch.cuda.synchronize()
        first_ms = (time.perf_counter() - began) * 1e3
        run, calls, captured = fn, 1, False
        if graph:
            try:
                estimate = _estimate_ms(torch, fn)
                calls = max(1, min(100, math.ceil(0.1 / max(estimate, 1e-4))))
                self._graphs.append(_capture_graph(torch, fn, calls))
                run, captured = self._graphs[-1].replay, True
            # not capturable: say so and measure eagerly
            except Exception as exc:  # noqa: BLE001
                self.warnings.append(
                    f"graph capture failed ({type(exc).__name__}: "
                    f"{str(exc).splitlines()[0]}); measured eagerly"
                )
                run, calls = fn, 1
        if not captured and self.synchronizes(fn):
            self.warnings.append(
                "callable synchronizes inside: timed on the host in reference loops, its "
                "kernels apart"
            )
            return HostSampler(
                fn,
                torch.cuda.synchronize,
                launch_reference(torch, self.device),
                wake=launch_wake(torch, self.device),
                first_ms=first_ms,
            )
        return CudaEventSampler(self, run, calls, captured)

    def recover(self, sampler: CudaEventSampler, restart: bool = False) -> None:
        """After :class:`SynchronizesInside`: sample without the blocker from now on, or, with
        ``restart``, measure the callable afresh as one that synchronizes inside (its next
        sampler is a :class:`HostSampler`)."""
        self.warnings.append(
            "callable synchronized while the stream was blocked: "
            + (
                "measured host-bound from the first round"
                if restart
                else "launch latency is not hidden"
            )
        )
        sampler.blocker = None
        if not sampler.graph:  # the next round of this measurement need not time out again
            self._synchronizing.append((sampler.run, True))

    def finish(
        self, sampler: CudaEventSampler | HostSampler, fn: Callable[[], object], sampled: Sampled
    ) -> Measurement:
        # the callables end with the measurement: the cache must not keep their tensors alive
        self._synchronizing.clear()
        if isinstance(sampler, HostSampler):
            return self._finish_host(sampled)
        samples = sampled.samples
        device_ms = float(sorted(samples)[len(samples) // 2])
        host = host_ms_per_call(self.torch, fn, device_ms)
        notes = self.lasting + self.warnings
        if host > HOST_BOUND_RATIO * device_ms:
            notes.append(
                f"host-bound: {format_ms(host)} per call on the host vs "
                f"{format_ms(device_ms)} on the device"
            )
        recorded = self.nvml is not None
        clocks, clock_warning = clock_report(self.clock_batches, self.spin_mhz, recorded)
        if clock_warning:
            notes.append(clock_warning)
        graph = sampler.graph
        gap = None if graph else launch_gap_us(self.torch, self.device, self.cycles_per_ms)
        spin = clocks.get("spin_sm_mhz")
        return Measurement.from_samples(
            samples,
            metric="graph" if graph else "device",
            cache=self.cache,
            graph=graph,
            host_ms_per_call=host,
            device=str(self.device),
            blocking=sampler.blocker.name if sampler.blocker is not None else "none",
            flush=self.flush.method if self.flush is not None else "none",
            clocks=clocks,
            warnings=tuple(dict.fromkeys(notes + sampled.warnings)),
            cost_s=sampled.cost_s,
            name=sampled.name,
            round_medians_ms=sampled.round_medians_ms,
            sm_mhz=float(spin["median"]) if spin else None,
            launch_gap_us=gap,
        )

    def _finish_host(self, sampled: Sampled) -> Measurement:
        """A host-bound measurement: the time per call (ms) and, what its verdict compares, the
        time in reference loops (:func:`pytest_cudaperf.measure.timing.in_loops`)."""
        loops = in_loops(sampled)
        references = sorted(paired_references(sampled))
        median_ms = float(sorted(sampled.samples)[len(sampled.samples) // 2])
        return Measurement.from_samples(
            sampled.samples,
            # a round that found out late (the blocker timed out) took no references: its
            # time is the host's, judged as it is
            metric="host" if loops else "device",
            host_ms_per_call=median_ms,
            device=str(self.device),
            warnings=tuple(dict.fromkeys(self.lasting + self.warnings + sampled.warnings)),
            cost_s=sampled.cost_s,
            name=sampled.name,
            round_medians_ms=sampled.round_medians_ms,
            reference_ms=references[len(references) // 2] if references else None,
            in_loops=loops[0] if loops else None,
            in_loops_ci=loops[1] if loops else None,
            references_ms=kept_references(sampled),
        )

    def reset(self) -> None:
        """Before reusing this backend for another measurement: drop the previous one's
        warnings and clock readings (what holds for the backend itself stays). In place: the
        lists are the samplers' too."""
        self.warnings.clear()
        self.clock_batches.clear()
        self.spin_mhz.clear()

    def close(self) -> None:
        """Release flush buffers and graph pools."""
        self.flush = None
        self._graphs.clear()
        self.torch.cuda.synchronize()
        self.torch.cuda.empty_cache()


def _estimate_ms(torch_mod: Any, fn: Callable[[], object]) -> float:
    start = torch_mod.cuda.Event(enable_timing=True)
    end = torch_mod.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        fn()
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end)) / 5
