"""history/drift.py: the Mann-Kendall test and the Theil-Sen slope, and a drift found where the
level creeps, and only there: not in flat noise, not at a single step."""

from __future__ import annotations

import numpy as np
import pytest

from pytest_cudaperf.history.drift import best_step_sse, drift, mann_kendall_p, theil_sen

SEEDS = range(20)


def creep(runs: int, per_run: float, noise: float, seed: int, flat: int = 0) -> list[float]:
    rng = np.random.default_rng(seed)
    level = np.concatenate([np.ones(flat), (1 + per_run) ** np.arange(runs)])
    return list(level * (1 + rng.normal(0, noise, flat + runs)))


def step(runs: int, at: int, size: float, noise: float, seed: int) -> list[float]:
    rng = np.random.default_rng(seed)
    level = np.where(np.arange(runs) >= at, 1 + size, 1.0)
    return list(level * (1 + rng.normal(0, noise, runs)))


def test_mann_kendall_and_theil_sen() -> None:
    rising = np.arange(20, dtype=float)
    assert mann_kendall_p(rising) < 1e-6
    assert mann_kendall_p(rising[::-1]) < 1e-6
    assert mann_kendall_p(np.ones(20)) == 1.0  # all tied: no trend
    assert mann_kendall_p(np.random.default_rng(0).normal(0, 1, 40)) > 0.05
    slope, intercept = theil_sen(2.0 + 0.5 * rising + np.r_[[9.0], np.zeros(19)])  # one outlier
    assert (slope, intercept) == (pytest.approx(0.5), pytest.approx(2.0))
    assert best_step_sse(np.r_[np.zeros(5), np.ones(5)]) == pytest.approx(0.0)


@pytest.mark.parametrize("noise", [0.01, 0.02])
def test_a_creep_of_half_a_percent_a_run_is_found(noise: float) -> None:
    found = [drift(creep(30, 0.005, noise, seed)) for seed in SEEDS]
    assert all(d is not None for d in found)
    for d in found:
        assert d is not None
        assert (d.start, d.stop) == (0, 30)
        assert d.slope == pytest.approx(0.005, abs=0.0025)
        assert d.change == pytest.approx(1.005**29 - 1, abs=0.06)
        assert d.p < 0.001


def test_a_creep_is_followed_back_to_about_where_it_began() -> None:
    d = drift(creep(40, 0.005, 0.015, seed=1, flat=30))
    assert d is not None
    assert 20 <= d.start <= 30  # the last 30 runs, then back in steps of 10 while it holds
    assert d.stop == 70


def test_flat_noise_is_no_drift() -> None:
    for noise in (0.01, 0.02):
        assert [drift(creep(60, 0.0, noise, seed)) for seed in SEEDS] == [None] * len(SEEDS)


@pytest.mark.parametrize("at", [8, 15, 25])
def test_a_single_step_is_no_drift(at: int) -> None:
    assert [drift(step(30, at, 0.10, 0.015, seed)) for seed in SEEDS] == [None] * len(SEEDS)


def test_too_few_runs_or_too_small_a_change_is_no_drift() -> None:
    assert drift([1.0, 1.01, 1.02, 1.03, 1.04, 1.05, 1.06, 1.07, 1.08]) is None  # 9 runs
    assert drift([1.0 + 0.0005 * i for i in range(30)]) is None  # 1.5% over the window
    with pytest.raises(ValueError, match="positive and finite"):
        drift([1.0, -1.0])
