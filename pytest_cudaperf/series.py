"""A baseline series and what its recordings say: the types (:class:`Recording`, one process's
measurement; :class:`Entry`, a series; :class:`Record`, what one test produced for one series),
the series' value and noise, change points, drift, and how new recordings join a series. Pure
functions over plain data: the files are :mod:`pytest_cudaperf.store`'s.

A series' noise is the larger of what its recordings saw within their processes and how their
medians move between processes: within-process statistics cannot see a state that holds for a
whole process (why: docs/decisions.md, "Why does a series keep recordings from several
processes?").
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_cudaperf.keys import SeriesKey
from pytest_cudaperf.measure import instability
from pytest_cudaperf.units import LOOPS

#: recordings kept per series (oldest dropped first)
MAX_RECORDINGS = 10
#: the units of a time series: milliseconds, and a host-bound time in reference loops
TIME_UNITS = frozenset({"ms", LOOPS})


@dataclass(frozen=True)
class Recording:
    """One process's measurement of a series."""

    date: str
    median: float
    noise: float
    n: int
    rounds: tuple[float, ...] = ()
    sm_mhz: float | None = None
    unstable: tuple[str, ...] = ()
    ci: tuple[float, float] | None = None
    #: the reference loop's time while this process measured (CPU backend on the CPU; see
    #: ``Measurement.reference_ms``)
    reference_ms: float | None = None
    #: the GPU's time per launch of tiny kernels queued back to back in this process (device
    #: time on CUDA; see ``Measurement.launch_gap_us``)
    launch_gap_us: float | None = None
    #: a host-bound time's kernels (ms per call) in this process: the part of each call that
    #: does not follow the host's speed (see ``Measurement.fixed_ms``)
    fixed_ms: float | None = None


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def usual_reference(recordings: Sequence[Recording]) -> float | None:
    """The median reference time (ms) of the recordings that have a usable one: how fast the
    host ran when the series was recorded; None where none has."""
    return _median([x for r in recordings if (x := r.reference_ms) and _finite_positive(x)])


@dataclass(frozen=True)
class Entry:
    """A baseline series: what verdicts use (``value``, ``noise``) and the evidence behind it."""

    value: float
    unit: str
    noise: float
    since: str
    env: Mapping[str, Any]
    recordings: tuple[Recording, ...]
    #: opaque JSON object kept verbatim (per-kernel breakdown)
    breakdown: Mapping[str, Any] | None = None
    #: ``device``, ``wall`` or ``bytes`` (from the series name; not stored)
    metric: str = "device"

    @property
    def processes(self) -> int:
        """How many recordings (each from its own process) stand behind the series."""
        return len(self.recordings)

    @property
    def sm_mhz(self) -> float | None:
        """The median SM clock of the recordings that have one."""
        return _median([r.sm_mhz for r in self.recordings if r.sm_mhz is not None])

    @property
    def reference_ms(self) -> float | None:
        """The median reference-loop time of the recordings that have one: how fast the host
        ran when the series was recorded."""
        return usual_reference(self.recordings)

    @property
    def launch_gap_us(self) -> float | None:
        """The median launch gap of the recordings that have one: the GPU's time per launch
        of back-to-back kernels when the series was recorded."""
        return _median([r.launch_gap_us for r in self.recordings if r.launch_gap_us is not None])

    @property
    def unmoved_ms(self) -> tuple[float, float] | None:
        """How much of each call the host's speed does not move, at least and at most, as this
        series' recordings show (:func:`unmoved_range`)."""
        return unmoved_range(self.recordings) if self.metric == "host" else None

    @property
    def state_reach(self) -> float:
        """How far this series' time follows the host's state (:func:`state_reach`)."""
        return state_reach(self.recordings, self.metric)


@dataclass(frozen=True)
class Record:
    """What one test produced for one series: travels on the TestReport, in the JSON report, and
    into the store. JSON form (``to_json``)::

        {"nodeid": ..., "name": ..., "series": ..., "device_class": ..., "unit": ...,
         "recording": {...Recording...}, "env": {...}, "breakdown": {...} (optional)}
    """

    key: SeriesKey
    series: str
    device_class: str
    unit: str
    recording: Recording
    env: Mapping[str, Any]
    breakdown: Mapping[str, Any] | None = None
    #: the tolerance it was judged at (the marker's, the run's host tolerance for a host-bound
    #: time, else the run's), for the change-point test at update and the drift check (None:
    #: the run's tolerance)
    tolerance: float | None = None

    @property
    def value(self) -> float:
        return self.recording.median


#: noise assumed for a series recorded in fewer than ``MIN_PROCESSES`` processes: one process cannot
#: see process-level states. ±3% for device time, ±15% for host-bound GPU code in reference loops,
#: ±50% for CPU wall time (a 3x slowdown still fails, a 1.6x process state does not); ``cudaperf
#: record`` replaces the floor by the measured spread (why: docs/decisions.md, "What noise does a
#: series from fewer than three processes get?").
SINGLE_PROCESS_FLOOR = {"device": 0.03, "host": 0.15, "wall": 0.50, "bytes": 0.0}
#: the floor of a change point's threshold with fewer than ``MIN_PROCESSES`` recordings: lower
#: than the verdict's for CPU wall time, so that an intentional +20% change starts afresh
CHANGE_POINT_FLOOR = {"device": 0.03, "host": 0.10, "wall": 0.10, "bytes": 0.0}
#: a CPU wall-time series is taken as at least ±30% whatever its recordings: CPU wall time moves
#: between processes by more than a few recordings show; a 3x slowdown still fails (why:
#: docs/decisions.md, "Why is a CPU wall-time series judged at ±30% at least?").
WALL_FLOOR = 0.30
#: recordings from this many processes let their spread stand for the between-process noise
MIN_PROCESSES = 3
#: the between-process spread is this many times half the relative range of the recordings'
#: medians: a range from 3-10 draws underestimates the spread of the population
SPREAD_FACTOR = 1.5
#: an update is a change point when it moves the value by more than this many times the noise
CHANGE_POINT_NOISE_FACTOR = 2.0
#: a series this noisy cannot fail a slowdown under 2x: it is named whenever it is written
BLIND_NOISE = 1.0


def metric_of(series: str, unit: str = "ms") -> str:
    """``device`` (CUDA event / graph time, the kernels' time), ``host`` (GPU code that
    synchronizes inside, in reference loops), ``wall`` (host wall-clock time) or ``bytes``."""
    if unit == "bytes" or series.startswith("memory:"):
        return "bytes"
    if series.startswith("time:host"):
        return "host"
    return "wall" if series.startswith("time:wall") else "device"


def _finite_positive(value: float) -> bool:
    return math.isfinite(value) and value > 0


def toward(value: float, base: float, shift: float) -> float:
    """``value`` less ``shift`` (a part that moved between processes, not with the code), as
    far as ``base`` and no further: a shift never moves a value past it."""
    return min(max(base, value - max(0.0, shift)), value - min(0.0, shift))


def medians_of(recordings: Sequence[Recording], metric: str) -> list[float]:
    """The recordings' medians; those of a host-bound series (``metric == "host"``, in loops)
    at the recordings' median launch reference: a recording whose reference ran faster reads
    up to ``fixed_ms * (1 / reference_ms - 1 / usual)`` loops more for its kernels, which do
    not follow the host (as many of them as :func:`unmoved_range` allows), and is moved toward
    the medians' median by as much of that as it needs (as the verdict moves a new
    measurement: never past it). A kernel-heavy call's loops otherwise move with the host's
    state against the reference: an op of 338 µs kernels and 90 µs of host work read 3.1–4.8
    loops in ten processes for references of 143–84 µs (why: docs/decisions.md, "Why are a
    host-bound series' recordings taken at one reference?")."""
    medians = [r.median for r in recordings]
    usual = usual_reference(recordings)
    if metric != "host" or usual is None or len(medians) < 2:
        return medians
    center = float(statistics.median(medians))
    unmoved = unmoved_range(recordings)
    return [
        at_reference(r.median, center, r.fixed_ms, (r.reference_ms, usual), unmoved)
        for r in recordings
    ]


def at_reference(
    value: float,
    base: float,
    fixed_ms: float | None,
    references: tuple[float | None, float],
    unmoved: tuple[float, float] | None,
) -> float:
    """A host-bound ``value`` (loops, taken with the launch reference at ``now_ms``) as the call
    would read at ``then_ms`` (``references``: ``(now_ms, then_ms)``): its kernels
    (``fixed_ms``) do not follow the host, so it reads ``k * (1 / now_ms - 1 / then_ms)`` loops
    more for the ``k`` ms of them that the call waits for. ``unmoved`` (:func:`unmoved_range`)
    bounds ``k``: its low end is taken off in any case, the rest up to its high end only as far
    as ``base`` and no further (:func:`toward`); without it ``k`` is anything from none to all
    of the kernels. ``value`` as it is without the kernels' time or a reference."""
    now_ms, then_ms = references
    if not (fixed_ms and now_ms and _finite_positive(fixed_ms) and _finite_positive(now_ms)):
        return value
    low, high = unmoved_part(fixed_ms, unmoved)
    per_ms = 1 / now_ms - 1 / then_ms
    return toward(value - low * per_ms, base, (high - low) * per_ms)


def unmoved_part(fixed_ms: float, unmoved: tuple[float, float] | None) -> tuple[float, float]:
    """How much of a call's ``fixed_ms`` of kernels the host's speed does not move, at least and
    at most: ``unmoved`` (:func:`unmoved_range`) within them, or none to all of them without."""
    if unmoved is None:
        return 0.0, fixed_ms
    return min(fixed_ms, unmoved[0]), min(fixed_ms, unmoved[1])


#: :func:`unmoved_range` is the fit's slope less and plus this many of its standard errors
UNMOVED_SE = 2.0


def unmoved_range(recordings: Sequence[Recording]) -> tuple[float, float] | None:
    """How much of each call (ms, at least and at most) does not follow the host's speed, as a
    host-bound series' recordings show it, or None where they cannot: a call of ``h`` loops of
    host work and ``k`` ms that the host's speed does not move reads ``h + k / reference``
    loops, so the slope of the recordings' loops on 1 / their launch reference is the ``k`` they
    saw; the range is that slope less and plus :data:`UNMOVED_SE` standard errors, at least 0.
    None with fewer than :data:`MIN_PROCESSES` recordings that have a reference, or with
    references within ``instability.HOST_MIN`` of each other (the host seen in one state: the
    slope is not known). A call that waits for its kernels behind host work of its own reads
    the same loops in both states, and none of its kernels is set aside; one that waits for all
    of them has them all set aside, whichever way its loops move (why: docs/decisions.md, "How
    much of a host-bound call's kernels does the host's speed not move?")."""
    points = _in_two_states(recordings, [r.median for r in recordings])
    if points is None:
        return None
    xs, ys = [1 / x for x, _ in points], [y for _, y in points]
    fit = statistics.linear_regression(xs, ys)
    residuals = [y - fit.intercept - fit.slope * x for x, y in zip(xs, ys, strict=True)]
    center = statistics.fmean(xs)
    spread_x = sum((x - center) ** 2 for x in xs)
    error = UNMOVED_SE * math.sqrt(sum(e * e for e in residuals) / (len(xs) - 2) / spread_x)
    return max(0.0, fit.slope - error), max(0.0, fit.slope + error)


#: how far a host-bound time in loops can follow the host's state, at most: with the launch
#: reference ``factor`` times slower than at recording, a call's loops may read up to ``factor **
#: STATE_REACH`` more unchanged. The steepest call measured, ``RandomMixUpV2``, rose as the
#: reference's time to the power 0.39; most calls 0.07
STATE_REACH = 0.5
#: added to a series' own slope of loops on the reference (:func:`state_reach`): the slope of
#: three recordings missed that of fifteen runs by up to 0.16 in nine of ten choices
STATE_MARGIN = 0.2


def state_reach(recordings: Sequence[Recording], metric: str) -> float:
    """How far a host-bound series' time in loops follows the host's state: the slope of
    log(loops) on log(launch reference) over its recordings (:func:`medians_of`, the kernels set
    aside), at least 0, plus :data:`STATE_MARGIN`, at most :data:`STATE_REACH`, where at least
    :data:`MIN_PROCESSES` recordings have a reference and theirs lie beyond
    ``instability.HOST_MIN`` apart (the host was seen in two states); :data:`STATE_REACH`
    otherwise, and for any other series. Python-heavy code slows more than the reference in
    the host's slow state (a slope above 0); a call that the reference follows has a slope of 0
    (why: docs/decisions.md, "Why is a host-bound change judged only in the recordings'
    state?")."""
    if metric != "host":
        return STATE_REACH
    points = _in_two_states(recordings, medians_of(recordings, metric))
    if points is None:
        return STATE_REACH  # too few, or one state only: how it follows the other is not known
    slope = statistics.linear_regression(
        [math.log(x) for x, _ in points], [math.log(m) for _, m in points]
    ).slope
    return min(STATE_REACH, max(0.0, slope) + STATE_MARGIN)


def _in_two_states(
    recordings: Sequence[Recording], values: Sequence[float]
) -> list[tuple[float, float]] | None:
    """Each recording's (launch reference, value) where both are usable, if at least
    :data:`MIN_PROCESSES` are and their references lie beyond ``instability.HOST_MIN`` apart
    (the host seen in two states: how a series follows it can be fitted); None otherwise."""
    points = [
        (x, v)
        for r, v in zip(recordings, values, strict=True)
        if (x := r.reference_ms) and _finite_positive(x) and _finite_positive(v)
    ]
    if len(points) < MIN_PROCESSES:
        return None
    references = [x for x, _ in points]
    return None if instability.host_ratio(max(references), min(references)) is None else points


def spread(medians: Sequence[float]) -> float:
    """``SPREAD_FACTOR`` x half the relative range of ``medians`` (0 for fewer than two)."""
    values = [m for m in medians if _finite_positive(m)]
    if len(values) < 2:
        return 0.0
    center = statistics.median(values)
    return SPREAD_FACTOR * (max(values) - min(values)) / 2 / center


def in_usual_state(recordings: Sequence[Recording], values: Sequence[float]) -> list[float]:
    """The ``values`` (one per recording) of the recordings taken with the host in its usual
    state: their launch reference within ``instability.HOST_MIN`` of the recordings' median, or
    none to tell. All of them where fewer than :data:`MIN_PROCESSES` are: a spread of two
    draws says too little. A host-bound verdict is taken only with the host in that state (it
    waits for it, ``Verdict.awaits_host``), so a recording from the other state is the second
    value the state makes, not noise around this one (why: docs/decisions.md, "Why is a
    host-bound series' spread taken in the host's usual state?")."""
    kept = [v for v, usual in zip(values, at_usual_speed(recordings), strict=True) if usual]
    return kept if len(kept) >= MIN_PROCESSES else list(values)


def at_usual_speed(recordings: Sequence[Recording]) -> list[bool]:
    """Per recording, whether the host ran as it usually did for them: its launch reference
    within ``instability.HOST_MIN`` of the recordings' median, or none to tell."""
    usual = usual_reference(recordings)
    return [instability.host_ratio(r.reference_ms, usual) is None for r in recordings]


def reach(recordings: Sequence[Recording], metric: str = "device") -> float:
    """How far the furthest recording lies from the series' value (the median of the
    recordings' medians, :func:`medians_of`), relative; 0 for fewer than two recordings.

    An unchanged process was seen there, so a verdict must not call that far a regression (a
    series whose processes are bimodal has a :func:`spread` below it). A recording taken while the
    host itself ran slow or fast (its reference loop beyond ``instability.HOST_MIN`` of the
    recordings' median) does not count: the host's speed explains it, and the verdict weighs the
    host's speed now on its own (why: docs/decisions.md, "Why is a series' noise at least its
    reach?")."""
    pairs = [
        (usual, m)
        for usual, m in zip(at_usual_speed(recordings), medians_of(recordings, metric), strict=True)
        if _finite_positive(m)
    ]
    if len(pairs) < 2:
        return 0.0
    value = statistics.median(m for _, m in pairs)
    return max((abs(m / value - 1) for usual, m in pairs if usual), default=0.0)


@dataclass(frozen=True)
class NoiseParts:
    """What a series' noise is made of (:func:`noise_parts`); the noise is the largest."""

    #: what the recordings saw within their own processes (their noise)
    seen: float
    #: how the recordings' medians move between processes: :func:`spread` or :func:`reach`
    moves: float
    #: the metric's floor: few processes, CPU wall time
    floor: float
    #: the unstable findings of a recording at the middle of their noise (the one ``seen`` is
    #: with an odd count)
    unstable: tuple[str, ...] = ()

    @property
    def noise(self) -> float:
        return max(self.seen, self.moves, self.floor)


def noise_parts(recordings: Sequence[Recording], metric: str) -> NoiseParts:
    """The parts of a series' noise: with fewer than ``MIN_PROCESSES`` recordings the largest
    recording noise and ``SINGLE_PROCESS_FLOOR[metric]``, from ``MIN_PROCESSES`` on the median
    recording noise; the between-process spread (a host-bound series' over its recordings in
    the host's usual state, :func:`in_usual_state`) or the furthest recording's distance
    (:func:`reach`: what an unchanged process was seen to read); ``WALL_FLOOR`` for CPU wall
    time. Peak memory (``metric == "bytes"``) is exact: no noise."""
    if metric == "bytes" or not recordings:
        return NoiseParts(0.0, 0.0, 0.0)
    # from MIN_PROCESSES recordings on, the median recording's noise: one process that waited for
    # a CPU most of the time (±330% on a loaded 2-core machine) must not make the series blind
    by_noise = sorted(recordings, key=lambda r: r.noise)
    few = len(recordings) < MIN_PROCESSES
    source = by_noise[-1] if few else by_noise[(len(by_noise) - 1) // 2]
    seen = source.noise if few else float(statistics.median(r.noise for r in recordings))
    medians = medians_of(recordings, metric)
    if metric == "host":
        medians = in_usual_state(recordings, medians)
    moves = max(spread(medians), reach(recordings, metric))
    floor = SINGLE_PROCESS_FLOOR.get(metric, SINGLE_PROCESS_FLOOR["device"]) if few else 0.0
    if metric == "wall":
        floor = max(floor, WALL_FLOOR)
    return NoiseParts(seen, moves, floor, source.unstable)


def noise_origin(parts: NoiseParts, n: int, metric: str, noise: float) -> str:
    """Where a series' ``noise`` (of ``n`` recordings, made of ``parts``) comes from, for a
    verdict that it keeps from the tolerance: between-process movement, recordings that were
    unstable in their own processes, or the CPU wall-time floor."""
    if parts.seen > max(parts.moves, parts.floor):
        why = f"; {', '.join(parts.unstable)}" if parts.unstable else ""
        return f"its recordings were unstable themselves (median ±{parts.seen:.0%}{why})"
    if parts.floor > parts.moves and metric == "wall" and n >= MIN_PROCESSES:
        return (
            f"CPU wall time is judged at ±{parts.floor:.0%} at least; the series moves "
            f"±{parts.moves:.0%} between processes ({n} recordings)"
        )
    return f"series moves ±{noise:.0%} between processes ({n} recordings)"


def blindness(entry: Entry) -> str | None:
    """Why ``entry`` is too noisy to fail a slowdown under 2x (:data:`BLIND_NOISE`): its noise,
    where the noise comes from and the slowdown it hides; None for a series that can."""
    if entry.metric == "bytes" or not entry.noise >= BLIND_NOISE:
        return None
    parts = noise_parts(entry.recordings, entry.metric)
    origin = noise_origin(parts, entry.processes, entry.metric, entry.noise)
    return f"±{entry.noise:.0%} ({origin}): no slowdown under {1 + entry.noise:.1f}x can fail it"


def beyond_tolerance(entry: Entry, tolerance: float) -> bool:
    """Whether ``entry``, recorded in :data:`MIN_PROCESSES` processes or more, moves between or
    within them by more than ``tolerance`` (the one its test was judged at) and than its
    metric's floor (:data:`WALL_FLOOR`): its verdicts' threshold is raised to that noise, so a
    change within it reads INCONCLUSIVE, not a regression. Peak memory has no noise; a series of
    fewer processes carries the documented floor; a blind one (:func:`blindness`) is named on
    its own (why: docs/decisions.md, "Why does `cudaperf record` name the series that move more
    than their tolerance?")."""
    if entry.metric == "bytes" or entry.processes < MIN_PROCESSES or entry.noise >= BLIND_NOISE:
        return False
    parts = noise_parts(entry.recordings, entry.metric)
    return max(parts.seen, parts.moves) > max(tolerance, parts.floor)


def summarize_recordings(recordings: Sequence[Recording], metric: str) -> tuple[float, float]:
    """``(value, noise)`` of a series: the median of the recordings' medians, and the relative
    half-width a verdict uses (the largest of :func:`noise_parts`). Peak memory
    (``metric == "bytes"``) is exact: the latest recording's value, no noise."""
    if not recordings:
        raise ValueError("a series needs at least one recording")
    if metric == "bytes":
        return recordings[-1].median, 0.0
    value = float(statistics.median(medians_of(recordings, metric)))
    return value, noise_parts(recordings, metric).noise


def change_point_threshold(entry: Entry, tolerance: float) -> float:
    """How far (relative) new recordings must lie from ``entry.value`` to start the series afresh:
    beyond the tolerance, beyond ``CHANGE_POINT_NOISE_FACTOR`` x the noise its recordings show, and
    beyond the single-process floor (twice a floor would hide a +20% intentional change on CPU)."""
    seen = max(
        max((r.noise for r in entry.recordings), default=0.0),
        spread([r.median for r in entry.recordings]),
    )
    few = len(entry.recordings) < MIN_PROCESSES
    floor = CHANGE_POINT_FLOOR.get(entry.metric, 0.0) if few else 0.0
    return max(tolerance, CHANGE_POINT_NOISE_FACTOR * seen, floor)


def is_change_point(entry: Entry, new_recordings: Sequence[Recording], tolerance: float) -> bool:
    """Are ``new_recordings`` clearly at a new level? |new median / value - 1| > threshold.
    Peak memory is exact: any other value is a new level."""
    medians = [r.median for r in new_recordings if math.isfinite(r.median)]
    if not medians:
        return False
    new = float(statistics.median(medians))
    if entry.unit == "bytes" or not _finite_positive(entry.value):
        return new != entry.value
    return abs(new / entry.value - 1) > change_point_threshold(entry, tolerance)


@dataclass(frozen=True)
class BaselineDrift:
    """Recordings that climbed (or fell) step by step: each step under the tolerance, the total
    from the first to the last recording over it."""

    change: float
    first_date: str
    last_date: str
    recordings: int

    def text(self) -> str:
        sign = "+" if self.change >= 0 else "−"
        return f"drifting {sign}{abs(self.change):.1%} since {self.first_date}"


def baseline_drift(entry: Entry, tolerance: float) -> BaselineDrift | None:
    """A :class:`BaselineDrift` when ``entry``'s recordings (3 or more) moved one way in steps
    each under ``tolerance`` (a step back of at most a quarter of it is allowed) and by more than
    it in all."""
    recs = [r for r in entry.recordings if _finite_positive(r.median)]
    if len(recs) < MIN_PROCESSES or entry.unit == "bytes":
        return None
    total = recs[-1].median / recs[0].median - 1
    if abs(total) <= tolerance:
        return None
    direction = 1.0 if total > 0 else -1.0
    for before, after in itertools.pairwise(recs):
        step = (after.median / before.median - 1) * direction
        if step >= tolerance or step < -tolerance / 4:
            return None
    return BaselineDrift(total, recs[0].date, recs[-1].date, len(recs))


def entry_of(  # noqa: PLR0913 - an entry's parts, each optional but the recordings
    recordings: Sequence[Recording],
    unit: str,
    env: Mapping[str, Any],
    metric: str,
    since: str | None = None,
    breakdown: Mapping[str, Any] | None = None,
) -> Entry:
    """The series ``recordings`` (oldest first) make; only the last ``MAX_RECORDINGS`` kept (the
    latest one for peak memory, which is exact)."""
    kept = tuple(recordings[-(1 if unit == "bytes" else MAX_RECORDINGS) :])
    value, noise = summarize_recordings(kept, metric)
    exact = int(value) if unit == "bytes" else value
    return Entry(exact, unit, noise, since or kept[0].date, dict(env), kept, breakdown, metric)


def absorb(
    old: Entry | None, group: Sequence[Record], tolerance: float, afresh: bool
) -> tuple[Entry, str]:
    """``group`` (one series' new records, oldest first) joined to the series ``old``: appended
    to its recordings, or the series started afresh where they are clearly at a new level (a
    change point), where its unit changed, or where ``afresh`` asks (``cudaperf record``).
    ``tolerance`` is for records that carry none of their own. Returns the series and how it
    changed: ``added``, ``afresh`` or ``appended``."""
    last = group[-1]
    new = [r.recording for r in group]
    metric = metric_of(last.series, last.unit)
    if old is None:
        return entry_of(new, last.unit, last.env, metric, None, last.breakdown), "added"
    given = [r.tolerance for r in group if r.tolerance is not None]
    allowed = min(given) if given else tolerance
    if afresh or old.unit != last.unit or is_change_point(old, new, allowed):
        return entry_of(new, last.unit, last.env, metric, None, last.breakdown), "afresh"
    kept = last.breakdown if last.breakdown is not None else old.breakdown
    recordings = [*old.recordings, *new]
    return entry_of(recordings, last.unit, last.env, metric, old.since, kept), "appended"
