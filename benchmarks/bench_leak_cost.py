"""Cost of one leak-check reading (settle + read) on a GPU process holding a realistic model,
broken down by step, and the whole @no_leak overhead beyond the body's own runs.

    python benchmarks/bench_leak_cost.py --out out/
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from collections.abc import Callable

import torch
from _table import publish

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pytest_cudaperf.memory import CudaMemory, check_leaks


def timed(fn: Callable[[], object], repeat: int = 20) -> float:
    samples = []
    for _ in range(repeat):
        began = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - began)
    return statistics.median(samples) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="out")
    args = parser.parse_args()
    layers = [torch.nn.TransformerEncoderLayer(1024, 16, 4096, batch_first=True) for _ in range(12)]
    model = torch.nn.Sequential(*layers).cuda()
    opt = torch.optim.Adam(model.parameters())
    x = torch.randn(8, 256, 1024, device="cuda")

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        model(x).sum().backward()
        opt.step()

    step()
    torch.cuda.synchronize()
    backend = CudaMemory()
    objects = len(gc.get_objects())

    def clear_caches() -> None:
        torch.cuda.synchronize()
        torch._C._cuda_clearCublasWorkspaces()
        torch.backends.cuda.cufft_plan_cache[0].clear()
        torch._C._host_emptyCache()

    rows: dict[str, Callable[[], object]] = {
        "gc.collect (one round)": gc.collect,
        "synchronize + clear cuBLAS/cuFFT/pinned caches (settle less gc)": clear_caches,
        "allocator + pinned statistics (read)": backend.read,
        "one reading (settle + read)": lambda: (backend.settle(), backend.read()),
    }
    lines = [
        f"Process with a 12-layer transformer encoder (d=1024) and Adam state, "
        f"{objects} Python objects tracked by gc.",
        "",
        "| step | median ms |",
        "|---|---|",
    ]
    for name, fn in rows.items():
        lines.append(f"| {name} | {timed(fn):.2f} |")
    step_ms = timed(step, 5)
    began = time.perf_counter()
    check_leaks(step, backend, warmup=1, iterations=3, tolerance=0)
    total_ms = (time.perf_counter() - began) * 1e3
    lines.append(f"| training step (the body) | {step_ms:.2f} |")
    lines.append(
        f"| @no_leak protocol: 4 body runs + 4 readings | {total_ms:.2f} "
        f"(overhead beyond the body runs: {total_ms - 4 * step_ms:.2f}, "
        f"{(total_ms - 4 * step_ms) / 4:.2f} per reading) |"
    )
    publish(lines, args.out, "RESULTS-leak-cost.md")


if __name__ == "__main__":
    main()
