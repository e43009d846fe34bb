"""Which statistic of a three-round measurement is most reproducible across processes?

For the small cold-L2 kernels whose medians move between processes, prints per process and
measurement the pooled median (what the plugin reports), the round medians, and do_bench's
median in the same process. Run it in several processes and compare the spread (max/min - 1)
of: the pooled median, the mean of the round medians, the median of the round medians.

    for i in 0 1 2 3 4 5 6 7; do
        python benchmarks/diagnostics/diag_round_statistic.py --seed $i
    done
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench_worker import kernels

from pytest_cudaperf.measure.cuda import CudaBackend
from pytest_cudaperf.measure.timing import Budget, measure

DEV = torch.device("cuda:0")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    import triton.testing

    props = torch.cuda.get_device_properties(0)
    work = kernels(1.0)
    for name in ("add 8 MiB (~7 µs)", "matmul 512² fp32"):
        fn = work[name]
        backend = CudaBackend(DEV, "cold", props.L2_cache_size, str(props.uuid))
        for rep in range(args.repeats):
            m = measure(backend, fn, Budget.for_tolerance(0.05, max_time=1.0))
            row = {
                "process": args.seed,
                "kernel": name,
                "rep": rep,
                "pooled_median_ms": m.median_ms,
                "round_medians_ms": list(m.round_medians_ms),
            }
            print(json.dumps(row), flush=True)
        backend.close()
        samples = triton.testing.do_bench(fn, return_mode="all")
        ordered = sorted(samples)
        print(
            json.dumps(
                {
                    "process": args.seed,
                    "kernel": name,
                    "do_bench_median_ms": ordered[len(ordered) // 2],
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
