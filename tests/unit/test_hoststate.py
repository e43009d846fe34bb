"""Waiting for the host's state (:mod:`pytest_cudaperf.run.hoststate`), on a fake clock."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator

import pytest

from pytest_cudaperf.run.hoststate import POLL_S, HostWait, Spell, latest_reference


class FakeTime:
    """A clock that only ``sleep`` moves."""

    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def probe_of(readings: Iterable[float]) -> Callable[[], float]:
    """The probe reads ``readings`` in turn, then the last one for ever."""
    it = iter(readings)
    last = [0.0]

    def probe() -> float:
        last[0] = next(it, last[0])
        return last[0]

    return probe


def test_the_host_coming_back_ends_the_wait() -> None:
    """Measured at 130 µs beside the calls, recorded at 90 µs: the probe's first reading (65 µs
    back to back) scales it, and 45 µs (90 beside a call) is the recordings' state."""
    fake = FakeTime()
    wait = HostWait(probe_of([0.065, 0.065, 0.060, 0.045]), 30.0, fake)
    waited = wait.until_back(0.130, 0.090)
    assert waited.back
    assert fake.slept == [POLL_S] * 3
    assert waited.seconds == pytest.approx(3 * POLL_S)
    assert waited.reference_ms == pytest.approx(0.090)
    assert waited.describe(0.090) == (
        "host-bound: waited 1.5 s for the host to run the launch reference as at recording "
        "(90.00 µs, 90.00 µs at recording), then measured again"
    )


def test_within_the_band_counts_as_back() -> None:
    """1.2x the recordings' reference is within HOST_MIN (25%): the same state."""
    fake = FakeTime()
    wait = HostWait(probe_of([0.1, 0.08]), 30.0, fake)
    assert wait.until_back(0.15, 0.1).back  # 0.08 scaled by 1.5: 0.12 ms
    assert fake.slept == [POLL_S]


def test_a_wait_within_a_few_seconds_ends_there_and_starts_a_spell() -> None:
    """A wait whose test can be measured elsewhere (its loop's fresh process) waits at most
    ``within_s`` of its limit; in vain, it starts a spell as a whole wait of that length would,
    and the deadline it leaves is the callable's own."""
    fake, spell = FakeTime(), Spell()
    wait = HostWait(probe_of([0.065]), 15.0, fake, spell)
    waited = wait.until_back(0.130, 0.090, within_s=5.0)
    assert not waited.back
    assert fake.now - 100.0 == pytest.approx(5.0)
    assert spell.since is not None  # later waits look once
    # a look of one poll, then the rest of the callable's deadline is still there
    assert wait.until_back(0.130, 0.090, within_s=5.0).seconds == pytest.approx(POLL_S)
    # a host back within it ends it at once
    fake = FakeTime()
    back = HostWait(probe_of([0.065, 0.045]), 15.0, fake).until_back(0.130, 0.090, within_s=5.0)
    assert back.back
    assert fake.now - 100.0 == pytest.approx(POLL_S)


def test_a_host_that_stays_slow_ends_the_wait_at_the_deadline() -> None:
    fake = FakeTime()
    wait = HostWait(probe_of([0.065]), 2.0, fake)
    waited = wait.until_back(0.130, 0.090)
    assert not waited.back
    assert fake.now - 100.0 == pytest.approx(2.0)  # no poll past the deadline
    assert waited.describe(0.090) == (
        "host-bound: waited 2.0 s for the host's state, in vain: it still ran the launch "
        "reference 1.4x slower than at recording (130.00 µs, 90.00 µs at recording); not "
        "judged (--cudaperf-state-wait)"
    )


def test_a_slow_probe_counts_against_the_deadline() -> None:
    """A probe that takes 0.6 s (a host slow to launch): a poll starts only where its sleep and
    a probe as long as the last fit before the deadline, so the wait ends within the limit, not
    a probe past it."""
    fake = FakeTime()
    readings = probe_of([0.065])

    def slow_probe() -> float:
        fake.now += 0.6
        return readings()

    wait = HostWait(slow_probe, 2.0, fake)
    waited = wait.until_back(0.130, 0.090)
    assert not waited.back
    assert waited.seconds <= 2.0 + 1e-9
    assert fake.slept == [POLL_S]  # 0.6 + 0.5 + 0.6 s, then 0.5 + 0.6 s more would pass 2.0 s


class BusyDevice:
    """A device other processes measure on: a hold waits ``busy_s`` seconds of the fake clock,
    or the whole bound it is given where that is shorter (then not had). The bounds asked are
    kept."""

    def __init__(self, fake: FakeTime, busy_s: Iterable[float]) -> None:
        self.fake, self.busy_s, self.asked = fake, iter(busy_s), list[float | None]()

    @contextlib.contextmanager
    def __call__(self, within_s: float | None = None, /) -> Iterator[bool]:
        self.asked.append(within_s)
        busy = next(self.busy_s, 0.0)
        had = within_s is None or busy <= within_s
        self.fake.now += busy if had or within_s is None else within_s
        yield had


def test_a_device_busy_past_the_limit_ends_the_wait_unread_and_starts_no_spell() -> None:
    """Other processes measure on the device for 1 s, then 3 s: the first reading waits 1 s of
    a 2 s limit, the poll's hold gets what is left (0.5 s) and gives up there. The wait ends at
    its limit, says the device was busy, and starts no spell: it did not read the state."""
    fake, spell = FakeTime(), Spell()
    device = BusyDevice(fake, [1.0, 3.0])
    waited = HostWait(probe_of([0.065]), 2.0, fake, spell, device).until_back(0.130, 0.090)
    assert device.asked == [pytest.approx(2.0 - POLL_S), pytest.approx(2.0 - 1.0 - POLL_S)]
    assert not waited.back
    assert waited.cut
    assert waited.seconds == pytest.approx(2.0)
    assert waited.busy_s == pytest.approx(1.5)
    assert spell.since is None
    assert waited.describe(0.090) == (
        "host-bound: waited 2.0 s for the host's state, in vain: other processes measured on the "
        "device for 1.5 s of it, to its end; it last ran the launch reference 1.4x slower than at"
        " recording (130.00 µs, 90.00 µs at recording); not judged (--cudaperf-state-wait)"
    )


def test_a_device_had_after_a_while_counts_that_while_and_reads_on() -> None:
    """The device busy for 0.3 s at the first reading: the wait reads on, the host comes back,
    and its line says how long it waited for the device."""
    fake = FakeTime()
    device = BusyDevice(fake, [0.3])
    wait = HostWait(probe_of([0.065, 0.045]), 15.0, fake, device=device)
    waited = wait.until_back(0.130, 0.090)
    assert waited.back
    assert not waited.cut
    assert waited.busy_s == pytest.approx(0.3)
    line = waited.describe(0.090)
    assert line.startswith("host-bound: waited 0.8 s for the host to run the launch reference")
    assert line.endswith(
        "then measured again; 0.3 s of the wait went to other processes' measurements on the device"
    )


def test_a_first_probe_that_leaves_no_room_for_a_poll_ends_the_wait() -> None:
    """The probe's first reading (the scale) took 1.6 s of a 2 s limit: a sleep and another
    probe as long would end 1.7 s past it, so the wait ends there, not polled."""
    fake = FakeTime()
    readings = probe_of([0.065])

    def slow_probe() -> float:
        fake.now += 1.6
        return readings()

    waited = HostWait(slow_probe, 2.0, fake).until_back(0.130, 0.090)
    assert not waited.back
    assert waited.seconds == pytest.approx(1.6)
    assert fake.slept == []


def test_a_poll_fits_the_longest_probe_yet_not_the_last() -> None:
    """Probes of 0.1, 0.5, then 0.1 s within a 3 s limit: after the third, a poll and a probe of
    0.5 s would end at 3.3 s, so the wait ends at 2.3 s (fitting the last, 0.1 s, it would
    have polled once more)."""
    fake = FakeTime()
    times = iter([0.1, 0.5])
    readings = probe_of([0.065])

    def probe() -> float:
        fake.now += next(times, 0.1)
        return readings()

    waited = HostWait(probe, 3.0, fake).until_back(0.130, 0.090)
    assert not waited.back
    assert fake.slept == [POLL_S] * 3
    assert waited.seconds == pytest.approx(2.3)


def test_a_host_slower_or_faster_than_at_recording_is_not_back() -> None:
    """Measured 1.8x faster than at recording: a host still 1.4x faster is not back, one at
    1.1x is; a host that overshoots to 1.4x slower is not back either."""
    fake = FakeTime()
    wait = HostWait(probe_of([0.05, 0.0643, 0.126, 0.0825]), 30.0, fake)
    waited = wait.until_back(0.05, 0.09)
    assert waited.back
    assert fake.slept == [POLL_S] * 3
    assert waited.reference_ms == pytest.approx(0.0825)


def test_a_fast_state_that_stays_is_said_so() -> None:
    fake = FakeTime()
    wait = HostWait(probe_of([0.05]), 1.0, fake)
    waited = wait.until_back(0.05, 0.09)
    assert not waited.back
    assert "1.8x faster than at recording" in waited.describe(0.09)


def test_every_wait_of_one_callable_shares_one_deadline() -> None:
    """The deadline starts at the first wait: a later one gets what is left of it."""
    fake = FakeTime()
    wait = HostWait(probe_of([0.065, 0.065, 0.065, 0.045]), 3.0, fake)
    assert wait.until_back(0.130, 0.090).back  # 1.5 s: two polls slow, the third back
    fake.sleep(0.5)  # a measurement, slow again: the probe's next reading scales to it
    second = wait.until_back(0.130, 0.090)
    assert not second.back
    assert second.seconds == pytest.approx(1.0)  # what was left of the 3 s
    assert fake.now - 100.0 == pytest.approx(3.0)


def test_a_wait_past_the_deadline_does_not_read_the_probe() -> None:
    fake = FakeTime()
    readings: list[float] = []

    def probe() -> float:
        readings.append(0.065)
        return readings[-1]

    wait = HostWait(probe, 1.0, fake)
    assert not wait.until_back(0.130, 0.090).back
    read = len(readings)
    late = wait.until_back(0.130, 0.090)
    assert not late.back
    assert late.seconds == 0.0
    assert len(readings) == read  # the deadline had passed: no probe


def test_a_state_that_outlasted_a_wait_makes_later_waits_look_once() -> None:
    """A wait of a whole 3 s in vain starts a spell of the process; the next callable's wait
    (a wait of its own, sharing the spell) looks once, one poll, and says how long the state has
    lasted; a look that finds the host back ends the spell, so that the one after waits again."""
    fake, spell = FakeTime(), Spell()
    first = HostWait(probe_of([0.065]), 3.0, fake, spell=spell)
    assert not first.until_back(0.130, 0.090).back
    assert spell.since == pytest.approx(103.0)
    fake.sleep(7.0)  # the next test's measurement
    second = HostWait(probe_of([0.065]), 3.0, fake, spell=spell)
    looked = second.until_back(0.130, 0.090)
    assert not looked.back
    assert looked.seconds == pytest.approx(POLL_S)
    assert looked.describe(0.090) == (
        "host-bound: the host has been in another state since a wait ran out 8 s ago, and a "
        "look of 0.5 s found it there: it ran the launch reference 1.4x slower than at "
        "recording (130.00 µs, 90.00 µs at recording); not waited for again, not judged "
        "(--cudaperf-state-wait)"
    )
    assert spell.since == pytest.approx(103.0)  # a look in vain neither ends nor restarts it
    third = HostWait(probe_of([0.065, 0.045]), 3.0, fake, spell=spell)
    assert third.until_back(0.130, 0.090).back
    assert spell.since is None
    fourth = HostWait(probe_of([0.065, 0.065, 0.065, 0.045]), 3.0, fake, spell=spell)
    assert fourth.until_back(0.130, 0.090).seconds == pytest.approx(3 * POLL_S)  # waits again


def test_a_spell_that_a_measurement_saw_end_waits_in_full_again() -> None:
    """A wait in vain starts a spell; a later measurement met the host as at recording
    (``met_back``), so the next wait waits until the host is back instead of looking once."""
    fake, spell = FakeTime(), Spell()
    assert not HostWait(probe_of([0.065]), 3.0, fake, spell=spell).until_back(0.130, 0.090).back
    assert spell.since is not None
    spell.met_back()
    assert spell.since is None
    wait = HostWait(probe_of([0.065, 0.065, 0.045]), 3.0, fake, spell=spell)
    waited = wait.until_back(0.130, 0.090)
    assert waited.back
    assert waited.spell_s is None
    assert waited.seconds == pytest.approx(2 * POLL_S)


def test_a_spell_no_wait_has_met_for_ten_limits_lapses() -> None:
    """A look in vain 20 s into the spell has seen the state; nothing sees it for the next
    31 s (more than ten 3 s limits): the next wait waits in full again, and, in vain, starts a
    spell of its own."""
    fake, spell = FakeTime(), Spell()
    assert not HostWait(probe_of([0.065]), 3.0, fake, spell=spell).until_back(0.130, 0.090).back
    fake.sleep(20.0)
    looked = HostWait(probe_of([0.065]), 3.0, fake, spell=spell).until_back(0.130, 0.090)
    assert looked.seconds == pytest.approx(POLL_S)
    assert spell.seen == pytest.approx(123.5)
    fake.sleep(31.0)
    again = HostWait(probe_of([0.065]), 3.0, fake, spell=spell).until_back(0.130, 0.090)
    assert again.spell_s is None
    assert again.seconds == pytest.approx(3.0)
    assert spell.since == pytest.approx(157.5)


def test_a_wait_cut_short_by_its_deadline_starts_no_spell() -> None:
    """A callable whose measurements spent most of its deadline waits 1 s of its 3 s in vain:
    less than half the limit is no evidence of a lasting state."""
    fake, spell = FakeTime(), Spell()
    wait = HostWait(probe_of([0.065, 0.065, 0.065, 0.045]), 3.0, fake, spell=spell)
    assert wait.until_back(0.130, 0.090).back
    fake.sleep(1.0)
    assert not wait.until_back(0.130, 0.090).back  # the 1 s left
    assert spell.since is None


@pytest.mark.parametrize(
    ("references_ms", "expected"),
    [
        # an H100 measurement of 215 calls whose median reference was 121 µs: its last calls ran
        # in the fast state again (2026-11-27, RandomJigsaw, 40a1b58)
        ((0.119,) * 180 + (0.086, 0.085, 0.088, 0.092, 0.086, 0.097, 0.086, 0.085, 0.103), 0.086),
        # fewer calls than LATEST_CALLS (nine): all of them
        ((0.130, 0.120, 0.140), 0.130),
        # no references (a measurement read from an older report): the whole measurement's
        ((), 0.121),
    ],
)
def test_the_host_state_a_measurement_ended_in_is_its_last_calls(
    references_ms: tuple[float, ...], expected: float
) -> None:
    assert latest_reference(references_ms, 0.121) == pytest.approx(expected)
