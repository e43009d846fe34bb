"""Waiting for the host's state: a host-bound slowdown left undecided while the host ran in
another state than at recording (:attr:`pytest_cudaperf.verdict.Verdict.awaits_host`) is
measured again once the launch reference runs as at recording (:class:`HostWait`), and exact
rounds left undecided while other processes shared the CPU are taken again once they left it
(:class:`CpuWait`), each within one deadline per measured callable (``--cudaperf-state-wait``).
A state that outlasted a wait is a :class:`Spell` of the process: later waits look once.

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
from typing import TYPE_CHECKING, Protocol

from pytest_cudaperf.locks import Hold, free
from pytest_cudaperf.measure import instability
from pytest_cudaperf.units import format_ms

if TYPE_CHECKING:
    from pytest_cudaperf.measure.cpu import MachineMeter

#: seconds between two probes while waiting
POLL_S = 0.5
#: seconds a wait waits where its test can be measured in its loop's fresh process instead: of
#: the 35 waits that met the host back in kornia's two judged runs (2026-11-29, H200), 33 took at
#: most 5 s; the waits in vain took 14.5 s each (why: docs/decisions.md, "Why does a change read
#: in the host's other state go to the fresh process after a few seconds?")
DEFER_AFTER_S = 5.0
#: the share of its limit a wait must have waited, in vain, for the state it waited out to
#: count as lasting (:class:`Spell`)
SPELL_SHARE = 0.5
#: the limits after which a spell that no wait has met lapses (:class:`Spell`): 2.5 min at 15 s
SPELL_LAPSE = 10
#: seconds of a wait spent waiting for the device that its line mentions (:class:`Waited`)
BUSY_SAID_S = 0.1
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


class Ticks(Protocol):
    """A clock and a sleep: the :mod:`time` module, or a test's fake."""

    def monotonic(self) -> float: ...

    def sleep(self, seconds: float, /) -> object: ...


@dataclass
class Spell:
    """A state of the host (another speed than at recording; other processes on the CPU) that
    outlasted a whole wait, in this process. A wait that ran out in vain after waiting
    :data:`SPELL_SHARE` of its limit or more starts it (``since``, on the waits' clock); while it
    lasts, a later wait, of any callable, looks once (one poll) instead of waiting, and a look
    that finds the state over ends it; so does :data:`SPELL_LAPSE` limits without a wait that
    met it (``seen``), and so does a measurement that met the host as at recording
    (:meth:`met_back`), where the next wait waits in full. The host's states switch within
    seconds; one that outlasted half a minute lasts minutes (a job sharing the host, another
    machine of the kind), and waiting for it at every callable would cost each the whole wait
    (why: docs/decisions.md, "Why does a state that outlasted a wait end the waits of later
    tests?")."""

    since: float | None = None
    seen: float = 0.0

    def looks_once(self, now: float, limit_s: float) -> bool:
        """Whether a wait (of ``limit_s``) that starts ``now`` looks once: the state outlasted a
        wait, and a wait met it within the last :data:`SPELL_LAPSE` limits."""
        if self.since is not None and now - self.seen > SPELL_LAPSE * limit_s:
            self.since = None  # lapsed: nothing has seen the state for minutes
        return self.since is not None

    def met_back(self) -> None:
        """A measurement of some callable met the host in its recordings' state
        (:func:`pytest_cudaperf.observation.as_recorded`): the state the spell stands for is
        over, and the next wait waits in full. The spell is a guess that the state lasts; a
        measurement that saw it end is evidence that it did (why: docs/decisions.md, "Why does
        a state that outlasted a wait end the waits of later tests?")."""
        self.since = None

    def ended(
        self, began: float, now: float, limit_s: float, back: bool, looked: bool
    ) -> float | None:
        """A wait (of ``limit_s``) from ``began`` to ``now`` ended: ``back`` (the state is over)
        ends the spell; a look (``looked``) in vain has seen the state, and the seconds since the
        spell began are returned for its line; a whole wait in vain (of :data:`SPELL_SHARE` of
        ``limit_s`` or more) starts it. None but for a look in vain."""
        if back:
            self.since = None
        elif self.since is not None and looked:
            self.seen = now
            return now - self.since
        elif self.since is None and now - began >= SPELL_SHARE * limit_s:
            self.since = self.seen = now
        return None


@dataclass(frozen=True)
class Waited:
    """One wait: whether the host came back (ran the reference within ``instability.HOST_MIN``
    of its time at recording), after how long, and the launch reference it last read, on the
    scale of the reference timed beside each call (ms). ``busy_s``: how long of it the probes
    waited for the device while other processes measured there; ``cut``: the device was not had
    in the time left, so the wait ended without reading the host's state then."""

    back: bool
    seconds: float
    reference_ms: float
    #: where the wait only looked once (a :class:`Spell`): seconds since the spell began
    spell_s: float | None = None
    busy_s: float = 0.0
    cut: bool = False

    def describe(self, recorded_ms: float) -> str:
        """One line for the test's details."""
        busy = (
            f"; {self.busy_s:.1f} s of the wait went to other processes' measurements on the device"
            if self.busy_s >= BUSY_SAID_S
            else ""
        )
        if self.back:
            return (
                f"host-bound: waited {self.seconds:.1f} s for the host to run the launch "
                f"reference as at recording ({format_ms(self.reference_ms)}, "
                f"{format_ms(recorded_ms)} at recording), then measured again{busy}"
            )
        ratio = self.reference_ms / recorded_ms
        speed = f"{ratio:.1f}x slower" if ratio > 1 else f"{1 / ratio:.1f}x faster"
        ran = (
            f"ran the launch reference {speed} than at recording ({format_ms(self.reference_ms)}"
            f", {format_ms(recorded_ms)} at recording)"
        )
        if self.cut:
            return (
                f"host-bound: waited {self.seconds:.1f} s for the host's state, in vain: other "
                f"processes measured on the device for {self.busy_s:.1f} s of it, to its end; it "
                f"last {ran}; not judged (--cudaperf-state-wait)"
            )
        if self.spell_s is not None:
            return (
                f"host-bound: the host has been in another state since a wait ran out "
                f"{self.spell_s:.0f} s ago, and a look of {self.seconds:.1f} s found it there: it "
                f"{ran}; not waited for again, not judged (--cudaperf-state-wait){busy}"
            )
        return (
            f"host-bound: waited {self.seconds:.1f} s for the host's state, in vain: it still "
            f"{ran}; not judged (--cudaperf-state-wait){busy}"
        )


class HostWait:
    """Waits, within ``limit_s`` seconds in all from its first wait, until ``probe`` (the launch
    reference timed now, ms: :func:`pytest_cudaperf.measure.hostbound.reference_probe`) says the
    host runs as at recording. The probe times the reference back to back, not after a call, so it
    need not read what the reference beside each call reads; its first reading, taken right
    after the measurement that met the other state, scales it to the reference beside that
    measurement's last calls (:func:`latest_reference`). A poll starts only where its sleep and a
    probe as long as the longest yet (that first one included) fit before the deadline: a wait
    ends past its limit only by a probe slower than every one before it. A probe holds the
    device (``device``, a :class:`pytest_cudaperf.locks.Hold`), which it waits for only within
    the time left: while other processes measure there past it, the wait ends without reading
    (:attr:`Waited.cut`). Where the host's other state outlasted an earlier wait of this process
    (``spell``), the wait looks once: one poll. ``ticks`` is a test seam."""

    def __init__(
        self,
        probe: Callable[[], float],
        limit_s: float,
        ticks: Ticks = time,
        spell: Spell | None = None,
        device: Hold = free,
    ) -> None:
        self._probe = probe
        self._limit_s = limit_s
        self._clock = ticks.monotonic
        self._sleep = ticks.sleep
        self._deadline: float | None = None
        self._spell = spell if spell is not None else Spell()
        self._device = device

    def until_back(
        self, measured_ms: float, recorded_ms: float, within_s: float | None = None
    ) -> Waited:
        """Wait until the host runs the reference within ``instability.HOST_MIN`` of
        ``recorded_ms`` (the recordings'), where it ran ``measured_ms`` beside the last calls
        just measured (:func:`latest_reference`); or until the deadline, or ``within_s`` from
        now where that comes first (a wait whose test has somewhere else to be measured: its
        loop's fresh process); or, in a :class:`Spell`, for one poll. A wait cut short by
        ``within_s`` starts a spell as a whole wait of that length would; one that the device
        cut (other processes measuring) neither starts nor ends one: it did not read the
        state."""
        began = self._clock()
        if self._deadline is None:
            self._deadline = began + self._limit_s
        limit_s = self._limit_s if within_s is None else min(self._limit_s, within_s)
        deadline = self._deadline if within_s is None else min(self._deadline, began + within_s)
        once = self._spell.looks_once(began, self._limit_s)
        scale: float | None = None  # read first: right after the measurement, not past the deadline
        now = measured_ms
        probe_s = busy_s = 0.0  # the longest probe yet (a poll must fit it); the device's waits
        back = polled = cut = False
        while self._clock() + POLL_S + probe_s <= deadline and not (once and polled):
            if scale is not None:
                polled = True
                self._sleep(POLL_S)
            asked = self._clock()
            room = POLL_S if scale is None else 0.0  # the first reading leaves room for a poll
            with self._device(max(deadline - asked - probe_s - room, 0.0)) as had:
                started = self._clock()
                busy_s += started - asked
                if not had:
                    cut = True
                    break
                reading = self._probe()
                probe_s = max(probe_s, self._clock() - started)
            if scale is None:  # timed, and the deadline asked again with its time
                scale = measured_ms / reading
                continue
            now = reading * scale
            back = instability.host_ratio(now, recorded_ms) is None
            if back:
                break
        ended = self._clock()
        spell_s = (
            None if cut else self._spell.ended(began, ended, limit_s, back, looked=once and polled)
        )
        return Waited(back, ended - began, now, spell_s, busy_s, cut)


@dataclass(frozen=True)
class CpuWaited:
    """One wait for other processes to leave the CPU: whether they did (their share of the
    machine below ``instability.BUSY_MIN`` over one poll, the load average within the cores),
    after how long, and why not where they did not (the last finding)."""

    free: bool
    seconds: float
    busy: str = ""
    #: where the wait only looked once (a :class:`Spell`): seconds since the spell began
    spell_s: float | None = None

    def describe(self) -> str:
        """One line for the test's details."""
        if self.free:
            return (
                f"pedantic rounds: waited {self.seconds:.1f} s for other processes to leave the "
                "CPU, then took the rounds again"
            )
        why = f" ({self.busy})" if self.busy else ""
        if self.spell_s is not None:
            return (
                f"pedantic rounds: other processes have shared the CPU since a wait ran out "
                f"{self.spell_s:.0f} s ago, and a look of {self.seconds:.1f} s found them "
                f"there{why}; not waited for again, not taken again (--cudaperf-state-wait)"
            )
        return (
            f"pedantic rounds: waited {self.seconds:.1f} s for other processes to leave the CPU, "
            f"in vain{why}; not taken again (--cudaperf-state-wait)"
        )


class CpuWait:
    """Waits, within ``limit_s`` seconds in all from its first wait, until the CPU is free:
    other processes use less than ``instability.BUSY_MIN`` of the machine's CPU time over one
    :data:`POLL_S`, and the load average is within the cores (``instability.busy_machine``,
    ``instability.overloaded``: what made the measurement contended). Exact rounds read under
    contention are judged at twice their baseline, and taken again at once they usually meet
    the same competitor (a compiler, a test run: seconds). Where other processes outlasted an
    earlier wait of this process (``spell``), the wait looks once: one poll. ``meter``
    (:class:`pytest_cudaperf.measure.cpu.MachineMeter`), ``load`` and ``ticks`` (the
    :mod:`time` module's ``monotonic`` and ``sleep``) are test seams."""

    def __init__(
        self,
        limit_s: float,
        meter: MachineMeter | None = None,
        load: Callable[[], float | None] | None = None,
        ticks: Ticks = time,
        spell: Spell | None = None,
    ) -> None:
        from pytest_cudaperf.measure import cpu

        self._limit_s = limit_s
        self._meter = meter if meter is not None else cpu.MachineMeter()
        self._load = load or cpu.load_average
        self._cores = cpu.usable_cores()
        self._clock = ticks.monotonic
        self._sleep = ticks.sleep
        self._deadline: float | None = None
        self._spell = spell if spell is not None else Spell()

    def until_free(self) -> CpuWaited:
        """Poll until the CPU is free, or until the deadline; in a :class:`Spell`, once."""
        began = self._clock()
        if self._deadline is None:
            self._deadline = began + self._limit_s
        once = self._spell.looks_once(began, self._limit_s)
        busy = ""
        free = polled = False
        while self._clock() + POLL_S <= self._deadline and not (once and polled):
            self._meter.reset()
            self._meter.begin()
            self._sleep(POLL_S)
            polled = True
            found = instability.busy_machine(self._meter.others()) or instability.overloaded(
                self._load(), self._cores, measured=True
            )
            free = found is None
            if found is None:  # on found, not free: mypy narrows found for the line below
                break
            busy = found.reason
        ended = self._clock()
        spell_s = self._spell.ended(began, ended, self._limit_s, free, looked=once and polled)
        return CpuWaited(free, ended - began, "" if free else busy, spell_s)
