"""Regressions in the run history: the change points of each series where it got slower.

Each series of the store (per device class) is ordered by run and searched with
:func:`pytest_cudaperf.history.changepoints.change_points`; a change point that made a time
series larger is a regression, named by the last run before it (the last good commit) and the
first after it (the first bad one). Peak memory counts as a time does: more is worse.
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_cudaperf.history.changepoints import change_points
from pytest_cudaperf.history.store import HistoryStore, SeriesId


@dataclass(frozen=True)
class Regression:
    series: SeriesId
    unit: str
    last_good: str
    first_bad: str
    #: after / before - 1 (the medians of the stretches around the change point)
    change: float
    before: float
    after: float
    p: float
    #: when the first bad run was recorded
    date: str


def regressions(store: HistoryStore, since: str = "") -> list[Regression]:
    """Every slowdown change point in the store, worst first."""
    found: list[Regression] = []
    for ident in store.series_ids():
        points = [p for p in store.points(ident, since) if p.value > 0]
        for cp in change_points([p.value for p in points]):
            if cp.change <= 0:
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
                )
            )
    return sorted(found, key=lambda r: (-r.change, r.series))
