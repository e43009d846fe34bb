"""The rank's side: the function each rank runs (:func:`rank_main`): isolate itself,
initialise the process group, run the one test item through ``pytest.main`` with a collector of
its reports, and write its :class:`~pytest_cudaperf.distributed.result.RankResult` once."""

from __future__ import annotations

import contextlib
import faulthandler
import functools
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_cudaperf import atomic
from pytest_cudaperf.distributed.result import Collective, PhaseReport, RankResult
from pytest_cudaperf.rank_env import (
    BACKEND_ENV,
    DIR_ENV,
    GPU_ENV,
    LOCK_ENV,
    RANK_ENV,
    WORLD_ENV,
)
from pytest_cudaperf.report.model import TestOutcome
from pytest_cudaperf.run.child import private_paths

if TYPE_CHECKING:
    import pytest


class Collector:
    """Gathers, in a rank, the item's reports by phase and the collectives its test timed."""

    def __init__(self) -> None:
        self.phases: dict[str, PhaseReport] = {}
        self.errors: list[str] = []
        self.collectives: list[Collective] = []

    def pytest_configure(self, config: pytest.Config) -> None:
        config.stash[_stash_key()] = self

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.errors.append(f"collection failed: {report.longreprtext}")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        longrepr: str = report.longreprtext
        if report.skipped and isinstance(report.longrepr, tuple):
            longrepr = str(report.longrepr[2])
        payload = getattr(report, "cudaperf", None)
        self.phases[report.when] = PhaseReport(
            outcome=report.outcome,
            longrepr=longrepr,
            sections=tuple(report.sections),
            cudaperf=TestOutcome.from_json(payload) if payload else None,
            cudaperf_failure=getattr(report, "cudaperf_failure", None),
        )


def pg_timeout(timeout: float) -> float:
    """The process group's timeout: below the test's, so a rank stuck in a collective raises
    (with its traceback) before the launcher has to kill it."""
    return max(1.0, timeout - max(5.0, 0.2 * timeout))


@functools.lru_cache(maxsize=1)
def _stash_key() -> pytest.StashKey[Collector]:
    import pytest

    return pytest.StashKey[Collector]()


def collector_of(config: pytest.Config) -> Collector | None:
    """The collector of this rank's pytest run; None outside a rank."""
    return config.stash.get(_stash_key(), None)


def alive(pid: int) -> bool:
    """Is ``pid`` a running process (a zombie counts as gone)?"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _watch_launcher(launcher: int) -> None:
    """A rank whose launcher died ends itself: no orphan. The launcher is watched by its pid,
    not as the rank's parent: a forked rank's parent is the forkserver, which the ranks it
    forked keep running (they hold its liveness pipe)."""
    while True:
        if not alive(launcher):
            os._exit(3)
        time.sleep(0.5)


def take_launchers_state(spec: dict[str, Any]) -> None:
    """Take the launcher's environment (the run's settings in it), working directory and
    ``sys.path`` (``environ``, ``cwd`` and ``sys_path`` of ``spec``): a rank forked from a
    forkserver has the forkserver's, from when it started."""
    os.environ.clear()
    os.environ.update(spec["environ"])
    os.chdir(spec["cwd"])
    sys.path[:] = spec["sys_path"]


def result_path(workdir: Path, rank: int) -> Path:
    """Where a rank writes its result; the launcher takes the rank as done once it exists."""
    return workdir / f"rank{rank}.json"


def rank_args(args: Sequence[str], rank: int) -> list[str]:
    """The item's pytest arguments (:func:`~pytest_cudaperf.run.child.item_args`) for one rank:
    its own base temporary directory (``<basetemp>-rank<r>``) and JUnit file: with one folder for
    all ranks, pytest would clear it as each rank first used it, and every rank's ``tmp_path``
    would be the same directory."""
    found = list(args)
    at = found.index("--basetemp")
    own = private_paths(Path(f"{found[at + 1]}-rank{rank}"))
    found[at : at + len(own)] = own
    return found


def rank_main(index: int, spec: dict[str, Any]) -> None:
    """The function each rank runs: isolate, init the process group, run the item."""
    take_launchers_state(spec)
    os.setpgrp()  # the launcher kills the rank's whole tree through its process group
    workdir = Path(spec["workdir"])
    rank, world, backend = index, int(spec["world_size"]), str(spec["backend"])
    log = open(workdir / f"rank{rank}.log", "w")  # noqa: SIM115 - lives as long as the process
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    stack = open(workdir / f"rank{rank}.stack", "w")  # noqa: SIM115
    faulthandler.register(signal.SIGUSR1, file=stack, all_threads=True)
    faulthandler.dump_traceback_later(float(spec["timeout"]) + 30, exit=True, file=stack)
    threading.Thread(target=_watch_launcher, args=(int(spec["parent"]),), daemon=True).start()
    atomic.write_text(workdir / f"rank{rank}.pid", str(os.getpid()))
    gpus: list[int] | None = spec["gpus"]
    os.environ.update(
        {
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(world),
            "LOCAL_WORLD_SIZE": str(world),
            RANK_ENV: str(rank),
            WORLD_ENV: str(world),
            GPU_ENV: str(gpus[rank]) if gpus else "",
            # the launcher holds the GPUs' locks; a rank's own are private (a shared folder
            # would have one rank wait for another's exclusive hold, inside a collective)
            LOCK_ENV: str(workdir / f"locks-rank{rank}"),
            DIR_ENV: str(workdir),
            BACKEND_ENV: backend,
        }
    )
    result = RankResult(rank)
    initialised = False
    try:
        import pytest
        import torch
        import torch.distributed as dist

        kwargs: dict[str, Any] = {}
        if gpus:
            device = torch.device("cuda", gpus[rank])
            torch.cuda.set_device(device)
            if backend == "nccl":
                kwargs["device_id"] = device  # NCCL initialises eagerly, here
        import datetime

        store = dist.FileStore(str(workdir / "store"), world)  # type: ignore[attr-defined]
        dist.init_process_group(
            backend,
            store=store,
            rank=rank,
            world_size=world,
            timeout=datetime.timedelta(seconds=pg_timeout(float(spec["timeout"]))),
            **kwargs,
        )
        initialised = True
        control_group()  # collective: every rank creates it here, in the same order
        collector = Collector()
        code = pytest.main(rank_args(spec["args"], rank), plugins=[collector])
        error = None
        if not collector.phases:
            why = "; ".join(collector.errors) or f"pytest exit code {int(code)}"
            error = f"the rank ran no test for {spec['nodeid']}: {why}"
        result = RankResult(rank, dict(collector.phases), error, tuple(collector.collectives))
    except BaseException:  # noqa: BLE001 - everything is reported to the launcher
        result = RankResult(rank, error=traceback.format_exc())
    result.write(result_path(workdir, rank))
    sys.stdout.flush()
    if initialised:
        with contextlib.suppress(Exception):
            import torch.distributed as dist

            dist.destroy_process_group()


@functools.lru_cache(maxsize=1)
def control_group() -> Any:
    """A gloo group for the measurement loop's agreement (CPU tensors, whatever the backend)."""
    import torch.distributed as dist

    if dist.get_backend() == "gloo":
        return dist.group.WORLD
    return dist.new_group(backend="gloo")
