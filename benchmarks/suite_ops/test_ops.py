"""Twenty common ops as a user times them on the CPU: elementwise, matrix products of four sizes,
a convolution, sort and top-k, softmax, layer norm, GELU, cumulative sum, a linear layer."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.nn import functional


def _randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("n", [4096, 1 << 18])
def test_add(cuda_timer: Any, n: int) -> None:
    x, y = _randn(n), _randn(n)
    cuda_timer(torch.add, x, y)


@pytest.mark.parametrize("n", [64, 128, 256, 512])
def test_mm(cuda_timer: Any, n: int) -> None:
    a, b = _randn(n, n), _randn(n, n)
    cuda_timer(torch.mm, a, b)


def test_conv2d(cuda_timer: Any) -> None:
    x, w = _randn(1, 16, 32, 32), _randn(32, 16, 3, 3)
    cuda_timer(functional.conv2d, x, w, padding=1)


@pytest.mark.parametrize("n", [1024, 1 << 16])
def test_sort(cuda_timer: Any, n: int) -> None:
    x = _randn(n)
    cuda_timer(torch.sort, x)


@pytest.mark.parametrize("n", [1024, 1 << 16])
def test_topk(cuda_timer: Any, n: int) -> None:
    x = _randn(n)
    cuda_timer(torch.topk, x, 16)


@pytest.mark.parametrize("rows", [64, 1024])
def test_softmax(cuda_timer: Any, rows: int) -> None:
    x = _randn(rows, 256)
    cuda_timer(torch.softmax, x, -1)


@pytest.mark.parametrize("rows", [64, 1024])
def test_layer_norm(cuda_timer: Any, rows: int) -> None:
    x = _randn(rows, 256)
    cuda_timer(functional.layer_norm, x, (256,))


@pytest.mark.parametrize("n", [4096, 1 << 18])
def test_gelu(cuda_timer: Any, n: int) -> None:
    x = _randn(n)
    cuda_timer(functional.gelu, x)


@pytest.mark.parametrize("n", [1024, 1 << 16])
def test_cumsum(cuda_timer: Any, n: int) -> None:
    x = _randn(n)
    cuda_timer(torch.cumsum, x, 0)


def test_linear(cuda_timer: Any) -> None:
    x, w, b = _randn(64, 512), _randn(512, 512), _randn(512)
    cuda_timer(functional.linear, x, w, b)
