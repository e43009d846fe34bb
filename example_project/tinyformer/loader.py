"""An input pipeline: batches staged in page-locked host memory, copied without blocking."""

from __future__ import annotations

from collections.abc import Iterator

import torch


class BatchLoader:
    """Yields device batches from host batches, overlapping the copy with compute."""

    def __init__(self, host_batches: list[torch.Tensor], device: torch.device) -> None:
        self.host_batches = host_batches
        self.device = device

    def __iter__(self) -> Iterator[torch.Tensor]:
        for batch in self.host_batches:
            yield batch.to(self.device, non_blocking=batch.is_pinned())

    def __len__(self) -> int:
        return len(self.host_batches)
