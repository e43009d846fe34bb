from __future__ import annotations

import pytest
import torch
from sizes import pick


def test_sort(cuda_timer, cuda_device):
    x = torch.randn(pick(cuda_device, 1 << 22, 1 << 12), device=cuda_device)
    cuda_timer(torch.sort, x)


def test_topk(cuda_timer, cuda_device):
    x = torch.randn(pick(cuda_device, (512, 32_000), (8, 1000)), device=cuda_device)
    cuda_timer(torch.topk, x, 50, dim=-1)


def test_rfft(cuda_timer, cuda_device):
    x = torch.randn(pick(cuda_device, (256, 8192), (4, 256)), device=cuda_device)
    cuda_timer(torch.fft.rfft, x)


def test_index_select(cuda_timer, cuda_device):
    x = torch.randn(pick(cuda_device, (100_000, 256), (1000, 16)), device=cuda_device)
    idx = torch.randint(0, x.shape[0], (pick(cuda_device, 16_384, 64),), device=cuda_device)
    cuda_timer(torch.index_select, x, 0, idx)


def test_adamw_step(cuda_timer, cuda_device):
    params = [
        torch.nn.Parameter(torch.randn(pick(cuda_device, 1 << 20, 1 << 10), device=cuda_device))
        for _ in range(8)
    ]
    for p in params:
        p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW(params, lr=1e-3, fused=cuda_device.type == "cuda")
    cuda_timer(opt.step)


@pytest.mark.gpu
def test_pinned_host_to_device(cuda_timer, cuda_device, pinned_batch):
    host = pinned_batch((1 << 24,))  # 64 MB, page-locked
    cuda_timer(host.to, cuda_device, non_blocking=True)


@pytest.mark.gpu
@pytest.mark.perf(graph=True)
def test_small_mlp_as_cuda_graph(cuda_timer, cuda_device):
    mlp = torch.nn.Sequential(
        torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256)
    ).to(cuda_device)
    x = torch.randn(64, 256, device=cuda_device)
    with torch.no_grad():
        cuda_timer(mlp, x)
