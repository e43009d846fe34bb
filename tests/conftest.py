"""Shared helpers for the plugin's own tests."""

from __future__ import annotations

import gc
import importlib
import multiprocessing.forkserver  # noqa: F401 - kept across inner runs, as torch below
import shutil
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

import pytest

# The inner runs are pytester's default, in this process (a pytest process of its own costs
# seconds: torch's import). pytester drops the modules an inner run imported, and torch cannot be
# imported a second time: torch, and the torch._dynamo that a TorchDispatchMode (the leak sites'
# and the work counter's) imports, are imported here, once. A test whose inner run must have a
# process of its own (a signal to its parent, a process that must never import torch, what xdist
# workers print on their stderr) calls runpytest_subprocess. The forkserver module, from which a
# @distributed test's CPU ranks fork, is imported above for the same reason: dropped after an
# inner run, the next would start another forkserver (torch imported again) beside the first.
import torch
import torch._dynamo  # noqa: F401

# Their objects (about 280,000) moved out of the garbage collector's view: a leak check's
# gc.collect() (a dozen or more per @no_leak test, per sweep re-run) walked them all, 0.2 s each,
# in every inner run of this process. Nothing an inner run allocates is frozen: its census and
# leak sites see all of it. Inner runs in processes of their own (xdist workers, fresh
# processes) keep the whole heap, as a user's run does. A leak check on an allocator backend
# (frozen_heap) leaves this freeze as it is; a test that unfroze the heap itself is followed by
# the pytester fixture's freezing again, before its test's inner runs allocate anything.
gc.freeze()
#: how many objects that froze
FROZEN = gc.get_freeze_count()

#: how the integration tests run the inner pytest: without xdist, with -n0 and with -n2
MODES = {"plain": [], "n0": ["-n0"], "n2": ["-n2"]}


@pytest.fixture(params=list(MODES), ids=list(MODES))
def mode(request: pytest.FixtureRequest) -> list[str]:
    """The inner run's xdist arguments, for a test of a path that xdist changes: what workers send
    the controller and it merges (records, leaks, counts in the JSON report), baseline updates,
    the fresh process's arguments. A test whose path xdist leaves alone (a marker's argument, a
    budget, a skip, a setting read where the test runs) runs once, without xdist: each inner run
    with -n2 starts three processes that each import torch."""
    return MODES[request.param]


@pytest.fixture(autouse=True)
def _no_fresh_process(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The inner runs judge regressions in their own process only (a fresh process per planted
    regression would add seconds to each); test_fresh_process.py and the GPU tests of host-bound
    code and of device time of several launches test the fresh process."""
    fresh = ("test_fresh_process.py", "test_gpu_host_bound.py", "test_gpu_device_fresh.py")
    if request.node.path.name not in fresh:
        monkeypatch.setenv("PYTEST_CUDAPERF_CONFIRM_PROCESS", "off")


#: the plugins installed for the tests of one file each, which need them loadable in that file's
#: inner runs: pytest-benchmark (serving its fixture) and pytest-rerunfailures (re-run tests)
_ONLY_IN = {
    "benchmark": ("test_benchmark_fixture.py", "test_gpu_benchmark.py"),
    "rerunfailures": ("test_reruns.py",),
}


def _inner_addopts(request: pytest.FixtureRequest) -> str:
    """``-p no:NAME`` for each of those plugins this test's inner runs do without: loading and
    configuring them costs every inner pytest."""
    name = request.node.path.name
    return " ".join(f"-p no:{plugin}" for plugin, files in _ONLY_IN.items() if name not in files)


@pytest.fixture(autouse=True)
def _inner_plugins(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The inner runs of a test started without pytester (``cudaperf`` commands) leave out the
    plugins they do without."""
    if addopts := _inner_addopts(request):
        monkeypatch.setenv("PYTEST_ADDOPTS", addopts)


@pytest.fixture
def pytester(
    pytester: pytest.Pytester, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> pytest.Pytester:
    """pytester, whose inner runs also leave out the plugins they do without: pytester removes
    ``PYTEST_ADDOPTS`` as it starts, after the autouse fixture set it, so it is set again here."""
    if addopts := _inner_addopts(request):
        monkeypatch.setenv("PYTEST_ADDOPTS", addopts)
    if gc.get_freeze_count() < FROZEN:  # unfrozen by a test since (see above)
        gc.collect()
        gc.freeze()
    return pytester


@pytest.fixture
def interruptible_cudaperf() -> list[str]:
    """The command line of ``python -m pytest_cudaperf.cli`` with Ctrl-C delivered as a terminal
    delivers it, even when this run was started in the background of a shell, which starts its
    jobs with SIGINT ignored (and an ignored signal stays ignored across exec)."""
    return [
        sys.executable,
        "-c",
        "import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "runpy.run_module('pytest_cudaperf.cli', run_name='__main__', alter_sys=True)",
    ]


class Stop(NamedTuple):
    """A signal that stops a ``cudaperf`` command, its exit code and the word its one line says."""

    sig: signal.Signals
    rc: int
    said: str


STOPS = {
    "ctrl-c": Stop(signal.SIGINT, 130, "interrupted"),
    "sigterm": Stop(signal.SIGTERM, 143, "terminated"),
}


@pytest.fixture(params=list(STOPS), ids=list(STOPS))
def stop(request: pytest.FixtureRequest) -> Stop:
    """Each way a ``cudaperf`` command is stopped: Ctrl-C at a terminal, SIGTERM from a cancelled
    CI job or ``timeout``."""
    return STOPS[request.param]


class Recorded(NamedTuple):
    """The baseline folder that ``pytest --cudaperf-update`` wrote, and its baseline file's name."""

    folder: Path
    name: str

    def write(self, project: Path) -> Path:
        """A copy of the folder as ``project``'s baseline folder; the baseline file's path."""
        shutil.copytree(self.folder, project / ".cudaperf")
        return project / ".cudaperf" / self.name


#: ``record_once``'s type: (test file's name, its source, pytest arguments) -> the baseline
RecordOnce = Callable[[str, str, Sequence[str]], Recorded]


def _run_here(project: Path, args: Sequence[str], basetemp: Path) -> int:
    """``pytest ARGS`` started in ``project``, in this process (as pytester's inline runs: what
    it imports dropped after, the current folder and the environment put back), with the plugins
    of :data:`_ONLY_IN` left out; its exit code (its output is this test's captured output)."""
    modules, paths = dict(sys.modules), (list(sys.path), list(sys.meta_path))
    addopts = " ".join(f"-p no:{p}" for p in _ONLY_IN)
    importlib.invalidate_caches()
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.chdir(project)
            patch.setenv("PYTEST_ADDOPTS", addopts)
            return int(pytest.main([*args, f"--basetemp={basetemp}"]))
    finally:
        sys.modules.clear()
        sys.modules.update(modules)
        sys.path[:], sys.meta_path[:] = paths


@pytest.fixture(scope="session")
def record_once(tmp_path_factory: pytest.TempPathFactory) -> RecordOnce:
    """``record_once(file, source, args)``: the baseline that ``pytest ARGS --cudaperf-update``
    records for the test file ``file`` holding ``source``, run once per session for each
    (file, source, args), in this process, for the tests that start from a recorded baseline
    rather than test the recording: an inner run that measures costs seconds, one in a process
    of its own seconds more (torch's import)."""
    done: dict[tuple[str, str, tuple[str, ...]], Recorded] = {}

    def record(file: str, source: str, args: Sequence[str]) -> Recorded:
        key = (file, source, tuple(args))
        if key not in done:
            project = tmp_path_factory.mktemp("recorded")
            (project / file).write_text(source)
            basetemp = tmp_path_factory.mktemp("recorded-basetemp")
            rc = _run_here(project, [*args, "--cudaperf-update"], basetemp)
            assert rc == 0, f"recording {file}: pytest exited {rc} (its output: above)"
            (path,) = (project / ".cudaperf").glob("*.json")
            done[key] = Recorded(path.parent, path.name)
        return done[key]

    return record
