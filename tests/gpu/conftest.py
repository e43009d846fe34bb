"""The GPU tests' inner runs each take a process of their own, and a test that reads the GPU
device-wide has it to itself.

A CUDA context belongs to one process: an inner run that kills it (a device-side assert, an
out-of-memory test) would fail every GPU test run after it in the same process. The CPU tests
run their inner pytest in the test's process (tests/conftest.py says why); on the H100 on
2026-11-28 that made one device-side assert fail 23 GPU tests after it.

Memory outside torch's allocator is read device-wide (the device's used memory less torch's
reserved), so any other process on the GPU moves it: under ``scripts/gpu-suite.sh -n 3`` the raw
``cudaMalloc`` must-flag test read no growth in two of the whole suite's runs (H200, 2026-11-28
and 2026-11-29). A test whose wait for the host's state must read that state must not meet
another's measurement either: its probe gives up on a device held to the wait's end. Nor must a
test whose spell of the host's other state must last from one of its tests to the next (it
lapses after ten waits' limits, 20 s at the test's 2 s, and in the whole suite its second test
waited in full, as after a lapse, while other tests measured on the device), nor one whose
verdicts read a planted host slowdown against a single recording (the whole suite's load moved
the host's speed 1.4x between that recording and the judged run): both failed so in the whole
suite under ``-n 3``, and passed alone and under ``-n 3`` among the host-bound tests alone
(H200, 2026-11-29). Every GPU test holds the suite's lock shared; a test marked ``gpu_alone``
holds it alone, after the tests of the other workers that hold it end and before any other
starts.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from pytest_cudaperf.locks import DeviceLock

#: seconds after which a test of an inner run writes its stacks (the 18 GPU tests whose times
#: were kept from H200 runs on 2026-11-28 and 2026-11-29 took at most 72 s each)
INNER_STACK_AFTER_S = 150
#: seconds after which an inner run is killed and its test fails with the stacks it wrote: one
#: hung inner run fails its own test, and the suite's lock goes to the next
INNER_RUN_LIMIT_S = 240


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "gpu_alone: a GPU test that reads the GPU device-wide, or whose waits must read the"
        " host's state, or whose verdicts read the host's speed against one recording (other"
        " tests' measurements and load move both): no other GPU test runs",
    )


@pytest.fixture(autouse=True)
def _inner_runs_in_their_own_process(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``pytester.runpytest`` starts a pytest process (``--runpytest=subprocess``): set before
    the ``pytester`` fixture reads the option, which autouse fixtures are."""
    monkeypatch.setattr(request.config.option, "runpytest", "subprocess")


@pytest.fixture
def pytester(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """pytest's ``pytester``, where a hung inner run says where it hangs and fails only its own
    test: a test of an inner run still running after :data:`INNER_STACK_AFTER_S` writes every
    thread's stack to the run's ``stderr`` file, and a run still going after
    :data:`INNER_RUN_LIMIT_S` is killed, its test failing with the end of that file. A hung
    inner run would otherwise hold the suite until the whole job's limit (a GPU test ran past
    five minutes on the H200, 2026-11-29). ``PYTEST_ADDOPTS`` is set here, after ``pytester``
    has cleared it for its runs."""
    dump = f"-o faulthandler_timeout={INNER_STACK_AFTER_S}"
    monkeypatch.setenv("PYTEST_ADDOPTS", dump)
    run = pytester.runpytest_subprocess

    def limited(*args: str | os.PathLike[str], timeout: float | None = None) -> pytest.RunResult:
        try:
            return run(*args, timeout=INNER_RUN_LIMIT_S if timeout is None else timeout)
        except pytester.TimeoutExpired as exc:
            stderr = (pytester.path / "stderr").read_text(encoding="utf-8", errors="replace")
            raise pytester.TimeoutExpired(f"{exc}\n{stderr[-8000:]}") from None

    pytester.runpytest_subprocess = limited  # type: ignore[method-assign]
    return pytester


@pytest.fixture(autouse=True)
def _the_gpu_shared_or_alone(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """Hold the GPU suite's lock while the test runs: shared, or alone for ``gpu_alone``. The
    lock lies above the base temporary directory, which the xdist workers of one run share."""
    lock = DeviceLock(tmp_path_factory.getbasetemp().parent, "gpu-suite")
    try:
        if request.node.get_closest_marker("gpu_alone"):
            with lock.exclusive():
                yield
        else:
            lock.acquire_shared()
            try:
                yield
            finally:
                lock.release_shared()
    finally:
        lock.close()
