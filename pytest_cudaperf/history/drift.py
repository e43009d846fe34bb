"""Slow drifts of a series in commit order: a level that creeps a little each run, with no step.

Over the last :data:`WINDOW` values (at least :data:`MIN_POINTS`), on their logarithms (a drift is
a ratio per run): the Mann–Kendall test says whether they trend at all (two-sided p below
:data:`P_MAX`), the Theil–Sen slope (the median of the pairwise slopes) says by how much per run,
and the change over the window (the slope times the runs it spans) must reach
:data:`MIN_EFFECT`. A single step trends too, so a drift is reported only where a straight line
fits the window at least as well as the best single step does (least squares on the logs, the step
at its best place); a step is the change-point search's to report (why: docs/decisions.md, "How
does the history find a slow drift?"). Pure functions of the values; no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: the values a drift is looked for in: the last this many
WINDOW = 30
#: the fewest values the test is made on
MIN_POINTS = 10
#: a trend is kept when the Mann-Kendall test's two-sided p-value is below this
P_MAX = 0.001
#: and when the line moves by at least this much over the window
MIN_EFFECT = 0.02
#: a drift found in the last window is followed back this many runs at a time
EXTEND = 10
#: and while its slope stays at least this share of the last window's (the creep kept its pace)
SAME_PACE = 0.8
#: the fewest values on either side of the step the line is compared with
MIN_SIDE = 3


@dataclass(frozen=True)
class DriftFit:
    """The level moved steadily over ``values[start:stop]``."""

    start: int
    stop: int
    #: the change per run: exp(Theil-Sen slope of the logs) - 1
    slope: float
    #: the fitted line's values at the window's first and last run
    before: float
    after: float
    #: the Mann-Kendall test's two-sided p-value
    p: float

    @property
    def change(self) -> float:
        """after / before - 1: the change over the window."""
        return self.after / self.before - 1


def drift(
    values: Sequence[float],
    window: int = WINDOW,
    p_max: float = P_MAX,
    min_effect: float = MIN_EFFECT,
) -> DriftFit | None:
    """The drift of the last ``window`` of ``values`` (positive numbers in commit order), up or
    down, or None. A drift found there is followed back in steps of :data:`EXTEND` runs while it
    still holds, the same way, at :data:`SAME_PACE` of its slope or more: it is reported over the
    longest such stretch ending at the last value."""
    given = np.asarray(values, dtype=float)
    if given.ndim != 1 or not np.all(np.isfinite(given)) or not np.all(given > 0):
        raise ValueError("drift: the values must be positive and finite")
    logs = np.log(given)
    latest = found = _fit(logs, max(0, len(logs) - window), p_max, min_effect)
    while found is not None and latest is not None and found.start > 0:
        wider = _fit(logs, max(0, found.start - EXTEND), p_max, min_effect)
        if wider is None or wider.slope / latest.slope < SAME_PACE:
            break
        found = wider
    return found


def _fit(logs: np.ndarray, start: int, p_max: float, min_effect: float) -> DriftFit | None:
    """The drift of ``logs[start:]``, or None."""
    x = logs[start:]
    n = len(x)
    if n < max(MIN_POINTS, 2 * MIN_SIDE):
        return None
    p = mann_kendall_p(x)
    slope, intercept = theil_sen(x)
    before, after = math.exp(intercept), math.exp(intercept + slope * (n - 1))
    if p >= p_max or abs(after / before - 1) < min_effect:
        return None
    if line_sse(x) > best_step_sse(x) * n ** (1 / n):  # BIC: the step's place is a parameter
        return None
    return DriftFit(start, len(logs), math.expm1(slope), before, after, p)


def mann_kendall_p(x: np.ndarray) -> float:
    """The Mann-Kendall trend test's two-sided p-value (normal approximation with the
    continuity correction, ties counted)."""
    n = len(x)
    if n < 3:
        return 1.0
    s = float(sum(np.sign(x[i + 1 :] - x[i]).sum() for i in range(n - 1)))
    _, ties = np.unique(x, return_counts=True)
    var = (n * (n - 1) * (2 * n + 5) - float(np.sum(ties * (ties - 1) * (2 * ties + 5)))) / 18
    if s == 0 or var <= 0:
        return 1.0
    z = (s - math.copysign(1, s)) / math.sqrt(var)
    return math.erfc(abs(z) / math.sqrt(2))


def theil_sen(x: np.ndarray) -> tuple[float, float]:
    """The Theil-Sen line of ``x`` against its index: the median of the pairwise slopes, and the
    median of ``x - slope * index`` as the intercept."""
    n = len(x)
    i, j = np.triu_indices(n, k=1)
    slope = float(np.median((x[j] - x[i]) / (j - i)))
    return slope, float(np.median(x - slope * np.arange(n)))


def line_sse(x: np.ndarray) -> float:
    """The sum of squared residuals of the least-squares line of ``x`` against its index."""
    index = np.arange(len(x), dtype=float)
    slope, intercept = np.polyfit(index, x, 1)
    return float(np.sum((x - intercept - slope * index) ** 2))


def best_step_sse(x: np.ndarray, min_side: int = MIN_SIDE) -> float:
    """The least sum of squared residuals of one step (two means) over every split that leaves
    ``min_side`` values on each side."""
    n = len(x)
    x = x - x.mean()  # the sums of squares below stay exact
    total, squares = np.concatenate(([0.0], np.cumsum(x))), np.concatenate(([0.0], np.cumsum(x**2)))
    best = math.inf
    for t in range(min_side, n - min_side + 1):
        left = squares[t] - total[t] ** 2 / t
        right = (squares[n] - squares[t]) - (total[n] - total[t]) ** 2 / (n - t)
        best = min(best, float(left + right))
    return best
