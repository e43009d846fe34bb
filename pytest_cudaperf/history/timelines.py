"""What the dashboard shows, read from a run history: per test, a timeline per measured series
(its name and series), one line per device class, its runs placed on one commit axis, and each
line's change points with the kernel breakdowns of the runs on either side.

The commit axis of a timeline lists the commits of its runs in the order they were first
recorded (a run without a commit is its own place); runs of the same commit share a place. A
line's change points are :func:`~pytest_cudaperf.history.changepoints.change_points` of its
positive values in run order, searched as ``cudaperf history regressions`` searches them (in
cycle space where the clocks moved: :func:`~pytest_cudaperf.history.regressions.comparable`); a
rise is worse (a longer time, a larger peak), a fall better. What ``cudaperf history
regressions`` lists beside them, a drift and the acknowledgements, comes from
:func:`~pytest_cudaperf.history.regressions.regressions`; as there, a change point inside a
drift's stretch is not shown (the drift is). Reading only: nothing here writes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pytest_cudaperf.breakdown.diff import diff
from pytest_cudaperf.breakdown.html import side_by_side_html
from pytest_cudaperf.breakdown.model import Breakdown
from pytest_cudaperf.history.changepoints import ChangePoint, change_points, too_few
from pytest_cudaperf.history.regressions import (
    DRIFT,
    STEP,
    Regression,
    comparable,
    regressions_after,
)
from pytest_cudaperf.history.store import Ack, Confirmation, HistoryStore, Point, SeriesId

#: lines of the breakdown diff's text shown above its table
DIFF_LINES = 12


@dataclass(frozen=True)
class Run:
    """One run's value of one series on one device class (its stored :class:`Point`), at place
    ``x`` of its commit axis."""

    x: int
    point: Point

    @property
    def commit(self) -> str:
        return self.point.commit

    @property
    def date(self) -> str:
        return self.point.recorded_at

    @property
    def value(self) -> float:
        return self.point.value

    @property
    def unit(self) -> str:
        return self.point.unit

    @property
    def verdict(self) -> str:
        return self.point.verdict

    @property
    def lo(self) -> float | None:
        """The lower end of the value's interval, where the store has a finite one."""
        return _finite(self.point.lo)

    @property
    def hi(self) -> float | None:
        return _finite(self.point.hi)

    @property
    def breakdown(self) -> Mapping[str, Any] | None:
        """The run's kernel (or op) breakdown as stored, where it has one."""
        return self.point.breakdown

    @property
    def run_id(self) -> str:
        return self.point.run_id


@dataclass(frozen=True)
class RenderedDiff:
    """The kernel breakdown diff of a change point's last good and first bad runs: the diff's
    lines and its side-by-side table (escaped HTML), or ``missing``, one line saying why there is
    none."""

    lines: tuple[str, ...] = ()
    table_html: str = ""
    missing: str = ""


@dataclass(frozen=True)
class LevelChange:
    """A change point of one line: the level moved between ``last_good`` and ``first_bad``."""

    last_good: Run
    first_bad: Run
    point: ChangePoint
    breakdown: RenderedDiff
    #: where the two runs are in their line's runs
    good_index: int
    bad_index: int
    #: the clock (MHz) ``point``'s medians are expressed at, where the search ran in cycle space
    reference_mhz: float | None = None
    #: a rise ``cudaperf history ack`` acknowledged
    ack: Ack | None = None
    #: a rise ``cudaperf bisect`` confirmed, with the commit it found
    confirmed: Confirmation | None = None

    @property
    def worse(self) -> bool:
        """The value rose: a slower time, a larger peak."""
        return self.point.change > 0


@dataclass(frozen=True)
class Drift:
    """A slow upward drift ``cudaperf history regressions`` lists: the level crept up over
    ``runs[first:last + 1]`` of its line; ``breakdown`` diffs those two runs'."""

    first: int
    last: int
    regression: Regression
    breakdown: RenderedDiff
    #: its straight line (on a log scale) in the line's own values, at its first and last run:
    #: the listed change, centred on the runs' geometric mean
    start: float = 0.0
    end: float = 0.0

    @property
    def ack(self) -> Ack | None:
        return self.regression.ack


@dataclass(frozen=True)
class Line:
    device_class: str
    runs: tuple[Run, ...]
    changes: tuple[LevelChange, ...]
    drift: Drift | None = None

    @property
    def latest_change(self) -> LevelChange | None:
        return self.changes[-1] if self.changes else None

    @property
    def too_few(self) -> str | None:
        """Why no change point can be found in the line yet (too few runs with a value), or
        None."""
        return too_few(sum(1 for r in self.runs if r.value > 0))


@dataclass(frozen=True)
class Place:
    """A place on a commit axis: the commit (empty for a run without one) and when its first run
    was recorded."""

    commit: str
    date: str


@dataclass(frozen=True)
class Timeline:
    """One measured series of one test: ``name`` (``""`` for the test's own measurement) and
    ``series`` (``time:device/cold``, ``memory:peak``…), a line per device class."""

    nodeid: str
    name: str
    series: str
    unit: str
    axis: tuple[Place, ...]
    lines: tuple[Line, ...]

    @property
    def title(self) -> str:
        return f"{self.name} · {self.series}" if self.name else self.series


@dataclass(frozen=True)
class TestHistory:
    nodeid: str
    timelines: tuple[Timeline, ...]

    @property
    def runs(self) -> int:
        """The runs that measured it (on any device class)."""
        return len({r.run_id for t in self.timelines for line in t.lines for r in line.runs})


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _parse(stored: Mapping[str, Any]) -> Breakdown:
    """A stored breakdown: a breakdown's JSON, or a compared pair's (its ``current`` side)."""
    if "entries" not in stored and isinstance(stored.get("current"), Mapping):  # a compared pair
        stored = stored["current"]
    return Breakdown.from_json(stored)


def breakdown_diff(
    before: Run, after: Run, names: tuple[str, str] = ("last good", "first bad")
) -> RenderedDiff:
    """What the kernels did between the two runs (``names``: what they are, for the line that
    says a breakdown is missing), or why that cannot be said."""
    good, bad = before.breakdown, after.breakdown
    if good is None or bad is None:
        absent = [
            f"the {side} run ({run.commit[:10] or run.date})"
            for side, run in zip(names, (before, after), strict=True)
            if run.breakdown is None
        ]
        return RenderedDiff(missing="no breakdown recorded for " + " nor ".join(absent))
    try:
        base, current = _parse(good), _parse(bad)
    except ValueError as exc:
        return RenderedDiff(missing=f"breakdown unreadable: {exc}")
    if base.backend != current.backend:
        return RenderedDiff(
            missing=f"breakdowns not compared: {base.backend} before, {current.backend} after"
        )
    return RenderedDiff(
        lines=tuple(diff(base, current).lines(DIFF_LINES)),
        table_html=side_by_side_html(base, current),
    )


def _axis(points: Iterable[Point]) -> list[tuple[str, str]]:
    """The places of a commit axis in order: (commit, or ``@`` and the time of a run without
    one; when its first run was recorded)."""
    first: dict[str, str] = {}
    for p in points:
        key = p.commit or f"@{p.recorded_at}"
        if key not in first or p.recorded_at < first[key]:
            first[key] = p.recorded_at
    return sorted(first.items(), key=lambda kv: (kv[1], kv[0]))


def _drift(runs: tuple[Run, ...], listed: list[Regression]) -> Drift | None:
    found = next((r for r in listed if r.kind == DRIFT), None)
    if found is None:
        return None
    first = [i for i, r in enumerate(runs) if r.commit == found.last_good]
    last = [i for i, r in enumerate(runs) if r.commit == found.first_bad]
    if not first or not last:
        return None
    before, after = runs[first[0]], runs[last[-1]]
    stretch = [r.value for r in runs[first[0] : last[-1] + 1] if r.value > 0]
    centre = math.exp(sum(map(math.log, stretch)) / len(stretch))
    start = centre / math.sqrt(1 + found.change)
    return Drift(
        first[0],
        last[-1],
        found,
        breakdown_diff(before, after, ("first", "last")),
        start,
        start * (1 + found.change),
    )


def _line(
    device_class: str,
    points: list[Point],
    place: Callable[[Point], int],
    listed: list[Regression],
) -> Line:
    runs = tuple(Run(place(p), p) for p in points)
    # the runs and values ``regressions`` searches: positive ones, in cycle space where needed
    searched = [i for i, p in enumerate(points) if p.value > 0]
    values, reference = comparable([points[i] for i in searched])
    acks = {r.first_bad: r.ack for r in listed if r.kind == STEP}
    confirmed = {r.first_bad: r.confirmed for r in listed if r.kind == STEP}
    changes = []
    for cp in change_points(values):
        good, bad = searched[cp.index - 1], searched[cp.index]
        changes.append(
            LevelChange(
                runs[good],
                runs[bad],
                cp,
                breakdown_diff(runs[good], runs[bad]),
                good,
                bad,
                reference,
                acks.get(runs[bad].commit) if cp.change > 0 else None,
                confirmed.get(runs[bad].commit) if cp.change > 0 else None,
            )
        )
    drift = _drift(runs, listed)
    if drift is not None:  # as ``regressions``: inside a drift, change points only cut it in steps
        changes = [c for c in changes if c.bad_index <= drift.first]
    return Line(device_class, runs, tuple(changes), drift)


def timeline(
    nodeid: str,
    name: str,
    series: str,
    by_class: Mapping[str, list[Point]],
    listed: Mapping[SeriesId, list[Regression]],
) -> Timeline:
    """One measured series' timeline from each device class's points (oldest run first), with
    what ``cudaperf history regressions`` lists of it (``listed``, by series)."""
    order = _axis(p for points in by_class.values() for p in points)
    index = {key: i for i, (key, _) in enumerate(order)}

    def place(p: Point) -> int:
        return index[p.commit or f"@{p.recorded_at}"]

    lines = tuple(
        _line(c, by_class[c], place, listed.get((c, nodeid, name, series), []))
        for c in sorted(by_class)
        if by_class[c]
    )
    latest = max((r for line in lines for r in line.runs), key=lambda r: r.date)
    axis = tuple(Place("" if key.startswith("@") else key, date) for key, date in order)
    return Timeline(nodeid, name, series, latest.unit, axis, lines)


def read_history(
    store: HistoryStore,
    since: str = "",
    progress: Callable[[int, int, str], None] | None = None,
) -> list[TestHistory]:
    """Every test of the store with its timelines, tests and timelines in name order; ``since``
    (a commit or a date: :meth:`~pytest_cudaperf.history.store.HistoryStore.since_time`, read
    once for every series) keeps the runs from it on. ``progress(done, total, nodeid)`` is called
    after each test is read."""
    cut = store.since_time(since)
    listed: dict[SeriesId, list[Regression]] = {}
    for found in regressions_after(store, cut):
        listed.setdefault(found.series, []).append(found)
    grouped: dict[str, dict[tuple[str, str], dict[str, list[Point]]]] = {}
    for ident in store.series_ids():
        device_class, nodeid, name, series = ident
        points = store.points(ident, cut)
        if points:
            grouped.setdefault(nodeid, {}).setdefault((name, series), {})[device_class] = points
    tests = []
    for i, nodeid in enumerate(sorted(grouped), 1):
        measured = grouped[nodeid]
        tests.append(
            TestHistory(
                nodeid,
                tuple(timeline(nodeid, n, s, measured[n, s], listed) for n, s in sorted(measured)),
            )
        )
        if progress is not None:
            progress(i, len(grouped), nodeid)
    return tests
