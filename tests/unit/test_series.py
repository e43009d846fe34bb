from __future__ import annotations

from dataclasses import replace

import pytest

from pytest_cudaperf import series
from pytest_cudaperf import series as evidence
from pytest_cudaperf.series import Entry, Recording, entry_of


def rec(median: float, noise: float = 0.01, date: str = "2026-11-01") -> Recording:
    return Recording(date=date, median=median, noise=noise, n=50)


def entry(*medians: float, noise: float = 0.01, metric: str = "device") -> Entry:
    recs = [rec(m, noise, f"2026-11-{i + 1:02d}") for i, m in enumerate(medians)]
    return entry_of(recs, "ms", {}, metric)


def test_value_is_median_of_medians_and_noise_the_spread() -> None:
    value, noise = evidence.summarize_recordings([rec(4.5), rec(5.3), rec(4.9)], "device")
    assert value == 4.9
    # 1.5 x half the relative range: 1.5 * 0.4 / 4.9
    assert noise == pytest.approx(1.5 * 0.4 / 4.9)


def test_one_process_far_off_sets_the_noise_where_the_range_underestimates_it() -> None:
    """The session-7 conv1d's recordings: 25.03-27.44 µs in four processes, 37.24 µs in the
    fifth. 1.5 x half the range says ±36%; an unchanged process was seen at +46%, so the noise is
    that."""
    medians = [0.02508, 0.02543, 0.02744, 0.02503, 0.03724]
    recs = [rec(m) for m in medians]
    value, noise = evidence.summarize_recordings(recs, "device")
    assert value == 0.02543
    assert evidence.spread(medians) == pytest.approx(0.360, abs=0.001)
    assert noise == evidence.reach(recs) == pytest.approx(0.464, abs=0.001)
    # symmetric recordings: the spread stays the larger
    even = [rec(0.9), rec(1.0), rec(1.1)]
    assert evidence.reach(even) == pytest.approx(0.1)
    assert evidence.summarize_recordings(even, "device")[1] == pytest.approx(0.15)
    assert evidence.reach([rec(1.0)]) == evidence.reach([]) == 0.0


def test_a_recording_from_a_slow_host_does_not_reach() -> None:
    """A recording whose reference loop ran 1.66x slower than the others' (a CPU A/A's exp[1024]
    at 2.07x the value): the host's speed explains it, and a 3x slowdown must still fail."""
    at_speed = [replace(rec(m), reference_ms=0.44) for m in (7.96, 8.28, 8.05, 8.0)]
    slow = replace(rec(16.67), reference_ms=0.727)
    assert evidence.reach([*at_speed, slow]) == pytest.approx(8.28 / 8.05 - 1)
    # without the loop's time (files written before it) the recording counts
    assert evidence.reach([*at_speed, rec(16.67)]) == pytest.approx(16.67 / 8.05 - 1)


def test_a_kernel_heavy_host_bound_series_is_taken_at_one_reference() -> None:
    """``torch.unique`` of 4M elements on the H100: 338 µs of kernels, ~90 µs of host work; ten
    unchanged processes read 3.08–4.83 loops as the launch reference took 143–84 µs (2026-11-27,
    e66d464). Taken at the recordings' median reference they agree within a few percent."""
    runs = [(3.64, 0.125), (4.21, 0.101), (4.79, 0.086), (4.67, 0.087), (3.08, 0.143)]
    recordings = [
        Recording("2026-11-27", loops, 0.02, 40, reference_ms=ref, fixed_ms=0.338)
        for loops, ref in runs
    ]
    raw = evidence.spread([r.median for r in recordings])
    assert raw > 0.3
    at_one = evidence.medians_of(recordings, "host")
    assert evidence.spread(at_one) < 0.05
    assert evidence.summarize_recordings(recordings, "host")[1] < 0.05
    # never past the series' median: the kernels explain a move toward it, not beyond
    assert min(at_one) >= min(r.median for r in recordings)
    assert max(at_one) <= max(r.median for r in recordings)
    # other series, and recordings without their kernels' time, are taken as they are
    assert evidence.medians_of(recordings, "device") == [r.median for r in recordings]
    plain = [replace(r, fixed_ms=None) for r in recordings]
    assert evidence.medians_of(plain, "host") == [r.median for r in recordings]


#: ``topk`` then ``nonzero`` on the H100 (2026-11-26, a28bbd9): 128 µs of kernels, which the
#: call waits for behind host work of its own, so its loops stay put in both states of the host
TOPK_NONZERO = [(2.617, 0.0782), (2.464, 0.1318), (2.395, 0.0930), (2.384, 0.1210), (2.457, 0.1231)]


@pytest.mark.parametrize(
    ("points", "unmoved"),
    [
        # h + k / reference exactly: the slope is k, and a perfect fit has no error either way
        ([(2 + 0.05 / x, x) for x in (0.08, 0.10, 0.15)], (0.05, 0.05)),
        # loops that rise with the reference's time (Python-heavy code): nothing is unmoved
        ([(3.0, 0.08), (3.2, 0.10), (3.6, 0.15)], (0.0, 0.0)),
        # the H100's topk then nonzero: none to about half its kernels, two standard errors
        (TOPK_NONZERO, (0.0, 0.0644)),
        # unique of 4 M elements on the H100: all of its 338 µs of kernels, or near it
        ([(3.64, 0.125), (4.21, 0.101), (4.79, 0.086), (4.67, 0.087), (3.08, 0.143)], (0.30, 0.39)),
        # the host seen in one state only (within HOST_MIN): not known
        ([(3.0, 0.09), (3.1, 0.10), (3.0, 0.11)], None),
        # two recordings with a reference: too few
        ([(3.0, 0.08), (3.5, 0.15)], None),
    ],
)
def test_the_part_of_a_host_bound_call_the_host_does_not_move_is_what_its_recordings_show(
    points: list[tuple[float, float]], unmoved: tuple[float, float] | None
) -> None:
    recordings = [
        Recording("2026-11-26", loops, 0.015, 100, reference_ms=ref, fixed_ms=0.128)
        for loops, ref in points
    ]
    found = series.unmoved_range(recordings)
    assert entry_of(recordings, "loops", {}, "host").unmoved_ms == found
    assert entry_of(recordings, "ms", {}, "device").unmoved_ms is None
    if unmoved is None:
        assert found is None
    else:
        assert found == pytest.approx(unmoved, abs=0.01)


def test_a_call_whose_loops_barely_move_with_the_host_keeps_its_spread() -> None:
    """Recordings in both states whose loops fall by 0.2 as the reference slows from 0.08 to
    0.15 ms: about 34 µs of the call's 128 µs of kernels is unmoved by the host, and only that
    moves them (all 128 µs could move the fastest recording up to 0.32 loop, to the median,
    and hide the spread the series has)."""
    points = [(3.1, 0.08), (3.0, 0.10), (2.9, 0.15)]
    recordings = [
        Recording("2026-11-26", loops, 0.015, 100, reference_ms=ref, fixed_ms=0.128)
        for loops, ref in points
    ]
    unmoved = series.unmoved_range(recordings)
    assert unmoved is not None
    assert unmoved[1] < 0.128
    fastest = evidence.medians_of(recordings, "host")[0]
    assert 3.0 < fastest < 3.1
    assert series.at_reference(3.1, 3.0, 0.128, (0.08, 0.10), None) == pytest.approx(3.0)


def test_a_recording_is_moved_by_the_kernels_its_series_waits_for_for_certain() -> None:
    """With 0.3–0.4 ms of a call unmoved by the host for certain, a recording whose reference
    ran at 0.08 ms against the recordings' 0.10 ms reads at least 0.3 × 2.5 = 0.75 loop more:
    taken off even past the median, the rest (up to 0.25 loop) only as far as the median."""
    assert series.at_reference(5.0, 4.0, 0.5, (0.08, 0.10), (0.3, 0.4)) == pytest.approx(4.0)
    assert series.at_reference(4.5, 4.0, 0.5, (0.08, 0.10), (0.3, 0.4)) == pytest.approx(3.75)
    # a slower reference: the kernels weigh less, at least 0.3 × 3.33 loop is added back
    slow = series.at_reference(2.5, 4.0, 0.5, (0.15, 0.10), (0.3, 0.4))
    assert slow == pytest.approx(2.5 + 0.4 * (1 / 0.10 - 1 / 0.15))
    # all of the kernels bounded by what the call has
    assert series.at_reference(4.5, 4.0, 0.2, (0.08, 0.10), (0.3, 0.4)) == pytest.approx(4.0)
    # nothing to move without the kernels' time or a reference
    assert series.at_reference(4.5, 4.0, None, (0.08, 0.10), (0.3, 0.4)) == 4.5
    assert series.at_reference(4.5, 4.0, 0.5, (None, 0.10), (0.3, 0.4)) == 4.5


def states(*points: tuple[float, float]) -> list[Recording]:
    """Host-bound recordings, each (loops, launch reference in ms)."""
    return [Recording("2026-11-27", loops, 0.02, 40, reference_ms=ref) for loops, ref in points]


@pytest.mark.parametrize(
    ("points", "reach"),
    [
        # the host seen in one state only: how the series follows the other is not known
        ([(3.0, 0.09), (3.1, 0.10), (3.0, 0.11)], series.STATE_REACH),
        # two states, loops flat (the reference follows the call): the margin alone
        ([(3.0, 0.09), (3.0, 0.10), (3.0, 0.15)], series.STATE_MARGIN),
        # a call whose loops rise as the reference's time ** 0.15
        ([(3.0, 0.09), (3.0 * (15 / 9) ** 0.15, 0.15), (3.0, 0.09)], 0.15 + series.STATE_MARGIN),
        # RandomMixUpV2's 0.39: up to STATE_REACH, no further
        ([(3.0, 0.09), (3.0 * (15 / 9) ** 0.39, 0.15), (3.0, 0.09)], series.STATE_REACH),
        # loops that fall with a slower reference (kernels the reference does not follow)
        ([(3.0, 0.09), (2.5, 0.15), (3.0, 0.09)], series.STATE_MARGIN),
        # two recordings with a reference: too few for a slope
        ([(3.0, 0.09), (3.5, 0.15)], series.STATE_REACH),
    ],
)
def test_a_host_bound_series_reaches_into_the_hosts_state_as_far_as_its_recordings_show(
    points: list[tuple[float, float]], reach: float
) -> None:
    """The host's launch reference took ~90 µs in its fast state and ~150 µs in its slow one
    (2026-11-27, H100): recordings in both states show how far a call's loops follow it."""
    recordings = states(*points)
    assert series.state_reach(recordings, "host") == pytest.approx(reach)
    assert entry_of(recordings, "loops", {}, "host").state_reach == pytest.approx(reach)
    # other series, and recordings without a reference, reach the whole way
    assert series.state_reach(recordings, "device") == series.STATE_REACH
    plain = [replace(r, reference_ms=None) for r in recordings]
    assert series.state_reach(plain, "host") == series.STATE_REACH


def test_a_host_bound_series_spread_is_taken_in_the_hosts_usual_state() -> None:
    """RandomMixUpV2's five recordings (2026-11-29, H200): 7.87 loops with the launch reference
    at 94 µs, 6.3–7.1 at 63–68 µs. The verdict judges it only at 63–68 µs; there its spread is
    ±9%, not the ±18% of all five."""
    recordings = states(
        (6.478, 0.064), (7.866, 0.094), (6.278, 0.063), (7.053, 0.065), (6.705, 0.068)
    )
    usual = [6.478, 6.278, 7.053, 6.705]
    assert series.in_usual_state(recordings, [r.median for r in recordings]) == usual
    noise = series.summarize_recordings(recordings, "host")[1]
    assert noise == pytest.approx(series.spread(usual))
    assert noise < 0.09 < series.spread([r.median for r in recordings])
    # other metrics keep every recording's spread
    assert series.summarize_recordings(recordings, "device")[1] == pytest.approx(
        series.spread([r.median for r in recordings])
    )
    # fewer than three in the usual state, or no reference: every recording counts
    two = states((6.478, 0.064), (7.866, 0.094), (7.9, 0.100), (6.278, 0.063))
    assert series.in_usual_state(two, [1.0, 2.0, 3.0, 4.0]) == [1.0, 2.0, 3.0, 4.0]
    plain = [replace(r, reference_ms=None) for r in recordings]
    assert series.in_usual_state(plain, [1.0] * 5) == [1.0] * 5


def test_noise_is_at_least_the_recordings_noise() -> None:
    # below three processes the largest recording noise counts ...
    _, two = evidence.summarize_recordings([rec(1.0, 0.2), rec(1.0, 0.1)], "device")
    assert two == 0.2
    # ... from three on the median one: one process that waited for a CPU does not blind it
    _, noise = evidence.summarize_recordings(
        [rec(1.0, 3.3), rec(1.0, 0.02), rec(1.0, 0.04)], "device"
    )
    assert noise == 0.04


def test_cpu_wall_time_keeps_its_floor_whatever_the_recordings() -> None:
    steady = [rec(1.0, 0.01), rec(1.01, 0.01), rec(0.99, 0.01), rec(1.0, 0.01), rec(1.0, 0.01)]
    assert evidence.summarize_recordings(steady, "wall")[1] == evidence.WALL_FLOOR
    assert evidence.summarize_recordings(steady, "device")[1] < 0.05


@pytest.mark.parametrize(("metric", "floor"), [("device", 0.03), ("wall", 0.50)])
def test_fewer_than_three_processes_get_the_floor(metric: str, floor: float) -> None:
    assert evidence.summarize_recordings([rec(1.0)], metric) == (1.0, floor)
    _, two = evidence.summarize_recordings([rec(1.0), rec(1.0)], metric)
    assert two == floor
    # two processes far apart: the spread wins over the floor
    _, apart = evidence.summarize_recordings([rec(1.0), rec(3.0)], metric)
    assert apart == pytest.approx(1.5 * 1.0 / 2.0)


def test_bytes_are_exact() -> None:
    assert evidence.summarize_recordings([rec(100, 0.0), rec(200, 0.0)], "bytes") == (200, 0.0)


def test_no_recordings_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least one"):
        evidence.summarize_recordings([], "device")


def test_metric_of() -> None:
    assert evidence.metric_of("time:wall") == "wall"
    assert evidence.metric_of("time:device/cold") == "device"
    assert evidence.metric_of("memory:peak", "bytes") == "bytes"


def test_change_point_needs_more_than_tolerance_and_twice_the_noise() -> None:
    series = entry(1.0, 1.0, 1.01, 0.99, noise=0.01)  # 4 processes, noise ~1.5%
    assert not evidence.is_change_point(series, [rec(1.04)], 0.05)
    assert evidence.is_change_point(series, [rec(1.2)], 0.05)
    assert evidence.is_change_point(series, [rec(0.8)], 0.05)
    noisy = entry(1.0, 1.1, 0.9, noise=0.01)  # moves ±15% between processes
    assert not evidence.is_change_point(noisy, [rec(1.2)], 0.05)
    assert evidence.is_change_point(noisy, [rec(1.5)], 0.05)


def test_intentional_cpu_change_of_twenty_percent_is_a_change_point() -> None:
    one = entry(1.0, noise=0.02, metric="wall")  # floor 10%, not twice the floor
    assert evidence.is_change_point(one, [rec(1.2, 0.02)], 0.05)
    assert not evidence.is_change_point(one, [rec(1.08, 0.02)], 0.05)


def test_change_point_ignores_nan_recordings() -> None:
    assert not evidence.is_change_point(entry(1.0), [rec(float("nan"))], 0.05)


def test_drift_step_by_step() -> None:
    climbing = entry(1.0, 1.03, 1.06, 1.09)
    found = evidence.baseline_drift(climbing, 0.05)
    assert found is not None
    assert found.change == pytest.approx(0.09)
    assert found.first_date == "2026-11-01"
    assert found.text() == "drifting +9.0% since 2026-11-01"
    falling = evidence.baseline_drift(entry(1.0, 0.97, 0.94, 0.91), 0.05)
    assert falling is not None
    assert falling.text().startswith("drifting −9.0%")


@pytest.mark.parametrize(
    "medians",
    [
        (1.0, 1.01, 1.02),  # total under the tolerance
        (1.0, 1.0, 1.09),  # one step over the tolerance: a jump, not drift
        (1.0, 1.06, 0.95, 1.07),  # up and down
        (1.0, 1.08),  # too few recordings
    ],
)
def test_no_drift(medians: tuple[float, ...]) -> None:
    assert evidence.baseline_drift(entry(*medians), 0.05) is None


def test_a_series_too_noisy_to_fail_says_why_and_what_it_hides() -> None:
    wild = entry(1.0, 3.0, 1.0)  # an unchanged process was seen at +200%: its reach
    assert series.blindness(wild) == (
        "±200% (series moves ±200% between processes (3 recordings)): no slowdown under 3.0x "
        "can fail it"
    )
    unstable = entry_of([rec(1.0, noise=1.37)], "ms", {}, "wall")  # one process that waited
    assert series.blindness(unstable) is not None
    assert "its recordings were unstable themselves (median ±137%)" in str(
        series.blindness(unstable)
    )
    assert series.blindness(entry(1.0, 1.02, 0.99)) is None
    assert series.blindness(entry_of([rec(1.0, noise=0.9)], "ms", {}, "wall")) is None  # 1.9x fails
    peak = entry_of([rec(4096, noise=0.0)], "bytes", {}, "bytes")
    assert series.blindness(peak) is None
