"""The speed of light end to end on the CPU backend: counted and declared work, the rates in
the table, the JSON report and the JUnit properties; min_peak has no CPU ceiling to gate on."""

from __future__ import annotations

import json

import pytest

FAST = ["--cudaperf-max-time=0.05", "--cudaperf-rounds=1", "-p", "no:cacheprovider"]

TESTS = """
import pytest
import torch

A, B = torch.randn(64, 64), torch.randn(64, 64)

def test_gemm(cuda_timer):
    cuda_timer(torch.mm, A, B)

def test_declared(cuda_timer):
    cuda_timer(torch.mm, A, B, flops=1e9, bytes="1MB", name="mm")

@pytest.mark.perf(min_peak=0.5)
def test_gated(cuda_timer):
    cuda_timer(torch.mm, A, B)

def test_bad(cuda_timer):
    cuda_timer(torch.mm, A, B, flops="lots")
"""


def test_work_is_counted_and_reported_everywhere(pytester: pytest.Pytester) -> None:
    """Under xdist: the roofline rides on the outcome's JSON through execnet (the same path
    without xdist; the other test runs without it)."""
    pytester.makepyfile(test_sol=TESTS)
    result = pytester.runpytest(
        "-n2", *FAST, "--cudaperf-roofline", "--cudaperf-json=r.json", "--junitxml=j.xml"
    )
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*cuda_timer: flops: expected a number, got 'lots'*",
            "test *median*baseline*change*95% CI*verdict*peak mem*speed of light",
            "test_sol.py::test_declared ?mm? *TFLOP/s *GB/s",
        ]
    )
    report = json.loads((pytester.path / "r.json").read_text())
    assert report["schema"] == 4
    roofs = {
        r["key"]: r["roofline"] for t in report["tests"] for r in t["records"] if "roofline" in r
    }
    assert roofs["test_sol.py::test_gemm"]["work"]["flops"] == 2 * 64**3
    assert roofs["test_sol.py::test_gemm"]["work"]["read_bytes"] == 2 * 64 * 64 * 4
    assert roofs["test_sol.py::test_declared [mm]"]["work"]["declared"] == ["flops", "bytes"]
    assert roofs["test_sol.py::test_declared [mm]"]["work"]["flops"] == 10**9
    assert roofs["test_sol.py::test_gemm"]["measured"] is None  # no CPU ceiling
    junit = (pytester.path / "j.xml").read_text()
    assert 'name="cudaperf time:wall sol"' in junit


def test_min_peak_on_the_cpu_is_said_not_checked(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_sol=TESTS)
    result = pytester.runpytest(*FAST, "-k", "gated", "-rA", "--cudaperf-json=r.json")
    result.assert_outcomes(passed=1)
    report = json.loads((pytester.path / "r.json").read_text())
    (test,) = report["tests"]
    assert "min_peak not checked: no measured ceiling on cpu" in test["details"]
    assert any(d.startswith("speed of light: ") for d in test["details"])
