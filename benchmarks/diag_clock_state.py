"""Does the round-to-round state of small cold-L2 kernels follow the SM clock, or what happens
between rounds?

RESULTS.md shows that a cold 512² matmul's round medians sit on one of two levels (~16.5 and
~17.4 µs) and that a state holds for a whole round. This script measures, in one process, the
cold 8 MiB add and the cold 512² matmul three times per variant, three rounds each, and records
per round: the median, and the SM clock *measured inside the stream blocker* just before each
sample (``%clock64`` cycles over ``%globaltimer`` nanoseconds while it spins), plus NVML's reading.
Variants differ in what happens before each round:

- ``plain``: nothing (the backend's cached dry run);
- ``sleep20``: a 20 ms ``torch.cuda._sleep`` and a synchronize (the per-round dry run of the
  first releases);
- ``idle50``: 50 ms with the GPU idle;
- ``burst``: 10 ms of back-to-back calls of the kernel;
- ``warm20`` / ``warm50`` / ``warm150``: the round's sampler takes batches for at least 20 / 50 /
  150 ms before its adaptive warm-up starts (is the slow state a transient after a sampler
  starts?).

Run: python benchmarks/diag_clock_state.py --seed 0 > rows.jsonl (several processes).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pytest_cudaperf import stats
from pytest_cudaperf.cuda_timing import CudaBackend, SpinBlocker
from pytest_cudaperf.timing import Budget, run_adaptive

DEV = torch.device("cuda:0")


@triton.jit
def _clock64():
    return tl.inline_asm_elementwise(
        "mov.u64 $0, %clock64;", "=l", [], dtype=tl.int64, is_pure=False, pack=1
    )


@triton.jit
def _globaltimer():
    return tl.inline_asm_elementwise(
        "mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1
    )


@triton.jit(do_not_specialize=["slot", "max_iters"])
def spin_clocked(flag_ptr, count_ptr, stamp_ptr, slot, max_iters):
    t0 = _globaltimer()
    c0 = _clock64()
    done = 0
    count = 0
    while done == 0:
        value = tl.load(flag_ptr + slot, volatile=True)
        count += 1
        done = ((value != 0) | (count >= max_iters)).to(tl.int32)
    c1 = _clock64()
    t1 = _globaltimer()
    tl.store(count_ptr + slot, count)
    tl.store(stamp_ptr + slot * 2, c1 - c0)
    tl.store(stamp_ptr + slot * 2 + 1, t1 - t0)


class ClockedBlocker(SpinBlocker):
    """The plugin's spin blocker, also stamping cycles and nanoseconds of each spin."""

    def __init__(self, device: torch.device) -> None:
        super().__init__(torch, device)
        self.stamps = torch.zeros(2 * 64, dtype=torch.int64, device=device)

    def block(self, slot: int, enqueue_s: float) -> None:
        if slot == 0:
            self._host[:] = 0
        self._used = slot + 1
        spin_clocked[(1,)](self._flags, self._counts, self.stamps, slot, 200_000)

    def mhz(self, size: int) -> list[float]:
        raw = self.stamps[: 2 * size].view(size, 2).cpu().tolist()
        return [c / ns * 1e3 for c, ns in raw if ns > 0]


def make(kind: str) -> Callable[[], object]:
    if kind == "add 8 MiB":
        a, b, c = (torch.randn(1 << 21, device=DEV) for _ in range(3))
        return lambda: torch.add(a, b, out=c)
    x, y = torch.randn(512, 512, device=DEV), torch.randn(512, 512, device=DEV)
    return lambda: torch.mm(x, y)


def before_round(variant: str, fn: Callable[[], object], backend: CudaBackend) -> None:
    if variant == "sleep20":
        torch.cuda.synchronize()
        torch.cuda._sleep(int(20 * backend.cycles_per_ms))
        torch.cuda.synchronize()
    elif variant == "idle50":
        torch.cuda.synchronize()
        time.sleep(0.05)
    elif variant == "burst":
        torch.cuda.synchronize()
        end = time.perf_counter() + 0.01
        while time.perf_counter() < end:
            fn()
        torch.cuda.synchronize()


def one_round(
    backend: CudaBackend,
    blocker: ClockedBlocker,
    fn: Callable[[], object],
    budget: Budget,
    variant: str,
) -> dict[str, Any]:
    sampler = backend.sampler(fn, False)
    if variant.startswith("warm"):
        until = time.perf_counter() + int(variant[4:]) / 1e3
        while time.perf_counter() < until:
            sampler.batch()
    mhz: list[float] = []
    batch = sampler.batch

    def stamped() -> list[float]:
        times = batch()
        mhz.extend(blocker.mhz(len(times)))
        return times

    sampler.batch = stamped  # type: ignore[method-assign]
    backend.clocks.reset()
    result = run_adaptive(sampler, budget)
    return {
        "median_ms": stats.summarize(result.samples).median,
        "n": len(result.samples),
        "spin_mhz": statistics.median(mhz) if mhz else None,
        "spin_mhz_q": [min(mhz), max(mhz)] if mhz else None,
        "nvml_mhz": backend.clocks.summary(),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--variants", default="plain,sleep20,idle50,burst")
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    props = torch.cuda.get_device_properties(0)
    backend = CudaBackend(DEV, "cold", props.L2_cache_size, str(props.uuid))
    blocker = ClockedBlocker(DEV)
    backend.blocker = blocker
    per_round = Budget.for_tolerance(0.05, max_time=0.6).per_round()
    from triton.testing import do_bench

    for kind in ("add 8 MiB", "matmul 512²"):
        fn = make(kind)
        for rep in range(args.reps):
            for variant in args.variants.split(","):
                rounds = []
                for _ in range(3):
                    before_round(variant, fn, backend)
                    rounds.append(one_round(backend, blocker, fn, per_round, variant))
                row = {"process": args.seed, "kernel": kind, "variant": variant, "rep": rep}
                print(json.dumps({**row, "rounds": rounds}), flush=True)
        row = {"process": args.seed, "kernel": kind, "variant": "do_bench"}
        print(json.dumps({**row, "median_ms": do_bench(fn, return_mode="median")}), flush=True)


if __name__ == "__main__":
    main()
