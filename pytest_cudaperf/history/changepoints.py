"""Change points of a series ordered by commit: the indexes where its level moved.

The method is Apache Otava's: E-divisive means places the split of a stretch (the index that
maximises the energy distance between the values before and after it), a two-sample test decides
whether the split is real, and the search recurses into both sides (binary segmentation). The test
here is Welch's t on the logarithms of the values (a change is a ratio), at :data:`P_MAX`, and a
change smaller than :data:`MIN_EFFECT` between the two sides' medians is not reported. Pure
functions of the values; no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: a split is kept when the two-sided p-value of Welch's t on its two sides' logs is below this
P_MAX = 0.001
#: and when the two sides' medians differ by at least this much
MIN_EFFECT = 0.02
#: the fewest values on either side of a split
MIN_SIZE = 3


#: the fewest values a series needs before a change point can be found in it
NEEDED = 2 * MIN_SIZE


def too_few(runs: int) -> str | None:
    """Why a series of ``runs`` values cannot show a change point (one clause), or None when it
    has enough: however large a step, fewer than :data:`MIN_SIZE` runs on a side of it are not
    enough to tell it from noise."""
    if runs >= NEEDED:
        return None
    return (
        f"too few runs to judge: a change point needs {MIN_SIZE} runs on each side "
        f"({NEEDED} in all), there {'is' if runs == 1 else 'are'} {runs}"
    )


@dataclass(frozen=True)
class ChangePoint:
    """The level moved between ``index - 1`` and ``index``."""

    index: int
    #: the medians of the stretches before and after (between the neighbouring change points)
    before: float
    after: float
    #: Welch's t-test's two-sided p-value on the logs of the two stretches
    p: float

    @property
    def change(self) -> float:
        """after / before - 1."""
        return self.after / self.before - 1


def change_points(
    values: Sequence[float],
    p_max: float = P_MAX,
    min_effect: float = MIN_EFFECT,
    min_size: int = MIN_SIZE,
) -> list[ChangePoint]:
    """The change points of ``values`` (positive numbers in commit order), by index."""
    given = np.asarray(values, dtype=float)
    if given.ndim != 1 or not np.all(np.isfinite(given)) or not np.all(given > 0):
        raise ValueError("change_points: the values must be positive and finite")
    logs = np.log(given)
    found: list[int] = []
    stretches = [(0, len(logs))]
    while stretches:
        start, stop = stretches.pop()
        split = best_split(logs[start:stop], min_size)
        if split is None:
            continue
        at = start + split
        left, right = logs[start:at], logs[at:stop]
        effect = math.exp(float(np.median(right) - np.median(left))) - 1
        if welch_p(left, right) < p_max and abs(effect) >= min_effect:
            found.append(at)
            stretches += [(start, at), (at, stop)]
    return _described(sorted(found), logs)


def _described(indexes: list[int], logs: np.ndarray) -> list[ChangePoint]:
    """Each change point with the medians of its neighbouring stretches and their p-value."""
    bounds = [0, *indexes, len(logs)]
    points = []
    for i, at in enumerate(indexes):
        left, right = logs[bounds[i] : at], logs[at : bounds[i + 2]]
        points.append(
            ChangePoint(
                at,
                math.exp(float(np.median(left))),
                math.exp(float(np.median(right))),
                welch_p(left, right),
            )
        )
    return points


def best_split(x: np.ndarray, min_size: int = MIN_SIZE) -> int | None:
    """E-divisive means (exponent 1): the index ``t`` that maximises
    ``t (n - t) / n * (2 mean|a - b| - mean|a - a'| - mean|b - b'|)`` over the values before
    (``a``) and from (``b``) ``t``; None when no split leaves ``min_size`` values on each side."""
    n = len(x)
    if n < 2 * min_size:
        return None
    distance = np.abs(x[:, None] - x[None, :])
    # prefix sums over rows and columns: the sum of any block of the distance matrix in O(1)
    block = np.zeros((n + 1, n + 1))
    block[1:, 1:] = distance.cumsum(0).cumsum(1)

    def total(r0: int, r1: int, c0: int, c1: int) -> float:
        return float(block[r1, c1] - block[r0, c1] - block[r1, c0] + block[r0, c0])

    best, where = -math.inf, None
    for t in range(min_size, n - min_size + 1):
        m = n - t
        between = total(0, t, t, n) / (t * m)
        within_a = total(0, t, 0, t) / (t * (t - 1))  # each pair twice, over t(t-1) ordered pairs
        within_b = total(t, n, t, n) / (m * (m - 1))
        q = t * m / n * (2 * between - within_a - within_b)
        if q > best:
            best, where = q, t
    return where


def welch_p(a: np.ndarray, b: np.ndarray) -> float:
    """The two-sided p-value of Welch's t-test of equal means (1.0 when it cannot be told)."""
    na, nb = len(a), len(b)
    if na < 2 or nb < 2:
        return 1.0
    va, vb = float(np.var(a, ddof=1)) / na, float(np.var(b, ddof=1)) / nb
    diff = float(np.mean(b) - np.mean(a))
    if va + vb == 0:
        return 0.0 if diff else 1.0
    t = diff / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (na - 1) + vb**2 / (nb - 1))
    return student_two_sided(t, df)


def student_two_sided(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with ``df`` degrees of freedom: I_{df/(df+t^2)}(df/2, 1/2)."""
    return _betainc(df / 2, 0.5, df / (df + t * t))


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b) (Lentz's continued fraction)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    if x > (a + 1) / (a + b + 2):  # the fraction converges fast on this side only
        return 1.0 - _betainc(b, a, 1.0 - x)
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-14:
            break
    return front * h / a
