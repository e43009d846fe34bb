"""The host-clock backend: wall-clock samples, and how much the sampling thread had to wait for
a CPU while it took them.

Contention is read, not guessed: on Linux ``/proc/thread-self/schedstat`` counts the
nanoseconds this thread sat runnable in a run queue; that wait, over the wall time of the
batches, says how much of a wall time was somebody else's. ``/proc/stat`` counts the machine's
busy CPU time: less this process's own, it is what other processes (and, in a VM, the
hypervisor's other guests: ``steal``) used while the samples were taken — work that slows a
measurement through the caches and memory bandwidth the cores share without making it wait.
More xdist workers than usable cores and a load average above the cores are named as well (see
:mod:`pytest_cudaperf.measure.instability` for the noise each implies).

Some slowdowns leave no trace in any counter (another tenant of the host, the core's sibling
thread). A :class:`ReferenceProbe` times a fixed reference loop beside the samples; against the
same loop's time when the baseline was recorded, it says how much slower (or faster) this machine
was while measuring (why: docs/decisions.md, "Why does a CPU measurement time a reference
loop?").
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from pytest_cudaperf.measure import instability
from pytest_cudaperf.measure.measurement import Measurement
from pytest_cudaperf.measure.timing import Sampled

SCHEDSTAT = "/proc/thread-self/schedstat"
PROC_STAT = "/proc/stat"


def parse_schedstat(text: str) -> tuple[int, int] | None:
    """``(ns on a CPU, ns waiting in a run queue)`` from a schedstat line
    (``"<on cpu ns> <run-queue wait ns> <timeslices>"``), or None if it is not one."""
    fields = text.split()
    if len(fields) < 2:
        return None
    try:
        return int(fields[0]), int(fields[1])
    except ValueError:
        return None


def read_schedstat(path: str = SCHEDSTAT) -> tuple[int, int] | None:
    """This thread's schedstat; None where the kernel has none (not Linux, no schedstats)."""
    try:
        with open(path) as f:
            return parse_schedstat(f.read())
    except OSError:
        return None


def parse_proc_stat(text: str) -> tuple[int, int] | None:
    """``(busy ticks, all ticks)`` of the whole machine from ``/proc/stat``'s first line
    (``"cpu  user nice system idle iowait irq softirq steal ..."``): busy is everything but
    ``idle`` and ``iowait``; ``guest`` time is already inside ``user``. None if it is not one."""
    fields = text.split("\n", 1)[0].split()
    if len(fields) < 5 or fields[0] != "cpu":
        return None
    try:
        ticks = [int(f) for f in fields[1:9]]
    except ValueError:
        return None
    idle = ticks[3] + ticks[4]
    return sum(ticks) - idle, sum(ticks)


def read_machine_ticks(path: str = PROC_STAT) -> tuple[int, int] | None:
    """The machine's busy and total CPU ticks; None where there is no ``/proc/stat``."""
    try:
        with open(path) as f:
            return parse_proc_stat(f.readline())
    except OSError:
        return None


#: the reference loop: this many iterations of a Python loop (the interpreter's speed on this
#: core), a copy of :data:`REFERENCE_BYTES` (memory bandwidth), and :data:`REFERENCE_READS`
#: reads at scattered places of a :data:`REFERENCE_SPAN`-byte buffer (memory latency, which a
#: streaming copy does not show); ~0.4 ms on the 2-core CI machine
REFERENCE_LOOP = 2000
REFERENCE_BYTES = 1 << 20
REFERENCE_READS = 1000
REFERENCE_SPAN = 8 << 20


@functools.cache
def _buffers() -> tuple[bytes, bytearray, bytearray]:
    """The copy's source and target and the buffer the scattered reads go to, made at the first
    use (a GPU-only run never makes them). The last is written: an untouched one maps every page
    to the kernel's one zero page, which stays in cache."""
    return bytes(REFERENCE_BYTES), bytearray(REFERENCE_BYTES), bytearray(b"\x01") * REFERENCE_SPAN


def interpret_and_copy() -> int:
    """The reference loop's first part: the interpreter and memory bandwidth."""
    total = 0
    for i in range(REFERENCE_LOOP):
        total += i * i
    source, target, _ = _buffers()
    target[:] = source
    return total


def scattered_reads() -> int:
    """The reference loop's second part: memory latency."""
    buffer, mask, at, total = _buffers()[2], REFERENCE_SPAN - 1, 12345, 0
    for _ in range(REFERENCE_READS):
        at = (at * 1103515245 + 12345) & mask  # full-period LCG: no stride a prefetcher follows
        total += buffer[at]
    return total


def reference_work() -> int:
    """The fixed reference loop :class:`ReferenceProbe` times (the same work in every process)."""
    return interpret_and_copy() + scattered_reads()


class ReferenceProbe:
    """How fast this machine runs a fixed reference loop while a measurement takes its samples.

    :meth:`point` times the loop ``reps`` times and keeps the fastest (an interrupt in one rep is
    not the machine's speed); the backend takes a point at each round's start and one at the end,
    and :meth:`value` is their median in milliseconds: during a slow stretch of the host it reads
    about what the samples read (why: docs/decisions.md, "Why does a CPU measurement time a
    reference loop?")."""

    def __init__(
        self,
        work: Callable[[], object] = reference_work,
        clock: Callable[[], int] = time.perf_counter_ns,
        reps: int = 3,
    ) -> None:
        self._work = work
        self._clock = clock
        self._reps = reps
        self.points_ms: list[float] = []

    def point(self) -> None:
        best: int | None = None
        for _ in range(self._reps):
            start = self._clock()
            self._work()
            elapsed = self._clock() - start
            best = elapsed if best is None else min(best, elapsed)
        if best is not None and best > 0:
            self.points_ms.append(best / 1e6)

    def value(self) -> float | None:
        """The median point in milliseconds; None before any point."""
        return statistics.median(self.points_ms) if self.points_ms else None

    def reset(self) -> None:
        self.points_ms = []


def _clock_ticks() -> int:
    try:
        return int(os.sysconf("SC_CLK_TCK"))
    except (AttributeError, OSError, ValueError):
        return 100


class MachineMeter:
    """The share of the machine's CPU time that other processes used while a measurement ran:
    busy ticks of ``/proc/stat`` less this process's own CPU time (every thread), over all ticks,
    from the first batch's start to when :meth:`others` is asked (the backend's ``finish``).

    One window, not a sum over the batches: ticks are 10 ms per core, a batch may be shorter, and
    under contention the scheduler hands this thread the core just after a tick, so a short batch
    usually ends before the next tick and sees none (summed per batch, two spinning competitors on
    2 cores read 24% instead of 55%)."""

    def __init__(
        self,
        reader: Callable[[], tuple[int, int] | None] = read_machine_ticks,
        own_cpu_ns: Callable[[], int] = time.process_time_ns,
        hz: int | None = None,
    ) -> None:
        self._reader = reader
        self._own = own_cpu_ns
        self._ticks_per_ns = (hz or _clock_ticks()) / 1e9
        self._first: tuple[float, float, float] | None = None

    def _read(self) -> tuple[float, float, float] | None:
        ticks = self._reader()
        return None if ticks is None else (*ticks, self._own() * self._ticks_per_ns)

    def begin(self) -> None:
        """The window opens at the first batch of a measurement (later calls keep it)."""
        if self._first is None:
            self._first = self._read()

    def others(self) -> float | None:
        """Other processes' share of the machine's CPU time since :meth:`begin`; None when
        unknown (no ``/proc/stat``, or no batch yet)."""
        last = self._read() if self._first is not None else None
        if self._first is None or last is None:
            return None
        busy, total, own = (b - a for a, b in zip(self._first, last, strict=True))
        if total <= 0:
            return None
        return min(1.0, max(0.0, (busy - own) / total))

    def reset(self) -> None:
        self._first = None


class WaitMeter:
    """Run-queue wait of the calling thread over the wall time of the spans it was told about
    (:meth:`begin` / :meth:`end` around each batch, from the thread that takes the samples), and,
    with a ``machine`` meter, what other processes used of the machine meanwhile."""

    def __init__(
        self,
        reader: Callable[[], tuple[int, int] | None] = read_schedstat,
        clock: Callable[[], int] = time.perf_counter_ns,
        machine: MachineMeter | None = None,
    ) -> None:
        self._reader = reader
        self._clock = clock
        self.machine = machine
        self.waited_ns = 0
        self.wall_ns = 0
        self.available = True
        self._start: tuple[int, int] | None = None

    def begin(self) -> None:
        if self.machine is not None:
            self.machine.begin()
        if not self.available:
            return
        stat = self._reader()
        if stat is None:
            self.available = False
            return
        self._start = (stat[1], self._clock())

    def end(self) -> None:
        if self._start is None:
            return
        stat = self._reader()
        now = self._clock()
        if stat is None:
            self.available = False
        else:
            self.waited_ns += max(0, stat[1] - self._start[0])
            self.wall_ns += max(0, now - self._start[1])
        self._start = None

    def read(self) -> tuple[int, int] | None:
        """This thread's schedstat now (None where there is none)."""
        return self._reader()

    def waited(self) -> float | None:
        """The share of the spans' wall time spent waiting for a CPU; None when unknown."""
        if not self.available or self.wall_ns <= 0:
            return None
        return min(1.0, self.waited_ns / self.wall_ns)

    def others(self) -> float | None:
        """Other processes' share of the machine's CPU time (see :class:`MachineMeter`)."""
        return self.machine.others() if self.machine is not None else None

    def reset(self) -> None:
        self.waited_ns = self.wall_ns = 0
        self._start = None
        if self.machine is not None:
            self.machine.reset()


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one)."""
    affinity = getattr(os, "sched_getaffinity", None)
    if affinity is not None:
        return len(affinity(0))
    return os.cpu_count() or 1


def xdist_workers(environ: Mapping[str, str]) -> int | None:
    """``PYTEST_XDIST_WORKER_COUNT`` (set in every xdist worker), or None."""
    try:
        return int(environ["PYTEST_XDIST_WORKER_COUNT"])
    except (KeyError, ValueError):
        return None


def load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def contention_findings(
    waited: float | None,
    workers: int | None,
    cores: int,
    load: float | None,
    others: float | None = None,
) -> list[instability.Finding | None]:
    """What the surroundings say about a host-clock measurement: measured run-queue wait, other
    processes' share of the machine, more xdist workers than cores, and a load average above the
    cores (its noise counts only where the wait could not be measured)."""
    measured = waited is not None
    return [
        instability.contention(waited),
        instability.busy_machine(others),
        instability.oversubscribed(workers, cores),
        instability.overloaded(load, cores, measured),
    ]


def contention(meter: WaitMeter, environ: Mapping[str, str]) -> tuple[tuple[str, ...], float]:
    """What the surroundings said while ``meter`` watched (:func:`contention_findings`, from
    ``environ``'s xdist workers, the cores and the load), as a measurement's reasons and noise."""
    return instability.combine(
        contention_findings(
            meter.waited(), xdist_workers(environ), usable_cores(), load_average(), meter.others()
        )
    )


#: a batch of the CPU sampler aims at this much time at least: calls longer than a fifth of it
#: come in smaller batches, down to one call (a 0.5 s call warms up with two calls, not ten)
CPU_BATCH_TARGET_S = 0.1


def calls_per_batch(call_s: float, most: int) -> int:
    """How many timed calls a batch takes: ``most``, or fewer for a call so long that ``most``
    of them would pass :data:`CPU_BATCH_TARGET_S` (at least one)."""
    return max(1, min(most, math.ceil(CPU_BATCH_TARGET_S / max(call_s, 1e-9))))


class CpuSampler:
    """Wall-clock samples of ``fn``: calls shorter than 20 µs are timed in groups and divided;
    calls longer than 20 ms come fewer to a batch (:func:`calls_per_batch`)."""

    def __init__(
        self,
        fn: Callable[[], object],
        per_batch: int = 5,
        sync: Callable[[], None] | None = None,
        meter: WaitMeter | None = None,
    ) -> None:
        self.fn = fn
        self.sync = sync
        self.per_batch = per_batch
        self.group = 1
        self.meter = meter
        self._calibrated = False

    def _timed(self, calls: int) -> float:
        """Milliseconds per call, less the time this thread sat in a run queue while timing
        (Linux schedstat; another process holding the core is not the code's time)."""
        fn, sync = self.fn, self.sync
        before = self._waited_ns()
        start = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        if sync is not None:
            sync()
        elapsed = time.perf_counter_ns() - start
        after = self._waited_ns()
        if before is not None and after is not None:
            elapsed -= min(max(0, after - before), elapsed * 9 // 10)
        return elapsed / 1e6 / calls

    def _waited_ns(self) -> int | None:
        if self.meter is None or not self.meter.available:
            return None
        stat = self.meter.read()
        return stat[1] if stat is not None else None

    def batch(self) -> list[float]:
        if not self._calibrated:
            once = self._timed(1)
            self.group = max(1, min(10_000, math.ceil(0.02 / max(once, 1e-6))))
            self.per_batch = calls_per_batch(once / 1e3 * self.group, self.per_batch)
            self._calibrated = True
        if self.meter is not None:
            self.meter.begin()
        times = [self._timed(self.group) for _ in range(self.per_batch)]
        if self.meter is not None:
            self.meter.end()
        return times


@contextlib.contextmanager
def intra_op_threads(threads: int) -> Iterator[int | None]:
    """torch's intra-op threads set to ``threads`` while inside (0: left as they are), and set
    back after; yields the count the code inside runs with (None where torch is not imported:
    this never imports it)."""
    torch = sys.modules.get("torch")
    getter = getattr(torch, "get_num_threads", None)
    if getter is None:
        yield None
        return
    before = int(getter())
    if threads <= 0 or threads == before:
        yield before
        return
    torch.set_num_threads(threads)  # type: ignore[union-attr]
    try:
        yield threads
    finally:
        torch.set_num_threads(before)  # type: ignore[union-attr]


class CpuBackend:
    """The host-clock backend. With ``sync`` (e.g. ``torch.cuda.synchronize``) it times
    synchronized wall time of code that runs on a GPU. A CPU callable is measured with torch's
    intra-op threads at ``threads`` (0: torch's own setting), so that other processes on a busy
    machine cannot oversubscribe its cores (why: docs/decisions.md, "Why is a CPU callable
    measured with one intra-op thread?")."""

    def __init__(
        self,
        sync: Callable[[], None] | None = None,
        device: str = "cpu",
        meter: WaitMeter | None = None,
        environ: Mapping[str, str] | None = None,
        threads: int = 1,
    ) -> None:
        self._sync = sync
        self._threads = threads
        #: the intra-op threads the current measurement runs with (set by :meth:`hold`)
        self._held: int | None = None
        self._device = device
        #: shared by every sampler of one measurement (rounds, compare's two callables)
        self.meter = meter if meter is not None else WaitMeter(machine=MachineMeter())
        self._environ = environ if environ is not None else os.environ
        #: the reference loop, timed at each round's start and at the end (see ReferenceProbe)
        self.probe = ReferenceProbe()
        self._finished = False

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """The measurement's thread state, while it measures: a CPU callable's intra-op threads
        (code that runs on a GPU keeps the process's)."""
        threads = self._threads if self._device == "cpu" else 0
        with intra_op_threads(threads) as held:
            self._held = held
            yield

    def sampler(self, fn: Callable[[], object], graph: bool) -> CpuSampler:
        if self._finished:  # a new measurement (a re-measure): the wait starts from zero
            self.reset()
        if self._device == "cpu":  # a GPU's wall time is not the host's speed
            self.probe.point()
        return CpuSampler(fn, sync=self._sync, meter=self.meter)

    def recover(  # pragma: no cover - nothing blocks on the CPU
        self, sampler: Any, restart: bool = False
    ) -> None:
        raise AssertionError("the CPU backend never blocks")

    def finish(self, sampler: Any, fn: Callable[[], object], sampled: Sampled) -> Measurement:
        if not self._finished and self._device == "cpu":  # compare() finishes twice
            self.probe.point()
        self._finished = True
        notes = list(sampled.warnings)
        if self._device == "cpu" and sampler.group > 1:
            notes.append(f"timed in groups of {sampler.group} calls (each call < 20 µs)")
        reasons, noise = contention(self.meter, self._environ)
        return Measurement.from_samples(
            sampled.samples,
            metric="wall",
            device=self._device,
            blocking="none",
            warnings=tuple(notes),
            cost_s=sampled.cost_s,
            name=sampled.name,
            round_medians_ms=sampled.round_medians_ms,
            instability=reasons,
            instability_noise=noise,
            reference_ms=self.probe.value(),
            threads=self._held if self._device == "cpu" else None,
        )

    def reset(self) -> None:
        self.meter.reset()
        self.probe.reset()
        self._finished = False

    def close(self) -> None:
        pass
