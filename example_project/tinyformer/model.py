"""Attention with an eager and a fused (scaled_dot_product_attention) path, a transformer block
and a training step.

Two switches plant problems for the README's demonstration of a red run:
TINYFORMER_PLANT_REGRESSION=1 makes the fused path do its work twice; TINYFORMER_PLANT_LEAK=1
makes train_step keep every loss, with its autograd graph, in a module-level list.
"""

from __future__ import annotations

import math
import os

import torch
import torch.nn.functional as F
from torch import nn

from tinyformer.ops import rms_norm

LOSS_HISTORY: list[torch.Tensor] = []


def _planted(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, fused: bool = True) -> None:
        super().__init__()
        self.heads = heads
        self.fused = fused
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, dim = x.shape
        q, k, v = self.qkv(x).view(batch, seq, 3, self.heads, dim // self.heads).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        if self.fused:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            if _planted("TINYFORMER_PLANT_REGRESSION"):
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True) * 0.5 + y * 0.5
        else:
            scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
            mask = torch.ones(seq, seq, dtype=torch.bool, device=x.device).triu(1)
            y = scores.masked_fill(mask, float("-inf")).softmax(-1) @ v
        return self.out(y.transpose(1, 2).reshape(batch, seq, dim))


class TransformerBlock(nn.Module):
    def __init__(self, dim: int = 256, heads: int = 4, fused: bool = True) -> None:
        super().__init__()
        self.norm1 = nn.Parameter(torch.ones(dim))
        self.norm2 = nn.Parameter(torch.ones(dim))
        self.attn = Attention(dim, heads, fused)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(rms_norm(x, self.norm1))
        return x + self.mlp(rms_norm(x, self.norm2))


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor) -> float:
    optimizer.zero_grad(set_to_none=True)
    loss = model(x).pow(2).mean()
    loss.backward()
    optimizer.step()
    if _planted("TINYFORMER_PLANT_LEAK"):
        LOSS_HISTORY.append(loss)  # keeps the graph alive: the classic training-loop leak
    return float(loss.detach())
