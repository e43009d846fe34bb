from __future__ import annotations

import json
import random
import time

import pytest

from pytest_cudaperf.timing import (
    Budget,
    CpuBackend,
    Measurement,
    compare,
    measure,
    run_adaptive,
)


class ScriptedSampler:
    """Batches from a list: a warm-up that settles, then steady samples."""

    def __init__(self, batches: list[list[float]]) -> None:
        self.batches = list(batches)
        self.taken = 0

    def batch(self) -> list[float]:
        self.taken += 1
        return self.batches.pop(0) if self.batches else [1.0] * 5


def test_warmup_runs_until_two_batch_medians_agree() -> None:
    sampler = ScriptedSampler([[9.0] * 5, [3.0] * 5, [1.0] * 5, [1.0] * 5])
    result = run_adaptive(sampler, Budget(warmup=10.0, min_samples=5, precision=0.01))
    assert result.warmup_batches == 4
    assert result.samples[0] == 1.0
    assert not result.warnings


def test_budget_warns_when_precision_not_reached() -> None:
    class Noisy:
        def __init__(self) -> None:
            self.rng = random.Random(1)

        def batch(self) -> list[float]:
            return [self.rng.uniform(1.0, 5.0) for _ in range(5)]

    result = run_adaptive(Noisy(), Budget(warmup=0.0, max_time=0.01, precision=0.001))
    assert any("time budget" in w for w in result.warnings)
    assert len(result.samples) >= 3


def test_budget_for_tolerance_sets_precision() -> None:
    assert Budget.for_tolerance(0.05).precision == pytest.approx(0.005)
    assert Budget.for_tolerance(0.5).precision == pytest.approx(0.01)
    assert Budget.for_tolerance(0.0).precision == pytest.approx(0.0005)


def test_cpu_sleep_is_about_two_ms() -> None:
    m = measure(CpuBackend(), lambda: time.sleep(0.002), Budget(max_time=0.5))
    assert 1.9 < m.median_ms < 3.5
    assert m.metric == "wall"
    assert m.mode == "wall"
    assert m.n >= 10
    assert m.ci_ms[0] <= m.median_ms <= m.ci_ms[1]


def test_cpu_groups_short_calls() -> None:
    m = measure(CpuBackend(), lambda: None, Budget(max_time=0.2))
    assert m.median_ms < 0.01
    assert any("timed in groups" in w for w in m.warnings)


def test_measurement_round_trips_through_json() -> None:
    m = Measurement.from_samples(
        [1.0, 2.0, 3.0], metric="device", cache="cold", clocks={"recorded": False}, warnings=("x",)
    )
    again = Measurement.from_dict(json.loads(json.dumps(m.to_dict())))
    assert again == m
    assert again.mode == "device/cold"
    assert "device time, 3 samples, cold L2" in again.describe()


def test_compare_finds_the_faster_callable() -> None:
    comparison = compare(
        CpuBackend(),
        lambda: time.sleep(0.001),
        lambda: time.sleep(0.003),
        Budget(warmup=0.0, max_time=0.3, precision=0.02),
    )
    assert 2.0 < comparison.speedup < 3.5
    assert comparison.ci[0] <= comparison.speedup <= comparison.ci[1]
    assert comparison.rounds >= 3
    assert "speedup" in comparison.describe()
