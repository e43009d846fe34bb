"""The run-wide context (settings, baseline store, device probe, CUDA fault state, locks) and
the per-test context that the fixtures and the re-run protocol share, with what the test has
measured so far (:class:`ItemState`).

One :class:`RunContext` per process, built in ``pytest_configure``; one :class:`TestContext`
per test that uses the plugin, built by :mod:`pytest_cudaperf.plugin` on first use.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_cudaperf.devices.faults import FaultState, is_sticky_cuda_error
from pytest_cudaperf.devices.placement import DeviceContext, gpu_skip_reason, worker_index
from pytest_cudaperf.devices.probe import Probe
from pytest_cudaperf.keys import SeriesKey
from pytest_cudaperf.locks import Hold, LockRegistry
from pytest_cudaperf.markers import Marks
from pytest_cudaperf.measure.ceilings import MeasuredCeilings
from pytest_cudaperf.measure.energy import Resolution
from pytest_cudaperf.paths import unwritable
from pytest_cudaperf.rank_env import RankEnv
from pytest_cudaperf.report.model import (
    ComparisonOutcome,
    Failure,
    FailureKind,
    JudgedRecord,
    LeakOutcome,
    SweepOutcome,
    TestOutcome,
)
from pytest_cudaperf.run.child import FRESH_ENV, FreshProcess, passed_args, settings_env
from pytest_cudaperf.run.hoststate import Spell
from pytest_cudaperf.settings import ConfigLike, Settings, resolve
from pytest_cudaperf.store.baselines import BaselineStore

if TYPE_CHECKING:
    from pytest_cudaperf.markers import GpuRequirement, LeakOptions, PerfOptions
    from pytest_cudaperf.measure.measurement import Measurement


# --- run and test contexts -------------------------------------------------------------------


def _lock_folder(workerinput: Mapping[str, Any]) -> Path:
    uid = os.getuid() if hasattr(os, "getuid") else 0
    given = workerinput.get("cudaperf_lock_dir")
    return Path(given or os.path.join(tempfile.gettempdir(), f"pytest-cudaperf-{uid}"))


def other_outputs(xmlpath: str | None, environ: Mapping[str, str]) -> dict[str, Path]:
    """The files this run writes beside the plugin's own outputs: pytest's ``--junitxml`` (with
    the plugin's properties), the GitHub step summary (under GitHub Actions)."""
    found = {"--junitxml": Path(os.path.abspath(xmlpath))} if xmlpath else {}
    if environ.get("GITHUB_ACTIONS") == "true" and environ.get("GITHUB_STEP_SUMMARY"):
        found["GITHUB_STEP_SUMMARY"] = Path(environ["GITHUB_STEP_SUMMARY"])
    return found


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
    #: the suspects confirmed together after this process's test loop (None: each is confirmed
    #: inside its test's call)
    deferred: Deferred | None = None
    #: the ceilings measured in this process (a copy, a GEMM per compute class), per device class
    ceilings: MeasuredCeilings = field(default_factory=MeasuredCeilings)
    #: each GPU's energy counter resolution (or why it has none), probed once per process
    energy_resolutions: dict[str, Resolution | str] = field(default_factory=dict)
    #: the host's other state, and other processes on the CPU, where one outlasted a whole wait
    host_spell: Spell = field(default_factory=Spell)
    cpu_spell: Spell = field(default_factory=Spell)
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
        positional: Sequence[str] = (),
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
        if settings.confirm_process != "off" and rank is None and not fresh_locks:
            env = settings_env(settings, baseline_dir)
            fresh = FreshProcess(
                root, inifile, env, passed_args(invocation, positional), cwd=output_dir
            )
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

    def unwritable_outputs(self, others: Mapping[str, Path] | None = None) -> list[str]:
        """The run's output targets that cannot be written, one line each (option, path, why,
        what to do); checked by the process that writes them before any test runs. ``others``:
        files written beside this plugin's (``--junitxml``, which carries its properties, the
        GitHub step summary), by the option or variable that names them."""
        from pytest_cudaperf.history.backends import is_url, not_a_history, target_problem

        settings, found = self.settings, []
        url = settings.history if settings.history and is_url(settings.history) else None
        targets = [
            ("--cudaperf-json", settings.json),
            ("--cudaperf-html", settings.html),
            ("--cudaperf-history", None if url else settings.history),
        ]
        problem = target_problem(url) if url else None  # its scheme, the driver
        if problem:
            found.append(f"--cudaperf-history: {problem}")
        taken: dict[Path, str] = {}  # each output's file, by the first option that names it
        for option, given in targets:
            if not given:
                continue
            path = self.output_dir / given
            why = unwritable(path)
            if why:
                found.append(f"{option}: {path} {why}; point {option} at a writable file")
            elif clash := self._not_an_output(path, taken.get(path.resolve())):
                found.append(f"{option}: {path} {clash}")
            elif option == "--cudaperf-history" and (other := not_a_history(path)):
                found.append(f"{option}: {path} {other}; point {option} at a history or a new file")
            taken.setdefault(path.resolve(), option)
        for option, path in (others or {}).items():
            why = unwritable(path)
            if why:
                fix = f"{'set' if option.isupper() else 'point'} {option} to a writable file"
                found.append(f"{option}: {path} {why}; {fix}")
        if settings.update and not settings.disable:
            why = unwritable(self.baseline_dir, folder=True)
            if why:
                found.append(
                    f"--cudaperf-update: the baseline folder {self.baseline_dir} {why}; make it a "
                    "writable folder, or choose another with --cudaperf-baseline-dir"
                )
        return found

    def _not_an_output(self, path: Path, also: str | None) -> str | None:
        """Why ``path`` may not take an output, and what to do, where the run's own files
        forbid it: another option (``also``) writes it, or it is a ``.json`` file in the
        baseline folder, whose ``.json`` files are all read as baselines."""
        if also:
            return f"is {also}'s file as well; give each output a file of its own"
        if path.resolve().parent == self.baseline_dir and path.suffix == ".json":
            return (
                "lies in the baseline folder, whose .json files are read as baselines; write it "
                "outside that folder"
            )
        return None

    @property
    def probe(self) -> Probe:
        """The device probe, taken on first use (it imports torch)."""
        if self._probe is None:
            from pytest_cudaperf.devices.probe import probe

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
    the device it runs on (set by the ``cuda_device`` fixture). The run's settings and the
    test's marker options are resolved once, when it is built (the settings are final by then:
    ``pytest_configure`` settles them before any test starts)."""

    __test__ = False  # not a pytest test class

    run: RunContext
    state: ItemState
    marks: Marks = field(default_factory=Marks)
    device: DeviceContext | None = None
    #: the run's settings
    settings: Settings = field(init=False, repr=False, compare=False)
    #: the test's ``@perf`` options (None: not marked)
    perf: PerfOptions | None = field(init=False, repr=False, compare=False)
    #: the test's ``@no_leak`` options (None: not marked)
    no_leak: LeakOptions | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.settings = self.run.settings
        self.perf = self.marks.perf
        self.no_leak = self.marks.no_leak

    @property
    def nodeid(self) -> str:
        return self.state.nodeid

    @property
    def memory_device_type(self) -> str:
        """Which allocator this test's leak and peak checks read (``cuda`` or ``cpu``): see
        :func:`pytest_cudaperf.memory.backends.device_type`."""
        from pytest_cudaperf.memory.backends import device_type

        own = self.device.name if self.device is not None else None
        return device_type(self.settings.device, own)

    @property
    def measuring(self) -> bool:
        """Does a measurement or guard called now record anything? (not when disabled, nor
        while the plugin re-runs the body)"""
        return not (self.settings.disable or self.state.replaying)


@dataclass
class ItemState:
    """What one test has measured so far, and the failures to apply once its body has passed."""

    nodeid: str
    records: list[JudgedRecord] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    details: list[str] = field(default_factory=list)
    leak: LeakOutcome | None = None
    comparisons: list[ComparisonOutcome] = field(default_factory=list)
    names: Counter[tuple[str, str]] = field(default_factory=Counter)
    #: the leak sweep's conclusion (None: not swept)
    sweep: SweepOutcome | None = None
    #: the body is being re-run by ``@no_leak``'s protocol or a whole-test ``@perf``: the
    #: measurements and guards inside it ran on the first call and are not taken again
    replaying: bool = False

    def key(self, name: str | None = None, *, unnamed: str = "") -> SeriesKey:
        """The one key-naming scheme: the first unnamed measurement is the test's own (name
        ``""``), later ones ``unnamed`` + count (``"2"``, ``"3"``; ``"guard2"`` for guards,
        counted apart); a name, then ``name-2``…"""
        label = name or ""
        self.names[(unnamed, label)] += 1
        count = self.names[(unnamed, label)]
        if not label:
            return SeriesKey(self.nodeid, "" if count == 1 else f"{unnamed}{count}")
        return SeriesKey(self.nodeid, label if count == 1 else f"{label}-{count}")

    def fail(self, kind: FailureKind, message: str) -> None:
        self.failures.append(Failure(kind, message))

    @property
    def empty(self) -> bool:
        return not (self.records or self.leak or self.comparisons or self.failures or self.sweep)

    def outcome(self, body_passed: bool, location: tuple[str, int] | None) -> TestOutcome:
        return TestOutcome(
            nodeid=self.nodeid,
            records=tuple(self.records),
            failures=tuple(self.failures),
            details=tuple(self.details),
            leak=self.leak,
            comparisons=tuple(self.comparisons),
            body_passed=body_passed,
            location=location,
            sweep=self.sweep,
        )


# --- suspects confirmed after the test loop ------------------------------------------------


@dataclass
class Suspect:
    """A regression (or improvement) of process-dependent code that held in the test's own
    process and waits for the fresh process's measurement (:mod:`pytest_cudaperf.run.confirm`):
    ``first`` the verdict confirmed here, ``measured`` its re-measurement, ``env`` what the fresh
    process adds to its environment (the GPU it must measure on), ``lock`` the device to itself
    while it measures, ``probe`` the host's state now (host-bound GPU time; None: the CPU),
    ``refine`` what the caller does to a confirmed record (exact rounds: too few samples).
    ``awaits_host``: no change yet but a host-bound one that the host's other state left
    undecided here, its wait cut short (``first`` INCONCLUSIVE, :attr:`Verdict.awaits_host`):
    the fresh process measures it to judge, not to confirm."""

    test: TestContext
    first: JudgedRecord
    measured: Measurement
    env: dict[str, str]
    lock: Hold
    probe: Callable[[], float] | None = None
    refine: Callable[[JudgedRecord, Measurement], JudgedRecord] | None = None
    awaits_host: bool = False


def env_key(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """What a fresh process adds to its environment (a :class:`Suspect`'s ``env``: the GPU it
    measures on), as a key: the suspects and controls of one key share one fresh process."""
    return tuple(sorted(env.items()))


@dataclass
class Control:
    """A time of process-dependent code that PASSED in this process (``record``, measured as
    ``measured``): a control the suspects' fresh process may measure beside them
    (:mod:`pytest_cudaperf.run.controls`)."""

    test: TestContext
    record: JudgedRecord
    measured: Measurement


@dataclass
class Deferred:
    """The suspects of this process's tests, confirmed together in one fresh process after its
    test loop; ``running`` is the test whose reports the loop holds back while it runs (a suspect
    of any other test is confirmed inside its call); ``controls`` the times that passed, by
    series, environment and folder, the few :func:`pytest_cudaperf.run.controls.offer` keeps."""

    running: str | None = None
    suspects: list[Suspect] = field(default_factory=list)
    controls: dict[tuple[str, tuple[tuple[str, str], ...], str], list[Control]] = field(
        default_factory=dict
    )

    def defers(self, nodeid: str) -> bool:
        """Whether a suspect of ``nodeid`` waits for the batch."""
        return self.running == nodeid

    def of(self, nodeid: str) -> list[Suspect]:
        """``nodeid``'s suspects."""
        return [s for s in self.suspects if s.test.nodeid == nodeid]
