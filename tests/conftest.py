"""Shared helpers for the plugin's own tests."""

from __future__ import annotations

import signal
import sys
from typing import NamedTuple

import pytest

#: how the integration tests run the inner pytest: without xdist, with -n0 and with -n2
MODES = {"plain": [], "n0": ["-n0"], "n2": ["-n2"]}


@pytest.fixture(params=list(MODES), ids=list(MODES))
def mode(request: pytest.FixtureRequest) -> list[str]:
    return MODES[request.param]


@pytest.fixture(autouse=True)
def _no_fresh_process(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The inner runs judge regressions in their own process only (a fresh process per planted
    regression would add seconds to each); test_fresh_process.py and the host-bound GPU tests
    test the fresh process."""
    if request.node.path.name not in ("test_fresh_process.py", "test_gpu_host_bound.py"):
        monkeypatch.setenv("PYTEST_CUDAPERF_CONFIRM_PROCESS", "off")


#: the tests of serving pytest-benchmark's fixture, which need it loadable in their inner runs
_WITH_PYTEST_BENCHMARK = ("test_benchmark_fixture.py", "test_gpu_benchmark.py")


@pytest.fixture(autouse=True)
def _no_pytest_benchmark(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """pytest-benchmark, installed for the tests of its fixture, stays out of every other test's
    inner runs: loading and configuring it costs each inner pytest ~0.2 s."""
    if request.node.path.name not in _WITH_PYTEST_BENCHMARK:
        monkeypatch.setenv("PYTEST_ADDOPTS", "-p no:benchmark")


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
