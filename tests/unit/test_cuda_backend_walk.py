"""The CUDA backend's visits of one measurement, on fakes of torch, Triton and NVML: its build
and its finish enter other modules of the package; a reset, a round's sampler (the first with
its dry run) and each batch enter none besides measure/cuda, and the finish asks measure/nvml
once for the clocks its batches read."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any

import pytest
from benchmark_scripts import benchmark_script

from pytest_cudaperf.measure import hostbound
from pytest_cudaperf.measure.nvml import clock_report

#: what each fake event pair times (ms)
EVENT_MS = 0.25
#: the SM clock the fake spin kernel stamps: 19800 cycles in 10 µs
SPIN = (19800, 10000)


Walk = benchmark_script("walk.py").Walk  # counts the visits as its walk does


def visits(action: Callable[[], object]) -> Any:
    """The package modules ``action`` enters, counted by benchmarks/walk.py's :class:`Walk`."""
    seen = Walk()
    sys.setprofile(seen)
    try:
        action()
    finally:
        sys.setprofile(None)
    return seen


def modules(seen: Any) -> set[str]:
    return set(seen.order())


class FakeEvent:
    def __init__(self, enable_timing: bool = False) -> None:
        self.recorded = 0

    def record(self) -> None:
        self.recorded += 1

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: FakeEvent) -> float:
        return EVENT_MS


class FakeClock:
    """``time`` for measure/cuda: a microsecond a reading, so that no load on this machine
    makes the dry run of a call that does not wait take 15 ms."""

    def __init__(self) -> None:
        self.ns = 0

    def perf_counter(self) -> float:
        return self.perf_counter_ns() / 1e9

    def perf_counter_ns(self) -> int:
        self.ns += 1000
        return self.ns


class FakeKernel:
    """A Triton kernel launched as ``kernel[grid](*args)``: the spin stamps its slot's SM clock
    and says it spun once (the host released it); the flush's kernels count their launches."""

    def __init__(self, spin: bool = False) -> None:
        self.spin = spin
        self.launches = 0

    def __getitem__(self, grid: tuple[int, ...]) -> Callable[..., None]:
        return self.launch

    def launch(self, *args: Any, **kwargs: Any) -> None:
        self.launches += 1
        if self.spin:
            _flags, counts, stamps, slot, _max_iters, clocked = args
            counts[slot] = 1
            if clocked:
                stamps[2 * slot], stamps[2 * slot + 1] = SPIN


@pytest.fixture
def fakes(monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    """torch with CPU tensors and fake CUDA events, Triton's kernels and NVML (a clock of 1980
    MHz, a reasons mask that says sw-power-cap on every third batch), in place of the real ones
    while a test builds and uses a :class:`CudaBackend`."""
    torch = pytest.importorskip("torch")
    from pytest_cudaperf import measure
    from pytest_cudaperf.measure import cuda

    sleeps: list[int] = []
    fake_torch = types.SimpleNamespace(
        cuda=types.SimpleNamespace(Event=FakeEvent, synchronize=lambda: None, _sleep=sleeps.append),
        zeros=lambda n, dtype, device=None, pin_memory=False: torch.zeros(n, dtype=dtype),
        ones=lambda n, dtype=None, device=None: torch.ones(n, dtype=dtype),
        empty=lambda *n, dtype=None, device=None: torch.empty(*n, dtype=dtype),
        sum=torch.sum,
        add=torch.add,
        int32=torch.int32,
        int64=torch.int64,
        float32=torch.float32,
    )
    spin = types.ModuleType("pytest_cudaperf.measure._spin")
    spin.spin_until_released = FakeKernel(spin=True)  # type: ignore[attr-defined]
    spin.read_flush = FakeKernel()  # type: ignore[attr-defined]
    spin.discard_lines = FakeKernel()  # type: ignore[attr-defined]
    masks = iter([0x0, 0x0, 0x4] * 1000)
    nvml = types.SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlDeviceGetHandleByUUID=lambda uuid: uuid,
        NVML_CLOCK_SM=0,
        nvmlDeviceGetClockInfo=lambda handle, clock: 1980,
        nvmlDeviceGetCurrentClocksEventReasons=lambda handle: next(masks),
    )
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    monkeypatch.setitem(sys.modules, "pytest_cudaperf.measure._spin", spin)
    monkeypatch.setattr(measure, "_spin", spin, raising=False)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setattr(cuda, "time", FakeClock())
    monkeypatch.setattr(hostbound, "_LAUNCH_GAPS", {})  # this process's probe is not the fake's
    return types.SimpleNamespace(
        torch=fake_torch, real=torch, spin=spin, sleeps=sleeps, cuda=cuda, measure=measure
    )


def build(fakes: types.SimpleNamespace, cache: str = "hot") -> Any:
    return fakes.cuda.CudaBackend(fakes.real.device("cpu"), cache, 1 << 20, "abc")


def call() -> None:
    """The measured callable: queues nothing, waits for nothing."""


def round_visits(backend: Any, batches: int) -> list[Any]:
    """One round's: its sampler's made, then each of its batches."""
    made: list[Any] = []
    walked = [visits(lambda: made.append(backend.sampler(call, False)))]
    return walked + [visits(made[0].batch) for _ in range(batches)]


@pytest.mark.parametrize("cache", ["hot", "cold"])
def test_a_reset_a_sampler_and_a_batch_enter_no_module_but_the_backends(
    fakes: types.SimpleNamespace, cache: str
) -> None:
    backend = build(fakes, cache)
    assert backend.blocker.name == "spin"
    assert backend.flush is None if cache == "hot" else backend.flush.method == "read+discard"
    backend.spin_mhz.append(1.0)  # a previous measurement's readings, dropped by the reset
    seen = visits(backend.reset)
    assert modules(seen) == {"measure/cuda"}
    assert (backend.clock_batches, backend.spin_mhz) == ([], [])
    first = visits(lambda: backend.sampler(call, False))  # its dry run queues the sleep
    assert modules(first) == {"measure/cuda"}
    assert len(fakes.sleeps) == 3  # two to calibrate it at the build, one for the dry run
    sampler = backend.sampler(call, False)  # a later round's: the dry run's answer is kept
    batches = [visits(sampler.batch) for _ in range(3)]
    assert [modules(b) for b in batches] == [{"measure/cuda"}] * 3
    assert fakes.spin.spin_until_released.launches > 3
    # the readings stayed with the backend, raw: NVML's per batch, the blocker's per sample
    assert backend.clock_batches == [(8, 1980, 0x0), (8, 1980, 0x0), (8, 1980, 0x4)]
    assert backend.spin_mhz == [1980.0] * 24


def test_the_sleep_is_resolved_once_at_the_build(
    fakes: types.SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without Triton the sleep kernel blocks the stream: the batches and the dry run call the
    torch function the build resolved (``_torch_compat`` names it), not the module."""
    from pytest_cudaperf import _torch_compat

    assert _torch_compat.cuda_sleeper() is fakes.torch.cuda._sleep
    monkeypatch.setitem(sys.modules, "pytest_cudaperf.measure._spin", None)  # no Triton
    monkeypatch.delattr(fakes.measure, "_spin")
    backend = build(fakes)
    assert backend.blocker.name == "sleep"
    assert backend.sleep is fakes.torch.cuda._sleep

    def gone(cycles: int) -> None:
        raise AssertionError("torch.cuda._sleep looked up again after the build")

    monkeypatch.setattr(fakes.torch.cuda, "_sleep", gone)
    before = len(fakes.sleeps)
    # a measurement on the kept backend: its reset, then two rounds
    walked = [visits(backend.reset), *round_visits(backend, 2), *round_visits(backend, 2)]
    assert [modules(seen) for seen in walked] == [{"measure/cuda"}] * 7
    assert len(fakes.sleeps) - before == 1 + 2 * 2 * 8  # one dry run; a sleep per sample
    assert backend.spin_mhz == []  # the sleep kernel reads no clock
    assert backend.lasting[0].startswith("spin blocker unavailable (ModuleNotFoundError")


def test_a_measurement_hands_on_from_the_backend_once(fakes: types.SimpleNamespace) -> None:
    """A whole measurement on a kept backend (measure/timing's rounds): of the backend's visits
    only the finish hands on, and it asks measure/nvml once; the clocks it records are what
    measure/nvml makes of the batches' raw readings."""
    from pytest_cudaperf.measure.timing import Budget, measure

    backend = build(fakes)
    budget = Budget(warmup=0.0, max_time=0.05, min_samples=4, rounds=2)
    found: list[Any] = []
    seen = visits(lambda: found.append(measure(backend, call, budget)))
    backends_visits = [i for i, (module, _) in enumerate(seen.entries) if module == "measure/cuda"]
    assert len(backends_visits) > 5  # two samplers, their batches, the finish
    handing_on = [i for i in backends_visits if i in seen.handing_on]
    assert len(handing_on) == 1
    assert seen.entries[handing_on[0]][1] == "measure/timing._rounds -> finish"
    (nvml,) = [origin for module, origin in seen.entries if module == "measure/nvml"]
    assert nvml.startswith("measure/cuda.finish -> ")
    (measured,) = found
    summary, warning = clock_report(backend.clock_batches, backend.spin_mhz, recorded=True)
    assert measured.clocks == summary
    assert summary["throttle_reasons"] == ["sw-power-cap"]
    assert summary["spin_sm_mhz"] == {"p10": 1980.0, "median": 1980.0, "p90": 1980.0}
    assert warning is not None
    assert warning.startswith("throttled: ")
    assert warning in measured.warnings
    assert measured.sm_mhz == 1980.0


def test_without_nvml_the_batches_keep_the_sample_counts(
    fakes: types.SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    backend = build(fakes)
    assert backend.nvml is None
    sampler = backend.sampler(call, False)
    seen = visits(sampler.batch)
    assert modules(seen) == {"measure/cuda"}
    assert backend.clock_batches == [(8, None, None)]
    summary, warning = clock_report(backend.clock_batches, backend.spin_mhz, recorded=False)
    assert summary == {
        "recorded": False,
        "spin_sm_mhz": {"p10": 1980.0, "median": 1980.0, "p90": 1980.0},
    }
    assert warning is None
