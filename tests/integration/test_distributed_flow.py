"""@pytest.mark.distributed end to end on the CPU: real rank processes on gloo, no mocks.

Each inner run starts two rank processes per distributed test (forked from a forkserver that
imported torch once, then pytest), so these tests take seconds each; those of a path that xdist
changes (the ranks' outcomes, leaks and records sent from a worker to the controller, a baseline
update) run without xdist and with -n 2.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pytest_cudaperf.distributed.rank import alive

MODES = {"plain": [], "n2": ["-n2"]}


@pytest.fixture(params=list(MODES), ids=list(MODES))
def dist_mode(request: pytest.FixtureRequest) -> list[str]:
    return MODES[request.param]


def test_ranks_pass_fail_and_leak(pytester: pytest.Pytester, dist_mode: list[str]) -> None:
    pytester.makepyfile("""
        import os
        import pytest
        import torch
        import torch.distributed as dist

        @pytest.fixture
        def rank_tensor(dist_rank, cuda_device):  # function fixtures run in the ranks only
            return torch.full((4,), float(dist.get_rank() + 1), device=cuda_device)

        @pytest.mark.distributed(world_size=2)
        def test_all_reduce(dist_rank, rank_tensor, tmp_path):
            assert dist.is_initialized() and dist.get_world_size() == 2
            assert dist.get_rank() == dist_rank.rank == int(os.environ["RANK"])
            assert dist_rank.is_main == (dist_rank.rank == 0)
            dist.all_reduce(rank_tensor)
            assert rank_tensor.tolist() == [3.0] * 4
            (tmp_path / "mine.txt").write_text(str(dist_rank.rank))
            paths = [None, None]
            dist.all_gather_object(paths, str(tmp_path))
            assert paths[0] != paths[1]  # each rank its own tmp_path
            assert (tmp_path / "mine.txt").read_text() == str(dist_rank.rank)
            print(f"rank {dist_rank.rank} done")

        @pytest.mark.distributed(world_size=2)
        def test_rank_one_fails(dist_rank):
            dist.barrier()
            assert dist_rank.rank != 1, "rank one disagrees"

        KEEP = []

        @pytest.mark.distributed(world_size=2)
        @pytest.mark.no_leak
        def test_leaks_on_rank_one(dist_rank):
            t = torch.ones(8)
            dist.all_reduce(t)
            if dist_rank.rank == 1:
                KEEP.append(torch.ones(1024))

        def test_dist_rank_outside_a_distributed_test(dist_rank):
            pass
    """)
    result = pytester.runpytest(*dist_mode, "-rA")
    result.assert_outcomes(passed=1, failed=2, errors=1)
    result.stdout.fnmatch_lines_random(
        [
            "distributed test failed on rank 1 of 2",
            "--- rank 1: failed in call:",
            "*E   AssertionError: rank one disagrees",
            "*test_*.py:*: in test_rank_one_fails",
            "rank 1: leak: +12.0 KiB over 3 runs (+4.0 KiB each) on cpu tensors",
            "LEAKED *test_leaks_on_rank_one - rank 1: *",
            "*Captured stdout (rank 1)*",
            "rank 1 done",
            "*dist_rank: only a @pytest.mark.distributed test has ranks",
        ]
    )
    assert "rank 0: leak" not in result.stdout.str()


def test_hang_is_cut_at_the_timeout(pytester: pytest.Pytester, tmp_path: Path) -> None:
    """Without xdist only: the cut (the deadline, the stacks, the killed process trees) happens
    where the test runs, a worker as much as the main process, and its failure reaches the
    controller as any failure does; the ranks started from an xdist worker are tested above and
    below. Most of the test's time is the timeout itself, which counts from the ranks' start."""
    pids = tmp_path / "pids"
    pytester.makepyfile(f"""
        import datetime
        import os
        import subprocess
        import sys
        import time
        import pytest
        import torch.distributed as dist

        @pytest.mark.distributed(world_size=2, timeout=12)
        def test_hang(dist_rank):
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
            with open({str(pids)!r}, "a") as f:
                f.write(f"{{os.getpid()}} {{child.pid}}\\n")
            if dist_rank.rank == 1:
                time.sleep(600)  # rank 1 never reaches the barrier
            # waits past the test's timeout (its own, not the process group's 15 s)
            dist.monitored_barrier(timeout=datetime.timedelta(seconds=600))  # gloo, torch >= 1.10

        def test_after():
            pass
    """)
    result = pytester.runpytest("--durations=1", "--durations-min=0")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines_random(
        [
            "distributed test timed out after 12 s on ranks 0, 1 of 2",
            "--- rank 0: did not finish within the timeout of 12 s",
            '*File "*test_hang_is_cut_at_the_timeout.py", line 17 in test_hang',  # barrier
            "--- rank 1: did not finish within the timeout of 12 s",
            "its Python stack when stopped:",
            '*File "*test_hang_is_cut_at_the_timeout.py", line 15 in test_hang',  # sleep
        ]
    )
    durations = re.findall(r"([0-9.]+)s call .*::test_hang", result.stdout.str())
    assert durations, "no duration reported for test_hang"
    assert 12 <= float(durations[0]) < 12 + 15, f"the hang took {durations[0]} s to cut"
    recorded = [int(p) for line in pids.read_text().splitlines() for p in line.split()]
    assert len(recorded) == 4  # two ranks, each with a child process
    assert [pid for pid in recorded if alive(pid)] == []


def test_perf_recorded_then_compared(
    pytester: pytest.Pytester, dist_mode: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The compare in each xdist mode: the ranks' records, merged in a worker, reach the
    controller's report with their ranks and bandwidth. The update before it runs without
    workers (the controller writes what the records it gets say, as the compare's report shows
    they arrive; a run with -n2 starts two workers that each import torch). Each rank sees the
    environment its launcher has when it launches: without workers, the compare's ranks fork
    from the forkserver that the update started, in the update's environment."""
    pytester.makepyfile("""
        import os
        import pathlib
        import pytest
        import torch
        import torch.distributed as dist

        @pytest.mark.distributed(world_size=2)
        @pytest.mark.perf(tolerance="500%")
        def test_allreduce(dist_rank, cuda_timer):
            launch = pathlib.Path(__file__).with_name("launch.txt").read_text()
            assert os.environ["CUDAPERF_TEST_LAUNCH"] == launch
            t = torch.ones(4096)
            cuda_timer(lambda: dist.all_reduce(t), max_time=0.3)
            result = dist_rank.bench_collective("all_reduce", torch.ones(1 << 16), max_time=0.3)
            assert result.busbw_gbps == pytest.approx(result.algbw_gbps)  # 2(n-1)/n = 1
    """)
    (pytester.path / "launch.txt").write_text("update")
    monkeypatch.setenv("CUDAPERF_TEST_LAUNCH", "update")
    first = pytester.runpytest("--cudaperf-update")
    first.assert_outcomes(passed=1)
    baselines = list((pytester.path / ".cudaperf").glob("*.json"))
    assert len(baselines) == 1
    entries = json.loads(baselines[0].read_text())["entries"]
    (series,) = entries.values()  # one test: its own time and the collective's
    assert set(series) == {"", "all_reduce/ws2"}
    assert set(series["all_reduce/ws2"]) == {"time:dist"}
    (pytester.path / "launch.txt").write_text("compare")
    monkeypatch.setenv("CUDAPERF_TEST_LAUNCH", "compare")
    second = pytester.runpytest(*dist_mode, "--cudaperf-json=out.json")
    second.assert_outcomes(passed=1)
    document = json.loads((pytester.path / "out.json").read_text())
    records = {r["name"]: r for t in document["tests"] for r in t["records"]}
    assert {r["verdict"]["kind"] for r in records.values()} <= {"pass", "improved"}
    collective = records["all_reduce/ws2"]
    ranks = collective["ranks"]
    assert set(ranks) == {"0", "1"}
    assert collective["recording"]["median"] == max(ranks.values())  # the slowest rank's
    bandwidth = collective["bandwidth"]
    assert bandwidth["op"] == "all_reduce"
    assert bandwidth["bytes"] == 4 << 16
    assert "NEW" not in second.stdout.str()
