"""Cost of recording a breakdown with an update: one measurement as ``--cudaperf-update`` takes it
(the plugin's adaptive measurement, default budget), against ``capture.profile`` of the same
callable: the first profile in the process (profiler/CUPTI start-up) and a later one.

    python benchmarks/bench_breakdown_cost.py --device cuda --out out/
    python benchmarks/bench_breakdown_cost.py --device cpu --out out/

"+%" is the profile's cost over the measurement's alone; an update also runs the test body and
its setup, so the share of a whole update's wall time is smaller than that.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable

import torch
from _table import publish

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pytest_cudaperf.breakdown import capture
from pytest_cudaperf.measure.cpu import CpuBackend
from pytest_cudaperf.measure.timing import Backend, Budget, measure

TOLERANCE = 0.05


def workloads(device: str, smoke: bool = False) -> dict[str, Callable[[], object]]:
    """The five callables; ``smoke``: each a few µs on the CPU."""
    dev = torch.device(device)
    cuda = dev.type == "cuda"
    small = torch.randn(1 << 12, device=dev)
    big = torch.randn(1 << (22 if cuda else 14 if smoke else 18), device=dev)
    n = 4096 if cuda else 32 if smoke else 256
    dtype = torch.bfloat16 if cuda else torch.float32
    mat = torch.randn(n, n, device=dev, dtype=dtype)
    width = 1024 if cuda else 32 if smoke else 256
    mlp = torch.nn.Sequential(
        torch.nn.Linear(width, 4 * width),
        torch.nn.GELU(),
        torch.nn.Linear(4 * width, width),
        torch.nn.LayerNorm(width),
    ).to(dev)
    x = torch.randn(64, width, device=dev)
    layer = torch.nn.TransformerEncoderLayer(width, 16, 4 * width, batch_first=True).to(dev).eval()
    seq = torch.randn(8, 256 if cuda else 4 if smoke else 32, width, device=dev)

    def no_grad(fn: Callable[[], object]) -> Callable[[], object]:
        def run() -> object:
            with torch.no_grad():
                return fn()

        return run

    return {
        "add, 16 KiB": lambda: small + small,
        f"add, {big.numel() * 4 >> 20} MiB": lambda: big + big,
        f"matmul {n}² {str(dtype).split('.')[1]}": lambda: mat @ mat,
        "MLP forward (4 ops)": no_grad(lambda: mlp(x)),
        "transformer layer forward": no_grad(lambda: layer(seq)),
    }


def backend_for(device: str) -> Backend:
    dev = torch.device(device)
    if dev.type != "cuda":
        return CpuBackend()
    from pytest_cudaperf.measure.cuda import CudaBackend

    props = torch.cuda.get_device_properties(dev)
    return CudaBackend(dev, "cold", props.L2_cache_size, str(props.uuid))


def seconds(fn: Callable[[], object]) -> float:
    began = time.perf_counter()
    fn()
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", default="out")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a smoke run: on the CPU, tiny workloads, a short budget, one repeat",
    )
    args = parser.parse_args()
    if args.smoke:
        args.device, args.repeat = "cpu", 1
    backend = backend_for(args.device)
    short = {"warmup": 0.002, "max_time": 0.02, "min_samples": 5, "rounds": 1}
    budget = Budget.for_tolerance(TOLERANCE, **(short if args.smoke else {}))
    rows = [
        f"Breakdown cost on {args.device} "
        f"({torch.cuda.get_device_name() if args.device.startswith('cuda') else 'CPU'}, "
        f"torch {torch.__version__}); medians of {args.repeat}",
        "",
        "| workload | measurement (s) | first profile (s) | profile (s) | + % | kernels/ops kept |",
        "|---|---|---|---|---|---|",
    ]
    first_done = False
    for name, fn in workloads(args.device, args.smoke).items():
        fn()
        first = None
        if not first_done:
            first = seconds(lambda fn=fn: capture.profile(fn, args.device))  # type: ignore[misc]
            first_done = True
        meas = []
        prof = []
        kept = 0
        for _ in range(args.repeat):
            backend.reset()
            meas.append(seconds(lambda fn=fn: measure(backend, fn, budget)))  # type: ignore[misc]
            began = time.perf_counter()
            b = capture.profile(fn, args.device)
            prof.append(time.perf_counter() - began)
            kept = len(b.entries)
        m, p = statistics.median(meas), statistics.median(prof)
        rows.append(
            f"| {name} | {m:.3f} | {'' if first is None else f'{first:.3f}'} | {p:.3f} "
            f"| {p / m * 100:+.0f}% | {kept} |"
        )
    backend.close()
    publish(rows, args.out, f"breakdown_cost_{torch.device(args.device).type}.md")


if __name__ == "__main__":
    main()
