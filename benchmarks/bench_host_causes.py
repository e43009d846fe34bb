"""What moves a host-bound, synchronising GPU call between processes?

Times kornia's image augmentations (5x3x128x128 float32 batches on the GPU, parameters sampled in
Python on every call, a synchronisation after each call as a synchronising test has) in many short
fresh processes, under several controls, interleaved so that a drift of the machine hits every
control alike:

- ``default``: where the scheduler puts the process;
- ``local``: pinned to one core of the GPU's NUMA node (``local_cpulist`` of its PCI device);
- ``remote``: pinned to one core of another NUMA node (or the far end of the list);
- ``nogc``: the garbage collector held during the samples, parameters seeded;
- ``local-nogc``: both.

Every call is timed with the reference loop right before it, and beside the candidate
references (``REFERENCES``: a Python loop, tiny CPU torch calls, tiny CUDA launches, launches and
a synchronize, a mix; ``SANDWICHED`` ones also right after the call). Each process prints, per
operation, the median per-call time, the median of call / loop beside it, the kernels' time per
call (the CUDA profiler, once per process), the host's reference-loop time (the CPU backend's)
and the core it ran on. The table says, per control, how far the per-process medians spread
(max/min - 1, median over the operations): in ms, over the loop timed between operations ("in
cycles"), the kernels', the loop's own, and call / loop beside each call ("per call").

    python benchmarks/bench_host_causes.py --processes 4 --out out/host-causes.json
    python benchmarks/bench_host_causes.py --processes 6 --controls default

Needs a CUDA device and kornia (``pip install kornia``).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

OPS = {
    "affine": "RandomAffine(degrees=45, translate=0.25, scale=(0.9, 1.1), shear=1.25, p=1.0)",
    "perspective": "RandomPerspective(0.5, p=1.0)",
    "rotation": "RandomRotation(degrees=45.0, p=1.0)",
    "resized_crop": "RandomResizedCrop((64, 64), p=1.0)",
    "crop": "RandomCrop((64, 64), pad_if_needed=True, p=1.0)",
    "color_jitter": "ColorJitter(0.1, 0.1, 0.1, 0.1, p=1.0)",
    "gaussian_blur": "RandomGaussianBlur(3, (1.6, 1.7), p=1.0)",
    "motion_blur": "RandomMotionBlur(3, 35.0, 0.5, p=1.0)",
    "equalize": "RandomEqualize(p=1.0)",
    "color_jiggle": "ColorJiggle(0.1, 0.1, 0.1, 0.1, p=1.0)",
    "mixup": "RandomMixUpV2(p=1.0)",
}
#: PyTorch's data-dependent ops, which synchronize by copying a result to the host: (op, input)
DATA_OPS = {
    "tolist": ("lambda x: x.tolist()", "torch.rand(1024, device='cuda')"),
    "item_of_sum": ("lambda x: x.sum().item()", "torch.rand(1 << 20, device='cuda')"),
    "topk_then_nonzero": (
        "lambda x: torch.nonzero(x.topk(1024).values > 0.99)",
        "torch.rand(1 << 20, device='cuda')",
    ),
    "nonzero_4m": ("torch.nonzero", "torch.rand(1 << 22, device='cuda') > 0.5"),
    "bincount": ("torch.bincount", "torch.randint(0, 1000, (1 << 18,), device='cuda')"),
    "unique_64k": ("torch.unique", "torch.randint(0, 1000, (1 << 16,), device='cuda')"),
}


def _python_loop() -> int:
    total = 0
    for i in range(2000):
        total += i * i
    return total


_TINY: dict[str, Any] = {}


def _tiny(device: str) -> Any:
    import torch

    return _TINY.setdefault(device, torch.ones(4, device=device))


def _additions(device: str, count: int) -> Any:
    """``count`` additions of two 4-element tensors on ``device``, not waited for."""
    import torch

    a = _tiny(device)
    out = a
    for _ in range(count):
        out = torch.add(out, a)
    return out


def _torch_calls() -> object:
    """40 additions of two 4-element CPU tensors: the dispatcher's work."""
    return _additions("cpu", 40)


def _cuda_launches() -> object:
    """20 additions of two 4-element CUDA tensors, not waited for: the launch path."""
    return _additions("cuda", 20)


@functools.cache
def _launch_reference() -> Any:
    import torch

    from pytest_cudaperf.measure.hostbound import launch_reference

    return launch_reference(torch, torch.device("cuda"))


def _cuda_synced() -> object:
    """The plugin's reference (``launch_reference``): 8 CUDA additions and a synchronize."""
    return _launch_reference()()


def _cuda_item() -> object:
    """8 CUDA additions and one element read back (a copy to the host, which waits)."""
    return _additions("cuda", 8)[0].item()


def _mixed() -> object:
    """20 CPU additions, 10 CUDA additions and a synchronize."""
    import torch

    out = _additions("cpu", 20)
    _additions("cuda", 10)
    torch.cuda.synchronize()
    return out


#: the parts a reference loop could be made of, each timed beside every call
REFERENCES = {
    "python": _python_loop,
    "torch": _torch_calls,
    "cuda_launches": _cuda_launches,
    "mixed": _mixed,
    "cuda_synced": _cuda_synced,
    "cuda_item": _cuda_item,
}

#: references also timed right after each call: "<name>+after" is call / mean(before, after)
SANDWICHED = ("cuda_synced", "cuda_item")
CONTROLS = ("default", "local", "remote", "nogc", "local-nogc")


def reference_ms() -> float:
    """The CPU backend's reference loop, best of five, in ms."""
    from pytest_cudaperf.measure.cpu import reference_work

    best = float("inf")
    for _ in range(5):
        began = time.perf_counter_ns()
        reference_work()
        best = min(best, (time.perf_counter_ns() - began) / 1e6)
    return best


def current_cpu() -> int:
    return int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[36])


def cpu_mhz(cpu: int) -> float | None:
    path = Path(f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_cur_freq")
    if path.exists():
        return int(path.read_text()) / 1000
    for block in Path("/proc/cpuinfo").read_text().split("\n\n"):
        if f"processor\t: {cpu}\n" in block + "\n":
            for line in block.splitlines():
                if line.startswith("cpu MHz"):
                    return float(line.split(":")[1])
    return None


def child(  # noqa: PLR0915 - one measured process, step by step
    control: str, calls: int, only: list[str], references: list[str]
) -> None:
    import gc

    import torch

    from pytest_cudaperf.measure.cpu import reference_work

    seeded = "nogc" in control
    sync: Callable[[], None] = (
        torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    )
    device = "cuda" if torch.cuda.is_available() else "cpu"  # the CPU: the smoke run's
    images = torch.rand(5, 3, 128, 128, device=device)
    out: dict[str, object] = {"control": control, "ops": {}}
    refs = [reference_ms()]
    chosen = [n for n in [*OPS, *DATA_OPS] if not only or n in only]
    for name in chosen:
        if name in OPS:
            from kornia import augmentation

            op, data = eval(f"K.{OPS[name]}", {"K": augmentation}), images
        else:
            texts = (x.replace("'cuda'", repr(device)) for x in DATA_OPS[name])
            op, data = (eval(x, {"torch": torch}) for x in texts)
        for _ in range(20):
            op(data)
        sync()
        if seeded:
            torch.manual_seed(0)
        times, refs_here = [], []
        if "nogc" in control:
            gc.collect()
            gc.disable()
        timed = {k: REFERENCES[k] for k in references or REFERENCES}
        parts: dict[str, list[float]] = {k: [] for k in timed}
        after: dict[str, list[float]] = {k: [] for k in SANDWICHED if k in timed}
        for _ in range(calls):
            began = time.perf_counter_ns()
            reference_work()
            refs_here.append((time.perf_counter_ns() - began) / 1e6)
            for part, work in timed.items():
                began = time.perf_counter_ns()
                work()
                parts[part].append((time.perf_counter_ns() - began) / 1e6)
            began_call = time.perf_counter_ns()
            op(data)
            sync()
            times.append((time.perf_counter_ns() - began_call) / 1e6)
            for part, samples in after.items():
                began = time.perf_counter_ns()
                timed[part]()
                samples.append((time.perf_counter_ns() - began) / 1e6)
        gc.enable()
        kernel_us = 0.0
        if torch.cuda.is_available():
            cuda = [torch.profiler.ProfilerActivity.CUDA]
            with torch.profiler.profile(activities=cuda) as prof:
                for _ in range(10):
                    op(data)
                sync()
            kernel_us = sum(e.self_device_time_total for e in prof.key_averages())
        cpu = current_cpu()
        out["ops"][name] = {  # type: ignore[index]
            "median_ms": statistics.median(times),
            "ref_ms": statistics.median(refs_here),
            "cycles": statistics.median(t / r for t, r in zip(times, refs_here, strict=True)),
            "by_part": {
                **{
                    part: statistics.median(t / r for t, r in zip(times, refs, strict=True))
                    for part, refs in parts.items()
                },
                **{
                    f"{part}+after": statistics.median(
                        2 * t / (r + q)
                        for t, r, q in zip(times, parts[part], after[part], strict=True)
                    )
                    for part in after
                },
            },
            "ref_medians_ms": {part: statistics.median(refs) for part, refs in parts.items()},
            "p10_ms": sorted(times)[len(times) // 10],
            "kernels_ms": kernel_us / 10 / 1e3,
            "cpu": cpu,
            "mhz": cpu_mhz(cpu),
        }
        refs.append(reference_ms())
    out["reference_ms"] = statistics.median(refs)
    print(json.dumps(out))


def gpu_cpus() -> tuple[list[int], list[int]]:
    """Cores local to GPU 0 and the others."""
    import torch

    allowed = sorted(os.sched_getaffinity(0))
    if not torch.cuda.is_available():  # the smoke run's CPU
        return allowed, []
    props = torch.cuda.get_device_properties(0)
    # the PCI fields are in torch's device properties, not in its type stubs
    domain, bus_id, device = (getattr(props, f"pci_{n}_id") for n in ("domain", "bus", "device"))
    bus = f"{domain:04x}:{bus_id:02x}:{device:02x}.0"
    local_list = Path(f"/sys/bus/pci/devices/{bus}/local_cpulist")
    local = parse_cpulist(local_list.read_text()) if local_list.exists() else allowed
    local = [c for c in local if c in allowed] or allowed
    others = [c for c in allowed if c not in local]
    return local, others


def parse_cpulist(text: str) -> list[int]:
    cpus: list[int] = []
    for part in text.strip().split(","):
        if "-" in part:
            low, high = part.split("-")
            cpus.extend(range(int(low), int(high) + 1))
        elif part:
            cpus.append(int(part))
    return cpus


def spread(values: list[float]) -> float:
    """max / min - 1; 0 where every value is 0 (no kernels: the smoke run's CPU)."""
    return max(values) / min(values) - 1 if min(values) > 0 else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=5)
    parser.add_argument("--calls", type=int, default=150)
    parser.add_argument("--out", default="out/host-causes.json")
    parser.add_argument("--child", default=None)
    parser.add_argument("--controls", default=",".join(CONTROLS))
    parser.add_argument("--ops", default="", help="comma-separated names of OPS and DATA_OPS")
    parser.add_argument("--references", default="", help="comma-separated REFERENCES to time")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a smoke run on the CPU: 2 processes of the nogc control, 5 calls of 2 "
        "data-dependent ops on CPU tensors, the python and torch references",
    )
    args = parser.parse_args()
    if args.smoke:
        args.processes, args.calls, args.controls = 2, 5, "nogc"
        args.ops, args.references = "tolist,bincount", "python,torch"
    only = [n for n in args.ops.split(",") if n]
    references = [n for n in args.references.split(",") if n]
    if args.child:
        child(args.child, args.calls, only, references)
        return
    local, others = (sorted(os.sched_getaffinity(0)), []) if args.smoke else gpu_cpus()
    remote = others[-1] if others else sorted(os.sched_getaffinity(0))[-1]
    pin = {"local": local[len(local) // 2], "local-nogc": local[len(local) // 2], "remote": remote}
    print(f"GPU-local cores {local}, others {others}; pinned local {pin['local']}, remote {remote}")
    runs: list[dict[str, object]] = []
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    for i in range(args.processes):
        for control in args.controls.split(","):
            cmd = [sys.executable, __file__, "--child", control, "--calls", str(args.calls)]
            cmd += ["--ops", args.ops, "--references", args.references]
            if control in pin:
                cmd = ["taskset", "-c", str(pin[control]), *cmd]
            began = time.perf_counter()
            found = child_json(cmd)
            if found is None:
                continue
            runs.append(found)
            print(f"{i} {control:<11} {time.perf_counter() - began:5.1f} s", flush=True)
            Path(args.out).write_text(json.dumps({"local": local, "others": others, "runs": runs}))
    summarize(runs)


def child_json(cmd: list[str]) -> dict[str, Any] | None:
    """Run one measuring process; the JSON object on its last line, or None (its stderr's tail
    printed) when it failed."""
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode:
        print(done.stderr[-2000:])
        return None
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def summarize(runs: list[dict[str, object]]) -> None:
    print(
        f"{'control':<11} {'spread':>8} {'in cycles':>10} {'kernels':>8} {'ref spread':>10} "
        f"{'per call':>10}"
    )
    for control in CONTROLS:
        mine = [r for r in runs if r["control"] == control]
        if len(mine) < 2:
            continue
        refs = [float(r["reference_ms"]) for r in mine]  # type: ignore[arg-type]
        per_op, cycles, kernels = [], [], []
        names = list(mine[0]["ops"])  # type: ignore[call-overload]
        for name in names:
            medians = [r["ops"][name]["median_ms"] for r in mine]  # type: ignore[index]
            per_op.append(spread(medians))
            cycles.append(spread([m / ref for m, ref in zip(medians, refs, strict=True)]))
            kernels.append(spread([r["ops"][name]["kernels_ms"] for r in mine]))  # type: ignore[index]
        beside = [
            spread([r["ops"][name].get("cycles", 0) or 1 for r in mine])  # type: ignore[index]
            for name in names
        ]
        print(
            f"{control:<11} {statistics.median(per_op):8.1%} {statistics.median(cycles):10.1%} "
            f"{statistics.median(kernels):8.1%} {spread(refs):10.1%} "
            f"{statistics.median(beside):10.1%}"
        )
        first = mine[0]["ops"][names[0]]["by_part"]  # type: ignore[index]
        for part in first:
            found = [
                spread([r["ops"][name]["by_part"][part] for r in mine])  # type: ignore[index]
                for name in names
                if all("by_part" in r["ops"][name] for r in mine)  # type: ignore[index]
            ]
            if found:
                print(f"  over {part} alone: {statistics.median(found):.1%}")


if __name__ == "__main__":
    main()
