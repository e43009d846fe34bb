from __future__ import annotations

from pytest_cudaperf.verdict import Kind, budget_failure, environment_change, judge

ENV = {"torch": "2.12", "cuda": "13.0", "driver": "580"}
BASE = {
    "value": 1.1,
    "noise": 0.002,
    "unit": "ms",
    "n": 50,
    "env": {"torch": "2.11", "cuda": "13.0", "driver": "580", "date": "2026-11-20"},
}


def test_missing_baseline_is_new() -> None:
    assert judge(1.0, 0.01, "ms", None, 0.05, "H100", ENV).kind is Kind.NEW


def test_regression_message_says_what_moved() -> None:
    verdict = judge(1.234, 0.003, "ms", BASE, 0.05, "NVIDIA H100 80GB HBM3", ENV)
    assert verdict.kind is Kind.REGRESSION
    assert verdict.message.startswith(
        "perf regression: median 1.234 ms vs baseline 1.100 ms (+12.2%, 95% CI +11.8%…+12.6%, "
        "tolerance 5.0%) — NVIDIA H100 80GB HBM3; baseline 2026-11-20, now torch 2.11 → 2.12"
    )


def test_within_tolerance_passes_and_large_drop_improves() -> None:
    assert judge(1.12, 0.003, "ms", BASE, 0.05, "X", ENV).kind is Kind.PASS
    assert judge(0.8, 0.003, "ms", BASE, 0.05, "X", ENV).kind is Kind.IMPROVED


def test_ci_straddling_the_threshold_is_inconclusive() -> None:
    verdict = judge(1.155, 0.02, "ms", BASE, 0.05, "X", ENV)
    assert verdict.kind is Kind.INCONCLUSIVE
    assert verdict.message.startswith("inconclusive: ")


def test_recorded_noise_raises_the_threshold_and_says_so() -> None:
    noisy = {**BASE, "noise": 0.15}
    verdict = judge(1.2, 0.0, "ms", noisy, 0.05, "X", ENV)
    assert verdict.kind is not Kind.REGRESSION
    assert verdict.threshold == 0.15
    assert "tolerance 5.0%, raised to 15.0% by the baseline's noise" in verdict.message
    assert verdict.to_dict()["tolerance"] == 0.05
    plain = judge(1.12, 0.0, "ms", BASE, 0.05, "X", ENV)
    assert plain.threshold == plain.tolerance == 0.05
    assert "tolerance 5.0%) —" in plain.message


def test_memory_verdicts() -> None:
    base = {"value": 1000.0, "noise": 0.0, "unit": "bytes", "n": 1, "env": {}}
    assert judge(1000.0, 0.0, "bytes", base, 0.01, "X", ENV).kind is Kind.PASS
    verdict = judge(2048.0, 0.0, "bytes", base, 0.01, "X", ENV)
    assert verdict.kind is Kind.REGRESSION
    assert verdict.message.startswith("memory regression: peak memory 2.0 KiB vs baseline")


def test_budget_failure_line() -> None:
    assert budget_failure(3.0, 5.0, "ms", "max_ms", "x") is None
    assert budget_failure(
        12.3, 5.0, "ms", "max_ms", "device time, 40 samples, cold L2", "test_attention"
    ) == ("perf: test_attention median 12.300 ms > max_ms 5 ms (device time, 40 samples, cold L2)")
    assert budget_failure(2**21, 2**20, "bytes", "max_peak", "requested bytes") == (
        "memory: peak 2.0 MiB > max_peak 1.0 MiB (requested bytes)"
    )


def test_environment_change() -> None:
    assert environment_change(ENV, ENV) == "same torch/CUDA/driver"
    assert environment_change({"torch": "1"}, {"torch": "2"}).startswith("now torch 1 → 2")
