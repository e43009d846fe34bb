"""Functional tests: run on the GPU when there is one (cuda_device), else on the CPU."""

from __future__ import annotations

import pytest
import torch

from tinyformer import Attention
from tinyformer.ops import rms_norm, rms_norm_reference


def test_fused_attention_matches_eager(cuda_device: torch.device, x: torch.Tensor) -> None:
    torch.manual_seed(0)
    fused = Attention(256, 4, fused=True).to(cuda_device)
    eager = Attention(256, 4, fused=False).to(cuda_device)
    eager.load_state_dict(fused.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(fused(x), eager(x), rtol=2e-3, atol=2e-3)


def test_rms_norm_matches_reference(cuda_device: torch.device, x: torch.Tensor) -> None:
    weight = torch.rand(x.shape[-1], device=cuda_device)
    torch.testing.assert_close(rms_norm(x, weight), rms_norm_reference(x, weight))


@pytest.mark.gpu(capability=(8, 0))
def test_bf16_autocast_forward(block: torch.nn.Module, x: torch.Tensor) -> None:
    with torch.no_grad():
        reference = block(x)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            y = block(x)
    assert torch.isfinite(y).all()
    torch.testing.assert_close(y.float(), reference, rtol=0.05, atol=0.05)
