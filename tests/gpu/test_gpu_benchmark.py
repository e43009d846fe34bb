"""pytest-benchmark's ``benchmark`` fixture on a GPU: CUDA work is timed as device time with its
host time beside it, Python code that queues no CUDA work by the CPU backend under the CPU's
device class, a callable that synchronizes inside host-bound (said once in the test's report), each
also where one call outlasts the first short hold of the check for CUDA work,
and pedantic's rounds with a setup by CUDA events around each round."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.gpu

FAST = ["--cudaperf-max-time=0.3", "-p", "no:cacheprovider", "-p", "no:benchmark"]

SUITE = """
import time

import torch

def test_gpu(benchmark):
    x = torch.randn(1024, 1024, device="cuda")
    assert benchmark(torch.mm, x, x).shape == (1024, 1024)

def test_python(benchmark):
    assert benchmark(sum, range(1000)) == 499500

def test_synchronizes(benchmark):
    x = torch.randn(1 << 16, device="cuda")
    benchmark(lambda: (x * 2).sum().item())

def test_python_long(benchmark):
    benchmark(time.sleep, 0.06)

def test_synchronizes_long(benchmark):
    x = torch.randn(4096, 4096, device="cuda")

    def call():
        for _ in range(12):
            y = x @ x
        return y.sum().item()

    benchmark(call)

def test_long_on_the_host_then_queues(benchmark):
    x = torch.zeros(4, device="cuda")

    def call():
        time.sleep(0.03)
        x.add_(1)

    benchmark(call)

def test_rounds(benchmark):
    def setup():
        x = torch.randn(512, 512, device="cuda")
        return (x, x), {}

    benchmark.pedantic(torch.mm, setup=setup, rounds=20)
"""


def test_each_callable_is_timed_where_it_runs(pytester: pytest.Pytester) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest(*FAST, "--benchmark-json=bench.json", "--cudaperf-json=out.json")
    result.assert_outcomes(passed=7)
    benchmarks = {
        b["name"]: b for b in json.loads((pytester.path / "bench.json").read_text())["benchmarks"]
    }
    gpu = benchmarks["test_gpu"]
    assert gpu["cudaperf"]["metric"] == "device"
    assert gpu["cudaperf"]["series"].startswith("time:device/")
    assert gpu["cudaperf"]["device"].startswith("cuda")
    assert gpu["cudaperf"]["host_s_per_call"] is not None
    assert gpu["options"]["timer"] == "cuda_event"

    python = benchmarks["test_python"]["cudaperf"]
    assert (python["metric"], python["device"]) == ("wall", "cpu")
    assert python["device_class"].startswith("CPU ")

    assert benchmarks["test_synchronizes"]["cudaperf"]["metric"] == "host"
    # past the first short hold: a 60 ms sleep, 12 GEMMs read back, 30 ms on the host then a kernel
    long_python = benchmarks["test_python_long"]["cudaperf"]
    assert (long_python["metric"], long_python["device"]) == ("wall", "cpu")
    assert benchmarks["test_synchronizes_long"]["cudaperf"]["metric"] == "host"
    assert benchmarks["test_long_on_the_host_then_queues"]["cudaperf"]["device"].startswith("cuda")
    rounds = benchmarks["test_rounds"]
    assert (rounds["cudaperf"]["series"], rounds["stats"]["rounds"]) == ("time:region", 20)
    assert rounds["options"]["timer"] == "cuda_event"

    tests = {t["nodeid"]: t for t in json.loads((pytester.path / "out.json").read_text())["tests"]}
    details = tests["test_suite.py::test_synchronizes"]["details"]
    assert sum("synchronizes inside" in line for line in details) == 1, details
