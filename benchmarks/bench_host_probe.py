"""Can a probe taken apart from the call tell a slow process from a slow call?

Host-bound measurements divide each call by the launch reference timed right before it; on the
H100 the reference ran 1.5-1.9x slower in some processes than at recording, and a Python-heavy
call (kornia's RandomMixUpV2) slowed more than the reference there. Device time of launch-dense
calls moved +4...+8% between processes, 0.12-0.17 µs per launch. Two probes that no call can
contaminate, in several fresh processes:

- *host probe*: the woken launch reference timed back to back, before anything else, and again
  at the end of the process (``host_probe_ms``, ``host_probe_end_ms``);
- *gap probe*: 400 tiny additions queued behind a blocking kernel, CUDA events around them: the
  GPU's time per launch (``gap_us``), at start and end.

Beside them, per synchronising op: the median call in ms, the reference beside each call, the
ratio (loops), and the same with a planted busy-wait of ``--plant`` of the call (does the plant
reach the probe? it must not). The summary gives, per op, the slope of log(loops) on log(host
probe) and on log(reference beside the call), and of log(ms) on log(host probe). How device
time follows the gap probe is read from a suite's own runs (``benchmarks/launch_gaps.py``).

``--profile-between`` asks whether a process that has profiled its kernels once launches slower
for the rest of its life (the plugin times a host-bound call's kernels apart after its first
measurement, with the CUDA profiler): each process times the ops and probes as above, then runs
the plugin's kernel pass (``breakdown.percall.kernel_times``) on the first op, then times the
ops and probes again; the summary gives, per process, the host probe and the gap probe before
and after, and the kernel pass's seconds, and per op the median over processes of the reference
beside the calls and of the loops, after over before. The plugin has kineto detach CUPTI when a
profile stops (``breakdown.capture.detach_cupti_after_profiles``); ``--keep-cupti`` sets
``TEARDOWN_CUPTI=0`` in each process, so CUPTI stays attached after the profile, as torch leaves
it by default (pytorch/pytorch#144455): the contrast is what detaching it saves. ``--busy-between
S`` keeps the GPU busy for S seconds first (sleep kernels back to back, as a suite's device-time
tests keep it before its first host-bound test) and times everything again after that too:
whether a busy GPU, rather than the kernel pass, moves the reference.

    python benchmarks/bench_host_probe.py --processes 12 --out out/host-probe.json
    python benchmarks/bench_host_probe.py --processes 8 --profile-between --out out/probed.json
    python benchmarks/bench_host_probe.py --processes 8 --profile-between --keep-cupti
    python benchmarks/bench_host_probe.py --processes 8 --busy-between 5 --profile-between

Needs a CUDA device and kornia 0.9 (``pip install kornia``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_host_causes import DATA_OPS, OPS, child_json
from bench_host_plant import busy_wait, timed

SYNC_OPS = ("mixup", "color_jiggle", "gaussian_blur", "tolist", "nonzero_4m", "unique_64k")
#: the smoke run's ops, on CPU tensors
SMOKE_OPS = ("tolist", "bincount")


def sync_op(  # noqa: PLR0913 - the call, how often, the plant and the three timings
    call: Callable[[], None], calls: int, plant: float, reference: Callable[[], object],
    wake: Callable[[], object], host_probe: Callable[[], float],
) -> dict[str, Any]:  # fmt: skip
    """One synchronising call timed as the plugin does (wake, reference, call), without and
    with a planted busy-wait; then the host probe again (did the plant reach it?)."""
    for _ in range(min(20, calls)):
        call()
    delay_s = plant * statistics.median(timed(call) for _ in range(min(20, calls))) / 1e3

    def planted() -> None:
        call()
        busy_wait(delay_s)

    found: dict[str, Any] = {}
    for arm, work in (("plain", call), ("planted", planted)):
        pairs = []
        for _ in range(calls):
            wake()
            ref_ms = timed(reference)
            pairs.append((timed(work), ref_ms))
        found[arm] = {
            "ms": statistics.median(t for t, _ in pairs),
            "ref_ms": statistics.median(r for _, r in pairs),
            "loops": statistics.median(t / r for t, r in pairs),
        }
    found["probe_after_planted_ms"] = host_probe()
    return found


def profile_once(call: Callable[[], None], smoke: bool) -> None:
    """The plugin's kernel pass over ``call`` (on the CPU, ``smoke``: a profile of its CPU
    events, which is what the CPU has)."""
    import torch

    if smoke:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
            call()
        return
    from pytest_cudaperf.breakdown.percall import kernel_times

    kernel_times(call, "cuda")


def keep_busy(seconds: float, smoke: bool) -> None:
    """The GPU kept busy for ``seconds`` (sleep kernels back to back, as the device-time tests
    that run before a suite's first host-bound test keep it); the CPU on ``smoke``."""
    if smoke:
        busy_wait(seconds)
        return
    import torch

    from pytest_cudaperf._torch_compat import cuda_sleeper
    from pytest_cudaperf.measure import cuda

    sleep = cuda_sleeper()
    cycles = int(cuda.sleep_cycles_per_ms(torch) * 10)  # 10 ms kernels
    ends = time.perf_counter() + seconds
    while time.perf_counter() < ends:
        sleep(cycles)
        torch.cuda.synchronize()


def child(
    calls: int,
    plant: float,
    smoke: bool = False,
    profile_between: bool = False,
    busy_s: float = 0.0,
) -> dict[str, Any]:
    """One process's probes and calls; ``smoke``: on the CPU, the CPU backend's reference loop
    for the launch reference, no gap probe (0), the data-dependent ops on CPU tensors. Then the
    phases asked for, each followed by the probes and calls again (``after``, in order):
    ``busy_s`` seconds of a busy GPU (``busy``), one kernel pass over the first op
    (``profile``)."""
    import torch

    from pytest_cudaperf.measure import cuda, hostbound
    from pytest_cudaperf.measure.cpu import reference_work

    device = torch.device("cpu" if smoke else "cuda")
    sync: Callable[[], None] = (lambda: None) if smoke else torch.cuda.synchronize
    if smoke:
        reference: Callable[[], object] = reference_work
        wake: Callable[[], object] = lambda: None  # noqa: E731
        cycles_per_ms = 0.0
    else:
        reference, wake = (
            hostbound.launch_reference(torch, device),
            hostbound.launch_wake(torch, device),
        )
        cycles_per_ms = cuda.sleep_cycles_per_ms(torch)

    def gap_us() -> float:
        return 0.0 if smoke else hostbound.probe_launch_gap(torch, device, cycles_per_ms)

    def host_probe() -> float:
        wake()
        return statistics.median(timed(reference) for _ in range(5 if smoke else 30))

    for _ in range(5 if smoke else 50):
        reference()
    out: dict[str, Any] = {"host_probe_ms": host_probe(), "gap_us": gap_us(), "ops": {}}
    images = torch.rand(5, 3, 128, 128, device=device)
    torch.manual_seed(0)
    timed_calls: dict[str, Callable[[], None]] = {}
    for name in SMOKE_OPS if smoke else SYNC_OPS:
        if name in OPS:
            from kornia import augmentation as K  # noqa: N812 - kornia's own spelling

            op: Callable[..., Any] = eval(f"K.{OPS[name]}", {"K": K}).to(device)
            data: Any = images
        else:
            op = eval(DATA_OPS[name][0], {"torch": torch})
            data = eval(DATA_OPS[name][1].replace("'cuda'", repr(device.type)), {"torch": torch})

        def call(op: Callable[..., Any] = op, data: Any = data) -> None:
            op(data)
            sync()

        timed_calls[name] = call
        out["ops"][name] = sync_op(call, calls, plant, reference, wake, host_probe)
    out["host_probe_end_ms"] = host_probe()
    out["gap_end_us"] = gap_us()
    first = next(iter(timed_calls.values()))
    phases: list[tuple[str, Callable[[], None]]] = []
    if busy_s > 0:
        phases.append(("busy", lambda: keep_busy(busy_s, smoke)))
    if profile_between:
        phases.append(("profile", lambda: profile_once(first, smoke)))
    out["after"] = []
    for what, phase in phases:
        began = time.perf_counter()
        phase()
        out["after"].append(
            {
                "what": what,
                "seconds": time.perf_counter() - began,
                "host_probe_ms": host_probe(),
                "gap_us": gap_us(),
                "ops": {
                    name: sync_op(call, calls, plant, reference, wake, host_probe)
                    for name, call in timed_calls.items()
                },
            }
        )
    return out


def slope(xs: list[float], ys: list[float]) -> float:
    """The least-squares slope of log(ys) on log(xs) (0 where xs do not vary)."""
    try:
        return statistics.linear_regression([*map(math.log, xs)], [*map(math.log, ys)]).slope
    except statistics.StatisticsError:
        return 0.0


def summarize(runs: list[dict[str, Any]], names: tuple[str, ...] = SYNC_OPS) -> None:
    probes = [r["host_probe_ms"] for r in runs]
    print("process  host probe  end      gap µs  end")
    for i, r in enumerate(runs):
        print(
            f"{i:>7}  {r['host_probe_ms'] * 1e3:7.1f} µs {r['host_probe_end_ms'] * 1e3:6.1f} µs"
            f"  {r['gap_us']:6.3f} {r['gap_end_us']:6.3f}"
        )
    print(
        f"{'op':<14} {'loops~probe':>11} {'loops~ref':>9} {'ms~probe':>9} {'plant':>7} "
        f"{'probe moved by plant':>20} {'loops spread':>12}"
    )
    for name in names:
        ops = [r["ops"][name] for r in runs]
        loops = [o["plain"]["loops"] for o in ops]
        refs = [o["plain"]["ref_ms"] for o in ops]
        ms = [o["plain"]["ms"] for o in ops]
        seen = statistics.median(o["planted"]["loops"] / o["plain"]["loops"] for o in ops)
        moved = statistics.median(
            o["probe_after_planted_ms"] / r["host_probe_ms"] for o, r in zip(ops, runs, strict=True)
        )
        print(
            f"{name:<14} {slope(probes, loops):+11.2f} {slope(refs, loops):+9.2f} "
            f"{slope(probes, ms):+9.2f} {seen - 1:+7.1%} {moved - 1:+20.1%} "
            f"{max(loops) / min(loops) - 1:12.1%}"
        )


def summarize_phases(runs: list[dict[str, Any]], names: tuple[str, ...] = SYNC_OPS) -> None:
    """After each phase (a busy GPU, a kernel pass), against the pass before it: per process the
    host probe and the gap probe before and after, and the phase's seconds; per op the median
    over the processes of the reference beside its calls, of its loops and of its ms."""
    for index, what in enumerate(phase["what"] for phase in runs[0]["after"]):

        def before(r: dict[str, Any], index: int = index) -> dict[str, Any]:
            if index == 0:
                return {"host_probe_ms": r["host_probe_end_ms"], "gap_us": r["gap_end_us"],
                        "ops": r["ops"]}  # fmt: skip
            return dict(r["after"][index - 1])

        print(f"after {what}: process  host probe  before -> after  (its seconds)  gap µs")
        for i, r in enumerate(runs):
            then, now = before(r), r["after"][index]
            change = now["host_probe_ms"] / then["host_probe_ms"] - 1
            print(
                f"{i:>7}  {then['host_probe_ms'] * 1e3:7.1f} -> "
                f"{now['host_probe_ms'] * 1e3:7.1f} µs"
                f"  {change:+6.1%}  ({now['seconds']:.2f} s)  {then['gap_us']:6.3f} -> "
                f"{now['gap_us']:6.3f}"
            )
        print(f"{'op':<14} {'reference':>9} {'loops':>7} {'ms':>7}  (after / before, median)")
        for name in names:
            moved = {
                key: statistics.median(
                    r["after"][index]["ops"][name]["plain"][key]
                    / before(r)["ops"][name]["plain"][key]
                    for r in runs
                )
                - 1
                for key in ("ref_ms", "loops", "ms")
            }
            print(f"{name:<14} {moved['ref_ms']:+9.1%} {moved['loops']:+7.1%} {moved['ms']:+7.1%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=12)
    parser.add_argument("--calls", type=int, default=60, help="calls per op, arm and process")
    parser.add_argument("--plant", type=float, default=0.25)
    parser.add_argument("--out", default="out/host-probe.json")
    parser.add_argument("--child", action="store_true")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a smoke run on the CPU: three processes' figures taken in this one (CPU reference "
        "loop, no gap probe, tolist and bincount on CPU tensors, 5 calls), then the summary",
    )
    parser.add_argument(
        "--profile-between",
        action="store_true",
        help="each process also runs one kernel pass, then times the ops and probes again",
    )
    parser.add_argument(
        "--busy-between",
        type=float,
        default=0.0,
        metavar="S",
        help="each process also keeps the GPU busy for S seconds (before any kernel pass), then "
        "times the ops and probes again",
    )
    parser.add_argument(
        "--keep-cupti",
        action="store_true",
        help="TEARDOWN_CUPTI=0 in each process: CUPTI left attached after a profile, as torch "
        "leaves it by default",
    )
    args = parser.parse_args()
    between, busy = args.profile_between, args.busy_between
    phased = between or busy > 0
    if args.keep_cupti:  # read by kineto when a profile stops; children inherit it
        os.environ["TEARDOWN_CUPTI"] = "0"
    if args.child:
        print(json.dumps(child(args.calls, args.plant, False, between, busy)))
        return
    runs: list[dict[str, Any]] = []
    if args.smoke:
        runs = [child(5, args.plant, True, between, busy) for _ in range(3)]
        (summarize_phases if phased else summarize)(runs, SMOKE_OPS)
        return
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    for i in range(args.processes):
        cmd = [sys.executable, __file__, "--child", "--calls", str(args.calls)]
        cmd += ["--profile-between"] if between else []
        cmd += ["--busy-between", str(busy)] if busy > 0 else []
        began = time.perf_counter()
        found = child_json([*cmd, "--plant", str(args.plant)])
        if found is None:
            continue
        runs.append(found)
        print(f"process {i}: {time.perf_counter() - began:5.1f} s", flush=True)
        Path(args.out).write_text(json.dumps({"plant": args.plant, "runs": runs}))
    if len(runs) > 2:
        (summarize_phases if phased else summarize)(runs)


if __name__ == "__main__":
    main()
