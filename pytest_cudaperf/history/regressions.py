"""Regressions in the run history: where each series got slower, by a step or by a slow drift,
and whether someone acknowledged it.

Each series of the store (per device class) is ordered by run. A time series whose runs know
their SM clock and ran at different clocks (more than 1% apart somewhere) is searched in cycle
space, as ``cudaperf ab`` and the verdict's confirmation compare: each value times its clock over
the series' median clock (device time scales inversely with the clock), so a clock change alone is
no change. The values are searched with
:func:`pytest_cudaperf.history.changepoints.change_points`, and a change point that made the series
larger is a *step*, named by the last run before it (the last good commit) and the first after it
(the first bad one). The latest runs are tested for a *drift* with
:func:`pytest_cudaperf.history.drift.drift`; an upward one is listed from the first to the last
commit of its stretch, and a change point inside that stretch is the drift cut into steps, not
listed. Peak memory counts as a time does: more is worse.

A step is acknowledged by an :class:`~pytest_cudaperf.history.store.Ack` of its first bad
commit; a drift by an ack of one of the last :data:`~pytest_cudaperf.history.drift.WINDOW` runs'
commits, so that an acknowledged drift that goes on for another window is listed again.
A step is confirmed by a :class:`~pytest_cudaperf.history.store.Confirmation` of its first bad
commit (``cudaperf bisect`` writes one with the commit it found inside the step).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from pytest_cudaperf.history.changepoints import change_points
from pytest_cudaperf.history.drift import WINDOW, drift
from pytest_cudaperf.history.store import Ack, Confirmation, HistoryStore, Point, SeriesId

STEP = "step"
DRIFT = "drift"
#: clocks further apart than this make a series' search run in cycle space (as ``cudaperf ab``)
CLOCK_SPREAD = 0.01


@dataclass(frozen=True)
class Regression:
    series: SeriesId
    unit: str
    #: a step: the last run before it; a drift: the first run of its stretch
    last_good: str
    #: a step: the first run after it; a drift: the last run of its stretch
    first_bad: str
    #: after / before - 1
    change: float
    #: a step: the medians of the stretches around it; a drift: its line at the two ends
    before: float
    after: float
    #: a step: Welch's t on the logs; a drift: the Mann-Kendall test
    p: float
    #: when the first bad run (a drift: the last run) was recorded
    date: str
    kind: str = STEP
    #: a drift's change per run
    slope: float | None = None
    #: the clock (MHz) the values are expressed at, where the search ran in cycle space
    reference_mhz: float | None = None
    #: the acknowledgement, where there is one
    ack: Ack | None = None
    #: the commits an ack may name: a step's first bad one, the last runs' of a drift
    commits: tuple[str, ...] = ()
    #: a step ``cudaperf bisect`` confirmed, with the commit it found
    confirmed: Confirmation | None = None

    @property
    def commit(self) -> str:
        """The commit that names it (in ``history ack``): a step's first bad commit, the last
        commit of a drift's stretch."""
        return self.first_bad


def comparable(points: Sequence[Point]) -> tuple[list[float], float | None]:
    """The values the search runs on, and the reference clock where they are in cycle space
    (value x its SM clock / the median clock: a time in milliseconds whose every run knows its
    clock, the clocks more than :data:`CLOCK_SPREAD` apart somewhere)."""
    values = [p.value for p in points]
    clocks = [p.sm_mhz for p in points]
    known = [c for c in clocks if c is not None and c > 0]
    if not points or points[0].unit != "ms" or len(known) != len(points):
        return values, None
    if max(known) <= min(known) * (1 + CLOCK_SPREAD):
        return values, None
    reference = statistics.median(known)
    return [v * c / reference for v, c in zip(values, known, strict=True)], reference


def _series_regressions(ident: SeriesId, points: Sequence[Point]) -> list[Regression]:
    values, reference = comparable(points)
    found: list[Regression] = []
    crept = drift(values)
    if crept is not None and crept.slope <= 0:
        crept = None
    for cp in change_points(values):
        if cp.change <= 0 or (crept is not None and cp.index > crept.start):
            continue
        before, after = points[cp.index - 1], points[cp.index]
        found.append(
            Regression(
                series=ident,
                unit=after.unit,
                last_good=before.commit,
                first_bad=after.commit,
                change=cp.change,
                before=cp.before,
                after=cp.after,
                p=cp.p,
                date=after.recorded_at,
                reference_mhz=reference,
                commits=(after.commit,),
            )
        )
    if crept is not None:
        first, last = points[crept.start], points[crept.stop - 1]
        found.append(
            Regression(
                series=ident,
                unit=last.unit,
                last_good=first.commit,
                first_bad=last.commit,
                change=crept.change,
                before=crept.before,
                after=crept.after,
                p=crept.p,
                date=last.recorded_at,
                kind=DRIFT,
                slope=crept.slope,
                reference_mhz=reference,
                commits=tuple(p.commit for p in points[-WINDOW:]),
            )
        )
    return found


def acknowledged(
    found: Regression, acks: Mapping[tuple[SeriesId, str], Sequence[Ack]]
) -> Ack | None:
    """The latest ack that covers ``found`` (acks by series and kind), or None."""
    covering = [a for a in acks.get((found.series, found.kind), ()) if a.commit in found.commits]
    return max(covering, key=lambda a: a.acked_at, default=None)


def regressions(store: HistoryStore, since: str = "") -> list[Regression]:
    """Every step and drift that made a series slower, each with its ack where it has one;
    unacknowledged first, then worst first. ``since`` (a commit or a date:
    :meth:`~pytest_cudaperf.history.store.HistoryStore.since_time`) keeps the runs from it on."""
    return regressions_after(store, store.since_time(since))


def run_counts(store: HistoryStore, since: str = "") -> dict[SeriesId, int]:
    """How many runs each series has that :func:`regressions` searches (those with a value),
    from ``since`` on."""
    cut = store.since_time(since)
    return {
        ident: sum(1 for p in store.points(ident, cut) if p.value > 0)
        for ident in store.series_ids()
    }


def regressions_after(store: HistoryStore, cut: str) -> list[Regression]:
    """:func:`regressions` of the runs recorded at or after ``cut``, a time
    :meth:`~pytest_cudaperf.history.store.HistoryStore.since_time` gave (``""``: every run), the
    same for every series."""
    acks: dict[tuple[SeriesId, str], list[Ack]] = {}
    for ack in store.acks():
        acks.setdefault((ack.series, ack.kind), []).append(ack)
    confirmed = {(c.series, c.first_bad): c for c in store.confirmations()}
    found: list[Regression] = []
    for ident in store.series_ids():
        points = [p for p in store.points(ident, cut) if p.value > 0]
        found += [
            replace(
                r,
                ack=acknowledged(r, acks),
                confirmed=confirmed.get((r.series, r.first_bad)) if r.kind == STEP else None,
            )
            for r in _series_regressions(ident, points)
        ]
    return sorted(found, key=lambda r: (r.ack is not None, -r.change, r.series, r.kind))
