"""``cudaperf record`` on a GPU: its runs start together, measure in turns (no two processes'
tests overlap), and write series of one recording per run, with the breakdown the last run
profiled."""

from __future__ import annotations

import itertools
import json
import sys

import pytest

pytestmark = pytest.mark.gpu

SUITE = """
import torch

def test_gemm(cuda_timer):
    a = torch.randn(2048, 2048, device="cuda")
    cuda_timer(lambda: a @ a)

def test_synchronizing(benchmark):
    a = torch.randn(1 << 20, device="cuda")
    benchmark(lambda: a.sum().item())
"""

#: each run's tests, from the first test's setup to the last one's teardown, per process
SPANS = """
import os, time
import pytest

@pytest.fixture(scope="session", autouse=True)
def span():
    began = time.time()
    yield
    with open(f"span-{os.getpid()}", "w") as out:
        out.write(f"{began} {time.time()}")
"""


def test_record_runs_take_turns_and_write_three_recordings(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_rec=SUITE)
    pytester.makeconftest(SPANS)
    result = pytester.run(
        sys.executable, "-m", "pytest_cudaperf.cli", "record", "--runs", "3", "--",
        "-q", "--cudaperf-benchmark", "--cudaperf-max-time=0.2", "--cudaperf-require-gpu",
        "-p", "no:cacheprovider", "-p", "no:benchmark",
    )  # fmt: skip
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    result.stdout.fnmatch_lines(
        [
            "cudaperf record: 3 pytest processes started together, each measuring in its turn",
            "cudaperf record: breakdowns: * series profiled (in the last run)",
        ]
    )
    assert result.stdout.str().count("ended: exit 0") == 3
    spans = sorted(
        tuple(float(x) for x in path.read_text().split()) for path in pytester.path.glob("span-*")
    )
    assert len(spans) == 3
    assert all(end <= start for (_, end), (start, _) in itertools.pairwise(spans))
    (baseline,) = (pytester.path / ".cudaperf").glob("*.json")
    entries = json.loads(baseline.read_text())["entries"]
    assert sorted(entries) == ["test_rec.py::test_gemm", "test_rec.py::test_synchronizing"]
    for names in entries.values():
        for series in names.values():
            kept = {name: len(entry["recordings"]) for name, entry in series.items()}
            # a time series keeps one recording per run; peak memory, exact, its latest one
            assert kept == {name: 1 if name == "memory:peak" else 3 for name in series}, kept
    (gemm,) = entries["test_rec.py::test_gemm"].values()
    assert any(s.get("breakdown") for s in gemm.values())  # the last run's
