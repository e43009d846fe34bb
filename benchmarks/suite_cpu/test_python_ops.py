"""Plain-Python work timed with the same fixture (the timer takes any callable)."""

from __future__ import annotations

import json
import random

import pytest

SIZES = [10, 100, 1_000, 3_000, 10_000, 30_000, 100_000, 300_000]


@pytest.mark.parametrize("n", SIZES)
def test_sorted_list(cuda_timer, n):
    data = random.Random(0).sample(range(10 * n), n)
    cuda_timer(sorted, data)


@pytest.mark.parametrize("n", SIZES)
def test_dict_build(cuda_timer, n):
    keys = [f"k{i}" for i in range(n)]
    cuda_timer(lambda: {k: i for i, k in enumerate(keys)})


@pytest.mark.parametrize("n", [10, 100, 1_000, 3_000, 10_000, 30_000, 60_000, 100_000])
def test_json_dumps(cuda_timer, n):
    doc = [{"id": i, "name": f"item{i}", "tags": ["a", "b"]} for i in range(n)]
    cuda_timer(json.dumps, doc)
