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


class HostClock:
    """Times samples taken by the test's own code on the CPU (:meth:`timed`, once per sample)
    and makes their :class:`Measurement` with the host's state beside them (:meth:`measurement`).
    ``meter``, ``probe`` and ``environ`` are test seams."""

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

    @contextlib.contextmanager
    def timed(self) -> Iterator[None]:
        """One sample: the block's wall time less the run-queue wait of this thread meanwhile
        (at most :data:`MAX_WAIT_SHARE` of it), with torch's intra-op threads held. The first
        sample times the reference loop before it. A block that raises adds no sample."""
        if not self.probe.points_ms:
            self.probe.point()
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
        whole span."""
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
