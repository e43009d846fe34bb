from __future__ import annotations

import torch
from sizes import pick


def test_sum_1024_launch_bound(cuda_timer, cuda_device):
    x = torch.randn(1024, device=cuda_device)
    cuda_timer(x.sum)


def test_sum_64mb(cuda_timer, cuda_device):
    x = torch.randn(pick(cuda_device, 1 << 24, 1 << 16), device=cuda_device)
    cuda_timer(x.sum)


def test_mean_rows(cuda_timer, cuda_device):
    x = torch.randn(pick(cuda_device, (8192, 1024), (256, 64)), device=cuda_device)
    cuda_timer(x.mean, dim=1)


def test_amax_columns(cuda_timer, cuda_device):
    x = torch.randn(pick(cuda_device, (8192, 1024), (256, 64)), device=cuda_device)
    cuda_timer(torch.amax, x, dim=0)


def test_cumsum(cuda_timer, cuda_device):
    x = torch.randn(pick(cuda_device, (1024, 4096), (64, 256)), device=cuda_device)
    cuda_timer(torch.cumsum, x, dim=1)


def test_vector_norm_hot(cuda_timer, cuda_device):
    x = torch.randn(pick(cuda_device, 1 << 22, 1 << 14), device=cuda_device)
    cuda_timer(torch.linalg.vector_norm, x, cache="hot")
