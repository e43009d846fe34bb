"""The run-wide context (settings, baseline store, device probe, CUDA fault state, locks) and
the per-test context that the fixtures and the re-run protocol share.

One :class:`RunContext` per process, built in ``pytest_configure``; one :class:`TestContext`
per test that uses the plugin, built by :mod:`pytest_cudaperf.plugin` on first use.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import sys
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_cudaperf.baselines import BaselineStore
from pytest_cudaperf.child import FRESH_ENV, FreshProcess, plugin_args, settings_env
from pytest_cudaperf.devices import (
    FaultState,
    Probe,
    gpu_skip_reason,
    is_sticky_cuda_error,
    worker_index,
)
from pytest_cudaperf.locks import LockRegistry
from pytest_cudaperf.outcome import ItemState
from pytest_cudaperf.rank_env import RankEnv
from pytest_cudaperf.settings import ConfigLike, Settings, resolve

if TYPE_CHECKING:
    from pytest_cudaperf.fixtures.device import DeviceContext
    from pytest_cudaperf.markers import GpuRequirement, LeakOptions, PerfOptions


# --- the one environment builder -------------------------------------------------------------


def environment(probe: Probe | None, device: object = None, *, run: bool = False) -> dict[str, Any]:
    """Where a value was measured. A record's (``device`` given): the date and the device's
    fingerprint (model, torch, CUDA, driver, NVML's power limit, clocks, ECC, MIG… — see
    :func:`pytest_cudaperf.devices.fingerprint`); a run's (``run=True``): torch, CUDA, driver,
    the GPUs, CPU and Python."""
    env: dict[str, Any] = {} if run else {"date": datetime.date.today().isoformat()}
    if probe is None:
        return env
    if run:
        env.update(
            torch=probe.torch_version,
            cuda=probe.cuda_version,
            driver=probe.driver,
            gpus=[f"{g.name} ({g.sm})" for g in probe.gpus],
            cpu=probe.cpu,
            python=".".join(map(str, sys.version_info[:3])),
        )
    else:
        from pytest_cudaperf.devices import fingerprint

        env.update(fingerprint(str(device or "cpu"), probe))
    return env


# --- run and test contexts -------------------------------------------------------------------


def _lock_folder(workerinput: Mapping[str, Any]) -> Path:
    uid = os.getuid() if hasattr(os, "getuid") else 0
    given = workerinput.get("cudaperf_lock_dir")
    return Path(given or os.path.join(tempfile.gettempdir(), f"pytest-cudaperf-{uid}"))


@dataclass
class RunContext:
    """What every test of this process shares."""

    settings: Settings
    store: BaselineStore
    locks: LockRegistry
    root: Path
    baseline_dir: Path
    output_dir: Path
    is_worker: bool = False
    worker: int = 0
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    faults: FaultState = field(default_factory=FaultState)
    #: this process is one rank of a ``@distributed`` test (None: it is not)
    rank: RankEnv | None = None
    #: re-measures a CPU regression in a fresh process (None: off, in a rank, in such a process)
    fresh: FreshProcess | None = None
    _probe: Probe | None = None

    @classmethod
    def create(  # noqa: PLR0913 - the parts of a pytest.Config, so that tests need none
        cls,
        root: Path,
        ini_name: str,
        options: ConfigLike,
        environ: Mapping[str, str],
        workerinput: Mapping[str, Any] | None,
        output_dir: Path,
        *,
        inifile: Path | None = None,
        invocation: Sequence[str] = (),
    ) -> RunContext:
        """Resolve the settings and load the store (SettingError, BaselineError on bad input)."""
        settings = resolve(options, environ, ini_name)
        baseline_dir = (root / settings.baseline_dir).resolve()
        given = workerinput or {}
        rank = RankEnv.read(environ)  # a rank of a @distributed test: a worker on its GPU
        worker = worker_index(given.get("workerid"))
        lock_folder = _lock_folder(given)
        if rank is not None:  # its own lock folder: the launcher holds the GPUs' locks
            lock_folder = _lock_folder({"cudaperf_lock_dir": rank.lock_dir})
            worker = worker if rank.gpu is None else rank.gpu
        fresh_locks = environ.get(FRESH_ENV)
        if fresh_locks:  # a fresh process: its parent holds the real locks and writes the reports
            lock_folder = Path(fresh_locks)
            settings = dataclasses.replace(settings, html=None)  # a --cudaperf-html in addopts
        fresh = None
        if settings.confirm_process == "auto" and rank is None and not fresh_locks:
            env = settings_env(settings, baseline_dir)
            fresh = FreshProcess(root, inifile, env, plugin_args(invocation))
        return cls(
            settings=settings,
            store=BaselineStore.load(baseline_dir),
            locks=LockRegistry(lock_folder),
            root=root,
            baseline_dir=baseline_dir,
            output_dir=output_dir,
            is_worker=workerinput is not None or rank is not None,
            worker=worker,
            run_id=given.get("cudaperf_run_id") or uuid.uuid4().hex[:12],
            rank=rank,
            fresh=fresh,
        )

    @property
    def probe(self) -> Probe:
        """The device probe, taken on first use (it imports torch)."""
        if self._probe is None:
            from pytest_cudaperf.devices import probe

            self._probe = probe()
        return self._probe

    def gpu_gate(self, req: GpuRequirement) -> tuple[str | None, str | None]:
        """For a ``@gpu`` test: (why to skip it, why to fail it), each None when not."""
        skip = gpu_skip_reason(req, self.probe, self.worker)
        return (skip, None) if skip else (None, self.faults.message())

    def note_error(self, nodeid: str, exc: BaseException) -> None:
        """A sticky CUDA error raised in a test body poisons this process's context."""
        if isinstance(exc, RuntimeError) and is_sticky_cuda_error(str(exc)):
            self.faults.record(nodeid, str(exc).strip().splitlines()[0])


@dataclass
class TestContext:
    """One test's view of the plugin: the run, what the test measured so far, its markers and
    the device it runs on (set by the ``cuda_device`` fixture)."""

    __test__ = False  # not a pytest test class

    run: RunContext
    state: ItemState
    marks: Mapping[str, Any] = field(default_factory=dict)
    device: DeviceContext | None = None

    @property
    def nodeid(self) -> str:
        return self.state.nodeid

    @property
    def settings(self) -> Settings:
        return self.run.settings

    @property
    def perf(self) -> PerfOptions | None:
        found: PerfOptions | None = self.marks.get("perf")
        return found

    @property
    def no_leak(self) -> LeakOptions | None:
        found: LeakOptions | None = self.marks.get("no_leak")
        return found

    @property
    def memory_device_type(self) -> str:
        """Which allocator this test's leak and peak checks read (``cuda`` or ``cpu``): see
        :func:`pytest_cudaperf.memory.backends.device_type`."""
        from pytest_cudaperf.memory.backends import device_type

        own = str(self.device.device) if self.device is not None else None
        return device_type(self.settings.device, own)

    @property
    def measuring(self) -> bool:
        """Does a measurement or guard called now record anything? (not when disabled, nor
        while the plugin re-runs the body)"""
        return not (self.run.settings.disable or self.state.replaying)
