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

from pytest_cudaperf.memory import CpuMemory, CudaMemory, check_leaks


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
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a smoke run: on the CPU (CpuMemory), a 1-layer d=64 encoder, few repeats",
    )
    args = parser.parse_args()
    device, repeat, iterations = ("cpu", 1, 1) if args.smoke else ("cuda", 20, 3)
    width, heads, count = (64, 4, 1) if args.smoke else (1024, 16, 12)
    layers = [
        torch.nn.TransformerEncoderLayer(width, heads, 4 * width, batch_first=True)
        for _ in range(count)
    ]
    model = torch.nn.Sequential(*layers).to(device)
    # Adam's first step imports torch's compiler (seconds): the smoke run steps by hand
    opt = None if args.smoke else torch.optim.Adam(model.parameters())
    x = torch.randn(8, 256 // (32 if args.smoke else 1), width, device=device)

    def step() -> None:
        model.zero_grad(set_to_none=True)
        model(x).sum().backward()
        if opt is not None:
            opt.step()
        else:
            with torch.no_grad():
                for p in model.parameters():
                    if p.grad is not None:
                        p.sub_(p.grad, alpha=1e-3)

    step()
    if not args.smoke:
        torch.cuda.synchronize()
    backend: CpuMemory | CudaMemory = CpuMemory() if args.smoke else CudaMemory()
    objects = len(gc.get_objects())

    def clear_caches() -> None:
        torch.cuda.synchronize()
        torch._C._cuda_clearCublasWorkspaces()
        torch.backends.cuda.cufft_plan_cache[0].clear()
        torch._C._host_emptyCache()

    rows: dict[str, Callable[[], object]] = {"gc.collect (one round)": gc.collect}
    if not args.smoke:
        rows["synchronize + clear cuBLAS/cuFFT/pinned caches (settle less gc)"] = clear_caches
    rows["allocator + pinned statistics (read)"] = backend.read
    rows["one reading (settle + read)"] = lambda: (backend.settle(), backend.read())
    lines = [
        f"Process with a {count}-layer transformer encoder (d={width}) on {device}"
        f"{'' if opt is None else ' and Adam state'}, "
        f"{objects} Python objects tracked by gc.",
        "",
        "| step | median ms |",
        "|---|---|",
    ]
    for name, fn in rows.items():
        lines.append(f"| {name} | {timed(fn, repeat):.2f} |")
    step_ms = timed(step, min(5, repeat))
    began = time.perf_counter()
    check_leaks(step, backend, warmup=1, iterations=iterations, tolerance=0)
    total_ms = (time.perf_counter() - began) * 1e3
    runs = iterations + 1
    lines.append(f"| training step (the body) | {step_ms:.2f} |")
    lines.append(
        f"| @no_leak protocol: {runs} body runs + {runs} readings | {total_ms:.2f} "
        f"(overhead beyond the body runs: {total_ms - runs * step_ms:.2f}, "
        f"{(total_ms - runs * step_ms) / runs:.2f} per reading) |"
    )
    publish(lines, args.out, "RESULTS-leak-cost.md")


if __name__ == "__main__":
    main()
