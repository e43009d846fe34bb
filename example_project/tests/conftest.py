"""Fixtures of the example suite: a seeded model and input on the test's device."""

from __future__ import annotations

import pytest
import torch

from tinyformer import TransformerBlock

BATCH, SEQ, DIM = 8, 256, 256


@pytest.fixture
def x(cuda_device: torch.device) -> torch.Tensor:
    return torch.randn(BATCH, SEQ, DIM, generator=torch.Generator().manual_seed(0)).to(cuda_device)


@pytest.fixture
def block(cuda_device: torch.device) -> TransformerBlock:
    torch.manual_seed(0)
    return TransformerBlock(DIM).to(cuda_device).eval()
