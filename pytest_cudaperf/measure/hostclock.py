"""The host clock of the entry points whose samples the test's own code takes: a
``cuda_timer.region`` and the rounds of ``benchmark.pedantic`` with a ``setup`` or ``teardown``,
on the CPU. Each sample is timed as the CPU backend times one (:class:`HostClock`): with torch's
intra-op threads held at ``--cudaperf-cpu-threads``, less the time the timing thread sat in a run
queue, and the measurement carries what the CPU backend knows about the host's state — the
reference loop's time (one point at the first sample, one at the end), the run-queue wait, other
processes' share of the machine, more xdist workers than cores, the load average — so that its
verdict weighs a busy or slow host as ``cuda_timer``'s does (why: docs/decisions.md, "Why is
every entry point judged with the host's state?").
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, Mapping

from pytest_cudaperf.measure.cpu import (
    MachineMeter,
    ReferenceProbe,
    WaitMeter,
    contention,
    intra_op_threads,
)
from pytest_cudaperf.measure.measurement import Measurement

#: at most this share of a sample's wall time is taken off as run-queue wait (the CPU sampler's)
MAX_WAIT_SHARE = 0.9
#: the window in which other processes' share of the machine is read is kept open this long at
#: least (s): the machine's CPU ticks are 10 ms a core, so a few milliseconds of rounds hold one
#: tick or none, and this process's own tick reads as another's (windows of 2 ms read others at
#: 80% or not at all where windows of 0.1 s read the 50% that one busy process on two cores is)
MIN_MACHINE_WINDOW_S = 0.1


class HostClock:
    """Times samples taken by the test's own code on the CPU (:meth:`timed`, once per sample)
    and makes their :class:`Measurement` with the host's state beside them (:meth:`measurement`).
    ``meter``, ``probe`` and ``environ`` are test seams, as are ``clock`` and ``sleep``."""

    clock = staticmethod(time.monotonic)
    sleep = staticmethod(time.sleep)

    def __init__(
        self,
        threads: int = 1,
        meter: WaitMeter | None = None,
        probe: ReferenceProbe | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self._threads = threads
        self.meter = meter if meter is not None else WaitMeter(machine=MachineMeter())
        self.probe = probe if probe is not None else ReferenceProbe()
        self._environ = environ if environ is not None else os.environ
        self.samples_ms: list[float] = []
        self._held: int | None = None
        self._opened: float | None = None

    @contextlib.contextmanager
    def timed(self) -> Iterator[None]:
        """One sample: the block's wall time less the run-queue wait of this thread meanwhile
        (at most :data:`MAX_WAIT_SHARE` of it), with torch's intra-op threads held. The first
        sample times the reference loop before it. A block that raises adds no sample."""
        if not self.probe.points_ms:
            self.probe.point()
        if self._opened is None:
            self._opened = self.clock()
        with intra_op_threads(self._threads) as held:
            self._held = held
            waited = self.meter.waited_ns
            self.meter.begin()
            began = time.perf_counter_ns()
            yield
            elapsed = time.perf_counter_ns() - began
            self.meter.end()
        wait = self.meter.waited_ns - waited
        elapsed -= min(max(0, wait), int(elapsed * MAX_WAIT_SHARE))
        self.samples_ms.append(elapsed / 1e6)

    def measurement(
        self, name: str | None = None, device: str = "cpu", calls: int = 1
    ) -> Measurement:
        """The samples so far (each over ``calls``: the calls one sample timed) as CPU wall
        time, with the reference loop timed once more now and the contention findings of the
        whole span (other processes' share of the machine over :data:`MIN_MACHINE_WINDOW_S` at
        least: the rest is waited for here)."""
        if self.meter.machine is not None and self._opened is not None:
            left = MIN_MACHINE_WINDOW_S - (self.clock() - self._opened)
            if left > 0:
                self.sleep(left)
        self.probe.point()
        reasons, noise = contention(self.meter, self._environ)
        return Measurement.from_samples(
            [ms / calls for ms in self.samples_ms],
            metric="wall",
            device=device,
            name=name,
            instability=reasons,
            instability_noise=noise,
            reference_ms=self.probe.value(),
            threads=self._held,
        )
