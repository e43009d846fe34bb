"""Does the launch reference follow a slowdown of the host part of a call, which it must not?

A host-bound measurement divides each call by the launch reference timed right before it
(``launch_reference``: tiny GPU additions and a synchronize). The ratio cancels the host's speed
only if the reference follows the host's state and not the call: a call that does more Python
work leaves the GPU idle for longer, and if a launch after an idle GPU is slower, the reference
grows with the slowdown and hides part of it.

Two parts, in several fresh processes each:

- *idle*: the reference timed after the GPU sat idle for 0-10 ms (the host busy or asleep), as
  it is (``cold``) and after one untimed addition and synchronize (``warm``);
- *plant*: kornia augmentations and data-dependent PyTorch ops, each in blocks without and with
  a planted host busy-wait of ``--plant`` of its median call (calibrated in the process), each
  call timed with one of the reference variants (``VARIANTS``) in turn. Per variant: the plant
  read in loops (the truth, in ms, is 1 + ``--plant``) and the spread of the unplanted loops
  between processes (what a reference must keep small).

    python benchmarks/bench_host_plant.py --processes 8 --out out/host-plant.json

Needs a CUDA device and kornia 0.9 (``pip install kornia``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_host_causes import DATA_OPS as CAUSES_DATA_OPS
from bench_host_causes import OPS as CAUSES_OPS
from bench_host_causes import child_json

#: kornia.augmentation constructors (a 5x3x128x128 batch), and kornia.filters.canny
AUGMENTATIONS = {
    **{name: f"K.{CAUSES_OPS[name]}" for name in ("color_jiggle", "gaussian_blur", "mixup")},
    "jigsaw": "K.RandomJigsaw((4, 4), p=1.0)",
    "rand_augment": "K.auto.RandAugment(n=2, m=10)",
    "canny": "kornia.filters.canny",
}
#: PyTorch's data-dependent ops: (op, input)
DATA_OPS = {
    name: CAUSES_DATA_OPS[name]
    for name in ("tolist", "nonzero_4m", "unique_64k", "topk_then_nonzero")
}
#: how the reference beside each call is taken: "cold" (right after the call), "warm" (after one
#: untimed addition and synchronize: the plugin's), "twice" (the second of two), "warm+python"
#: and "warm+torch" (the warm reference and a Python loop, or 20 additions of 4-element CPU
#: tensors, timed together), "python" (the Python loop alone)
VARIANTS = ("cold", "warm", "twice", "warm+python", "warm+torch", "python")
IDLE_MS = (0.0, 0.3, 1.0, 3.0, 10.0)


def busy_wait(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def timed(work: Callable[[], object]) -> float:
    began = time.perf_counter_ns()
    work()
    return (time.perf_counter_ns() - began) / 1e6


def after_idle(
    reference: Callable[[], object],
    warm: Callable[[], None],
    idle: tuple[float, ...] = IDLE_MS,
    repeat: int = 40,
) -> dict[str, dict[str, float]]:
    """The reference's median time after the GPU sat idle, cold and warmed, per idle time."""
    found = {}
    for idle_ms in idle:
        for mode, wait in (("busy", busy_wait), ("sleep", time.sleep)):
            cold, warmed = [], []
            for _ in range(repeat):
                wait(idle_ms / 1e3)
                cold.append(timed(reference))
                wait(idle_ms / 1e3)
                warm()
                warmed.append(timed(reference))
            found[f"{mode}:{idle_ms:g}"] = {
                "cold": statistics.median(cold),
                "warm": statistics.median(warmed),
            }
    return found


def python_loop() -> int:
    total = 0
    for i in range(600):
        total += i * i
    return total


def child(  # noqa: PLR0915 - one measured process, step by step
    calls: int, plant: float, only: list[str], variants: list[str], smoke: bool = False
) -> dict[str, Any]:
    """One process's figures; ``smoke``: on the CPU, with the CPU backend's reference loop for
    the launch reference, the data-dependent ops on CPU tensors, no kornia."""
    import torch

    from pytest_cudaperf.measure.cpu import reference_work
    from pytest_cudaperf.measure.hostbound import launch_reference

    device = torch.device("cpu" if smoke else "cuda")
    sync: Callable[[], None] = (lambda: None) if smoke else torch.cuda.synchronize
    reference: Callable[[], object] = reference_work if smoke else launch_reference(torch, device)
    one = torch.ones(4, device=device)

    def warm() -> None:
        torch.add(one, one)
        sync()

    tiny = torch.ones(4)

    def cpu_torch() -> object:
        out = tiny
        for _ in range(20):
            out = torch.add(out, tiny)
        return out

    def nothing() -> None:
        pass

    #: variant -> (untimed before, timed)
    taken: dict[str, tuple[Callable[[], object], Callable[[], object]]] = {
        "cold": (nothing, reference),
        "warm": (warm, reference),
        "twice": (reference, reference),
        "warm+python": (warm, lambda: (reference(), python_loop())),
        "warm+torch": (warm, lambda: (reference(), cpu_torch())),
        "python": (nothing, python_loop),
    }

    for _ in range(5 if smoke else 50):
        reference()
    idle = after_idle(reference, warm, (0.0, 0.3), 3) if smoke else after_idle(reference, warm)
    out: dict[str, Any] = {"idle": idle, "ops": {}}
    images = torch.rand(5, 3, 128, 128, device=device)
    torch.manual_seed(0)
    ops: dict[str, tuple[Callable[..., Any], Any]] = {}
    if not smoke:
        import kornia
        from kornia import augmentation as K  # noqa: N812 - kornia's own spelling

        for name, text in AUGMENTATIONS.items():
            made = eval(text, {"K": K, "kornia": kornia})
            ops[name] = (made.to(device) if hasattr(made, "to") else made, images)
    for name, (op_text, data_text) in DATA_OPS.items():
        if only and name not in only:
            continue
        on_device = data_text.replace("'cuda'", repr(device.type))
        ops[name] = (eval(op_text, {"torch": torch}), eval(on_device, {"torch": torch}))
    for name, (op, data) in ops.items():
        if only and name not in only:
            continue

        def call(op: Callable[..., Any] = op, data: Any = data) -> None:
            op(data)
            sync()

        for _ in range(3 if smoke else 20):
            call()
        median_ms = statistics.median(timed(call) for _ in range(3 if smoke else 30))
        delay_s = plant * median_ms / 1e3

        def planted(call: Callable[[], None] = call, delay_s: float = delay_s) -> None:
            call()
            busy_wait(delay_s)

        rows: dict[str, dict[str, list[tuple[float, float]]]] = {
            arm: {v: [] for v in variants} for arm in ("plain", "planted")
        }
        for block in range(8):
            arm = "planted" if block % 2 else "plain"
            work = planted if arm == "planted" else call
            for i in range(calls // 8):
                variant = variants[i % len(variants)]
                before, ref = taken[variant]
                before()
                ref_ms = timed(ref)
                rows[arm][variant].append((timed(work), ref_ms))
        out["ops"][name] = {
            "delay_ms": delay_s * 1e3,
            **{
                arm: {
                    v: {
                        "ms": statistics.median(t for t, _ in pairs),
                        "ref_ms": statistics.median(r for _, r in pairs),
                        "loops": statistics.median(t / r for t, r in pairs),
                    }
                    for v, pairs in by_variant.items()
                }
                for arm, by_variant in rows.items()
            },
        }
    return out


def spread(values: list[float]) -> float:
    return max(values) / min(values) - 1


def summarize(runs: list[dict[str, Any]], plant: float) -> None:
    print("reference after an idle GPU, median over processes (ms): cold / warm")
    for key in runs[0]["idle"]:
        cold = statistics.median(r["idle"][key]["cold"] for r in runs)
        warm = statistics.median(r["idle"][key]["warm"] for r in runs)
        print(f"  {key:<10} {cold:7.4f} {warm:7.4f}")
    print(
        f"plant of +{plant:.0%} per call, median over processes; spread (max/min - 1) and "
        "coefficient of variation of the unplanted figure between processes"
    )
    names = list(runs[0]["ops"])
    variants = list(runs[0]["ops"][names[0]]["plain"])
    print(f"{'op':<18} {'variant':<12} {'plant':>7} {'spread':>7} {'cv':>6}")
    for name in names:
        ops = [r["ops"][name] for r in runs]
        rows = [("in ms", "ms", variants[0])] + [(v, "loops", v) for v in variants]
        for label, field, v in rows:
            seen = statistics.median(o["planted"][v][field] / o["plain"][v][field] for o in ops)
            plain = [o["plain"][v][field] for o in ops]
            cv = statistics.stdev(plain) / statistics.mean(plain) if len(plain) > 1 else 0.0
            print(f"{name:<18} {label:<12} {seen - 1:+7.1%} {spread(plain):7.1%} {cv:6.1%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--calls", type=int, default=240, help="calls per op and process")
    parser.add_argument("--plant", type=float, default=0.25)
    parser.add_argument("--ops", default="", help="comma-separated names (default: all)")
    parser.add_argument("--out", default="out/host-plant.json")
    parser.add_argument("--variants", default="cold,warm,twice", help=", ".join(VARIANTS))
    parser.add_argument("--child", action="store_true")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a smoke run on the CPU: three processes' figures taken in this one (CPU reference "
        "loop, tolist and topk_then_nonzero on CPU tensors, 24 calls), then the summary",
    )
    args = parser.parse_args()
    only = [n for n in args.ops.split(",") if n]
    variants = [v for v in args.variants.split(",") if v]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        parser.error(f"--variants: unknown {', '.join(unknown)} (known: {', '.join(VARIANTS)})")
    if args.child:
        print(json.dumps(child(args.calls, args.plant, only, variants)))
        return
    if args.smoke:
        only = only or ["tolist", "topk_then_nonzero"]
        summarize([child(24, args.plant, only, variants, smoke=True) for _ in range(3)], args.plant)
        return
    runs: list[dict[str, Any]] = []
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    for i in range(args.processes):
        cmd = [sys.executable, __file__, "--child", "--calls", str(args.calls)]
        cmd += ["--plant", str(args.plant), "--ops", args.ops, "--variants", args.variants]
        began = time.perf_counter()
        found = child_json(cmd)
        if found is None:
            continue
        runs.append(found)
        print(f"process {i}: {time.perf_counter() - began:5.1f} s", flush=True)
        Path(args.out).write_text(json.dumps({"plant": args.plant, "runs": runs}))
    if runs:
        summarize(runs, args.plant)


if __name__ == "__main__":
    main()
