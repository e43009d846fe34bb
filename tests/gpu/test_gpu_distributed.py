"""@pytest.mark.distributed on two GPUs with NCCL: each rank on its own GPU with the process group
initialised eagerly (device_id), failure propagation, the hang timeout, a leak on one rank, and a
collective's bus bandwidth. They skip, with the reason, where fewer than two GPUs are visible."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from pytest_cudaperf.distributed.rank import alive

pytestmark = pytest.mark.gpu(count=2)


def test_ranks_on_their_own_gpus_with_nccl(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import os
        import pytest
        import torch
        import torch.distributed as dist

        @pytest.mark.distributed(world_size=2)
        def test_placement(dist_rank, cuda_device):
            assert dist.get_backend() == "nccl"
            assert cuda_device == torch.device("cuda", dist_rank.rank)
            assert torch.cuda.current_device() == dist_rank.rank
            t = torch.full((1024,), float(dist_rank.rank + 1), device=cuda_device)
            dist.all_reduce(t)
            assert t[0].item() == 3.0
            others = [d for d in range(torch.cuda.device_count()) if d != cuda_device.index]
            assert not any(torch._C._cuda_hasPrimaryContext(d) for d in others)

        @pytest.mark.distributed(world_size=2)
        def test_rank_one_fails(dist_rank, cuda_device):
            t = torch.ones(8, device=cuda_device)
            dist.all_reduce(t)
            assert dist_rank.rank != 1, "rank one disagrees"

        KEEP = []

        @pytest.mark.distributed(world_size=2)
        @pytest.mark.no_leak
        def test_leak_on_rank_one(dist_rank, cuda_device):
            t = torch.ones(1 << 20, device=cuda_device)
            dist.all_reduce(t)
            if dist_rank.rank == 1:
                KEEP.append(t)

        @pytest.mark.distributed(world_size=3)
        def test_three_ranks_skip_on_two_gpus():
            pass
    """)
    result = pytester.runpytest("-rA")
    result.assert_outcomes(passed=1, failed=2, skipped=1)
    result.stdout.fnmatch_lines_random(
        [
            "distributed test failed on rank 1 of 2",
            "*E   AssertionError: rank one disagrees",
            "rank 1: leak: +12.0 MiB over 3 runs (+4.0 MiB each)*",
            "*needs 3 GPUs (world_size=3), 2 visible*",
        ]
    )


def test_nccl_hang_is_cut(pytester: pytest.Pytester, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    pytester.makepyfile(f"""
        import os
        import time
        import pytest
        import torch
        import torch.distributed as dist

        @pytest.mark.distributed(world_size=2, timeout=40)
        def test_hang(dist_rank, cuda_device):
            with open({str(pids)!r}, "a") as f:
                f.write(f"{{os.getpid()}}\\n")
            if dist_rank.rank == 1:
                time.sleep(600)
            t = torch.ones(8, device=cuda_device)
            dist.all_reduce(t)
            torch.cuda.synchronize()

        def test_after():
            pass
    """)
    began = time.monotonic()
    result = pytester.runpytest()
    elapsed = time.monotonic() - began
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines_random(["--- rank 1: *", "its Python stack when stopped:"])
    assert elapsed < 40 + 15, f"the hang took {elapsed:.1f} s to cut"
    recorded = [int(p) for p in pids.read_text().split()]
    assert len(recorded) == 2
    assert [pid for pid in recorded if alive(pid)] == []


def test_allreduce_bus_bandwidth(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest
        import torch

        @pytest.mark.distributed(world_size=2)
        def test_bw(dist_rank, cuda_device):
            t = torch.zeros(128 << 20, dtype=torch.bfloat16, device=cuda_device)  # 256 MiB
            r = dist_rank.bench_collective("all_reduce", t)
            print(r.describe())
            assert r.busbw_gbps > 1.0
    """)
    result = pytester.runpytest("-rA", "--cudaperf-json=out.json")
    result.assert_outcomes(passed=1)
    document = json.loads((pytester.path / "out.json").read_text())
    record = document["tests"][0]["records"][0]
    assert record["name"] == "all_reduce/ws2"
    bandwidth = record["bandwidth"]
    assert bandwidth["bytes"] == 256 << 20
    print(json.dumps(bandwidth))
