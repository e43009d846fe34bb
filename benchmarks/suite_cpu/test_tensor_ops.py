"""Tensor operations of mixed sizes on the CPU: a few µs (launch overhead) to several ms."""

from __future__ import annotations

import pytest
import torch

SIZES = [1 << k for k in range(8, 24, 2)]  # 256 .. 4M elements


@pytest.mark.parametrize("n", SIZES)
def test_add(cuda_timer, n):
    x = torch.randn(n)
    cuda_timer(torch.add, x, x)


@pytest.mark.parametrize("n", SIZES)
def test_mul_scalar(cuda_timer, n):
    x = torch.randn(n)
    cuda_timer(torch.mul, x, 1.5)


@pytest.mark.parametrize("n", SIZES)
def test_exp(cuda_timer, n):
    x = torch.randn(n)
    cuda_timer(torch.exp, x)


@pytest.mark.parametrize("n", SIZES)
def test_sum(cuda_timer, n):
    x = torch.randn(n)
    cuda_timer(x.sum)


@pytest.mark.parametrize("n", SIZES)
def test_cumsum(cuda_timer, n):
    x = torch.randn(n)
    cuda_timer(torch.cumsum, x, 0)


@pytest.mark.parametrize("n", [1 << k for k in range(6, 22, 2)])
def test_sort(cuda_timer, n):
    x = torch.randn(n)
    cuda_timer(torch.sort, x)


@pytest.mark.parametrize("rows", [1, 4, 16, 64, 256, 1024, 2048, 4096])
def test_softmax(cuda_timer, rows):
    x = torch.randn(rows, 1024)
    cuda_timer(torch.softmax, x, dim=-1)


@pytest.mark.parametrize("rows", [1, 4, 16, 64, 256, 1024, 2048, 4096])
def test_layer_norm(cuda_timer, rows):
    x = torch.randn(rows, 512)
    cuda_timer(torch.nn.functional.layer_norm, x, (512,))


@pytest.mark.parametrize("n", [8, 16, 32, 64, 128, 192, 256, 384])
def test_matmul(cuda_timer, n):
    a = torch.randn(n, n)
    cuda_timer(torch.mm, a, a)


@pytest.mark.parametrize("length", [64, 256, 1024, 4096, 16_384, 65_536, 131_072, 262_144])
def test_conv1d(cuda_timer, length):
    x = torch.randn(1, 8, length)
    w = torch.randn(8, 8, 5)
    cuda_timer(torch.nn.functional.conv1d, x, w, padding=2)
