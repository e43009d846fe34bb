"""The launcher's side: a ``@distributed`` test's ranks started with
``torch.multiprocessing`` (:func:`start_method`), each GPU the test uses held exclusively, waited
for with a timeout (a rank still running has its Python stack dumped, then its process group
killed), and their merged outcome given to the test."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_cudaperf.distributed.merge import (
    Merged,
    RankOutcome,
    attach_bandwidth,
    format_stack,
    merge,
)
from pytest_cudaperf.distributed.plan import gpus_for, plan
from pytest_cudaperf.distributed.rank import rank_main, result_path
from pytest_cudaperf.distributed.result import RankResult
from pytest_cudaperf.locks import lock_key
from pytest_cudaperf.run.child import item_args, settings_env

if TYPE_CHECKING:
    import pytest

    from pytest_cudaperf.locks import LockRegistry
    from pytest_cudaperf.markers import DistributedOptions
    from pytest_cudaperf.run.context import ItemState, RunContext

#: how long the other ranks may still run after one rank failed, before they are stopped
FAILURE_GRACE_S = 10.0
#: how long a rank has to write its stack after SIGUSR1
STACK_WAIT_S = 2.0
#: what the forkserver of CPU ranks imports once, before it forks the first of them (the main
#: module, as multiprocessing's own default, then torch)
FORKSERVER_PRELOAD = ("__main__", "torch", "torch.distributed")


def start_method(gpus: list[int] | None) -> str:
    """How a test's ranks start: ``spawn`` for ranks on GPUs; ranks on the CPU fork from a
    forkserver that has imported torch once for the session (:data:`FORKSERVER_PRELOAD`, where
    this process has not started its forkserver yet), so that a rank does not import torch
    again: seconds a rank on a small CPU. A forked rank takes the launcher's environment,
    working directory and ``sys.path`` of the moment from its spec (:func:`rank_main`), as a
    spawned one has them (why: docs/decisions.md, "Why do CPU ranks fork from a forkserver?")."""
    if gpus:
        return "spawn"
    import multiprocessing

    multiprocessing.get_context("forkserver").set_forkserver_preload(list(FORKSERVER_PRELOAD))
    return "forkserver"


def _kill_tree(pid: int) -> None:
    """Kill a rank and every process it started (the rank leads its own process group)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)  # the group outlives its leader while members remain
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)  # a rank killed before it made its own group


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _read(path: Path, rank: int) -> RankOutcome:
    """A rank's result; one whose file cannot be read is the rank's error."""
    try:
        return RankOutcome.of(RankResult.read(path))
    except (OSError, ValueError) as exc:
        return RankOutcome(rank, error=f"its result {path} is unreadable: {exc}")


def launch(  # noqa: PLR0912, PLR0913 - one wait loop over the ranks, its spec spelled out
    nodeid: str,
    args: list[str],
    env: dict[str, str],
    world_size: int,
    backend: str,
    gpus: list[int] | None,
    timeout: float,
    workdir: Path,
) -> list[RankOutcome]:
    """Start the ranks with ``torch.multiprocessing.start_processes`` and wait for them; a rank
    still running at the timeout (or ``FAILURE_GRACE_S`` after another rank failed) has its
    stack dumped and its process group killed. No rank process outlives this call."""
    import torch.multiprocessing as mp

    spec = {
        "nodeid": nodeid,
        "args": args,
        "world_size": world_size,
        "backend": backend,
        "gpus": gpus,
        "timeout": timeout,
        "workdir": str(workdir),
        "parent": os.getpid(),
        # a forked rank's process state is the forkserver's: it takes the launcher's from here,
        # with the run's settings (``env``) on top
        "environ": {**os.environ, **env},
        "cwd": os.getcwd(),
        "sys_path": list(sys.path),
    }
    context = mp.start_processes(  # type: ignore[attr-defined,no-untyped-call]
        rank_main, args=(spec,), nprocs=world_size, join=False, start_method=start_method(gpus)
    )
    processes = context.processes
    results = [result_path(workdir, r) for r in range(world_size)]
    outcomes = [RankOutcome(rank=r) for r in range(world_size)]
    deadline = time.monotonic() + timeout
    failed_at: float | None = None
    stop_reason = ""
    try:
        while True:
            # a rank is done once its result is written (it may still be tearing down its
            # process group: it is killed at the end, without a stack) or it has exited
            done = [
                path.exists() or not p.is_alive()
                for path, p in zip(results, processes, strict=True)
            ]
            for r, path in enumerate(results):
                if not outcomes[r].phases and outcomes[r].error is None and path.exists():
                    outcomes[r] = _read(path, r)
                if done[r] and failed_at is None and (outcomes[r].failed or not path.exists()):
                    failed_at = time.monotonic()
            if all(done):
                break
            now = time.monotonic()
            if now >= deadline:
                stop_reason = f"did not finish within the timeout of {timeout:g} s"
                break
            if failed_at is not None and now >= failed_at + FAILURE_GRACE_S:
                first = next(o.rank for r, o in enumerate(outcomes) if done[r] and o.failed)
                stop_reason = (
                    f"still running {FAILURE_GRACE_S:g} s after rank {first} failed "
                    "(stopped; probably waiting in a collective for it)"
                )
                break
            time.sleep(0.1)
        running = [r for r, p in enumerate(processes) if p.is_alive() and not results[r].exists()]
        for r in running:
            with contextlib.suppress(ProcessLookupError):
                os.kill(processes[r].pid or 0, signal.SIGUSR1)
        _wait_for_stacks(workdir, running)
        for r in running:
            outcomes[r].killed = stop_reason
            stack = _tail(workdir / f"rank{r}.stack", lines=10_000)
            outcomes[r].stack = format_stack(stack) if stack.strip() else None
    finally:
        for p in processes:
            if p.pid is not None:
                _kill_tree(p.pid)
        for p in processes:
            p.join(5)
    for r, p in enumerate(processes):
        outcomes[r].exitcode = p.exitcode
        if not outcomes[r].phases and outcomes[r].error is None and results[r].exists():
            outcomes[r] = dataclasses.replace(
                _read(results[r], r),
                killed=outcomes[r].killed,
                stack=outcomes[r].stack,
                exitcode=p.exitcode,
            )
        outcomes[r].log_tail = _tail(workdir / f"rank{r}.log")
    return outcomes


def _wait_for_stacks(workdir: Path, ranks: list[int]) -> None:
    end = time.monotonic() + STACK_WAIT_S
    while time.monotonic() < end:
        paths = [workdir / f"rank{r}.stack" for r in ranks]
        if all(p.exists() and p.stat().st_size > 0 for p in paths):
            time.sleep(0.2)  # let the dump finish
            return
        time.sleep(0.05)


@contextlib.contextmanager
def _exclusive(locks: LockRegistry, keys: list[str]) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        for key in sorted(keys):  # one order everywhere: no lock-order deadlock
            stack.enter_context(locks.get(key).exclusive())
        yield


def run_test(item: pytest.Item, opts: DistributedOptions, run: RunContext) -> Merged:
    """Launch the test's ranks (holding every GPU it uses exclusively) and merge their outcomes."""
    probe = run.probe
    backend, use_cuda, _ = plan(opts, run.settings.device, probe)
    gpus = gpus_for(run.worker, opts.world_size, len(probe.gpus)) if use_cuda else None
    keys = [lock_key(f"cuda:{g}", probe.gpus[g].uuid) for g in gpus or []]
    workdir = Path(tempfile.mkdtemp(prefix="cudaperf-dist-"))
    try:
        config = item.config
        tbstyle = str(config.getoption("tbstyle", "auto"))
        where = (config.rootpath, config.inipath)
        args = item_args(item.nodeid, item.path, where, workdir / "tmp", tbstyle)
        env = settings_env(run.settings, run.baseline_dir)
        with _exclusive(run.locks, keys):
            outcomes = launch(
                item.nodeid, args, env, opts.world_size, backend, gpus, opts.timeout, workdir
            )
        merged = merge(outcomes, opts.timeout)
        collectives = outcomes[0].collectives  # aligned samples: every rank times the same
        if merged.payload is not None and collectives:
            merged = dataclasses.replace(
                merged, payload=attach_bandwidth(merged.payload, collectives)
            )
        return merged
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def apply(item: pytest.Item, merged: Merged, state: ItemState) -> None:
    """Give the launcher's test the ranks' outcome: their captured output, the merged outcome
    (the plugin's report path then fails a leak or regression as for any test), and a failure
    or skip."""
    import pytest

    for name, text in merged.sections:
        words = name.split()
        key = " ".join(w for w in words[1:] if w not in ("setup", "call", "teardown"))
        item.add_report_section("call", key, text)
    outcome = merged.payload
    if outcome is not None:
        state.records.extend(outcome.records)
        state.failures.extend(outcome.failures)
        state.details.extend(outcome.details)
        state.comparisons.extend(outcome.comparisons)
        state.leak = outcome.leak or state.leak
    if merged.outcome == "skipped":
        pytest.skip(merged.message)
    if merged.outcome == "failed":
        pytest.fail(merged.message, pytrace=False)
