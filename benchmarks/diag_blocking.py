"""Diagnostic: how the CUDA backend's launch hiding behaves for a few callables (sync detection
host time, spin-kernel iteration counts per batch, blocking mode and warnings)."""

from __future__ import annotations

import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pytest_cudaperf.measure import cuda as cuda_timing
from pytest_cudaperf.measure.timing import Budget, measure

dev = torch.device("cuda:0")
props = torch.cuda.get_device_properties(0)
a = torch.randn(1024, 1024, device=dev)
x = torch.randn(1 << 21, device=dev)
cases = {"mm 1024": lambda: torch.mm(a, a), "add 8MiB": lambda: torch.add(x, x)}
for name, fn in cases.items():
    for cache in ("hot", "cold"):
        backend = cuda_timing.CudaBackend(dev, cache, props.L2_cache_size, str(props.uuid))
        fn()
        torch.cuda.synchronize()
        cpm = backend.cycles_per_ms
        torch.cuda._sleep(int(20 * cpm))
        began = time.perf_counter()
        fn()
        host_ms = (time.perf_counter() - began) * 1e3
        torch.cuda.synchronize()
        spin = backend.blocker
        counts = []
        if isinstance(spin, cuda_timing.SpinBlocker):
            for _ in range(5):
                spin.block(0, 0.0)
                for _ in range(8):
                    fn()
                time.sleep(0.001)
                spin.release(0)
                torch.cuda.synchronize()
                counts.append(int(spin._counts[0].item()))
        m = measure(backend, fn, Budget(max_time=0.3))
        backend.close()
        print(
            f"{name} {cache}: cycles/ms {cpm:.0f}; host call during 20 ms sleep {host_ms:.3f} ms;"
            f" spin iterations for a 1 ms hold {counts}; blocking={m.blocking} "
            f"median={m.median_ms * 1e3:.2f}us relIQR={m.rel_iqr:.2%} warnings={m.warnings}",
            flush=True,
        )
