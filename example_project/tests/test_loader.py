"""The input pipeline with page-locked batches (plain host tensors on CPU-only machines)."""

from __future__ import annotations

import torch

from tinyformer import BatchLoader


def test_loader_copies_pinned_batches(pinned_batch, cuda_device: torch.device) -> None:
    host = [pinned_batch((8, 256, 256), seed=seed) for seed in range(4)]
    assert all(b.is_pinned() == torch.cuda.is_available() for b in host)
    loader = BatchLoader(host, cuda_device)
    batches = list(loader)
    assert len(batches) == len(loader) == 4
    for device_batch, host_batch in zip(batches, host, strict=True):
        assert device_batch.device.type == cuda_device.type
        torch.testing.assert_close(device_batch.cpu(), host_batch)
