from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from pytest_cudaperf.measure import stats


def test_median_ci_covers_the_true_median() -> None:
    rng = np.random.default_rng(0)
    covered = 0
    trials = 400
    for _ in range(trials):
        sample = rng.lognormal(0.0, 0.3, size=50)  # true median 1.0
        low, high = stats.summarize(sample).ci
        covered += low <= 1.0 <= high
    assert 0.93 <= covered / trials <= 0.995


def test_median_ci_indices_bounds() -> None:
    assert stats.median_ci_indices(1) == (0, 0)
    lo, hi = stats.median_ci_indices(100)
    assert 0 <= lo < 50 < hi <= 99
    with pytest.raises(ValueError, match="no samples"):
        stats.median_ci_indices(0)


def test_summary_fields() -> None:
    summary = stats.summarize([1.0, 2.0, 3.0, 4.0, 100.0])
    assert summary.median == 3.0
    assert summary.min == 1.0
    assert summary.max == 100.0
    assert summary.n == 5
    assert summary.mean == pytest.approx(22.0)


def test_ratio_ci_widens_with_noise() -> None:
    ratio, low, high = stats.ratio_ci(1.1, 0.0, 1.0, 0.0)
    assert ratio == pytest.approx(1.1)
    assert low == pytest.approx(1.1)
    assert high == pytest.approx(1.1)
    _, low2, high2 = stats.ratio_ci(1.1, 0.02, 1.0, 0.02)
    assert low2 < 1.1 < high2


def test_paired_ratio() -> None:
    ratio, low, high = stats.paired_ratio([2.0] * 10, [1.0] * 10)
    assert (ratio, low, high) == (2.0, 2.0, 2.0)
    with pytest.raises(ValueError, match="equally many"):
        stats.paired_ratio([1.0], [])


def test_stopping_and_stability_rules() -> None:
    tight = stats.summarize([1.0 + 0.0001 * i for i in range(30)])
    assert stats.precise_enough(tight, 0.005, 10)
    assert not stats.precise_enough(tight, 0.005, 31)
    assert stats.stable(1.0, 1.01)
    assert not stats.stable(1.0, 1.2)
    assert not stats.stable(0.0, 1.0)


def test_quantiles_interpolate_like_numpy() -> None:
    from pytest_cudaperf.measure.stats import quantiles

    assert quantiles([4.0, 1.0, 3.0, 2.0, 5.0], (0.0, 0.5, 0.9, 1.0)) == [1.0, 3.0, 4.6, 5.0]


def test_relative_iqr_and_halfwidth_are_one_rule_for_summaries_and_measurements() -> None:
    from pytest_cudaperf.measure.measurement import Measurement

    samples = [1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8, 1.9, 2.0]
    summary = stats.summarize(samples)
    m = Measurement.from_samples(samples)
    assert m.rel_iqr == summary.rel_iqr == stats.relative_iqr(summary.iqr, summary.median)
    assert m.rel_halfwidth == summary.rel_halfwidth
    assert stats.relative_halfwidth((0.9, 1.1), 1.0) == pytest.approx(0.1)
    assert stats.relative_halfwidth((0.0, 1.0), 0.0) == float("inf")
    assert stats.relative_iqr(1.0, 0.0) == float("inf")


def test_two_passes_over_the_same_calls_are_as_precise_as_they_agree() -> None:
    # calls that draw their work at random: 1 to 9 ms each, the same calls in both passes
    first = [1.0, 9.0, 2.0, 8.0, 3.0, 7.0, 4.0, 6.0, 5.0, 5.5]
    wide = stats.summarize(first)
    assert wide.rel_halfwidth > 0.3  # as if the calls were noise
    median, (low, high) = stats.repeated_median(first, list(first))
    assert median == pytest.approx(5.25)
    assert (low, high) == pytest.approx((5.25, 5.25))  # the passes agree exactly
    slower = [x * 1.10 for x in first]  # the second pass 10% slower throughout
    median, (low, high) = stats.repeated_median(first, slower)
    assert low == pytest.approx(median / 1.05)
    assert high == pytest.approx(median * 1.05)
    # passes that disagree wildly (a 1 µs kernel read 5x in one pass): wide, never below zero
    median, (low, high) = stats.repeated_median(first, [x * 5 for x in first])
    assert 0 < low < median < high
    assert high / median == pytest.approx(median / low)
    with pytest.raises(ValueError, match="equally many calls"):
        stats.repeated_median(first, first[:-1])


def test_two_passes_with_calls_that_read_no_work_never_divide_by_zero() -> None:
    """A call read as no work in a pass (a copy through pageable memory, or a call whose kernels
    a profile missed): where both passes agree it is no change; where one read work there it is
    as far apart as passes can be, which widens the CI, finite and warning-free (a run with
    ``-W error`` would fail on numpy's division warning). A pass whose median call read no work
    has no ratio at all."""
    first = [0.01, 0.0, 0.02, 0.015, 0.0, 0.012, 0.011]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        median, (low, high) = stats.repeated_median(first, list(first))
        assert (low, high) == pytest.approx((median, median))
        second = [0.01, 0.0, 0.02, 0.0, 0.013, 0.012, 0.011]  # two calls disagree
        median, (low, high) = stats.repeated_median(first, second)
    assert math.isfinite(low)
    assert math.isfinite(high)
    assert 0 < low < median < high
    with pytest.raises(ValueError, match="no work"):
        stats.repeated_median([0.0, 0.0, 0.01], [0.0, 0.0, 0.01])
