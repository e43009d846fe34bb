"""The pair noise that a comparison's time series share: an empirical-Bayes prior for each
series' variance of log pair ratios, fitted over all of them (Smyth 2004, "Linear models and
empirical Bayes methods for assessing differential expression in microarray experiments", the
method of limma's ``squeezeVar``).

A series with three pairs has a standard deviation from three ratios, two degrees of freedom:
Student's t puts its 95% interval at 4.3 standard errors. The suite's other series ran in the
same processes, so their spread says what a pair's noise is like; the prior weighs that with
``df`` degrees of freedom against the series' own ``d``, and the interval then has ``df + d``.
Where the series' variances differ more than their few pairs explain, the fitted ``df`` is small
and each series keeps mostly its own (why: docs/decisions.md, "Why do the series of a
`cudaperf ab` comparison share their pair noise?").
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

#: series (with two pairs or more) below which no prior is fitted: the fit reads the spread of the
#: series' log variances, and with fewer it is itself too uncertain (a variance of ten values
#: is known to about ±47%)
MIN_SERIES = 10


def digamma(x: float) -> float:
    """ψ(x) for x > 0 (recurrence to x ≥ 6, then the asymptotic series)."""
    shift = 0.0
    while x < 6:
        shift -= 1 / x
        x += 1
    inv = 1 / (x * x)
    tail = inv * (1 / 12 - inv * (1 / 120 - inv * (1 / 252 - inv * (1 / 240 - inv / 132))))
    return shift + math.log(x) - 0.5 / x - tail


def trigamma(x: float) -> float:
    """ψ'(x) for x > 0 (recurrence to x ≥ 6, then the asymptotic series)."""
    shift = 0.0
    while x < 6:
        shift += 1 / (x * x)
        x += 1
    inv = 1 / (x * x)
    tail = inv * (1 / 6 - inv * (1 / 30 - inv * (1 / 42 - inv / 30)))
    return shift + 1 / x + inv / 2 + tail / x


def trigamma_inverse(y: float) -> float:
    """The x > 0 with ψ'(x) = y (ψ' falls monotonically from ∞ to 0): bisection on log x."""
    if y <= 0:
        return math.inf
    low, high = -30.0, 30.0
    for _ in range(200):
        mid = (low + high) / 2
        if trigamma(math.exp(mid)) > y:
            low = mid
        else:
            high = mid
    return math.exp((low + high) / 2)


@dataclass(frozen=True)
class Prior:
    """A variance of log pair ratios (``variance``) held with ``df`` degrees of freedom
    (``math.inf``: the series' variances differ no more than their pairs explain)."""

    variance: float
    df: float
    #: the series it was fitted over
    series: int

    def moderated(self, variance: float, d: int) -> tuple[float, float]:
        """A series' variance ``variance`` of ``d`` degrees of freedom, weighed with this prior:
        ``(df * s0² + d * s²) / (df + d)`` and its degrees of freedom, ``df + d``."""
        if math.isinf(self.df):
            return self.variance, math.inf
        return (self.df * self.variance + d * variance) / (self.df + d), self.df + d

    @property
    def sd(self) -> float:
        return math.sqrt(self.variance)


def fit(variances: Sequence[tuple[float, int]]) -> Prior | None:
    """The prior of ``variances`` (each a series' sample variance and its degrees of freedom,
    at least 1), by the method of moments on their logs (limma's ``fitFDist``): the mean of
    ``log s² − ψ(d/2) + log(d/2)`` gives ``s0²``, their variance less the mean of ``ψ'(d/2)``
    gives ``ψ'(df/2)``. None below :data:`MIN_SERIES` usable series (a variance of 0, from
    ratios that agree exactly, has no log and is left out)."""
    usable = [(v, d) for v, d in variances if d >= 1 and v > 0 and math.isfinite(v)]
    if len(usable) < MIN_SERIES:
        return None
    e = [math.log(v) - digamma(d / 2) + math.log(d / 2) for v, d in usable]
    centre = statistics.fmean(e)
    excess = statistics.variance(e) - statistics.fmean(trigamma(d / 2) for _, d in usable)
    if excess <= 0:
        return Prior(math.exp(centre), math.inf, len(usable))
    df = 2 * trigamma_inverse(excess)
    return Prior(math.exp(centre + digamma(df / 2) - math.log(df / 2)), df, len(usable))


def log_ratios(ratios: Sequence[float]) -> list[float]:
    """The logs of ``ratios``, those that have one (positive and finite)."""
    return [math.log(r) for r in ratios if r > 0 and math.isfinite(r)]


def variance_of(logs: Sequence[float]) -> tuple[float, int] | None:
    """The sample variance of ``logs`` and its degrees of freedom; None below two."""
    if len(logs) < 2:
        return None
    return statistics.variance(logs), len(logs) - 1


def weighed(logs: Sequence[float], prior: Prior | None) -> tuple[float, float] | None:
    """:func:`variance_of` ``logs`` and its degrees of freedom, weighed with ``prior`` where
    given (:meth:`Prior.moderated`); None below two."""
    own = variance_of(logs)
    if own is None or prior is None:
        return own
    return prior.moderated(*own)


def log_variance(ratios: Sequence[float]) -> tuple[float, int] | None:
    """:func:`variance_of` the :func:`log_ratios` of ``ratios``."""
    return variance_of(log_ratios(ratios))
