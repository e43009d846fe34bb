"""What timing a host-bound call's kernels apart costs, and whether reading the profiler's raw
kineto events gives the per-call device times that torch's FunctionEvents give.

GPU code that synchronizes inside has its kernels profiled call by call
(``percall.kernel_times``). For each workload this profiles ``--calls`` calls the way it does
(each call in its range, synchronized), then reads the per-call device time both ways from the
same profile: the raw events (``capture.kineto_events``, what the plugin reads) and torch's
FunctionEvents (``prof.function_events``). Columns: the calls without the profiler, the calls
under it, each reading's cost, the largest per-call difference between the readings, and
``kernel_times`` whole as the plugin calls it (sized by the call's measured time; the
device-only pass where it works). The first workload's first profile carries the profiler's
start-up (once per process). The last four columns are ``percall.device_only_pass`` alone: the
same calls profiled with the CUDA activity only, each kernel given to a call by its host window
instead of a range; its median per call should match the ranges' (other calls, the same seeded
draws) with no kernel outside the windows (on the CPU: not run).

    python benchmarks/bench_kernel_times.py [--calls 10] [--repeat 2] --out out/
    python benchmarks/bench_kernel_times.py --smoke --out out/

On a GPU the workloads are the host suite's heaviest profiles (``benchmarks/suite_host``, which
needs kornia) and two PyTorch ops; without kornia, the ops only. ``--smoke`` profiles small CPU
ops (ranges only: no device time) so that the script's path runs in CI.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from _table import publish

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from pytest_cudaperf.breakdown import capture, percall  # noqa: E402
from pytest_cudaperf.seeding import same_draws  # noqa: E402


def workloads(device: torch.device) -> dict[str, Callable[[], object]]:
    """Name -> callable that synchronizes inside (on the CPU: small ops)."""
    if device.type != "cuda":
        x = torch.rand(64, 64)
        return {"matmul x20 (CPU)": lambda: [x @ x for _ in range(20)]}
    mask = torch.rand(1 << 22, device=device) > 0.5
    ints = torch.randint(0, 1000, (1 << 22,), device=device)
    found: dict[str, Callable[[], object]] = {
        "nonzero 4M": lambda: torch.nonzero(mask),
        "unique 4M": lambda: torch.unique(ints),
    }
    try:
        import kornia
        import kornia.augmentation as K  # noqa: N812 - kornia's own spelling
        import kornia.feature as KF  # noqa: N812
        from kornia.geometry.ransac import RANSAC
    except ImportError:
        print("bench_kernel_times: no kornia: PyTorch ops only", file=sys.stderr)
        return found
    gen = torch.Generator().manual_seed(0)
    points = torch.rand(100, 2, generator=gen) * 100
    dst = (points + torch.randn(100, 2, generator=gen)).to(device)
    src = points.to(device)
    ransac = RANSAC("homography", max_iter=10)
    image = torch.rand(1, 1, 128, 128, device=device)
    sift = KF.SIFTFeature(num_features=128).to(device)
    batch = torch.rand(5, 3, 128, 128, device=device)
    rain = K.RandomRain(p=1.0).to(device)
    canny = torch.rand(2, 3, 128, 128, device=device)
    found.update(
        {
            "RANSAC homography": lambda: ransac(src, dst),
            "SIFT": lambda: sift(image),
            "RandomRain": lambda: rain(batch),
            "canny": lambda: kornia.filters.canny(canny),
        }
    )
    return found


def profiled(fn: Callable[[], object], device: torch.device, calls: int) -> tuple[Any, float]:
    """The profile of ``calls`` calls as ``percall.kernel_times`` takes it, and its seconds."""
    cuda = device.type == "cuda"
    index = (device.index or 0) if cuda else None
    began = time.perf_counter()
    with same_draws(index), capture._profiler(torch, cuda) as prof:
        for _ in range(calls):
            with torch.autograd.profiler.record_function(capture.CALL_RANGE):
                fn()
                if cuda:
                    torch.cuda.synchronize(index)
    return prof, time.perf_counter() - began


def plain(fn: Callable[[], object], device: torch.device, calls: int) -> float:
    began = time.perf_counter()
    for _ in range(calls):
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    return time.perf_counter() - began


def row(name: str, fn: Callable[[], object], device: torch.device, calls: int) -> str:
    index = (device.index or 0) if device.type == "cuda" else None
    fn()
    calls_s = plain(fn, device, calls)
    prof, profiled_s = profiled(fn, device, calls)
    began = time.perf_counter()
    raw = percall.per_call_device_us(capture.kineto_events(prof.kineto_results, ops=False), index)
    raw_s = time.perf_counter() - began
    events = prof.kineto_results.events()
    began = time.perf_counter()
    old = percall.per_call_device_us(prof.function_events, index)
    old_s = time.perf_counter() - began
    if len(raw) != len(old):
        sys.exit(f"bench_kernel_times: {name}: {len(raw)} calls read raw, {len(old)} as events")
    diff = max((abs(a - b) / b for a, b in zip(raw, old, strict=True) if b > 0), default=0.0)
    whole = "—"
    if device.type == "cuda":
        began = time.perf_counter()
        percall.kernel_times(fn, str(device), each_s=calls_s / calls)  # sized as the plugin does
        whole = f"{time.perf_counter() - began:.3f}"
    per_call = statistics.median(raw) / 1e3 if raw else 0.0
    alone = "| — | — | — | — |"
    if index is not None:
        began = time.perf_counter()
        found = percall.device_only_pass(torch, fn, index, calls)
        alone_s = time.perf_counter() - began
        if found is not None:
            totals, outside, seen = found.totals_us, found.outside, found.events
            median = statistics.median(totals) / 1e3
            alone = f"| {seen} | {median:.3f} | {outside} | {alone_s:.3f} |"
    return (
        f"| {name} | {len(events)} | {per_call:.3f} | {calls_s:.3f} | {profiled_s:.3f} "
        f"| {raw_s:.3f} | {old_s:.3f} | {diff:.1e} | {whole} {alone}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--out", default="out")
    parser.add_argument("--smoke", action="store_true", help="CPU ops, one repeat, 3 calls")
    args = parser.parse_args()
    cuda = torch.cuda.is_available() and not args.smoke
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    if args.smoke:
        args.calls, args.repeat = 3, 1
    lines = [
        f"Kernels timed apart on {torch.cuda.get_device_name(0) if cuda else 'CPU'} "
        f"(torch {torch.__version__}), {args.calls} profiled calls; seconds",
        "",
        "| workload | events | device ms/call | calls | calls profiled | read raw | read as "
        "FunctionEvents | largest per-call difference | kernel_times "
        "| device-only: device events read | ms/call | outside the windows | profiled and read |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, fn in workloads(device).items():
        for _ in range(args.repeat):
            lines.append(row(name, fn, device, args.calls))
            print(lines[-1], flush=True)
    publish(lines, args.out, "kernel_times.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
