"""Is the slow/fast state of small cold-L2 kernels a property of the GPU at a moment, or of one
sampler? A timeline of batch medians.

``diag_clock_state.py`` showed that the SM clock stays at 1980 MHz in both states and that idle
gaps, a 20 ms sleep kernel or a burst of calls between rounds do not change how often rounds land
in the slow state. Here, in one process:

- ``single``: one sampler of the cold 8 MiB add for 3 s; the median of every batch (64 samples)
  with its time: how long does a state last inside one sampler?
- ``interleaved``: cold add, cold 512² matmul, hot add and hot matmul, each its own sampler,
  alternating batch by batch for 3 s: do the cold kernels change state at the same moments?

Run: python benchmarks/diagnostics/diag_state_timeline.py --seed 0 > rows.jsonl (several processes).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from pytest_cudaperf.measure import stats
from pytest_cudaperf.measure.cuda import CudaBackend, CudaEventSampler

DEV = torch.device("cuda:0")


def kernels() -> dict[str, Callable[[], object]]:
    a, b, c = (torch.randn(1 << 21, device=DEV) for _ in range(3))
    x, y = torch.randn(512, 512, device=DEV), torch.randn(512, 512, device=DEV)
    z = torch.empty(512, 512, device=DEV)
    return {
        "add": lambda: torch.add(a, b, out=c),
        "matmul": lambda: torch.mm(x, y, out=z),
    }


def warm(sampler: CudaEventSampler) -> None:
    for _ in range(3):
        sampler.batch()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    props = torch.cuda.get_device_properties(0)
    backends = {
        cache: CudaBackend(DEV, cache, props.L2_cache_size, str(props.uuid))
        for cache in ("cold", "hot")
    }
    fns = kernels()
    t0 = time.perf_counter()

    def emit(part: str, name: str, times: list[float]) -> None:
        row = {
            "process": args.seed,
            "part": part,
            "name": name,
            "t": round(time.perf_counter() - t0, 4),
            "median_ms": stats.summarize(times).median,
            "n": len(times),
        }
        print(json.dumps(row), flush=True)

    single = backends["cold"].sampler(fns["add"], False)
    warm(single)
    end = time.perf_counter() + args.seconds
    while time.perf_counter() < end:
        emit("single", "add cold", single.batch())

    samplers = {
        f"{name} {cache}": backends[cache].sampler(fn, False)
        for cache in ("cold", "hot")
        for name, fn in fns.items()
    }
    for sampler in samplers.values():
        warm(sampler)
    end = time.perf_counter() + args.seconds
    while time.perf_counter() < end:
        for name, sampler in samplers.items():
            emit("interleaved", name, sampler.batch())


if __name__ == "__main__":
    main()
