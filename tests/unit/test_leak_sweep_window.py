"""The leak sweep around a body, over a scripted allocator backend (the CUDA path, which the CPU
machine cannot run): what the first pass reads, when the full check re-runs, what it concludes."""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_cudaperf.fixtures import sweep
from pytest_cudaperf.locks import LockRegistry
from pytest_cudaperf.markers import Marks, SweepOptions
from pytest_cudaperf.memory import PeakResult, PeakWindow
from pytest_cudaperf.memory.sweep import SweepStatus
from pytest_cudaperf.report.model import FailureKind
from pytest_cudaperf.run.context import ItemState, RunContext, TestContext
from pytest_cudaperf.settings import Settings
from pytest_cudaperf.store.baselines import BaselineStore


class Allocator:
    """An allocator's readings: ``held`` bytes stay until dropped; ``garbage`` bytes only until
    a full settle (uncollected cycles); every allocation moves the count."""

    can_freeze = True

    def __init__(self) -> None:
        self.held = 0
        self.garbage = 0
        self.count = 0
        self.full_settles = 0

    def allocate(self, size: int, *, keep: bool = False, cyclic: bool = False) -> None:
        self.count += 1
        if keep:
            self.held += size
        elif cyclic:
            self.garbage += size

    def settle(self) -> list[str]:
        self.full_settles += 1
        self.garbage = 0
        return ["gc.collect x1"]

    def settle_devices(self) -> list[str]:
        return ["synchronize"]

    def allocations(self) -> int | None:
        return self.count

    def read(self) -> dict[str, int]:
        return {"cuda:0": self.held + self.garbage}

    def sites(self, body: Callable[[], object], leaked: Collection[str]) -> list[str]:
        return ["512 B in 1 block at t.py:3 in test_x"]

    def peak(self, fn: Callable[[], object]) -> PeakResult | None:
        return None

    @contextlib.contextmanager
    def peak_window(self) -> Iterator[PeakWindow]:
        yield PeakWindow()


@pytest.fixture
def allocator(monkeypatch: pytest.MonkeyPatch) -> Allocator:
    fake = Allocator()
    monkeypatch.setattr(sweep, "_backend", lambda test: fake)
    if "torch" not in sys.modules:  # the window reads only where torch is loaded
        monkeypatch.setitem(sys.modules, "torch", types.ModuleType("torch"))
    return fake


def _test(tmp_path: Path, mode: str = "fail", unsafe: tuple[str, ...] = ()) -> TestContext:
    settings = Settings(leak_sweep=mode, leak_sweep_unsafe_fixtures=unsafe)
    run = RunContext(
        settings=settings,
        store=BaselineStore.load(tmp_path),
        locks=LockRegistry(tmp_path / "locks"),
        root=tmp_path,
        baseline_dir=tmp_path,
        output_dir=tmp_path,
    )
    return TestContext(run, ItemState("t.py::test_x"))


def _swept(
    test: TestContext,
    body: Callable[[], object],
    marks: Marks | None = None,
    fixtures: tuple[str, ...] = (),
) -> None:
    """The body's own run inside the window, as the plugin's pytest_pyfunc_call runs it."""
    item: Any = types.SimpleNamespace(obj=body, funcargs={}, fixturenames=list(fixtures))
    marks = marks or Marks()
    with sweep.window(test.run, item, marks, lambda: test):
        body()


def test_a_body_that_frees_what_it_allocates_is_clean_without_a_full_settle(
    tmp_path: Path, allocator: Allocator
) -> None:
    test = _test(tmp_path)
    _swept(test, lambda: allocator.allocate(4096))
    assert test.state.sweep is not None
    assert test.state.sweep.status is SweepStatus.CLEAN
    assert not test.state.sweep.rechecked
    assert allocator.full_settles == 0


def test_a_body_that_allocates_nothing_is_untouched(tmp_path: Path, allocator: Allocator) -> None:
    test = _test(tmp_path)
    _swept(test, lambda: None)
    assert test.state.sweep is not None
    assert test.state.sweep.status is SweepStatus.UNTOUCHED


def test_uncollected_cycles_are_settled_away_before_any_rerun(
    tmp_path: Path, allocator: Allocator
) -> None:
    runs: list[int] = []

    def body() -> None:
        runs.append(1)
        allocator.allocate(1 << 20, cyclic=True)

    test = _test(tmp_path)
    _swept(test, body)
    assert test.state.sweep is not None
    assert test.state.sweep.status is SweepStatus.CLEAN
    assert allocator.full_settles == 1
    assert len(runs) == 1  # no re-run


def test_a_lazy_cache_is_rerun_and_passes(tmp_path: Path, allocator: Allocator) -> None:
    cache: list[int] = []

    def body() -> None:
        if not cache:
            cache.append(1)
            allocator.allocate(8192, keep=True)
        allocator.allocate(64)

    test = _test(tmp_path)
    _swept(test, body)
    assert test.state.sweep is not None
    assert test.state.sweep.status is SweepStatus.CLEAN
    assert test.state.sweep.rechecked
    assert test.state.sweep.growth == {"cuda:0": 8192}
    assert not test.state.failures


@pytest.mark.parametrize("mode", ["fail", "report"])
def test_a_leak_fails_the_test_or_is_only_listed(
    tmp_path: Path, allocator: Allocator, mode: str
) -> None:
    test = _test(tmp_path, mode)
    _swept(test, lambda: allocator.allocate(512, keep=True))
    sweep_outcome = test.state.sweep
    assert sweep_outcome is not None
    assert sweep_outcome.status is SweepStatus.LEAK
    assert sweep_outcome.reason == "leak: +1.5 KiB over 3 runs (+512 B each) on cuda:0"
    assert test.state.leak is not None
    assert test.state.leak.sites == ("512 B in 1 block at t.py:3 in test_x",)
    kinds = [f.kind for f in test.state.failures]
    assert kinds == ([FailureKind.LEAK] if mode == "fail" else [])
    assert sweep_outcome.seconds > 0


def test_a_test_that_may_not_be_rerun_is_unchecked_when_it_grew(
    tmp_path: Path, allocator: Allocator
) -> None:
    marked = _test(tmp_path)
    no_rerun = Marks(leak_sweep=SweepOptions(repeatable=False, reason="once"))
    _swept(marked, lambda: allocator.allocate(512, keep=True), no_rerun)
    assert marked.state.sweep is not None
    assert marked.state.sweep.status is SweepStatus.UNCHECKED
    assert marked.state.sweep.reason.endswith(
        "not re-run: marked leak_sweep(repeatable=False): once"
    )
    unsafe = _test(tmp_path, unsafe=("db",))
    _swept(unsafe, lambda: allocator.allocate(512, keep=True), fixtures=("request", "db"))
    assert unsafe.state.sweep is not None
    assert unsafe.state.sweep.status is SweepStatus.UNCHECKED
    assert "'db'" in unsafe.state.sweep.reason
    clean = _test(tmp_path)
    _swept(clean, lambda: allocator.allocate(64), no_rerun)
    assert clean.state.sweep is not None
    assert clean.state.sweep.status is SweepStatus.CLEAN


def test_a_rerun_that_raises_is_unchecked_not_failed(tmp_path: Path, allocator: Allocator) -> None:
    calls: list[int] = []

    def body() -> None:
        calls.append(1)
        allocator.allocate(512, keep=True)
        if len(calls) > 1:
            raise RuntimeError("state of the first run\nsecond line")

    test = _test(tmp_path)
    _swept(test, body)
    assert test.state.sweep is not None
    assert test.state.sweep.status is SweepStatus.UNCHECKED
    assert "raised RuntimeError: state of the first run when re-run" in test.state.sweep.reason
    assert not test.state.failures


def test_a_failed_body_is_unchecked_if_it_allocated(tmp_path: Path, allocator: Allocator) -> None:
    def fails() -> None:
        allocator.allocate(512, keep=True)
        raise AssertionError("its own failure")

    test = _test(tmp_path)
    with pytest.raises(AssertionError, match="its own failure"):
        _swept(test, fails)
    assert test.state.sweep is not None
    assert (test.state.sweep.status, test.state.sweep.reason) == (
        SweepStatus.UNCHECKED,
        "the body failed",
    )
    quiet = _test(tmp_path)
    with pytest.raises(AssertionError):
        _swept(quiet, lambda: (_ for _ in ()).throw(AssertionError("x")))
    assert quiet.state.sweep is None
    skipped = _test(tmp_path)
    with pytest.raises(pytest.skip.Exception):
        _swept(skipped, lambda: pytest.skip("no"))
    assert skipped.state.sweep is None


def test_no_leak_tests_are_left_alone_and_distributed_ones_unchecked(
    tmp_path: Path, allocator: Allocator
) -> None:
    from pytest_cudaperf.markers import DistributedOptions, LeakOptions

    own = _test(tmp_path)
    _swept(own, lambda: allocator.allocate(512, keep=True), Marks(no_leak=LeakOptions()))
    assert own.state.sweep is None
    ranks = _test(tmp_path)
    _swept(ranks, lambda: None, Marks(distributed=DistributedOptions()))
    assert ranks.state.sweep is not None
    assert ranks.state.sweep.status is SweepStatus.UNCHECKED
    off = _test(tmp_path, mode="off")
    _swept(off, lambda: allocator.allocate(512, keep=True))
    assert off.state.sweep is None
