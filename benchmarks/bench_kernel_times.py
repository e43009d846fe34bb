"""What timing a host-bound call's kernels apart costs, and whether reading the profiler's raw
kineto events gives the per-call device times that torch's FunctionEvents give.

GPU code that synchronizes inside has its kernels profiled call by call
(``capture.kernel_times``). For each workload this profiles ``--calls`` calls the way it does
(each call in its range, synchronized), then reads the per-call device time both ways from the
same profile: the raw events (``capture.spans_of_kineto``, what the plugin reads) and torch's
FunctionEvents (``capture.spans_of_events``). Columns: the calls without the profiler, the calls
under it, each reading's cost, the largest per-call difference between the readings, and
``kernel_times`` whole as the plugin calls it (sized by the call's measured time). The first
workload's first profile carries the profiler's start-up (once per process). The last four
columns try a cheaper way (``device_only``): the same calls profiled with the CUDA activity
only, each kernel given to a call by host windows instead of ranges; its median per call
should match the ranges' (other calls, the same seeded draws) with nothing outside the windows.

    python benchmarks/bench_kernel_times.py [--calls 10] [--repeat 2] --out out/
    python benchmarks/bench_kernel_times.py --smoke --out out/

On a GPU the workloads are the host suite's heaviest profiles (``benchmarks/suite_host``, which
needs kornia) and two PyTorch ops; without kornia, the ops only. ``--smoke`` profiles small CPU
ops (ranges only: no device time) so that the script's path runs in CI.
"""

from __future__ import annotations

import argparse
import inspect
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

from pytest_cudaperf.breakdown import capture  # noqa: E402
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
    """The profile of ``calls`` calls as ``capture.kernel_times`` takes it, and its seconds."""
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


#: host idle after each call of a device-only profile: the calls' windows are apart by it
GAP_S = 0.0005


def device_only(
    fn: Callable[[], object], device: torch.device, calls: int
) -> tuple[list[float], int, int, float]:
    """A way to time the kernels apart without the CPU activity (no op events, no ranges), not
    the plugin's: ``calls`` calls profiled with the CUDA activity only, each device event
    counted for the call whose host window (``time.time_ns()`` around the call and its
    synchronize, widened by half the gap; kineto's events carry Unix-epoch ns) holds its start.
    Per-call device µs, the events read, those outside every window, and the seconds (profile
    and reading). On the CPU (smoke) the CPU activity stands in and no event is the device's."""
    cuda = device.type == "cuda"
    index = (device.index or 0) if cuda else None
    params = inspect.signature(torch.autograd.profiler.profile.__init__).parameters
    kwargs: dict[str, Any] = {"use_kineto": True, "use_cpu": not cuda}
    if cuda:
        kwargs.update({"use_device": "cuda"} if "use_device" in params else {"use_cuda": True})
    stamps: list[tuple[int, int]] = []
    began = time.perf_counter()
    with same_draws(index), torch.autograd.profiler.profile(**kwargs) as prof:
        for _ in range(calls):
            start = time.time_ns()
            fn()
            if cuda:
                torch.cuda.synchronize(index)
            stamps.append((start, time.time_ns()))
            time.sleep(GAP_S)
    spans = capture.spans_of_kineto(prof.kineto_results)  # µs from the trace's start
    origin = capture._trace_start_ns(prof.kineto_results)
    windows = [((lo - origin) / 1e3, (hi - origin) / 1e3) for lo, hi in stamps]
    slack = GAP_S * 1e6 / 2
    totals, outside = [0.0] * calls, 0
    for ev in spans:
        if ev.device == "CPU" or not capture._is_work(ev.name, ev.kind, ev.index, set(), index):
            continue
        at = next(
            (i for i, (lo, hi) in enumerate(windows) if lo - slack <= ev.start <= hi + slack), None
        )
        if at is None:
            outside += 1
        else:
            totals[at] += ev.end - ev.start
    return totals, len(spans), outside, time.perf_counter() - began


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
    raw = capture.per_call_device_us(capture.spans_of_kineto(prof.kineto_results), index)
    raw_s = time.perf_counter() - began
    events = prof.kineto_results.events()
    began = time.perf_counter()
    old = capture.per_call_device_us(capture.spans_of_events(prof.function_events), index)
    old_s = time.perf_counter() - began
    if len(raw) != len(old):
        sys.exit(f"bench_kernel_times: {name}: {len(raw)} calls read raw, {len(old)} as events")
    diff = max((abs(a - b) / b for a, b in zip(raw, old, strict=True) if b > 0), default=0.0)
    whole = "—"
    if device.type == "cuda":
        began = time.perf_counter()
        capture.kernel_times(fn, str(device), each_s=calls_s / calls)  # sized as the plugin does
        whole = f"{time.perf_counter() - began:.3f}"
    per_call = statistics.median(raw) / 1e3 if raw else 0.0
    alone, seen, outside, alone_s = device_only(fn, device, calls)
    alone_ms = statistics.median(alone) / 1e3
    return (
        f"| {name} | {len(events)} | {per_call:.3f} | {calls_s:.3f} | {profiled_s:.3f} "
        f"| {raw_s:.3f} | {old_s:.3f} | {diff:.1e} | {whole} "
        f"| {seen} | {alone_ms:.3f} | {outside} | {alone_s:.3f} |"
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
        "FunctionEvents | largest per-call difference | kernel_times | device-only: events "
        "| ms/call | outside the windows | profiled and read |",
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
