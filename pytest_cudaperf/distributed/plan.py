"""Pure decisions about a ``@distributed`` test in this process: is it the launcher, which
backend and GPUs, why it is skipped."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pytest_cudaperf.markers import DistributedOptions, Marks
from pytest_cudaperf.rank_env import in_rank

if TYPE_CHECKING:
    from pytest_cudaperf.devices.probe import Probe
    from pytest_cudaperf.run.context import RunContext


def gpus_for(worker: int, world_size: int, visible: int) -> list[int]:
    """The GPUs of one distributed test: consecutive, starting where xdist worker ``worker``
    starts (distinct whenever ``world_size <= visible``)."""
    return [(worker * world_size + r) % visible for r in range(world_size)]


#: CPU ranks (processes) a host launches at most per core, and at least in all: a test that
#: asks for more (a typo such as ``world_size=10**6``) would start that many processes
CPU_RANKS_PER_CORE = 4
CPU_RANKS_MIN = 8


def cpu_ranks(cores: int | None) -> int:
    """The most CPU ranks a host of ``cores`` cores (None: unknown) launches."""
    return max(CPU_RANKS_MIN, CPU_RANKS_PER_CORE * (cores or 1))


def plan(
    opts: DistributedOptions, settings_device: str, probe: Probe, cores: int | None = None
) -> tuple[str, bool, str | None]:
    """(backend, use CUDA, skip reason or None) for a distributed test here; ``cores``: this
    host's (default: ``os.cpu_count()``), which bounds its CPU ranks (:func:`cpu_ranks`)."""
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
    cores = os.cpu_count() if cores is None else cores
    if not use_cuda and need > cpu_ranks(cores):
        return (
            backend,
            False,
            f"needs {need} CPU processes (world_size={need}); this host launches at most "
            f"{cpu_ranks(cores)} ({CPU_RANKS_PER_CORE} a core, {cores} cores)",
        )
    return backend, use_cuda, None


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
