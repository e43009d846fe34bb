from __future__ import annotations

import pytest
import torch
from sizes import pick


@pytest.mark.parametrize("n", [512, 2048])
def test_matmul_fp32(cuda_timer, cuda_device, n):
    n = pick(cuda_device, n, n // 16)
    a = torch.randn(n, n, device=cuda_device)
    cuda_timer(torch.mm, a, a)


def test_matmul_bf16_4096(cuda_timer, cuda_device):
    n = pick(cuda_device, 4096, 64)
    a = torch.randn(n, n, device=cuda_device, dtype=torch.bfloat16)
    cuda_timer(torch.mm, a, a)


def test_matmul_bf16_skinny(cuda_timer, cuda_device):
    a = torch.randn(
        pick(cuda_device, (8192, 1024), (128, 32)), device=cuda_device, dtype=torch.bfloat16
    )
    b = torch.randn(
        pick(cuda_device, (1024, 1024), (32, 32)), device=cuda_device, dtype=torch.bfloat16
    )
    cuda_timer(torch.mm, a, b)


def test_bmm_bf16(cuda_timer, cuda_device):
    a = torch.randn(
        pick(cuda_device, (64, 256, 256), (4, 16, 16)), device=cuda_device, dtype=torch.bfloat16
    )
    cuda_timer(torch.bmm, a, a)


def test_linear_fp32_hot(cuda_timer, cuda_device):
    x = torch.randn(pick(cuda_device, (4096, 1024), (64, 32)), device=cuda_device)
    layer = torch.nn.Linear(x.shape[1], x.shape[1], device=cuda_device)
    with torch.no_grad():
        cuda_timer(layer, x, cache="hot")
