"""Speed of light and energy on a real GPU: a contiguous 256 MB copy near the measured
bandwidth ceiling, the same data through a transposed view clearly below it and failed by
min_peak alone; a 4096^3 bf16 GEMM's joules per call, and a planted second GEMM raising them
beyond a max_joules set between."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.gpu

COPIES = """
import pytest
import torch

SRC = torch.randn(8192, 8192, device="cuda")  # 256 MiB of float32
DST = torch.empty_like(SRC)

def test_contiguous(cuda_timer):
    cuda_timer(lambda: DST.copy_(SRC))

@pytest.mark.perf(min_peak=0.5)
def test_transposed(cuda_timer):
    cuda_timer(lambda: DST.copy_(SRC.t()))
"""

GEMMS = """
import os
import pytest
import torch

A = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
B = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
TIMES = 2 if os.environ.get("PLANT_SECOND_GEMM") else 1
LIMIT = float(os.environ["MAX_JOULES"]) if os.environ.get("MAX_JOULES") else None

@pytest.mark.perf(max_joules=LIMIT)
def test_gemm(cuda_timer):
    def gemm():
        for _ in range(TIMES):
            A @ B
    cuda_timer(gemm)
"""


@pytest.fixture
def cuda() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")


def records(path: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """(test name, series) -> record of a --cudaperf-json report."""
    report = json.loads(path.read_text())
    return {
        (r["nodeid"].rsplit("::", 1)[-1], r["series"]): r
        for t in report["tests"]
        for r in t["records"]
    }


@pytest.mark.usefixtures("cuda")
def test_a_strided_copy_runs_clearly_below_the_ceiling_and_min_peak_fails_it_alone(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_copies=COPIES)
    result = pytester.runpytest_subprocess(
        "--cudaperf-roofline", "--cudaperf-json=r.json", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "speed of light: * is *% of the measured * TB/s (memory-bound, 0 FLOP/B) < min_peak 50%",
            "OVER BUDGET test_copies.py::test_transposed - speed of light: *",
        ]
    )
    found = records(pytester.path / "r.json")
    contiguous = found[("test_contiguous", "time:device/cold")]["roofline"]
    transposed = found[("test_transposed", "time:device/cold")]["roofline"]
    nbytes = 2 * 8192 * 8192 * 4
    for roof in (contiguous, transposed):
        assert roof["bound"] == "memory"
        assert roof["work"]["read_bytes"] + roof["work"]["written_bytes"] == nbytes
        assert roof["measured"]["bandwidth"] > 0
    print("contiguous", contiguous["fraction_measured"], contiguous["fraction_datasheet"])
    print("transposed", transposed["fraction_measured"], transposed["fraction_datasheet"])
    assert contiguous["fraction_measured"] >= 0.8
    assert transposed["fraction_measured"] < 0.5
    assert transposed["fraction_measured"] < 0.75 * contiguous["fraction_measured"]


@pytest.mark.usefixtures("cuda")
def test_a_planted_second_gemm_raises_the_energy_per_call_beyond_max_joules(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("pynvml")
    pytester.makepyfile(test_gemms=GEMMS)
    args = ("--cudaperf-json=r.json", "-p", "no:cacheprovider", "-rA")
    first = pytester.runpytest_subprocess("--cudaperf-energy", *args)
    first.assert_outcomes(passed=1)
    path = pytester.path / "r.json"
    details = json.loads(path.read_text())["tests"][0]["details"]  # why, where no figure
    assert ("test_gemm", "energy:call") in records(path), details
    energy = records(path)[("test_gemm", "energy:call")]
    one = energy["energy"]["joules_per_call"]
    print("one GEMM", energy["energy"])
    assert one > 0
    assert energy["unit"] == "J"
    limit = 1.4 * one
    monkeypatch.setenv("PLANT_SECOND_GEMM", "1")
    monkeypatch.setenv("MAX_JOULES", f"{limit:.6g}")
    second = pytester.runpytest_subprocess(*args)  # max_joules alone asks for the energy
    second.assert_outcomes(failed=1)
    second.stdout.fnmatch_lines(
        [f"*energy: * per call > max_joules {float(f'{limit:.6g}'):g} J (* W over * calls)*"]
    )
    two = records(pytester.path / "r.json")[("test_gemm", "energy:call")]["energy"]
    print("two GEMMs", two)
    assert two["joules_per_call"] >= 1.8 * one
