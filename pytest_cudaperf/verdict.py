"""Comparison policy: a current value with its noise against a baseline entry -> a verdict.

Regression only when the CI of current/baseline lies above ``1 + t``, where ``t`` is the larger of
the tolerance and the noise recorded with the baseline; improved when it lies below
``1 / (1 + t)``; pass when it lies inside; otherwise inconclusive (re-measure, then report without
failing). Peak memory is compared the same way, with the noise it shows (usually none).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from pytest_cudaperf.measure import stats
from pytest_cudaperf.units import format_ms, format_pct, format_size


class Kind(str, Enum):
    PASS = "pass"
    REGRESSION = "regression"
    IMPROVED = "improved"
    NEW = "new"
    INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True)
class Verdict:
    kind: Kind
    ratio: float | None = None
    ci: tuple[float, float] | None = None
    threshold: float | None = None
    message: str = ""
    #: the user's tolerance; ``threshold`` is larger when the baseline's noise is
    tolerance: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "ratio": self.ratio,
            "ci": list(self.ci) if self.ci else None,
            "threshold": self.threshold,
            "tolerance": self.tolerance,
            "message": self.message,
        }


def format_value(value: float, unit: str) -> str:
    return format_size(value) if unit == "bytes" else format_ms(value)


def ci_text(ci: tuple[float, float] | list[float]) -> str:
    """A ratio's CI as changes: ``+10.1%…+14.0%``."""
    return f"{format_pct(ci[0] - 1)}…{format_pct(ci[1] - 1)}"


def environment_change(baseline_env: Mapping[str, Any], current_env: Mapping[str, Any]) -> str:
    """``now torch 2.11 → 2.12`` for keys that differ, or ``same torch/CUDA/driver``."""
    changed = [
        f"{key} {baseline_env.get(key)} → {current_env.get(key)}"
        for key in ("torch", "cuda", "driver")
        if baseline_env.get(key) != current_env.get(key)
    ]
    return "now " + ", ".join(changed) if changed else "same torch/CUDA/driver"


def judge(
    value: float,
    halfwidth: float,
    unit: str,
    baseline: Mapping[str, Any] | None,
    tolerance: float,
    device_class: str,
    env: Mapping[str, Any],
) -> Verdict:
    """Compare ``value`` (relative CI half-width ``halfwidth``) with a baseline entry."""
    if baseline is None:
        return Verdict(Kind.NEW, message="no baseline for this device class")
    base_value = float(baseline["value"])
    base_noise = float(baseline.get("noise", 0.0))
    if base_value <= 0 or value <= 0:
        kind = Kind.PASS if value <= base_value else Kind.REGRESSION
        ratio = None
        ci = None
        threshold = tolerance
    else:
        threshold = max(tolerance, base_noise)
        ratio, low, high = stats.ratio_ci(value, halfwidth, base_value, base_noise)
        ci = (low, high)
        if low > 1 + threshold:
            kind = Kind.REGRESSION
        elif high < 1 / (1 + threshold):
            kind = Kind.IMPROVED
        elif high <= 1 + threshold and low >= 1 / (1 + threshold):
            kind = Kind.PASS
        else:
            kind = Kind.INCONCLUSIVE
    what = "peak memory" if unit == "bytes" else "median"
    change = (
        f"{format_pct(ratio - 1)}, 95% CI {ci_text(ci)}"
        if ratio is not None and ci is not None
        else "baseline is zero"
    )
    env_text = environment_change(baseline.get("env", {}), env)
    allowed = (
        f"tolerance {tolerance:.1%}, raised to {threshold:.1%} by the baseline's noise"
        if threshold > tolerance
        else f"tolerance {threshold:.1%}"
    )
    message = (
        f"{what} {format_value(value, unit)} vs baseline {format_value(base_value, unit)} "
        f"({change}, {allowed}) — {device_class}; baseline "
        f"{baseline.get('env', {}).get('date', 'undated')}, {env_text}"
    )
    prefix = {
        Kind.REGRESSION: "perf regression: " if unit != "bytes" else "memory regression: ",
        Kind.INCONCLUSIVE: "inconclusive: ",
    }.get(kind, "")
    return Verdict(kind, ratio, ci, threshold, prefix + message, tolerance)


def budget_failure(
    value: float, limit: float | None, unit: str, label: str, describe: str, subject: str = ""
) -> str | None:
    """``perf: test_attention median 12.3 ms > max_ms 5 ms (device time, 40 samples, cold L2)``."""
    if limit is None or value <= limit:
        return None
    who = f"{subject} " if subject else ""
    if unit == "bytes":
        return f"memory: {who}peak {format_size(value)} > {label} {format_size(limit)} ({describe})"
    return f"perf: {who}median {format_ms(value)} > {label} {limit:g} ms ({describe})"
