"""The walk of one measurement: which package modules one ``cuda_timer(fn)`` enters, in order,
and how often it enters again a module it entered before. The walk proper (the visits that hand
on to another package module) must enter each module once: the script exits 1 where it enters
one again, on any device. A measurement on CUDA reads its peak memory too and judges it with
its time; on the CPU, where there is no peak to read, the walk reads one through a stand-in of
the CUDA allocator's reader (:class:`StandInPeak`: ``CudaMemory.peak`` with a fixed window), so
that the CPU walk the benchmarks' smoke run checks is the path of a measurement with a peak.

The test's context is built as the plugin builds it (a run context over an empty baseline
folder, the device opened as ``cuda_device`` opens it), a first measurement is recorded as the
baseline, and the second, judged against it, runs under ``sys.setprofile``. Its backends are
built before the walk starts, as a test's first measurement leaves them to its second: on the
CPU the CPU backend and the stand-in reader, on CUDA the backend of the cache mode (built under
the GPU's lock) and the allocator's reader, so that the walked measurement resets a kept backend
(``Backends.get``) where a test's first ``cuda_timer`` call on CUDA would build one (a visit of
measure/cuda more, which hands on, and a reader built). A module is *entered* when a function of
it starts (or a generator of it resumes) while none of its frames is on the stack, *re-entered*
when that happens again after it was left, and *called back* when a function of it starts from
another module while one of its own frames is still below (a callback); the first entry comes
from this script, the test body. Where the walk proper enters a module again, a line names who
entered it each time (``module.function -> function``). pytest's own hooks do not run here, so
none of their entries is counted. The walk's profile function is hidden from the measurement
(which would otherwise label itself traced and skip its verdict), so the walk is that of a
measurement judged as any other.

    python benchmarks/walk.py                  # CPU: a second or two; exit 1 on a repeat
    python benchmarks/walk.py --device cuda    # the CUDA backend and allocator, on a GPU
    python benchmarks/walk.py --calls          # and each entry: caller -> callee function
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pytest_cudaperf  # noqa: E402
from pytest_cudaperf.fixtures.device import open_device  # noqa: E402
from pytest_cudaperf.fixtures.timer import Timer  # noqa: E402
from pytest_cudaperf.locks import LockRegistry  # noqa: E402
from pytest_cudaperf.markers import Marks, PerfOptions  # noqa: E402
from pytest_cudaperf.measure import timing  # noqa: E402
from pytest_cudaperf.measure.cpu import CpuBackend  # noqa: E402
from pytest_cudaperf.memory import CudaMemory, PeakResult, PeakWindow  # noqa: E402
from pytest_cudaperf.run.context import ItemState, RunContext, TestContext  # noqa: E402
from pytest_cudaperf.run.judged import Backends  # noqa: E402
from pytest_cudaperf.settings import Settings  # noqa: E402
from pytest_cudaperf.store.baselines import BaselineStore  # noqa: E402

#: the package as imported (run as a script: this checkout's; loaded by a test: the installed one)
PACKAGE = Path(pytest_cudaperf.__file__).resolve().parent
NODEID = "walk.py::test_walk"


def module_of(frame: FrameType) -> str | None:
    """``run/judged`` for a frame of ``pytest_cudaperf/run/judged.py``; None outside the
    package."""
    path = Path(frame.f_code.co_filename)
    try:
        relative = path.resolve().relative_to(PACKAGE)
    except ValueError:
        return None
    name = relative.with_suffix("").as_posix()
    return name.removesuffix("/__init__") if name != "__init__" else "pytest_cudaperf"


class Walk:
    """The visits of package modules while it is installed as the profile function. A module is
    *entered* when a frame of it starts (or resumes) while none of its frames is on the stack,
    and *left* when its last frame there returns; it is *called back* when a frame of it starts
    from another module's while one of its own is still below on the stack. A visit *hands
    on* when the module calls into another package module before it is left: the walk proper;
    a visit that does not is a look-up (a property, a helper's arithmetic)."""

    def __init__(self) -> None:
        #: (module entered, what called it: ``module.function``, or "the test")
        self.entries: list[tuple[str, str]] = []
        #: (module called back, by ``module.function``)
        self.callbacks: list[tuple[str, str]] = []
        #: the entries whose visit handed on (indexes into :attr:`entries`)
        self.handing_on: set[int] = set()
        self._depth: Counter[str] = Counter()
        self._visit: dict[str, int] = {}

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event not in ("call", "return"):
            return
        module = module_of(frame)
        if module is None:
            return
        if event == "return":
            self._depth[module] -= 1
            return
        self._depth[module] += 1
        below, caller = frame.f_back, None
        while below is not None and caller is None:
            caller = module_of(below)
            if caller is None:
                below = below.f_back
        origin = f"{caller}.{below.f_code.co_name}" if below is not None else "the test"
        if caller is not None and caller != module and caller in self._visit:
            self.handing_on.add(self._visit[caller])
        if self._depth[module] == 1:
            self._visit[module] = len(self.entries)
            self.entries.append((module, f"{origin} -> {frame.f_code.co_name}"))
        elif caller != module:
            self.callbacks.append((module, f"{origin} -> {frame.f_code.co_name}"))

    def order(self) -> list[str]:
        return list(dict.fromkeys(module for module, _ in self.entries))

    def reentries(self) -> Counter[str]:
        return Counter(module for module, _ in self.entries) - Counter(self.order())

    def path(self) -> list[str]:
        """The visits that handed on, in order: the walk without its look-ups."""
        return [self.entries[i][0] for i in sorted(self.handing_on)]


def test_context(device: str, folder: Path) -> TestContext:
    """One test's context, as the plugin builds it, with a short budget and a tolerance wide
    enough (1000%) that a busy machine's noise does not make the second measurement
    INCONCLUSIVE: the walk of one measurement judged once, not of its re-measurements."""
    settings = Settings(device=device, max_time=0.05, rounds=1, confirm_process="off")
    run = RunContext(
        settings=settings,
        store=BaselineStore.load(folder),
        locks=LockRegistry(folder / "locks"),
        root=folder,
        baseline_dir=folder,
        output_dir=folder,
    )
    test = TestContext(run, ItemState(NODEID), Marks(perf=PerfOptions(tolerance=10.0)))
    test.device = open_device(run)
    return test


class StandInPeak(CudaMemory):
    """The CUDA allocator's peak reader (``CudaMemory.peak``: one call, the same random draws)
    whose window reads a fixed peak instead of the allocator's statistics: a peak without a
    GPU."""

    #: the peak it reads: one 256x256 float32 result
    PEAK_BYTES = 256 * 256 * 4

    @contextlib.contextmanager
    def peak_window(self) -> Iterator[PeakWindow]:
        window = PeakWindow()
        yield window
        window.result = PeakResult(self.PEAK_BYTES, device="stand-in")


def timer_of(test: TestContext, fn: Callable[[], object]) -> Timer:
    """The test's ``cuda_timer``, its backends as a test's first measurement of ``fn`` leaves
    them: on the CPU the CPU backend with :class:`StandInPeak` reading the peak; on CUDA the
    timer's own, the backend of ``fn``'s target's cache mode built (under the GPU's lock, as
    ``Backends.get`` builds it) and the allocator's reader."""
    device = test.device
    assert device is not None
    if not device.is_cuda:
        threads = test.settings.cpu_threads
        given = Backends(device, CpuBackend(threads=threads), memory=StandInPeak(pinned=False))
        return Timer(test, given)
    timer = Timer(test)
    target = timer.target(fn)
    assert target.backends is not None
    with device.lock.exclusive():
        target.backends.get(target.cache)
    target.backends.memory()
    return timer


def untraced(monitoring: Any = None) -> str | None:
    """No tracer: what the measurement sees while the walk's profile function runs."""
    return None


def work(device: str) -> Callable[[], object]:
    import torch

    x = torch.randn(256, 256, device=device)
    return lambda: x @ x


def measure_once(device: str, folder: Path, walk: Walk | None) -> TestContext:
    test = test_context(device, folder)
    fn = work(str(test.device.device) if test.device else "cpu")
    timer = timer_of(test, fn)
    try:
        if walk is None:
            timer(fn)
        else:
            seen = getattr(timing, "active_tracer")  # noqa: B009 - patched, then put back
            setattr(timing, "active_tracer", untraced)  # noqa: B010 - the walk is no user's tracer
            sys.setprofile(walk)
            try:
                timer(fn)
            finally:
                sys.setprofile(None)
                setattr(timing, "active_tracer", seen)  # noqa: B010
    finally:
        timer.close()
        if test.device is not None:
            test.device.lock.release_shared()
    return test


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda or auto")
    parser.add_argument("--calls", action="store_true", help="print each entry's call")
    args = parser.parse_args(argv)
    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        try:
            first = measure_once(args.device, folder, None)
        except pytest.skip.Exception as exc:  # the device asked for is not here
            print(f"walk.py: --device {args.device}: {exc.msg}", file=sys.stderr)
            return 2
        # every series it recorded (on CUDA its peak memory too), so that the walk is judged
        for record in first.state.records:
            first.run.store.update(record.device_class, [record.record])
        walk = Walk()
        test = measure_once(args.device, folder, walk)
    (judged,) = [r for r in test.state.records if r.series.startswith("time:")]
    (peak,) = [r for r in test.state.records if r.series == "memory:peak"]
    assert test.device is not None
    reader = "" if test.device.is_cuda else " (stand-in reader)"
    print(
        f"device: {judged.device_class}; verdict: {judged.verdict.kind.value}; "
        f"peak memory{reader}: {peak.verdict.kind.value}"
    )
    path = walk.path()
    repeats = {m: n - 1 for m, n in Counter(path).items() if n > 1}
    said = ", ".join(f"{m} {n + 1}x" for m, n in repeats.items()) or "each module once"
    print(f"walk proper, the visits that handed on ({len(path)}; {said}):")
    print("  " + " -> ".join(path))
    proper = [walk.entries[i] for i in sorted(walk.handing_on)]
    for module in repeats:
        print(f"  {module} entered by: " + "; ".join(call for m, call in proper if m == module))
    order, again = walk.order(), walk.reentries()
    back = Counter(module for module, _ in walk.callbacks)
    print(f"modules entered, in order ({len(order)}), with their look-ups:")
    for module in order:
        counted = [f"entered again {again[module]}x"] if again[module] else []
        counted += [f"called back {back[module]}x"] if back[module] else []
        print(f"  {module}" + (f"  ({', '.join(counted)})" if counted else ""))
    lookups = len(walk.entries) - len(path)
    print(
        f"entries: {len(walk.entries)} ({len(path)} in the walk proper, {lookups} look-ups); "
        f"re-entries: {sum(again.values())}; callbacks: {len(walk.callbacks)}"
    )
    if args.calls:
        print("entries:")
        for module, call in walk.entries:
            print(f"  {module}: {call}")
        for module, call in walk.callbacks:
            print(f"  {module} called back: {call}")
    print(f"took {time.perf_counter() - began:.1f} s")
    if not repeats:
        return 0
    print(f"walk.py: the walk proper enters a module again: {said}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
