"""A fixture that draws its sizes on the GPU: recorded alone (``-k``), judged in the whole suite
after a test that draws first, the peak memory is the recording's because each measured test
starts from ``--cudaperf-seed``; with ``--cudaperf-seed=off`` the whole suite draws other sizes."""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.gpu

FAST = ["--cudaperf-max-time=0.2", "-p", "no:cacheprovider", "-p", "no:benchmark"]

SUITE = """
import pytest
import torch

@pytest.fixture
def length():
    # 4,096 floats to 8 MiB in steps of 5%: two draws of 128 part beyond the 1% memory tolerance
    return int(4096 * 1.05 ** int(torch.randint(0, 128, (1,), device="cuda").item()))

def test_draws_first():
    torch.rand(64, device="cuda")

def test_padded(benchmark, length):
    benchmark(lambda: torch.ones(length, device="cuda").sum())
"""


def test_a_size_drawn_on_the_gpu_is_the_recordings_whatever_ran_before(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_suite=SUITE)
    pytester.runpytest(*FAST, "--cudaperf-update", "-k", "test_padded").assert_outcomes(passed=1)
    # the peak column's verdict (a time's verdict stays the timer's business here)
    changed = re.compile(r"test_padded.*iB +(REGRESSION|IMPROVED)")
    whole = pytester.runpytest(*FAST).stdout.str()
    assert "test_padded" in whole
    assert not changed.search(whole), whole
    unseeded = pytester.runpytest(*FAST, "--cudaperf-seed=off").stdout.str()
    assert changed.search(unseeded), unseeded  # another size (one chance in 128 of the same)
