"""Performance tests: compared with the committed baselines of this device class."""

from __future__ import annotations

import pytest
import torch

from tinyformer import Attention, TransformerBlock
from tinyformer.ops import rms_norm


@torch.no_grad()
def test_block_forward(cuda_timer, block: TransformerBlock, x: torch.Tensor) -> None:
    m = cuda_timer(block, x)  # judged against the baseline; m is what was measured
    assert m.n >= 3  # samples from each of its rounds (fewer than ten where a call is slow)


@pytest.mark.perf(max_ms=50)
@torch.no_grad()
def test_fused_attention_within_budget(cuda_timer, cuda_device, x: torch.Tensor) -> None:
    attention = Attention(256, 4, fused=True).to(cuda_device)
    cuda_timer(attention, x, name="fused")


@pytest.mark.gpu
@pytest.mark.perf(min_speedup=1.2)
@torch.no_grad()
def test_fused_attention_beats_eager(cuda_timer, cuda_device, x: torch.Tensor) -> None:
    fused = Attention(256, 4, fused=True).to(cuda_device)
    eager = Attention(256, 4, fused=False).to(cuda_device)
    eager.load_state_dict(fused.state_dict())
    comparison = cuda_timer.compare(lambda: fused(x), lambda: eager(x), name="fused_vs_eager")
    assert comparison.speedup > 1.0, comparison.describe()


@pytest.mark.gpu
@pytest.mark.perf(graph=True)
@torch.no_grad()
def test_block_forward_as_cuda_graph(cuda_timer, block: TransformerBlock, x: torch.Tensor) -> None:
    m = cuda_timer(block, x)
    assert m.graph


@pytest.fixture
def activations(cuda_device: torch.device) -> torch.Tensor:
    """Enough rows that the GPU work (not Python dispatch) dominates the test's wall time."""
    rows = 16384 if cuda_device.type == "cuda" else 64
    return torch.randn(rows, 4096, generator=torch.Generator().manual_seed(1)).to(cuda_device)


@pytest.mark.perf(max_ms=50, tolerance=0.1)
def test_rms_norm_whole_test(cuda_device, activations: torch.Tensor) -> None:
    """@perf alone: the plugin re-runs and times this whole function (synchronized wall time,
    host included). Host-bound code moved by up to +67% between processes on the H100 machine
    (a 0.1 ms body: 120 µs in one process, 200 µs in another), so this body makes eight passes
    over a 256 MB tensor (~6 ms per call there); the device-time tests above hold 5%."""
    weight = torch.ones(activations.shape[-1], device=cuda_device)
    for _ in range(8):
        rms_norm(activations, weight)
