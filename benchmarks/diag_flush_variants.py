"""Does the way L2 is flushed decide the slow/fast state of small cold kernels?

The SM clock, idle gaps, sleeps, bursts and warm-up length did not change how often a round of
the cold 8 MiB add or the cold 512² matmul lands in the slow state (``diag_clock_state.py``), and
the two kernels do not change state at the same moments (``diag_state_timeline.py``). What every
cold sample shares is the flush. Here each variant replaces the backend's flush and measures both
kernels (three rounds, as the plugin does), ``--reps`` times per process:

- ``2x``: the plugin's flush, a read of twice the L2 size;
- ``1.25x`` / ``4x``: the same read over 1.25 / 4 times the L2 size;
- ``alt2``: two 2x buffers, read alternately;
- ``zero256``: triton do_bench's flush, writing 256 MiB of zeros (dirty lines).

Run: python benchmarks/diag_flush_variants.py --seed 0 > rows.jsonl (several processes).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pytest_cudaperf.cuda_timing import CudaBackend, L2Flush
from pytest_cudaperf.timing import Budget, measure

DEV = torch.device("cuda:0")


def flushes(l2: int) -> dict[str, Callable[[], None]]:
    two = [L2Flush(torch, DEV, l2), L2Flush(torch, DEV, l2)]
    turn = [0]

    def alternate() -> None:
        turn[0] ^= 1
        two[turn[0]]()

    zeros = torch.empty(256 << 20, dtype=torch.uint8, device=DEV)
    return {
        "2x": L2Flush(torch, DEV, l2),
        "1.25x": L2Flush(torch, DEV, l2 * 5 // 8),
        "4x": L2Flush(torch, DEV, 2 * l2),
        "alt2": alternate,
        "zero256": zeros.zero_,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reps", type=int, default=2)
    args = parser.parse_args()
    props = torch.cuda.get_device_properties(0)
    backend = CudaBackend(DEV, "cold", props.L2_cache_size, str(props.uuid))
    a, b, c = (torch.randn(1 << 21, device=DEV) for _ in range(3))
    x, y = torch.randn(512, 512, device=DEV), torch.randn(512, 512, device=DEV)
    work = {"add 8 MiB": lambda: torch.add(a, b, out=c), "matmul 512²": lambda: torch.mm(x, y)}
    budget = Budget.for_tolerance(0.05, max_time=0.6)
    variants = flushes(props.L2_cache_size)
    for rep in range(args.reps):
        for variant, flush in variants.items():
            backend.flush = flush  # type: ignore[assignment]
            for kernel, fn in work.items():
                backend.reset()
                m = measure(backend, fn, budget)
                row = {"process": args.seed, "rep": rep, "variant": variant, "kernel": kernel}
                print(json.dumps({**row, "rounds": list(m.round_medians_ms)}), flush=True)


if __name__ == "__main__":
    main()
