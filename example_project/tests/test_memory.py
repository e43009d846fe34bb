"""Memory tests on a training step: no leaks, and a peak-memory budget."""

from __future__ import annotations

import pytest
import torch

from tinyformer import TransformerBlock, train_step


@pytest.fixture
def trainer(cuda_device: torch.device) -> tuple[TransformerBlock, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = TransformerBlock(256).to(cuda_device)
    return model, torch.optim.Adam(model.parameters(), lr=1e-4)


@pytest.mark.no_leak
def test_train_step_does_not_leak(trainer, x: torch.Tensor) -> None:
    model, optimizer = trainer
    assert train_step(model, optimizer, x) > 0


def test_train_step_memory(memory_guard, trainer, x: torch.Tensor) -> None:
    model, optimizer = trainer
    train_step(model, optimizer, x)  # warm up: Adam state, cuBLAS workspaces
    with memory_guard(max_peak="1 GiB") as guard:  # fails the test on a leak or a larger peak
        train_step(model, optimizer, x)
    if torch.cuda.is_available():
        assert guard.peak_bytes is not None
        assert guard.peak_bytes > 0
    memory_guard.check(train_step, model, optimizer, x)  # warm-up, then repeated readings
