"""Does the round-to-round state of small cold-L2 kernels follow the SM clock, or what happens
between rounds?

RESULTS.md shows that a cold 512² matmul's round medians sit on one of two levels (~16.5 and
~17.4 µs) and that a state holds for a whole round. This script measures, in one process, the
cold 8 MiB add and the cold 512² matmul three times per variant, three rounds each, and records
per round: the median, and the SM clock *measured inside the stream blocker* just before each
sample (``%clock64`` cycles over ``%globaltimer`` nanoseconds while it spins), plus NVML's reading.
The committed rows were taken with this script's own copy of the clocked spin kernel; the plugin's
blocker has since taken that kernel over (``_spin.spin_until_released`` with ``clocked=True``,
the same code), and the script reads it through ``backend.clocks``.
Variants differ in what happens before each round:

- ``plain``: nothing (the backend's cached dry run);
- ``sleep20``: a 20 ms ``torch.cuda._sleep`` and a synchronize (the per-round dry run of the
  first releases);
- ``idle50``: 50 ms with the GPU idle;
- ``burst``: 10 ms of back-to-back calls of the kernel;
- ``warm20`` / ``warm50`` / ``warm150``: the round's sampler takes batches for at least 20 / 50 /
  150 ms before its adaptive warm-up starts (is the slow state a transient after a sampler
  starts?).

Run: python benchmarks/diagnostics/diag_clock_state.py --seed 0 > rows.jsonl (several processes).
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

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from pytest_cudaperf.measure import stats
from pytest_cudaperf.measure.cuda import CudaBackend
from pytest_cudaperf.measure.timing import Budget, run_adaptive

DEV = torch.device("cuda:0")


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
    backend: CudaBackend, fn: Callable[[], object], budget: Budget, variant: str
) -> dict[str, Any]:
    sampler = backend.sampler(fn, False)
    if variant.startswith("warm"):
        until = time.perf_counter() + int(variant[4:]) / 1e3
        while time.perf_counter() < until:
            sampler.batch()
    backend.clocks.reset()  # the blocker's readings of this round's samples only
    result = run_adaptive(sampler, budget)
    mhz = backend.clocks.spin_mhz
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
    per_round = Budget.for_tolerance(0.05, max_time=0.6).per_round()
    from triton.testing import do_bench

    for kind in ("add 8 MiB", "matmul 512²"):
        fn = make(kind)
        for rep in range(args.reps):
            for variant in args.variants.split(","):
                rounds = []
                for _ in range(3):
                    before_round(variant, fn, backend)
                    rounds.append(one_round(backend, fn, per_round, variant))
                row = {"process": args.seed, "kernel": kind, "variant": variant, "rep": rep}
                print(json.dumps({**row, "rounds": rounds}), flush=True)
        row = {"process": args.seed, "kernel": kind, "variant": "do_bench"}
        print(json.dumps({**row, "median_ms": do_bench(fn, return_mode="median")}), flush=True)


if __name__ == "__main__":
    main()
