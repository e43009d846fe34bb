"""All-reduce bus bandwidth through the plugin's distributed measurement path, set beside the
figure nccl-tests' formula gives for the same run's timings, and beside an nccl-tests-style loop.

1. plugin: a 2-rank ``@pytest.mark.distributed`` test calls ``dist_rank.bench_collective(
   "all_reduce", t)`` on a 256 MiB bf16 tensor; the run's JSON gives the record's median time
   (each aligned sample the slowest rank's) and the bus bandwidth the plugin derived from it.
2. nccl-tests formula, same samples: nccl-tests reports the *mean* time of its iterations;
   algbw = S / t, busbw = algbw * 2(n-1)/n (computed here, not with the plugin's function).
3. raw loop: ranks of our own (torch.multiprocessing spawn, NCCL), 5 warm-up iterations, then
   20 iterations between two CUDA events, as nccl-tests' all_reduce_perf times them.

    python benchmarks/bench_allreduce.py                  # 2 GPUs, NCCL, 256 MiB bf16
    python benchmarks/bench_allreduce.py --cpu --mib 4    # gloo on the CPU
    python benchmarks/bench_allreduce.py --smoke          # the same, 1 MiB, short
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

SUITE = """
import pytest
import torch

@pytest.mark.distributed(world_size={world})
def test_all_reduce(dist_rank, cuda_device):
    t = torch.zeros({numel}, dtype=torch.{dtype}, device=cuda_device)
    r = dist_rank.bench_collective("all_reduce", t, max_time={max_time})
    print(r.describe())
"""


def plugin_run(world: int, numel: int, dtype: str, cpu: bool, max_time: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "test_bw.py").write_text(
            SUITE.format(world=world, numel=numel, dtype=dtype, max_time=max_time)
        )
        args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA"]
        args += ["--cudaperf-json=out.json", "test_bw.py"]
        if cpu:
            args.append("--cudaperf-device=cpu")
        done = subprocess.run(args, cwd=tmp, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            sys.exit(f"the pytest run failed:\n{done.stdout}\n{done.stderr}")
        document = json.loads(Path(tmp, "out.json").read_text())
    record: dict[str, Any] = document["tests"][0]["records"][0]
    return record


def _raw_rank(rank: int, world: int, numel: int, dtype: str, store: str, out: str) -> None:  # noqa: PLR0913
    import datetime

    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available() and os.environ.get("BENCH_CPU") != "1"
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    kwargs: dict[str, Any] = {"device_id": device} if cuda else {}
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group(
        "nccl" if cuda else "gloo",
        store=dist.FileStore(store, world),  # type: ignore[attr-defined]
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=120),
        **kwargs,
    )
    t = torch.zeros(numel, dtype=getattr(torch, dtype), device=device)
    for _ in range(5):
        dist.all_reduce(t)
    iters = 20
    if cuda:
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            dist.all_reduce(t)
        end.record()
        end.synchronize()
        ms = start.elapsed_time(end) / iters
    else:
        import time

        dist.barrier()
        began = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)
        ms = (time.perf_counter() - began) * 1e3 / iters
    times = torch.tensor([ms], dtype=torch.float64)
    dist.all_reduce(times, op=dist.ReduceOp.MAX, group=dist.new_group(backend="gloo"))
    if rank == 0:
        Path(out).write_text(json.dumps({"ms": float(times.item())}))
    dist.destroy_process_group()


def raw_loop(world: int, numel: int, dtype: str) -> float:
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp, "raw.json"))
        mp.start_processes(  # type: ignore[attr-defined]
            _raw_rank,
            args=(world, numel, dtype, str(Path(tmp, "store")), out),
            nprocs=world,
            start_method="spawn",
        )
        return float(json.loads(Path(out).read_text())["ms"])


def nccl_tests_busbw(size_bytes: int, time_ms: float, world: int) -> tuple[float, float]:
    algbw = size_bytes / (time_ms * 1e-3) / 1e9
    return algbw, algbw * 2 * (world - 1) / world


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--max-time", type=float, default=2.0)
    parser.add_argument("--cpu", action="store_true", help="gloo on the CPU (a smoke test)")
    parser.add_argument(
        "--smoke", action="store_true", help="a smoke run: --cpu, 1 MiB of float32, 0.05 s"
    )
    args = parser.parse_args()
    if args.smoke:
        args.cpu, args.mib, args.dtype, args.max_time = True, 1, "float32", 0.05
    if args.cpu:
        os.environ["BENCH_CPU"] = "1"
    itemsize = {"bfloat16": 2, "float16": 2, "float32": 4}[args.dtype]
    size = args.mib * 2**20
    numel = size // itemsize
    world = args.world_size

    record = plugin_run(world, numel, args.dtype, args.cpu, args.max_time)
    samples = record["measurement"]["samples_ms"]
    median, mean = record["recording"]["median"], statistics.fmean(samples)
    plugin_bw = record["bandwidth"]
    formula_alg, formula_bus = nccl_tests_busbw(size, mean, world)
    median_alg, median_bus = nccl_tests_busbw(size, median, world)
    raw_ms = raw_loop(world, numel, args.dtype)
    raw_alg, raw_bus = nccl_tests_busbw(size, raw_ms, world)

    print(f"all_reduce, {args.mib} MiB {args.dtype}, {world} ranks, {record['device_class']}")
    ranks = record["ranks"]
    print(f"  each rank's record (ms; the same aligned samples): {ranks}; {len(samples)} samples")
    print(
        f"  plugin (median {median:.4f} ms):            algbw {plugin_bw['algbw_gbps']:8.2f} "
        f"GB/s  busbw {plugin_bw['busbw_gbps']:8.2f} GB/s"
    )
    print(
        f"  nccl-tests formula, same samples' median:  algbw {median_alg:8.2f} GB/s  "
        f"busbw {median_bus:8.2f} GB/s"
    )
    print(
        f"  nccl-tests formula, same samples' mean ({mean:.4f} ms): algbw {formula_alg:8.2f} "
        f"GB/s  busbw {formula_bus:8.2f} GB/s"
    )
    print(
        f"  nccl-tests-style loop (20 iters, {raw_ms:.4f} ms): algbw {raw_alg:8.2f} GB/s  "
        f"busbw {raw_bus:8.2f} GB/s"
    )


if __name__ == "__main__":
    main()
