"""Statistics on samples, numpy only (imported lazily): quantiles, distribution-free CI of the
median, ratio CIs, stopping and stability rules.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

Z95 = 1.959963984540054


@dataclass(frozen=True)
class Summary:
    n: int
    median: float
    mean: float
    min: float
    max: float
    iqr: float
    ci: tuple[float, float]

    @property
    def rel_iqr(self) -> float:
        return relative_iqr(self.iqr, self.median)

    @property
    def rel_halfwidth(self) -> float:
        """Half the CI's width relative to the median: the precision of the median."""
        return relative_halfwidth(self.ci, self.median)


def relative_iqr(iqr: float, median: float) -> float:
    """The IQR relative to the median (infinite for a non-positive median)."""
    return iqr / median if median > 0 else math.inf


def relative_halfwidth(ci: tuple[float, float], median: float) -> float:
    """Half the CI's width relative to the median (infinite for a non-positive median)."""
    return (ci[1] - ci[0]) / 2 / median if median > 0 else math.inf


def median_ci_indices(n: int, z: float = Z95) -> tuple[int, int]:
    """0-based order-statistic indices bounding a distribution-free CI of the median.

    Normal approximation to the binomial: 1-based ranks floor(n/2 - z*sqrt(n)/2) and
    ceil(1 + n/2 + z*sqrt(n)/2), clipped to the sample.
    """
    if n <= 0:
        raise ValueError("no samples")
    half = z * math.sqrt(n) / 2
    lo = max(1, math.floor(n / 2 - half)) - 1
    hi = min(n, math.ceil(1 + n / 2 + half)) - 1
    return lo, hi


def summarize(samples: Sequence[float] | np.ndarray, z: float = Z95) -> Summary:
    import numpy as np  # imported on first use: the plugin's import stays cheap

    data = np.sort(np.asarray(samples, dtype=np.float64))
    if data.size == 0:
        raise ValueError("no samples")
    lo, hi = median_ci_indices(int(data.size), z)
    q1, q3 = np.quantile(data, [0.25, 0.75])
    return Summary(
        n=int(data.size),
        median=float(np.median(data)),
        mean=float(data.mean()),
        min=float(data[0]),
        max=float(data[-1]),
        iqr=float(q3 - q1),
        ci=(float(data[lo]), float(data[hi])),
    )


def quantiles(values: Sequence[float], qs: Sequence[float]) -> list[float]:
    """``numpy.quantile`` of ``values`` at each of ``qs`` (linear interpolation)."""
    import numpy as np

    return [float(v) for v in np.quantile(np.asarray(values, dtype=np.float64), qs)]


def ratio_ci(
    current: float,
    current_halfwidth: float,
    baseline: float,
    baseline_halfwidth: float,
) -> tuple[float, float, float]:
    """Ratio current/baseline with a CI from relative half-widths combined in log space.

    Half-widths are relative (0.01 = 1%). Returns (ratio, low, high).
    """
    if current <= 0 or baseline <= 0:
        raise ValueError("ratio of non-positive values")
    ratio = current / baseline
    spread = math.sqrt(math.log1p(current_halfwidth) ** 2 + math.log1p(baseline_halfwidth) ** 2)
    return ratio, ratio * math.exp(-spread), ratio * math.exp(spread)


def paired_ratio(
    numerators: Sequence[float], denominators: Sequence[float]
) -> tuple[float, float, float]:
    """Median of per-round ratios with its distribution-free CI: (median, low, high)."""
    if len(numerators) != len(denominators) or not numerators:
        raise ValueError("need equally many rounds of both")
    import numpy as np

    ratios = np.asarray(numerators, dtype=np.float64) / np.asarray(denominators, dtype=np.float64)
    summary = summarize(ratios)
    return summary.median, summary.ci[0], summary.ci[1]


def repeated_median(
    first: Sequence[float], second: Sequence[float]
) -> tuple[float, tuple[float, float]]:
    """Two passes over the same calls (call ``i`` of one does the work of call ``i`` of the
    other: the same seeded draws): the median of both passes, with a CI from how the passes
    agree, not from how the calls differ. Its half-width ``h`` is half the largest distance from
    1 of the per-call ratios' median CI (second / first) and of the ratio of the passes'
    medians, taken as a ratio either way: ``median / (1 + h)`` to ``median * (1 + h)``, so that
    passes which disagree wildly (tiny kernels whose per-call ratios reach 5x) widen it without
    ever taking its low end to zero or below. A call in which one pass read no work and the
    other some counts as :data:`DISAGREE` apart; a pass whose median call read none raises
    ValueError (nothing to take a ratio of: the caller has no kernels' time then)."""
    if len(first) != len(second) or not first:
        raise ValueError("need two passes of equally many calls")
    medians = summarize(first).median, summarize(second).median
    if min(medians) <= 0:
        raise ValueError("a pass whose median call ran no work has no ratio to the other")
    pooled = summarize([*first, *second]).median
    ratios = [_call_ratio(b, a) for a, b in zip(first, second, strict=True)]
    low, high = summarize(ratios).ci
    passes = medians[1] / medians[0]
    half = max(abs(low - 1), abs(high - 1), abs(passes - 1)) / 2
    return pooled, (pooled / (1 + half), pooled * (1 + half))


#: the ratio a call counts as where one pass read work in it and the other none
#: (:func:`repeated_median`): as far apart as two passes can be, and finite
DISAGREE = 1e3


def _call_ratio(second: float, first: float) -> float:
    """One call's second pass over its first: 1 where neither read work, :data:`DISAGREE` (or
    its inverse) where only one did."""
    if first > 0 and second > 0:
        return second / first
    if first <= 0 and second <= 0:
        return 1.0
    return DISAGREE if second > 0 else 1 / DISAGREE


def precise_enough(summary: Summary, target: float, min_samples: int) -> bool:
    """Stopping rule: enough samples and the median's CI half-width within ``target``."""
    return summary.n >= min_samples and summary.rel_halfwidth <= target


def stable(previous: float, current: float, within: float = 0.02) -> bool:
    """Warm-up rule: two consecutive batch medians agree within ``within`` (relative)."""
    if previous <= 0 or current <= 0:
        return False
    return abs(current - previous) / max(previous, current) <= within
