from __future__ import annotations

import json
import random
import time

import pytest

from pytest_cudaperf.measure.timing import (
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


class StatefulBackend:
    """A backend whose every new sampler lands in one of two states, alternating, as small
    cold-L2 kernels did between back-to-back measurements on the H100 (16.4 vs 17.0 µs)."""

    def __init__(self, levels: tuple[float, ...]) -> None:
        self.levels = levels
        self.samplers = 0

    def sampler(self, fn: object, graph: bool) -> ScriptedSampler:
        level = self.levels[self.samplers % len(self.levels)]
        self.samplers += 1
        rng = random.Random(self.samplers)
        return ScriptedSampler([[level * rng.uniform(0.999, 1.001) for _ in range(8)]] * 200)

    def recover(self, sampler: object) -> None:
        pass

    def finish(self, sampler, fn, samples, warnings, cost_s, name, round_medians_ms=()):  # type: ignore[no-untyped-def]
        return Measurement.from_samples(samples, round_medians_ms=round_medians_ms, name=name)

    def close(self) -> None:
        pass


def test_rounds_widen_the_ci_to_cover_each_rounds_median() -> None:
    backend = StatefulBackend((1.00, 1.04))
    m = measure(backend, lambda: None, Budget(warmup=0.0, max_time=1.0, rounds=2))  # type: ignore[arg-type]
    assert backend.samplers == 2
    assert len(m.round_medians_ms) == 2
    assert m.round_medians_ms[0] == pytest.approx(1.00, rel=0.002)
    assert m.round_medians_ms[1] == pytest.approx(1.04, rel=0.002)
    # one round alone claims ±0.1%; the two rounds disagree by 4%: the CI says so
    assert m.ci_ms[0] <= 1.001
    assert m.ci_ms[1] >= 1.039
    assert m.rel_halfwidth > 0.015
    single = measure(StatefulBackend((1.0,)), lambda: None, Budget(warmup=0.0, rounds=1))  # type: ignore[arg-type]
    assert single.round_medians_ms == ()
    assert single.rel_halfwidth < 0.005


def test_per_round_budget_splits_time_and_samples() -> None:
    budget = Budget(min_time=0.2, max_time=1.0, min_samples=10, precision=0.01, rounds=2)
    one = budget.per_round()
    assert (one.min_time, one.max_time, one.min_samples, one.rounds) == (0.1, 0.5, 5, 1)
    assert one.precision == pytest.approx(0.01 * 2**0.5)
    assert Budget(rounds=1).per_round() == Budget(rounds=1)


def test_l2_flush_without_triton_reads_with_torch_sum() -> None:
    """On this CPU machine the Triton kernels cannot run: the flush falls back to torch.sum,
    says so, and its buffer is a whole number of discard programs' lines."""
    torch = pytest.importorskip("torch")
    from pytest_cudaperf.measure.cuda import L2Flush

    flush = L2Flush(torch, torch.device("cpu"), l2_bytes=3 << 20)
    assert flush.method == "torch.sum"
    assert flush.n * 4 >= 8 << 20  # at least 8 MiB, twice a small L2
    assert flush.n % (L2Flush.DISCARD_BLOCK * L2Flush.FLOATS_PER_LINE) == 0
    flush()  # reads the buffer
    assert float(flush._out) == flush.n


def test_sync_dry_run_once_per_callable_and_measurement(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_cudaperf.measure import cuda as cuda_timing

    dry_runs: list[object] = []

    def dry_run(torch_mod: object, fn: object, cycles: float) -> bool:
        dry_runs.append(fn)
        return False

    monkeypatch.setattr(cuda_timing, "_synchronizes", dry_run)
    backend = cuda_timing.CudaBackend.__new__(cuda_timing.CudaBackend)  # no CUDA here
    backend._torch, backend.cycles_per_ms, backend._synchronizing = None, 1.0, []
    backend.warnings = []

    def first() -> None:
        pass

    def second() -> None:
        pass

    assert [backend.synchronizes(f) for f in (first, first, second, first)] == [False] * 4
    assert dry_runs == [first, second]  # one dry run per callable, not per round
    # a blocker that timed out: the next round of the same callable samples unblocked at once
    sampler = cuda_timing.CudaEventSampler.__new__(cuda_timing.CudaEventSampler)
    sampler.run, sampler.graph, sampler.blocker = first, False, object()  # type: ignore[assignment]
    backend.recover(sampler)
    assert sampler.blocker is None
    assert backend.synchronizes(first) is True
    assert len(dry_runs) == 2


def test_spin_mhz_from_cycle_and_nanosecond_pairs() -> None:
    from pytest_cudaperf.measure.cuda import spin_mhz

    # 19800 cycles in 10 µs: 1980 MHz; a slot without time (not spun) is skipped
    assert spin_mhz([19800, 10000, 0, 0, 33000, 20000]) == [1980.0, 1650.0]


def test_without_triton_the_sleep_kernel_blocks_and_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys

    torch = pytest.importorskip("torch")
    from pytest_cudaperf.measure import cuda as cuda_timing

    monkeypatch.setitem(sys.modules, "pytest_cudaperf.measure._spin", None)  # Triton missing
    warnings: list[str] = []
    blocker = cuda_timing._make_blocker(torch, torch.device("cpu"), 1.0, warnings)
    assert isinstance(blocker, cuda_timing.SleepBlocker)
    assert blocker.sm_mhz() == []
    assert len(warnings) == 1
    assert warnings[0].startswith("spin blocker unavailable (ModuleNotFoundError")
    assert warnings[0].endswith("used torch.cuda._sleep")
