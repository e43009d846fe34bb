"""``@pytest.mark.distributed``: a test body run in ``world_size`` processes with an initialised
``torch.distributed`` process group.

The pytest process that collected the test (the *launcher*: a plain run or an xdist worker) does
not run the body. It starts ``world_size`` rank processes with ``torch.multiprocessing``
(``start_processes``, spawn); each rank initialises the process group (a ``FileStore`` in a fresh
private folder: no port to collide), then runs the one test item through ``pytest.main`` in
itself, so every fixture (``cuda_device``, ``cuda_timer``, ``memory_guard``, ``@no_leak``) works
per rank with no special code. Each rank writes its reports (outcome, traceback text, captured
output, the cudaperf payload) to a JSON file; the launcher merges them into the test's one outcome
(:func:`merge`). A rank that does not finish in time has its Python stack dumped (faulthandler on
SIGUSR1) and its whole process group killed.

Measurements in a rank go through :class:`RankBackend`: every rank times the same number of calls
per sample, batches start at a barrier, and each aligned sample is the *slowest rank's* (an
elementwise MAX all-reduce), with the loop's clock agreed the same way, so every rank takes the
same stop decisions (a collective inside the timed code never waits for a rank that stopped).
"""

from __future__ import annotations

import contextlib
import dataclasses
import faulthandler
import functools
import json
import math
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_cudaperf.keys import SeriesKey
from pytest_cudaperf.locks import lock_key
from pytest_cudaperf.rank_env import (
    BACKEND_ENV,
    DIR_ENV,
    GPU_ENV,
    LOCK_ENV,
    RANK_ENV,
    WORLD_ENV,
    RankEnv,
    in_rank,
)
from pytest_cudaperf.run.child import item_args, private_paths, settings_env

if TYPE_CHECKING:
    import pytest
    import torch

    from pytest_cudaperf.devices.probe import Probe
    from pytest_cudaperf.locks import LockRegistry
    from pytest_cudaperf.markers import DistributedOptions, Marks
    from pytest_cudaperf.measure.timing import Measurement, Sampled
    from pytest_cudaperf.report.model import FailureKind, JudgedRecord, LeakOutcome, TestOutcome
    from pytest_cudaperf.run.context import ItemState, RunContext

#: how long the other ranks may still run after one rank failed, before they are stopped
FAILURE_GRACE_S = 10.0
#: how long a rank has to write its stack after SIGUSR1
STACK_WAIT_S = 2.0

#: bus bandwidth factor per collective (nccl-tests PERFORMANCE.md), n = world size
BUS_FACTORS: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
}


# --- pure parts ------------------------------------------------------------------------------


def pg_timeout(timeout: float) -> float:
    """The process group's timeout: below the test's, so a rank stuck in a collective raises
    (with its traceback) before the launcher has to kill it."""
    return max(1.0, timeout - max(5.0, 0.2 * timeout))


def bus_bandwidth(op: str, size_bytes: int, time_ms: float, world_size: int) -> tuple[float, float]:
    """(algorithm bandwidth, bus bandwidth) in GB/s as nccl-tests defines them: algbw = S / t
    with S the operation's full size (all-gather: the gathered output, reduce-scatter: the
    input), busbw = algbw x 2(n-1)/n for all-reduce, x (n-1)/n for all-gather and
    reduce-scatter."""
    if op not in BUS_FACTORS:
        raise ValueError(f"collective must be one of {', '.join(BUS_FACTORS)}, got {op!r}")
    if time_ms <= 0 or world_size < 1:
        raise ValueError("time and world size must be positive")
    algbw = size_bytes / (time_ms / 1e3) / 1e9
    return algbw, algbw * BUS_FACTORS[op](world_size)


def collective_size(op: str, tensor_bytes: int, world_size: int) -> int:
    """nccl-tests' S for a per-rank tensor: all-gather gathers ``world_size`` of them; the
    all-reduce and reduce-scatter input is the tensor itself."""
    return tensor_bytes * world_size if op == "all_gather" else tensor_bytes


def gpus_for(worker: int, world_size: int, visible: int) -> list[int]:
    """The GPUs of one distributed test: consecutive, starting where xdist worker ``worker``
    starts (distinct whenever ``world_size <= visible``)."""
    return [(worker * world_size + r) % visible for r in range(world_size)]


def plan(
    opts: DistributedOptions, settings_device: str, probe: Probe
) -> tuple[str, bool, str | None]:
    """(backend, use CUDA, skip reason or None) for a distributed test here."""
    use_cuda = settings_device != "cpu" and probe.available
    backend = opts.backend or ("nccl" if use_cuda else "gloo")
    need = opts.world_size
    if backend == "nccl" and not probe.available:
        return backend, False, f"needs {need} GPUs for backend nccl: {probe.unavailable_reason()}"
    if settings_device == "cuda" and not probe.available:
        reason = probe.unavailable_reason()
        return backend, False, f"--cudaperf-device=cuda but no GPU: {reason}"
    if use_cuda and len(probe.gpus) < need:
        return backend, True, f"needs {need} GPUs (world_size={need}), {len(probe.gpus)} visible"
    return backend, use_cuda, None


@dataclass
class RankOutcome:
    """What one rank left behind: its reports by phase, or why it has none."""

    rank: int
    phases: dict[str, dict[str, Any]] = field(default_factory=dict)
    error: str | None = None  # an exception outside the test (process group setup, collection)
    exitcode: int | None = None
    stack: str | None = None  # dumped at the timeout
    killed: str | None = None  # why the launcher stopped it
    log_tail: str = ""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RankOutcome:
        return cls(
            rank=int(data["rank"]), phases=dict(data.get("phases", {})), error=data.get("error")
        )

    @property
    def failed(self) -> bool:
        if self.error or self.killed:
            return True
        if not self.phases:
            return True
        return any(p.get("outcome") == "failed" for p in self.phases.values())

    @property
    def body_failed(self) -> bool:
        """Failed for a reason other than a cudaperf check (leak, regression, budget)."""
        if self.error or self.killed or not self.phases:
            return True
        return any(
            p.get("outcome") == "failed" and not p.get("cudaperf_failure")
            for p in self.phases.values()
        )


@dataclass
class Merged:
    """The test's one outcome."""

    outcome: str  # passed, failed, skipped
    message: str = ""
    payload: TestOutcome | None = None
    sections: list[tuple[str, str]] = field(default_factory=list)


def format_stack(text: str, limit: int = 40) -> str:
    """The dumping thread's stack from faulthandler output, trimmed to the test's own frames:
    faulthandler writes the most recent call first, and the frames below the test function
    (pytest, pluggy, this launcher) say nothing the user needs."""
    blocks: list[list[str]] = []
    for line in text.splitlines():
        if line.startswith(("Thread 0x", "Current thread 0x", "Stack (most recent")):
            blocks.append([line])
        elif blocks and line.strip():
            blocks[-1].append(line)
    if not blocks:
        return text.strip()
    current = next((b for b in blocks if b[0].startswith("Current thread")), blocks[-1])
    kept = [current[0]]
    for line in current[1:]:
        if "_pytest" in line or "pluggy" in line or "pytest_cudaperf" in line:
            break
        kept.append(line)
    if len(kept) > limit + 1:
        kept = [*kept[: limit + 1], f"  ... {len(kept) - limit - 1} more frames"]
    return "\n".join(kept)


def _indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line if line else line for line in text.splitlines())


def _rank_failure_text(outcome: RankOutcome) -> str:
    if outcome.killed:
        text = outcome.killed
        if outcome.stack:
            text += f"\nits Python stack when stopped:\n{_indent(outcome.stack)}"
        elif outcome.log_tail:
            text += f"\nits output ends:\n{_indent(outcome.log_tail)}"
        return text
    if outcome.error:
        return f"failed outside the test:\n{_indent(outcome.error.rstrip())}"
    if not outcome.phases:
        text = f"left no result (exit code {outcome.exitcode})"
        if outcome.log_tail:
            text += f"; its output ends:\n{_indent(outcome.log_tail)}"
        return text
    parts = []
    for when in ("setup", "call", "teardown"):
        phase = outcome.phases.get(when)
        if phase and phase.get("outcome") == "failed":
            parts.append(f"failed in {when}:\n{_indent(str(phase.get('longrepr', '')).rstrip())}")
    return "\n".join(parts)


def _ranks_text(ranks: Sequence[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))


def merge_payloads(payloads: Mapping[int, TestOutcome | None]) -> TestOutcome | None:
    """One outcome from the ranks': per series (key, series) the slowest rank's record (the
    largest recording median), its measurement naming that ``rank`` and every rank's value in
    ``ranks``; failures and details prefixed with the ranks they came from (identical lines of
    several ranks said once); the leak of a rank that leaked (its rank in the failure line)."""
    from pytest_cudaperf.report.model import Failure, TestOutcome

    present = {r: p for r, p in sorted(payloads.items()) if p}
    if not present:
        return None
    slowest: dict[tuple[SeriesKey, str], tuple[int, JudgedRecord]] = {}
    values: dict[tuple[SeriesKey, str], dict[str, float]] = {}
    for rank, outcome in present.items():
        for judged in outcome.records:
            ident = (judged.key, judged.series)
            values.setdefault(ident, {})[str(rank)] = judged.value
            if ident not in slowest or judged.value > slowest[ident][1].value:
                slowest[ident] = (rank, judged)
    records = tuple(
        dataclasses.replace(judged, rank=rank, ranks=values[ident])
        for ident, (rank, judged) in slowest.items()
    )
    failures: dict[tuple[FailureKind, str], list[int]] = {}
    details: dict[str, list[int]] = {}
    leak: LeakOutcome | None = None
    for rank, outcome in present.items():
        for failure in outcome.failures:
            failures.setdefault((failure.kind, failure.message), []).append(rank)
        for line in outcome.details:
            details.setdefault(line, []).append(rank)
        if outcome.leak is not None and (leak is None or (outcome.leak.leaks and not leak.leaks)):
            leak = outcome.leak
    first = next(iter(present.values()))
    return TestOutcome(
        nodeid=first.nodeid,
        records=records,
        failures=tuple(
            Failure(kind, f"{_ranks_text(r)}: {line}") for (kind, line), r in failures.items()
        ),
        details=tuple(f"{_ranks_text(r)}: {line}" for line, r in details.items()),
        leak=leak,
        comparisons=first.comparisons,
        body_passed=all(p.body_passed for p in present.values()),
        location=first.location,
    )


def _payload_of(phase: Mapping[str, Any] | None) -> TestOutcome | None:
    from pytest_cudaperf.report.model import TestOutcome

    data = (phase or {}).get("cudaperf")
    return TestOutcome.from_json(data) if data else None


def merge(outcomes: Sequence[RankOutcome], timeout: float) -> Merged:
    """The test's one outcome from every rank's: failed when any rank failed (naming it, with
    its traceback) or did not finish (with its stack); skipped when every rank skipped."""
    world = len(outcomes)
    sections = [  # a phase's report holds the output of the phases before it: the last one
        (f"{name} (rank {o.rank})", text)
        for o in outcomes
        for phase in list(o.phases.values())[-1:]
        for name, text in phase.get("sections", [])
    ]
    payload = merge_payloads({o.rank: _payload_of(o.phases.get("call")) for o in outcomes})
    body_failed = [o for o in outcomes if o.body_failed]
    if body_failed:
        hung = [o.rank for o in outcomes if o.stack is not None and o.killed]
        head = f"distributed test failed on {_ranks_text([o.rank for o in body_failed])} of {world}"
        if hung and any("timeout" in (o.killed or "") for o in outcomes):
            head = (
                f"distributed test timed out after {timeout:g} s on {_ranks_text(hung)} of {world}"
            )
        lines = [head]
        for o in body_failed:
            lines.append(f"--- rank {o.rank}: {_rank_failure_text(o)}")
        return Merged("failed", "\n".join(lines), payload, sections)
    skipped = [o for o in outcomes if any(p.get("outcome") == "skipped" for p in o.phases.values())]
    if skipped and len(skipped) == world:
        reasons = {
            str(p.get("longrepr", "")).removeprefix("Skipped: ")
            for o in skipped
            for p in o.phases.values()
            if p.get("outcome") == "skipped"
        }
        return Merged("skipped", "; ".join(sorted(reasons)), None, sections)
    return Merged("passed", "", payload, sections)


# --- the launcher ----------------------------------------------------------------------------


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
        "env": env,
        "world_size": world_size,
        "backend": backend,
        "gpus": gpus,
        "timeout": timeout,
        "workdir": str(workdir),
        "parent": os.getpid(),
    }
    context = mp.start_processes(  # type: ignore[attr-defined,no-untyped-call]
        rank_main, args=(spec,), nprocs=world_size, join=False, start_method="spawn"
    )
    processes = context.processes
    results = [workdir / f"rank{r}.json" for r in range(world_size)]
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
                    outcomes[r] = RankOutcome.from_dict(json.loads(path.read_text()))
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
                RankOutcome.from_dict(json.loads(results[r].read_text())),
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


# --- the rank process ------------------------------------------------------------------------


class _Collector:
    """Records the item's reports in a rank (plain builtins, written as JSON)."""

    def __init__(self) -> None:
        self.phases: dict[str, dict[str, Any]] = {}
        self.errors: list[str] = []

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.errors.append(f"collection failed: {report.longreprtext}")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        longrepr: str = report.longreprtext
        if report.skipped and isinstance(report.longrepr, tuple):
            longrepr = str(report.longrepr[2])
        self.phases[report.when] = {
            "outcome": report.outcome,
            "longrepr": longrepr,
            "sections": [list(s) for s in report.sections],
            "cudaperf": getattr(report, "cudaperf", None),
            "cudaperf_failure": getattr(report, "cudaperf_failure", None),
        }


def _watch_parent(parent: int) -> None:
    """A rank whose launcher died ends itself: no orphan."""
    while True:
        if os.getppid() != parent:
            os._exit(3)
        time.sleep(0.5)


def rank_args(args: Sequence[str], rank: int) -> list[str]:
    """The item's pytest arguments (:func:`~pytest_cudaperf.child.item_args`) for one rank: its own
    base temporary directory (``<basetemp>-rank<r>``) and JUnit file. With one folder for all
    ranks, pytest clears it as each rank first uses it, and every rank's ``tmp_path`` was the same
    directory."""
    found = list(args)
    at = found.index("--basetemp")
    own = private_paths(Path(f"{found[at + 1]}-rank{rank}"))
    found[at : at + len(own)] = own
    return found


def rank_main(index: int, spec: dict[str, Any]) -> None:
    """The function each spawned rank runs: isolate, init the process group, run the item."""
    os.setpgrp()  # the launcher kills the rank's whole tree through its process group
    workdir = Path(spec["workdir"])
    rank, world, backend = index, int(spec["world_size"]), str(spec["backend"])
    log = open(workdir / f"rank{rank}.log", "w")  # noqa: SIM115 - lives as long as the process
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    stack = open(workdir / f"rank{rank}.stack", "w")  # noqa: SIM115
    faulthandler.register(signal.SIGUSR1, file=stack, all_threads=True)
    faulthandler.dump_traceback_later(float(spec["timeout"]) + 30, exit=True, file=stack)
    threading.Thread(target=_watch_parent, args=(int(spec["parent"]),), daemon=True).start()
    (workdir / f"rank{rank}.pid").write_text(str(os.getpid()))
    gpus: list[int] | None = spec["gpus"]
    os.environ.update(spec["env"])
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
    result: dict[str, Any] = {"rank": rank, "phases": {}, "error": None}
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
        collector = _Collector()
        code = pytest.main(rank_args(spec["args"], rank), plugins=[collector])
        result["phases"] = collector.phases
        if not collector.phases:
            why = "; ".join(collector.errors) or f"pytest exit code {int(code)}"
            result["error"] = f"the rank ran no test for {spec['nodeid']}: {why}"
    except BaseException:  # noqa: BLE001 - everything is reported to the launcher
        result["error"] = traceback.format_exc()
    tmp = workdir / f"rank{rank}.json.tmp"
    tmp.write_text(json.dumps(result, default=str))
    tmp.replace(workdir / f"rank{rank}.json")
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


# --- measurement in a rank -------------------------------------------------------------------


def _all_max(values: list[float]) -> list[float]:
    import torch
    import torch.distributed as dist

    tensor = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=control_group())
    return [float(v) for v in tensor.tolist()]


class RankSampler:
    """Samples aligned across ranks: a barrier starts each batch, every rank times the same
    number of calls per sample, and each sample returned is the slowest rank's. ``clock`` is
    the agreed (max) elapsed time, so every rank's measurement loop stops at the same batch."""

    def __init__(self, fn: Callable[[], object], cuda: bool, per_batch: int = 5) -> None:
        self.fn = fn
        self.cuda = cuda
        self.per_batch = per_batch
        self.group = 0
        self.local: list[float] = []
        self._start = time.perf_counter()
        self._agreed = 0.0

    def clock(self) -> float:
        return self._agreed

    def _timed(self, calls: int) -> float:
        fn = self.fn
        if self.cuda:
            import torch

            torch.cuda.synchronize()
            cuda: Any = torch.cuda
            start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
            start.record()
            for _ in range(calls):
                fn()
            end.record()
            end.synchronize()
            return float(start.elapsed_time(end)) / calls
        began = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        return (time.perf_counter_ns() - began) / 1e6 / calls

    def batch(self) -> list[float]:
        import torch.distributed as dist

        dist.barrier(group=control_group())
        if not self.group:
            # calibrate on the fastest of three calls, not the first: calibrated on its first
            # call, a 256 MiB all-reduce on two H200s took 180 samples in a 2 s budget (short
            # ones) and read 0.983 ms against 0.891 ms back to back; on the fastest of three, 15
            # samples read 0.897 against 0.898 ms (benchmarks/RESULTS.md, collective bandwidth)
            once = min(self._timed(1) for _ in range(3))
            group = max(1, min(10_000, math.ceil(0.02 / max(once / 1e3, 1e-6))))
            self.group = int(_all_max([float(group)])[0])
        local = [self._timed(self.group) for _ in range(self.per_batch)]
        self.local.extend(local)
        agreed = _all_max([*local, time.perf_counter() - self._start])
        self._agreed = agreed[-1]
        return agreed[:-1]


class RankBackend:
    """The measurement backend of a rank (see :class:`RankSampler`): ``metric`` ``dist``,
    timed with CUDA events on a GPU and the host clock on the CPU, hot cache."""

    def __init__(self, device: str) -> None:
        self.device = device

    def sampler(self, fn: Callable[[], object], graph: bool) -> RankSampler:
        return RankSampler(fn, self.device.startswith("cuda"))

    def recover(self, sampler: Any) -> None:  # pragma: no cover - no stream blocker here
        raise AssertionError("the distributed backend never blocks")

    def finish(self, sampler: Any, fn: Callable[[], object], sampled: Sampled) -> Measurement:
        from pytest_cudaperf.measure.timing import Measurement

        return Measurement.from_samples(
            sampled.samples,
            metric="dist",
            device=self.device,
            warnings=tuple(sampled.warnings),
            cost_s=sampled.cost_s,
            name=sampled.name,
            round_medians_ms=sampled.round_medians_ms,
        )

    def reset(self) -> None:
        pass

    def close(self) -> None:
        pass


def rank_backend(device: Any) -> RankBackend | None:
    """The backend for measurements in a rank process; None outside one."""
    if not in_rank(os.environ):
        return None
    return RankBackend(str(device))


def rank_body(body: Callable[[], object], runs: int) -> Callable[[], object]:
    """The body for a leak check's repeat protocol in a rank: its first ``runs`` calls run it;
    later calls (allocation-site tracing, which re-runs the body on the leaking rank only) do
    nothing there, since the body's collectives would wait for ranks that are done."""
    if not in_rank(os.environ):
        return body
    count = 0

    def run() -> object:
        nonlocal count
        count += 1
        return body() if count <= runs else None

    return run


# --- the dist_rank fixture -------------------------------------------------------------------


@dataclass(frozen=True)
class CollectiveResult:
    op: str
    size_bytes: int
    world_size: int
    time_ms: float
    algbw_gbps: float
    busbw_gbps: float

    def describe(self) -> str:
        return (
            f"{self.op} of {self.size_bytes / 2**20:.1f} MiB on {self.world_size} ranks: "
            f"{self.time_ms:.3f} ms, algbw {self.algbw_gbps:.2f} GB/s, "
            f"busbw {self.busbw_gbps:.2f} GB/s"
        )


class DistRank:
    """The ``dist_rank`` fixture: ``rank``, ``world_size``, ``local_rank``, ``device``,
    ``backend``, ``is_main``; ``barrier()``; ``bench_collective(op, tensor)``."""

    def __init__(self, env: RankEnv, device: torch.device, timer: Callable[[], Any]) -> None:
        self.rank = env.rank
        self.world_size = env.world_size
        self.local_rank = env.rank
        self.backend = env.backend
        self.device = device
        self._timer = timer
        self._workdir = env.workdir

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        import torch.distributed as dist

        dist.barrier()

    def __repr__(self) -> str:
        return f"DistRank(rank={self.rank}, world_size={self.world_size}, device={self.device})"

    def bench_collective(
        self, op: str, tensor: Any, *, name: str | None = None, **timer_kwargs: Any
    ) -> CollectiveResult:
        """Time ``op`` (all_reduce, all_gather, reduce_scatter) on ``tensor`` (this rank's
        input; for reduce_scatter the full input) through ``cuda_timer``, recorded as
        ``<op>/ws<N>`` (a time, lower is better; baselines per device class and world size),
        and return the algorithm and bus bandwidth of the slowest rank's median."""
        import torch
        import torch.distributed as dist

        n = self.world_size
        if op == "all_reduce":

            def run() -> None:
                dist.all_reduce(tensor)
        elif op == "all_gather":
            out = torch.empty((n * tensor.numel(),), dtype=tensor.dtype, device=tensor.device)

            def run() -> None:
                dist.all_gather_into_tensor(out, tensor.reshape(-1))
        elif op == "reduce_scatter":
            if tensor.numel() % n:
                raise ValueError(f"reduce_scatter: {tensor.numel()} elements do not split in {n}")
            out = torch.empty((tensor.numel() // n,), dtype=tensor.dtype, device=tensor.device)

            def run() -> None:
                dist.reduce_scatter_tensor(out, tensor.reshape(-1))
        else:
            raise ValueError(
                f"bench_collective: op must be one of {', '.join(BUS_FACTORS)}, got {op!r}"
            )
        measurement = self._timer()(run, name=name or f"{op}/ws{n}", **timer_kwargs)
        size = collective_size(op, tensor.numel() * tensor.element_size(), n)
        algbw, busbw = bus_bandwidth(op, size, measurement.median_ms, n)
        result = CollectiveResult(op, size, n, measurement.median_ms, algbw, busbw)
        if self._workdir:
            with open(Path(self._workdir) / f"collectives-rank{self.rank}.jsonl", "a") as f:
                f.write(
                    json.dumps({"name": name or f"{op}/ws{n}", **dataclasses.asdict(result)}) + "\n"
                )
        return result


def read_collectives(workdir: Path) -> list[dict[str, Any]]:
    path = workdir / "collectives-rank0.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# --- the launcher's part of a test -----------------------------------------------------------


def is_launcher(marks: Marks) -> bool:
    """Does this process launch the ranks of the test (rather than being one)?"""
    return marks.distributed is not None and not in_rank(os.environ)


def launcher_skip(marks: Marks, run: RunContext) -> str | None:
    """Why the launcher of a distributed test skips it here (too few GPUs, no GPU for nccl);
    None to run it, or when this process is no launcher."""
    if marks.distributed is None or not is_launcher(marks):
        return None
    return plan(marks.distributed, run.settings.device, run.probe)[2]


def require_gpus_error(run: RunContext, tests: Sequence[tuple[str, Marks]]) -> str | None:
    """Under ``--cudaperf-require-gpu``, a distributed test among ``tests`` (node id, parsed
    marks) that this machine has too few GPUs for is a usage error: its one line, else None."""
    if not run.settings.require_gpu or run.is_worker:
        return None
    for nodeid, marks in tests:
        if marks.distributed is not None:
            reason = plan(marks.distributed, "cuda", run.probe)[2]
            if reason:
                return f"--cudaperf-require-gpu: {nodeid} {reason}"
    return None


def skips_fixture(scope: str, marks: Marks) -> bool:
    """The launcher of a distributed test does not set up its function-scoped fixtures: they
    run in each rank (a fixture building a DDP model needs the process group)."""
    return scope == "function" and is_launcher(marks)


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
        args = item_args(
            item.nodeid, item.path, config.rootpath, config.inipath, workdir / "tmp", tbstyle
        )
        env = settings_env(run.settings, run.baseline_dir)
        with _exclusive(run.locks, keys):
            outcomes = launch(
                item.nodeid, args, env, opts.world_size, backend, gpus, opts.timeout, workdir
            )
        merged = merge(outcomes, opts.timeout)
        collectives = read_collectives(workdir)
        if merged.payload is not None and collectives:
            merged = dataclasses.replace(
                merged, payload=attach_bandwidth(merged.payload, collectives)
            )
        return merged
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def attach_bandwidth(outcome: TestOutcome, collectives: list[dict[str, Any]]) -> TestOutcome:
    """Algorithm and bus bandwidth (of the merged, slowest-rank time) in the measurement of
    each collective's time record."""
    by_name = {c["name"]: c for c in collectives}
    records = []
    for record in outcome.records:
        judged = record
        entry = by_name.get(judged.key.name)
        if entry and judged.is_time:
            algbw, busbw = bus_bandwidth(
                entry["op"], entry["size_bytes"], judged.value, entry["world_size"]
            )
            from pytest_cudaperf.report.model import Bandwidth

            bandwidth = Bandwidth(entry["op"], int(entry["size_bytes"]), algbw, busbw)
            judged = dataclasses.replace(judged, bandwidth=bandwidth)
        records.append(judged)
    return dataclasses.replace(outcome, records=tuple(records))


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
