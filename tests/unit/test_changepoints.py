"""history/changepoints.py: Student's t tail, the E-divisive split, and change points found where
the level moved, and only there."""

from __future__ import annotations

import random

import numpy as np
import pytest

from pytest_cudaperf.history.changepoints import (
    NEEDED,
    best_split,
    change_points,
    student_two_sided,
    too_few,
    welch_p,
)


@pytest.mark.parametrize(
    ("t", "df", "p"),
    [(12.706, 1, 0.05), (4.303, 2, 0.05), (2.228, 10, 0.05), (2.0, 10, 0.07339), (1.96, 1e6, 0.05),
     (0.0, 5, 1.0), (-2.0, 10, 0.07339)],
)  # fmt: skip
def test_students_two_sided_tail(t: float, df: float, p: float) -> None:
    assert student_two_sided(t, df) == pytest.approx(p, abs=2e-4)


def test_welch_tells_apart_two_levels_and_not_one() -> None:
    rng = np.random.default_rng(1)
    a, b = rng.normal(0.0, 0.01, 20), rng.normal(0.05, 0.01, 20)
    assert welch_p(a, b) < 1e-10
    assert welch_p(a, rng.normal(0.0, 0.01, 20)) > 0.01
    assert welch_p(np.ones(5), np.ones(5)) == 1.0
    assert welch_p(np.ones(5), np.ones(5) * 2) == 0.0
    assert welch_p(np.ones(1), np.ones(5)) == 1.0


def test_the_split_is_where_the_level_moved() -> None:
    x = np.array([0.0] * 12 + [1.0] * 8) + np.random.default_rng(2).normal(0, 0.05, 20)
    assert best_split(x) == 12
    assert best_split(np.zeros(5)) is None  # fewer than twice the smallest side


def _noisy(levels: list[tuple[int, float]], spread: float = 0.01, seed: int = 3) -> list[float]:
    rng = random.Random(seed)
    return [level * (1 + rng.gauss(0, spread)) for count, level in levels for _ in range(count)]


def test_one_step_is_found_at_its_commit_with_its_size() -> None:
    (point,) = change_points(_noisy([(25, 1.0), (20, 1.05)]))
    assert point.index == 25
    assert point.change == pytest.approx(0.05, abs=0.01)
    assert point.p < 1e-6


def test_several_steps_both_ways() -> None:
    points = change_points(_noisy([(15, 1.0), (15, 1.10), (15, 0.95)]))
    assert [p.index for p in points] == [15, 30]
    assert points[0].change > 0.08
    assert points[1].change < -0.1


def test_noise_and_changes_below_the_minimum_effect_are_not_change_points() -> None:
    assert change_points(_noisy([(60, 1.0)], spread=0.03)) == []
    assert change_points(_noisy([(30, 1.0), (30, 1.01)], spread=0.001)) == []  # real, but 1%
    assert len(change_points(_noisy([(30, 1.0), (30, 1.01)], spread=0.001), min_effect=0.005)) == 1


def test_values_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive and finite"):
        change_points([1.0, 0.0, 2.0])


def test_too_few_runs_is_said_with_how_many_it_takes() -> None:
    assert too_few(NEEDED) is None
    assert too_few(4) == (
        "too few runs to judge: a change point needs 3 runs on each side (6 in all), there are 4"
    )
    assert too_few(1) is not None
    assert "there is 1" in str(too_few(1))
    assert change_points([1.0, 1.01, 3.0, 3.02, 3.01]) == []  # a 3x step, one side too short
