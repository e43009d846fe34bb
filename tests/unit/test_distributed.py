"""The pure parts of @distributed: bandwidth math, planning, rank arguments, result merging, stack
formatting. The processes themselves are exercised in tests/integration/test_distributed_flow.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_cudaperf.devices.probe import GpuFacts, Probe
from pytest_cudaperf.distributed.bandwidth import bus_bandwidth, collective_size
from pytest_cudaperf.distributed.launcher import FORKSERVER_PRELOAD, start_method
from pytest_cudaperf.distributed.merge import (
    Merged,
    RankOutcome,
    attach_bandwidth,
    format_stack,
    merge,
    merge_payloads,
)
from pytest_cudaperf.distributed.plan import gpus_for, plan, require_gpus_error
from pytest_cudaperf.distributed.rank import alive, pg_timeout, rank_args, take_launchers_state
from pytest_cudaperf.distributed.result import Collective, PhaseReport, RankResult
from pytest_cudaperf.keys import SeriesKey
from pytest_cudaperf.locks import LockRegistry
from pytest_cudaperf.markers import DistributedOptions, MarkerError, Marks, PerfOptions, parse
from pytest_cudaperf.measure.measurement import Measurement
from pytest_cudaperf.rank_env import RankEnv
from pytest_cudaperf.report.model import (
    Bandwidth,
    Failure,
    FailureKind,
    JudgedRecord,
    LeakOutcome,
    TestOutcome,
)
from pytest_cudaperf.run.child import item_args
from pytest_cudaperf.run.context import RunContext
from pytest_cudaperf.series import Record, Recording
from pytest_cudaperf.settings import Settings
from pytest_cudaperf.store.baselines import BaselineStore
from pytest_cudaperf.verdict import Kind, Verdict

GIB = 2**30
H200 = GpuFacts(0, "NVIDIA H200", (9, 0), 141 * GIB, 132, 60 * 2**20, "u0")
H200B = GpuFacts(1, "NVIDIA H200", (9, 0), 141 * GIB, 132, 60 * 2**20, "u1")
TWO = Probe("2.11.0+cu130", "13.0", True, (H200, H200B), driver="580.1")
ONE = Probe("2.11.0+cu130", "13.0", True, (H200,), driver="580.1")
CPU_BUILD = Probe("2.13.0+cpu", None, False, cpu="Xeon")


def test_bus_bandwidth_follows_nccl_tests() -> None:
    # 1 GB in 10 ms: algbw 100 GB/s; all-reduce busbw x 2(n-1)/n, the others x (n-1)/n
    assert bus_bandwidth("all_reduce", 10**9, 10.0, 2) == pytest.approx((100.0, 100.0))
    assert bus_bandwidth("all_reduce", 10**9, 10.0, 8) == pytest.approx((100.0, 175.0))
    assert bus_bandwidth("all_gather", 10**9, 10.0, 4) == pytest.approx((100.0, 75.0))
    assert bus_bandwidth("reduce_scatter", 10**9, 10.0, 2) == pytest.approx((100.0, 50.0))
    assert bus_bandwidth("all_reduce", 10**9, 10.0, 1)[1] == 0.0
    with pytest.raises(ValueError, match="collective must be one of"):
        bus_bandwidth("broadcast", 1, 1.0, 2)
    with pytest.raises(ValueError, match="positive"):
        bus_bandwidth("all_reduce", 1, 0.0, 2)


def test_collective_size_is_the_operations_full_size() -> None:
    assert collective_size("all_reduce", 256 * 2**20, 2) == 256 * 2**20
    assert collective_size("all_gather", 64, 4) == 256  # the gathered output
    assert collective_size("reduce_scatter", 256, 4) == 256  # the input


def test_process_group_timeout_is_below_the_tests() -> None:
    assert pg_timeout(300) == 240
    assert pg_timeout(20) == 15
    assert pg_timeout(3) == 1
    for t in (2, 10, 60, 300, 1800):
        assert pg_timeout(t) < t


def test_each_rank_gets_its_own_base_temporary_directory(tmp_path: Path) -> None:
    args = item_args("t.py::f", tmp_path / "t.py", (tmp_path, None), tmp_path / "tmp")
    ranks = [rank_args(args, r) for r in range(2)]
    at = args.index("--basetemp") + 1
    assert [r[at] for r in ranks] == [f"{tmp_path}/tmp-rank0", f"{tmp_path}/tmp-rank1"]
    assert f"--junitxml={tmp_path}/tmp-rank1-junit.xml" in ranks[1]
    assert [r[: at - 1] + r[at + 2 :] for r in ranks] == [args[: at - 1] + args[at + 2 :]] * 2
    assert args[at] == str(tmp_path / "tmp")  # the launcher's list is left as it was


def test_cpu_ranks_fork_from_a_forkserver_with_torch_and_gpu_ranks_are_spawned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from multiprocessing import forkserver

    set_to: list[list[str]] = []
    monkeypatch.setattr(forkserver, "set_forkserver_preload", set_to.append)
    assert start_method([0, 1]) == "spawn"
    assert set_to == []
    assert start_method(None) == "forkserver"
    assert set_to == [list(FORKSERVER_PRELOAD)]
    assert FORKSERVER_PRELOAD[0] == "__main__"  # multiprocessing's own default, kept
    assert "torch" in FORKSERVER_PRELOAD


def test_a_rank_takes_its_launchers_environment_folder_and_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a forkserver's rank would otherwise have from when the forkserver started."""
    monkeypatch.setenv("CUDAPERF_STALE", "from the forkserver's start")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", ["/the/forkservers"])
    environ = {"PATH": os.environ.get("PATH", ""), "CUDAPERF_NOW": "the launcher's"}
    spec = {"environ": environ, "cwd": str(tmp_path.parent), "sys_path": ["/the/launchers"]}
    with monkeypatch.context() as undo:
        undo.setattr(os, "environ", os.environ.copy())  # cleared and refilled: not this one
        take_launchers_state(spec)
        assert dict(os.environ) == environ
        assert Path.cwd() == tmp_path.parent
        assert sys.path == ["/the/launchers"]


def test_gpus_for_workers() -> None:
    assert gpus_for(0, 2, 2) == [0, 1]
    assert gpus_for(1, 2, 8) == [2, 3]
    assert gpus_for(3, 2, 8) == [6, 7]
    assert gpus_for(4, 2, 8) == [0, 1]


def test_plan_backend_and_skip_reasons() -> None:
    two = DistributedOptions(world_size=2)
    assert plan(two, "auto", TWO) == ("nccl", True, None)
    assert plan(two, "cpu", TWO) == ("gloo", False, None)
    assert plan(two, "auto", CPU_BUILD) == ("gloo", False, None)
    assert plan(two, "auto", ONE)[2] == "needs 2 GPUs (world_size=2), 1 visible"
    nccl = DistributedOptions(world_size=2, backend="nccl")
    reason = plan(nccl, "auto", CPU_BUILD)[2]
    assert reason is not None
    assert reason.startswith("needs 2 GPUs for backend nccl: torch.cuda.is_available() is False")
    forced = plan(two, "cuda", CPU_BUILD)[2]
    assert forced is not None
    assert forced.startswith("--cudaperf-device=cuda but no GPU")
    assert plan(DistributedOptions(world_size=2, backend="gloo"), "auto", TWO) == (
        "gloo",
        True,
        None,
    )


def test_cpu_ranks_beyond_what_the_host_launches_skip_the_test() -> None:
    """``world_size=10**6`` on the CPU would start a million processes."""
    assert plan(DistributedOptions(world_size=8), "cpu", TWO, cores=2) == ("gloo", False, None)
    assert plan(DistributedOptions(world_size=9), "cpu", TWO, cores=2) == (
        "gloo",
        False,
        "needs 9 CPU processes (world_size=9); this host launches at most 8 (4 a core, 2 cores)",
    )
    huge = plan(DistributedOptions(world_size=10**6), "auto", CPU_BUILD, cores=64)[2]
    assert huge is not None
    assert huge.startswith("needs 1000000 CPU processes (world_size=1000000); this host launches")
    assert plan(DistributedOptions(world_size=16), "cpu", TWO, cores=4)[2] is None  # 4 a core


def _run_context(tmp_path: Path, probe: Probe, require_gpu: bool = True) -> RunContext:
    return RunContext(
        settings=Settings(require_gpu=require_gpu),
        store=BaselineStore.load(tmp_path / "baselines"),
        locks=LockRegistry(tmp_path / "locks"),
        root=tmp_path,
        baseline_dir=tmp_path / "baselines",
        output_dir=tmp_path,
        _probe=probe,
    )


def test_too_few_gpus_is_a_usage_error_only_when_gpus_are_required(tmp_path: Path) -> None:
    tests = [
        ("t.py::test_one", Marks(perf=PerfOptions())),
        ("t.py::test_four", Marks(distributed=DistributedOptions(world_size=4))),
    ]
    error = require_gpus_error(_run_context(tmp_path, TWO), tests)
    assert error == (
        "--cudaperf-require-gpu: t.py::test_four needs 4 GPUs (world_size=4), 2 visible"
    )
    assert require_gpus_error(_run_context(tmp_path, TWO), tests[:1]) is None
    assert require_gpus_error(_run_context(tmp_path, TWO, require_gpu=False), tests) is None
    two = [("t.py::test_two", Marks(distributed=DistributedOptions(world_size=2)))]
    assert require_gpus_error(_run_context(tmp_path, TWO), two) is None


def test_marker_validation() -> None:
    opts = parse("distributed", (), {"world_size": 4, "backend": "gloo", "timeout": "90s"})
    assert opts == DistributedOptions(world_size=4, backend="gloo", timeout=90.0)
    assert parse("distributed", (), {}) == DistributedOptions(2, None, 300.0)
    with pytest.raises(MarkerError, match=r"distributed: world_size: expected an integer >= 1"):
        parse("distributed", (), {"world_size": 0})
    with pytest.raises(MarkerError, match=r"backend: expected 'nccl', 'gloo' or None, got 'mpi'"):
        parse("distributed", (), {"backend": "mpi"})
    with pytest.raises(MarkerError, match="timeout: expected a positive duration"):
        parse("distributed", (), {"timeout": -1})
    with pytest.raises(
        MarkerError, match="unknown argument 'ranks'; it takes world_size, backend, timeout"
    ):
        parse("distributed", (), {"ranks": 2})


def test_rank_env_round_trip() -> None:
    assert RankEnv.read({}) is None
    env = RankEnv.read(
        {
            "PYTEST_CUDAPERF_DIST_RANK": "1",
            "PYTEST_CUDAPERF_DIST_WORLD_SIZE": "2",
            "PYTEST_CUDAPERF_DIST_GPU": "3",
            "PYTEST_CUDAPERF_DIST_BACKEND": "nccl",
        }
    )
    assert env == RankEnv(1, 2, 3, None, None, "nccl")


class _NoOptions:
    def getoption(self, name: str) -> Any:
        return None

    def getini(self, name: str) -> Any:
        return None


def test_a_rank_is_a_worker_on_its_gpu_with_private_locks(tmp_path: Path) -> None:
    environ = {
        "PYTEST_CUDAPERF_DIST_RANK": "1",
        "PYTEST_CUDAPERF_DIST_GPU": "3",
        "PYTEST_CUDAPERF_DIST_LOCK_DIR": str(tmp_path / "rank-locks"),
    }
    ctx = RunContext.create(tmp_path, "pytest.ini", _NoOptions(), environ, None, tmp_path)
    assert ctx.rank is not None
    assert ctx.rank.rank == 1
    assert (ctx.is_worker, ctx.worker) == (True, 3)
    assert ctx.locks.folder == tmp_path / "rank-locks"
    plain = RunContext.create(tmp_path, "pytest.ini", _NoOptions(), {}, None, tmp_path)
    assert (plain.rank, plain.is_worker, plain.worker) == (None, False, 0)
    assert plain.locks.folder != tmp_path / "rank-locks"


STACK = """\
Thread 0x00007f00aaaa (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 320 in wait

Current thread 0x00007f816b6a6b80 (most recent call first):
  File "/tmp/t/test_h.py", line 12 in helper
  File "/tmp/t/test_h.py", line 20 in test_hang
  File "/venv/lib/python3.11/site-packages/_pytest/python.py", line 157 in pytest_pyfunc_call
  File "/venv/lib/python3.11/site-packages/pluggy/_callers.py", line 121 in _multicall
"""


def test_format_stack_keeps_the_test_frames() -> None:
    assert format_stack(STACK) == (
        "Current thread 0x00007f816b6a6b80 (most recent call first):\n"
        '  File "/tmp/t/test_h.py", line 12 in helper\n'
        '  File "/tmp/t/test_h.py", line 20 in test_hang'
    )
    assert format_stack("no frames at all") == "no frames at all"
    many = "Current thread 0x1 (most recent call first):\n" + "".join(
        f'  File "/t.py", line {i} in f\n' for i in range(50)
    )
    assert format_stack(many, limit=5).splitlines()[-1] == "  ... 45 more frames"


def _record(name: str, value: float, series: str = "time:dist") -> JudgedRecord:
    recording = Recording(date="2026-11-23", median=value, noise=0.01, n=10)
    record = Record(SeriesKey("t.py::test", name), series, "cpu", "ms", recording, {})
    return JudgedRecord(record, Verdict(Kind.NEW), measurement=Measurement.from_samples([value]))


def _outcome(records: list[JudgedRecord], **extra: Any) -> TestOutcome:
    return TestOutcome("t.py::test", records=tuple(records), **extra)


def _leak(grown: int) -> LeakOutcome:
    leaks = {"cpu": grown} if grown else {}
    return LeakOutcome(SeriesKey("t.py::test", ""), {"cpu": [0, grown]}, leaks, 0)


def test_merge_payloads_takes_the_slowest_rank() -> None:
    merged = merge_payloads(
        {
            0: _outcome([_record("", 1.0), _record("r", 5.0)]),
            1: _outcome([_record("", 2.0), _record("r", 4.0)]),
        }
    )
    assert merged is not None
    by_name = {r.key.name: r for r in merged.records}
    assert by_name[""].value == 2.0
    assert by_name[""].rank == 1
    assert by_name[""].ranks == {"0": 1.0, "1": 2.0}
    measured = by_name[""].measurement
    assert measured is not None
    assert measured.samples_ms == (2.0,)  # the slowest rank's measurement
    assert by_name["r"].value == 5.0
    assert by_name["r"].rank == 0
    assert merged.body_passed is True
    payload = merged.to_json()
    assert TestOutcome.from_json(json.loads(json.dumps(payload))) == merged  # through xdist
    assert merge_payloads({0: None, 1: None}) is None


def test_merge_payloads_names_the_ranks_of_failures() -> None:
    slower = Failure(FailureKind.REGRESSION, "slower")
    merged = merge_payloads(
        {
            0: _outcome([], failures=(slower,), details=("warm-up",), leak=_leak(0)),
            1: _outcome(
                [],
                failures=(Failure(FailureKind.LEAK, "leak: +4 KiB"), slower),
                leak=_leak(4096),
                details=("warm-up",),
            ),
        }
    )
    assert merged is not None
    assert merged.failures == (
        Failure(FailureKind.REGRESSION, "ranks 0, 1: slower"),
        Failure(FailureKind.LEAK, "rank 1: leak: +4 KiB"),
    )
    assert merged.details == ("ranks 0, 1: warm-up",)
    assert merged.leak == _leak(4096)  # the rank that leaked, not the first


def _phases(call: str = "passed", longrepr: str = "", **call_extra: Any) -> dict[str, PhaseReport]:
    """A rank's phase reports, as its result's JSON reads back."""
    data = {
        "setup": {"outcome": "passed", "longrepr": "", "sections": []},
        "call": {"outcome": call, "longrepr": longrepr, "sections": [], **call_extra},
        "teardown": {
            "outcome": "passed",
            "longrepr": "",
            "sections": [["Captured stdout call", "hello\n"]],
        },
    }
    return {when: PhaseReport.from_json(phase) for when, phase in data.items()}


def test_merge_passes_when_every_rank_passed() -> None:
    merged = merge([RankOutcome(0, _phases()), RankOutcome(1, _phases())], 300)
    assert merged.outcome == "passed"
    assert merged.sections == [
        ("Captured stdout call (rank 0)", "hello\n"),
        ("Captured stdout call (rank 1)", "hello\n"),
    ]


def test_merge_names_the_failing_rank_with_its_traceback() -> None:
    merged = merge(
        [
            RankOutcome(0, _phases()),
            RankOutcome(1, _phases("failed", "t.py:3: in test\nE   AssertionError: boom")),
        ],
        300,
    )
    assert merged.outcome == "failed"
    assert merged.message == (
        "distributed test failed on rank 1 of 2\n"
        "--- rank 1: failed in call:\n"
        "    t.py:3: in test\n"
        "    E   AssertionError: boom"
    )


def test_merge_reports_a_hang_with_the_stacks() -> None:
    hung = RankOutcome(1, stack="Current thread 0x1:\n  File t.py, line 9 in test")
    hung.killed = "did not finish within the timeout of 20 s"
    merged = merge([RankOutcome(0, _phases("failed", "E   RuntimeError: timed out")), hung], 20)
    assert merged.outcome == "failed"
    lines = merged.message.splitlines()
    assert lines[0] == "distributed test timed out after 20 s on rank 1 of 2"
    assert "--- rank 0: failed in call:" in lines
    assert "--- rank 1: did not finish within the timeout of 20 s" in lines
    assert "its Python stack when stopped:" in lines
    assert "      File t.py, line 9 in test" in lines


def test_merge_reports_a_rank_without_a_result() -> None:
    merged = merge([RankOutcome(0, _phases()), RankOutcome(1, exitcode=-11, log_tail="x")], 60)
    assert merged.message.splitlines()[:2] == [
        "distributed test failed on rank 1 of 2",
        "--- rank 1: left no result (exit code -11); its output ends:",
    ]
    error = merge([RankOutcome(0, error="Traceback...\nValueError: no group")], 60)
    assert "--- rank 0: failed outside the test:" in error.message


def test_a_cudaperf_failure_is_not_a_body_failure() -> None:
    leaky = _phases(
        "failed",
        "rank 1: leak",
        cudaperf_failure="leak",
        cudaperf=_outcome([], failures=(Failure(FailureKind.LEAK, "leak: +4 KiB"),)).to_json(),
    )
    merged = merge([RankOutcome(0, _phases()), RankOutcome(1, leaky)], 60)
    assert merged.outcome == "passed"  # the launcher's report fails it as a leak
    assert merged.payload is not None
    assert merged.payload.failures == (Failure(FailureKind.LEAK, "rank 1: leak: +4 KiB"),)


def test_merge_skips_when_every_rank_skipped() -> None:
    skipped = {"setup": PhaseReport("skipped", "Skipped: no data")}
    merged = merge([RankOutcome(0, dict(skipped)), RankOutcome(1, dict(skipped))], 60)
    assert merged == Merged("skipped", "no data", None, [])


def test_attach_bandwidth_uses_the_merged_time() -> None:
    outcome = _outcome([_record("all_reduce/ws2", 2.0), _record("other", 1.0)])
    timed = Collective("all_reduce/ws2", "all_reduce", 10**9, 2, 1.0, 1000.0, 1000.0)
    outcome = attach_bandwidth(outcome, [timed])
    assert outcome.records[1].bandwidth is None
    assert outcome.records[0].bandwidth == Bandwidth(
        "all_reduce", 10**9, pytest.approx(500.0), pytest.approx(500.0)
    )


def test_alive_sees_exits() -> None:
    assert alive(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert not alive(child.pid)


def test_a_rank_result_round_trips_through_its_file(tmp_path: Path) -> None:
    """What a rank hands its launcher: phases (the call's outcome typed), an error, the
    collectives it timed; written atomically, read back equal."""
    measured = _outcome([_record("all_reduce/ws2", 2.0)], details=("warm-up",))
    phases = _phases(cudaperf=measured.to_json(), cudaperf_failure=None)
    collective = Collective("all_reduce/ws2", "all_reduce", 1 << 20, 2, 2.0, 0.5, 0.5)
    result = RankResult(1, phases, None, (collective,))
    path = tmp_path / "rank1.json"
    result.write(path)
    assert RankResult.read(path) == result
    assert RankResult.read(path).phases["call"].cudaperf == measured
    assert not list(tmp_path.glob("*.tmp"))
    assert collective.describe().startswith("all_reduce of 1.0 MiB on 2 ranks: 2.000 ms")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.pop("rank"), r"rank result.rank: expected an integer, got None"),
        (lambda d: d.update(rank=True), r"rank result.rank: expected an integer, got True"),
        (lambda d: d["phases"].update(lunch={}), r"rank result.phases: unknown phase 'lunch'"),
        (
            lambda d: d["phases"]["call"].update(outcome="won"),
            r"phases.call.outcome: expected passed, failed or skipped",
        ),
        (lambda d: d["phases"]["call"].update(sections=[["x"]]), r"phases.call.sections"),
        (
            lambda d: d["phases"]["call"].update(cudaperf={"records": []}),
            r"phases.call.cudaperf.nodeid: expected a string",
        ),
        (
            lambda d: d["collectives"].append({"name": "x"}),
            r"collectives\[0\].op: expected a string",
        ),
        (lambda d: d.update(collectives={}), r"rank result.collectives: expected a list"),
    ],
)
def test_a_rank_result_is_read_strictly(change: Any, message: str) -> None:
    data = RankResult(0, _phases()).to_json()
    change(data)
    with pytest.raises(ValueError, match=message):
        RankResult.from_json(data)
