"""The entry points whose samples the test's own code takes, on a GPU with the host busy:
``benchmark.pedantic`` with a setup that allocates on the GPU, ``cuda_timer.region`` and
``cuda_timer.compare``. Recorded once, compared with two busy loops holding host cores: none reads
a REGRESSION; quiet again, a 3x slowdown planted in each is caught."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

pytestmark = pytest.mark.gpu

FAST = [
    "--cudaperf-max-time=0.3",
    "--cudaperf-breakdown=off",
    "-p",
    "no:cacheprovider",
    "-p",
    "no:benchmark",
    "--cudaperf-json=out.json",
]

SUITE = """
import os
import pytest
import torch

SLOW = int(os.environ.get("SLOW", "1"))

def work(a):
    for _ in range(SLOW):
        torch.mm(a, a)

def test_rounds(benchmark):
    def setup():
        return (torch.randn(4096, 4096, device="cuda"),), {}
    benchmark.pedantic(work, setup=setup, rounds=30)

def test_region(cuda_timer):
    x = torch.randn(4096, 4096, device="cuda")
    for _ in range(30):
        with cuda_timer.region("mm"):
            work(x)

@pytest.mark.perf(min_speedup=0.6)
def test_compare(cuda_timer):
    x = torch.randn(4096, 4096, device="cuda")
    cuda_timer.compare(lambda: work(x), lambda: torch.mm(x, x))
"""

SPIN = "import time\nend = time.monotonic() + 300\nwhile time.monotonic() < end: pass"


@contextmanager
def busy_loops(n: int = 2) -> Iterator[None]:
    loops = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(n)]
    try:
        yield
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


def _kinds(pytester: pytest.Pytester) -> dict[str, list[str]]:
    report = json.loads((pytester.path / "out.json").read_text())
    return {
        t["nodeid"].split("::")[1]: [
            r["verdict"]["kind"] for r in t["records"] if r["series"].startswith("time:")
        ]
        for t in report["tests"]
    }


def test_pedantic_region_and_compare_on_a_busy_host(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    pytester.makepyfile(test_entry=SUITE)
    pytester.runpytest_subprocess(*FAST, "--cudaperf-update").assert_outcomes(passed=3)
    with busy_loops():
        busy = pytester.runpytest_subprocess(*FAST)
    kinds = _kinds(pytester)
    for name in ("test_rounds", "test_region"):
        assert kinds[name], name
        assert "regression" not in kinds[name], (name, kinds[name])
    busy.assert_outcomes(passed=3)

    monkeypatch.setenv("SLOW", "3")
    planted = pytester.runpytest_subprocess(*FAST)
    kinds = _kinds(pytester)
    assert kinds["test_rounds"] == ["regression"], kinds
    assert kinds["test_region"] == ["regression"], kinds
    planted.stdout.fnmatch_lines(["*test_compare*< min_speedup 0.6*"])
    planted.assert_outcomes(failed=3)
