"""Waiting for the host's state: a host-bound slowdown left undecided while the host ran in
another state than at recording (:attr:`pytest_cudaperf.verdict.Verdict.awaits_host`) is
measured again once the launch reference runs as at recording (:class:`HostWait`), and exact
rounds left undecided while other processes shared the CPU are taken again once they left it
(:class:`CpuWait`), each within one deadline per measured callable (``--cudaperf-state-wait``).

The host's states last seconds to minutes, so an immediate re-measurement usually meets the
same one; polling a probe of the launch reference is cheap (a few milliseconds every
:data:`POLL_S`) against measuring again (why: docs/decisions.md, "Why does a host-bound change
read in the host's other state wait for it?").
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pytest_cudaperf.measure import instability
from pytest_cudaperf.units import format_ms

if TYPE_CHECKING:
    from pytest_cudaperf.measure.cpu import MachineMeter

#: seconds between two probes while waiting
POLL_S = 0.5
#: the last calls of a measurement, whose launch references say which state the host was in
#: when the measurement ended (:func:`latest_reference`)
LATEST_CALLS = 9


def latest_reference(references_ms: Sequence[float], median_ms: float) -> float:
    """The launch reference (ms) of the host's state at the end of a measurement: the median of
    the references beside its last :data:`LATEST_CALLS` calls, or ``median_ms`` (the whole
    measurement's) without them. The host can switch state within a measurement, and the
    probe's first reading, right after it, meets the state it ended in: scaled to the whole
    measurement's reference instead, a probe read in the fast state puts the host's every
    later state a state higher (why: docs/decisions.md, "Why does a host-bound change read in
    the host's other state wait for it?")."""
    latest = [x for x in references_ms[-LATEST_CALLS:] if x > 0]
    return float(statistics.median(latest)) if latest else median_ms


@dataclass(frozen=True)
class Waited:
    """One wait: whether the host came back (ran the reference within ``instability.HOST_MIN``
    of its time at recording), after how long, and the launch reference it last read, on the
    scale of the reference timed beside each call (ms)."""

    back: bool
    seconds: float
    reference_ms: float

    def describe(self, recorded_ms: float) -> str:
        """One line for the test's details."""
        if self.back:
            return (
                f"host-bound: waited {self.seconds:.1f} s for the host to run the launch "
                f"reference as at recording ({format_ms(self.reference_ms)}, "
                f"{format_ms(recorded_ms)} at recording), then measured again"
            )
        ratio = self.reference_ms / recorded_ms
        speed = f"{ratio:.1f}x slower" if ratio > 1 else f"{1 / ratio:.1f}x faster"
        return (
            f"host-bound: waited {self.seconds:.1f} s for the host's state, in vain: it still "
            f"ran the launch reference {speed} than at recording ({format_ms(self.reference_ms)}"
            f", {format_ms(recorded_ms)} at recording); not judged (--cudaperf-state-wait)"
        )


class HostWait:
    """Waits, within ``limit_s`` seconds in all from its first wait, until ``probe`` (the launch
    reference timed now, ms: :func:`pytest_cudaperf.measure.hostbound.reference_probe`) says the
    host runs as at recording. The probe times the reference back to back, not after a call, so it
    need not read what the reference beside each call reads; its first reading, taken right
    after the measurement that met the other state, scales it to the reference beside that
    measurement's last calls (:func:`latest_reference`). ``clock`` and ``sleep`` are test
    seams."""

    def __init__(
        self,
        probe: Callable[[], float],
        limit_s: float,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], object] | None = None,
    ) -> None:
        self._probe = probe
        self._limit_s = limit_s
        self._clock = clock or time.monotonic
        self._sleep = sleep or time.sleep
        self._deadline: float | None = None

    def until_back(self, measured_ms: float, recorded_ms: float) -> Waited:
        """Wait until the host runs the reference within ``instability.HOST_MIN`` of
        ``recorded_ms`` (the recordings'), where it ran ``measured_ms`` beside the last calls
        just measured (:func:`latest_reference`); or until the deadline."""
        began = self._clock()
        if self._deadline is None:
            self._deadline = began + self._limit_s
        scale = 0.0  # read the first time round: right after the measurement, not past the deadline
        now = measured_ms
        probe_s = 0.0  # the last probe's time (it may wait for the GPU): a poll must fit it
        while self._clock() + POLL_S + probe_s <= self._deadline:
            scale = scale or measured_ms / self._probe()
            self._sleep(POLL_S)
            started = self._clock()
            now = self._probe() * scale
            probe_s = self._clock() - started
            if instability.host_ratio(now, recorded_ms) is None:
                return Waited(True, self._clock() - began, now)
        return Waited(False, self._clock() - began, now)


@dataclass(frozen=True)
class CpuWaited:
    """One wait for other processes to leave the CPU: whether they did (their share of the
    machine below ``instability.BUSY_MIN`` over one poll, the load average within the cores),
    after how long, and why not where they did not (the last finding)."""

    free: bool
    seconds: float
    busy: str = ""

    def describe(self) -> str:
        """One line for the test's details."""
        if self.free:
            return (
                f"exact rounds: waited {self.seconds:.1f} s for other processes to leave the CPU, "
                "then took the rounds again"
            )
        why = f" ({self.busy})" if self.busy else ""
        return (
            f"exact rounds: waited {self.seconds:.1f} s for other processes to leave the CPU, "
            f"in vain{why}; not taken again (--cudaperf-state-wait)"
        )


class CpuWait:
    """Waits, within ``limit_s`` seconds in all from its first wait, until the CPU is free:
    other processes use less than ``instability.BUSY_MIN`` of the machine's CPU time over one
    :data:`POLL_S`, and the load average is within the cores (``instability.busy_machine``,
    ``instability.overloaded``: what made the measurement contended). Exact rounds read under
    contention are judged at twice their baseline, and taken again at once they usually meet
    the same competitor (a compiler, a test run: seconds). ``meter``
    (:class:`pytest_cudaperf.measure.cpu.MachineMeter`), ``load``, ``cores``, ``clock`` and
    ``sleep`` are test seams."""

    def __init__(
        self,
        limit_s: float,
        meter: MachineMeter | None = None,
        load: Callable[[], float | None] | None = None,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], object] | None = None,
    ) -> None:
        from pytest_cudaperf.measure import cpu

        self._limit_s = limit_s
        self._meter = meter if meter is not None else cpu.MachineMeter()
        self._load = load or cpu.load_average
        self._cores = cpu.usable_cores()
        self._clock = clock or time.monotonic
        self._sleep = sleep or time.sleep
        self._deadline: float | None = None

    def until_free(self) -> CpuWaited:
        """Poll until the CPU is free, or until the deadline."""
        began = self._clock()
        if self._deadline is None:
            self._deadline = began + self._limit_s
        busy = ""
        while self._clock() + POLL_S <= self._deadline:
            self._meter.reset()
            self._meter.begin()
            self._sleep(POLL_S)
            found = instability.busy_machine(self._meter.others()) or instability.overloaded(
                self._load(), self._cores, measured=True
            )
            if found is None:
                return CpuWaited(True, self._clock() - began)
            busy = found.reason
        return CpuWaited(False, self._clock() - began, busy)
