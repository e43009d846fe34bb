"""Every entry point on a busy host, on the CPU: ``benchmark(...)``, ``benchmark.pedantic`` with
and without a ``setup``, ``@pytest.mark.perf`` on a whole test, ``cuda_timer.region``,
``cuda_timer.compare`` and a ``memory_guard`` budget (``benchmark.weave`` where aspectlib is
installed), and pedantic with too few rounds for a verdict. Recorded once, then compared while
two busy loops that this test starts hold the cores: none reads a REGRESSION; then, quiet again,
a 10x slowdown planted in each is caught. 10x, not 3x: against a one-process baseline (judged at
±50% at least) on CI's cores, which the other xdist worker keeps busy, a 3x plant's 95% CI reached
down to 1x for pedantic and to 1.3x for a region, an honest INCONCLUSIVE; the 3x pedantic plant
against three recordings is the next test's, and every entry point's 3x on a quiet host is
``benchmarks/bench_busy_entry.py``'s (RESULTS.md). One inner run for each phase holds every entry
point."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

# In-process runs: torch cannot be imported a second time in one process
import torch  # noqa: F401

ENTRY_POINTS = """
import os
import pytest
import torch

SLOW = int(os.environ.get("SLOW", "1"))
x = torch.randn(192, 192)

def mm(a):
    for _ in range(SLOW):
        a @ a

def test_plain(benchmark):
    benchmark(mm, x)

def test_pedantic(benchmark):
    def setup():
        return (torch.randn(192, 192),), {}
    benchmark.pedantic(mm, setup=setup, rounds=20)

def test_pedantic_no_setup(benchmark):
    benchmark.pedantic(mm, args=(x,), rounds=20)

def test_weave(benchmark):
    pytest.importorskip("aspectlib")
    benchmark.weave(mm, lazy=True)
    mm(x)

@pytest.mark.perf
def test_whole():
    mm(x)

def test_region(cuda_timer):
    for _ in range(20):
        with cuda_timer.region("mm"):
            mm(x)

@pytest.mark.perf(min_speedup=0.6)
def test_compare(cuda_timer):
    cuda_timer.compare(lambda: mm(x), lambda: x @ x)

def test_few_rounds(benchmark):  # planted too: too few rounds for a verdict all the same
    import time
    benchmark.pedantic(time.sleep, setup=lambda: ((0.002 * SLOW,), {}), rounds=5)

def test_guard(memory_guard):
    with memory_guard(max_peak="64MB"):
        mm(x)
"""

#: the tests whose time is judged against a baseline
TIMED = (
    "test_plain",
    "test_pedantic",
    "test_pedantic_no_setup",
    "test_whole",
    "test_region",
    "test_few_rounds",
)
FAST = [
    "-p",
    "no:benchmark",
    "-p",
    "no:cacheprovider",
    "--cudaperf-max-time=0.2",
    "--cudaperf-breakdown=off",
    "--cudaperf-json=report.json",
    "--cudaperf-state-wait=5s",  # a busy loop's contention is waited out in vain
]
#: how long a busy loop spins at most, were it left running
BUSY_S = 120


@contextmanager
def busy_loops(n: int = 2) -> Iterator[None]:
    """``n`` processes that spin (for at most :data:`BUSY_S`), killed on the way out."""
    spin = f"import time\nend = time.monotonic() + {BUSY_S}\nwhile time.monotonic() < end: pass"
    loops = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(n)]
    try:
        yield
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


def _verdicts(pytester: pytest.Pytester) -> dict[str, list[dict[str, Any]]]:
    """Test name -> its time records' verdicts."""
    report = json.loads((pytester.path / "report.json").read_text())
    return {
        test["nodeid"].split("::")[1]: [
            r["verdict"] for r in test["records"] if r["series"].startswith("time:")
        ]
        for test in report["tests"]
    }


def test_every_entry_point_reads_no_regression_when_busy_and_catches_10x_when_quiet(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_entry=ENTRY_POINTS)
    recorded = pytester.runpytest_inprocess(*FAST, "--cudaperf-update")
    recorded.assert_outcomes(passed=8, skipped=1)

    with busy_loops():
        busy = pytester.runpytest_inprocess(*FAST)
    verdicts = _verdicts(pytester)
    for name in TIMED:
        kinds = [v["kind"] for v in verdicts[name]]
        assert kinds, name
        assert "regression" not in kinds, (name, verdicts[name])
    busy.assert_outcomes(passed=8, skipped=1)

    monkeypatch.setenv("SLOW", "10")
    planted = pytester.runpytest_inprocess(*FAST)
    verdicts = _verdicts(pytester)
    (few,) = verdicts["test_few_rounds"]
    assert few["kind"] == "inconclusive", few
    assert "only 5 samples, too few for a confident verdict" in few["message"], few
    for name in TIMED[:-1]:
        (verdict,) = verdicts[name]
        assert verdict["ratio"] > 2, (name, verdict)
        # caught: a regression, or held back only by this run's contention (judged at 100%)
        assert verdict["kind"] == "regression" or (
            verdict["kind"] == "inconclusive" and verdict["threshold"] >= 1.0
        ), (name, verdict)
    planted.stdout.fnmatch_lines(["*test_compare*< min_speedup 0.6*"])
    assert "test_guard" not in {
        line.split("::")[1].split()[0]
        for line in planted.stdout.lines
        if line.startswith("FAILED test_entry.py::")
    }


PEDANTIC = """
import os
import torch

SLOW = int(os.environ.get("SLOW", "1"))

def mm(a):
    for _ in range(SLOW):
        a @ a

def test_pedantic(benchmark):
    def setup():
        return (torch.randn(256, 256),), {}
    benchmark.pedantic(mm, setup=setup, rounds=20)
"""


def test_a_3x_pedantic_plant_is_caught_or_the_cpu_was_never_free(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three recordings; then a 3x slowdown planted while two busy loops hold the cores for the
    first second: rounds read under contention (judged at 2x) are taken again once other
    processes left the CPU. A REGRESSION, or, on a loaded host (the CPU shared for the whole
    wait, or again while the rounds were taken again or confirmed in a fresh process, or
    recordings that moved), an INCONCLUSIVE that says what held it; never a pass."""
    pytester.makepyfile(test_planted=PEDANTIC)
    for _ in range(3):
        pytester.runpytest_inprocess(*FAST, "--cudaperf-update").assert_outcomes(passed=1)
    monkeypatch.setenv("SLOW", "3")
    spin = "import time\nend = time.monotonic() + 1\nwhile time.monotonic() < end: pass"
    loops = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(2)]
    try:
        pytester.runpytest_inprocess(*FAST, "--cudaperf-state-wait=10s")
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
    report = json.loads((pytester.path / "report.json").read_text())
    (test,) = report["tests"]
    ((verdict, n),) = [
        (r["verdict"], r["measurement"]["n"])
        for r in test["records"]
        if r["series"].startswith("time:")
    ]
    waited = [line for line in test["details"] if "pedantic rounds: waited" in line]
    if verdict["kind"] == "regression":
        # the recordings were taken beside the other xdist worker, whose load can make them
        # slow too: the 3x reads as 2x or more alone, about 1.96x seen in CI
        assert verdict["ratio"] > 1.5, verdict
        assert n in (20, 40, 80), n  # the rounds asked for, or taken again
        assert all("then took the rounds again" in line for line in waited), waited
    else:
        # never a pass, and it says what held it: the CPU shared for the whole wait (in vain),
        # or a threshold raised (by the contention the rounds taken again met, in this process
        # or the fresh one, or by the noise of three recordings on a loaded host)
        assert verdict["kind"] == "inconclusive", verdict
        message = verdict["message"]
        assert "raised to" in message or any("in vain" in line for line in waited), (
            message,
            waited,
        )
