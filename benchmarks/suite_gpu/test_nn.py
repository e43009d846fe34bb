from __future__ import annotations

import torch
from sizes import pick
from torch.nn import functional


def test_conv2d_3x3(cuda_timer, cuda_device):
    x = torch.randn(pick(cuda_device, (32, 64, 56, 56), (1, 8, 8, 8)), device=cuda_device)
    w = torch.randn(x.shape[1], x.shape[1], 3, 3, device=cuda_device)
    cuda_timer(functional.conv2d, x, w, padding=1)


def test_sdpa(cuda_timer, cuda_device):
    dtype = pick(cuda_device, torch.bfloat16, torch.float32)
    q = torch.randn(
        pick(cuda_device, (4, 16, 1024, 64), (1, 2, 32, 16)), device=cuda_device, dtype=dtype
    )
    cuda_timer(functional.scaled_dot_product_attention, q, q, q, is_causal=True)


def test_layer_norm(cuda_timer, cuda_device):
    x = torch.randn(pick(cuda_device, (8192, 1024), (64, 64)), device=cuda_device)
    cuda_timer(functional.layer_norm, x, (x.shape[1],))


def test_softmax(cuda_timer, cuda_device):
    x = torch.randn(pick(cuda_device, (8192, 1024), (64, 64)), device=cuda_device)
    cuda_timer(torch.softmax, x, dim=-1)


def test_embedding_lookup(cuda_timer, cuda_device):
    table = torch.randn(pick(cuda_device, 50_000, 1000), 512, device=cuda_device)
    ids = torch.randint(0, table.shape[0], (pick(cuda_device, 8192, 64),), device=cuda_device)
    cuda_timer(functional.embedding, ids, table)


def test_cross_entropy(cuda_timer, cuda_device):
    logits = torch.randn(pick(cuda_device, (4096, 32_000), (16, 100)), device=cuda_device)
    target = torch.randint(0, logits.shape[1], (logits.shape[0],), device=cuda_device)
    cuda_timer(functional.cross_entropy, logits, target)


def test_mlp_forward_hot(cuda_timer, cuda_device):
    width = pick(cuda_device, 1024, 32)
    mlp = torch.nn.Sequential(
        torch.nn.Linear(width, 4 * width), torch.nn.GELU(), torch.nn.Linear(4 * width, width)
    ).to(cuda_device)
    x = torch.randn(pick(cuda_device, 2048, 16), width, device=cuda_device)
    with torch.no_grad():
        cuda_timer(mlp, x, cache="hot")
