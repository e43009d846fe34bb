"""Distributed data parallel, tested the way the PyTorch DDP tutorial writes it.

Each test body runs in two rank processes with ``torch.distributed`` initialised (nccl on GPUs,
gloo on the CPU): ``pytest -p cudaperf`` starts them, so there is no ``torchrun`` and no
``init_process_group`` here.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: N817 - as the docs write it
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from tinyformer import TransformerBlock
from tinyformer.model import train_step

DIM, SEQ = 64, 32


@pytest.fixture
def ddp_model(dist_rank, cuda_device: torch.device) -> DDP:
    """The model wrapped in DDP on this rank's device (function fixtures run in the ranks)."""
    torch.manual_seed(dist_rank.rank)  # different on purpose: DDP broadcasts rank 0's weights
    model = TransformerBlock(DIM).to(cuda_device)
    device_ids = [cuda_device.index] if cuda_device.type == "cuda" else None
    return DDP(model, device_ids=device_ids)


def _same_on_every_rank(tensor: torch.Tensor) -> bool:
    gathered = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, tensor)
    return all(torch.equal(gathered[0], t) for t in gathered)


@pytest.mark.distributed(world_size=2)
@pytest.mark.no_leak
def test_ddp_training_step(dist_rank, ddp_model: DDP, cuda_device: torch.device) -> None:
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=1e-3)
    # each rank its own data, as a DistributedSampler gives it
    generator = torch.Generator().manual_seed(100 + dist_rank.rank)
    x = torch.randn(4, SEQ, DIM, generator=generator).to(cuda_device)
    loss = train_step(ddp_model, optimizer, x)
    assert loss > 0
    # gradients were averaged across ranks, so every rank took the same step
    first = next(ddp_model.parameters())
    assert first.grad is not None
    assert _same_on_every_rank(first.grad)
    assert _same_on_every_rank(first.detach())


@pytest.mark.distributed(world_size=2)
def test_distributed_sampler_shards_the_data(dist_rank, cuda_device: torch.device) -> None:
    dataset = TensorDataset(torch.arange(16.0))
    sampler = DistributedSampler(dataset, shuffle=False)
    batches = DataLoader(dataset, batch_size=4, sampler=sampler)
    # on the rank's device: NCCL gathers GPU tensors only (gloo, on the CPU, either)
    seen = torch.cat([batch for (batch,) in batches]).to(cuda_device)
    assert len(seen) == 16 // dist_rank.world_size
    everyone = [torch.empty_like(seen) for _ in range(dist_rank.world_size)]
    dist.all_gather(everyone, seen)
    assert sorted(torch.cat(everyone).tolist()) == list(range(16))  # disjoint, complete


@pytest.mark.distributed(world_size=2)
@pytest.mark.perf
def test_gradient_all_reduce(dist_rank, cuda_timer, cuda_device: torch.device) -> None:
    """The all-reduce DDP does per step, on a flat buffer the size of the model's gradients:
    timed as the slowest rank's median, with the bus bandwidth nccl-tests would report."""
    numel = sum(p.numel() for p in TransformerBlock(DIM).parameters())
    grads = torch.zeros(numel, device=cuda_device)  # summed in place each call: zeros stay finite
    cuda_timer(lambda: dist.all_reduce(grads), name="grad_all_reduce")
    result = dist_rank.bench_collective("all_reduce", grads)
    assert result.busbw_gbps > 0
    print(result.describe())
