from __future__ import annotations

import gc
import sys
import types
from collections.abc import Callable

import pytest
import torch

from pytest_cudaperf.memory.attribution import (
    CreationSites,
    LineGrowth,
    group_storages,
    user_frame,
)
from pytest_cudaperf.memory.backends import CpuMemory, CudaMemory
from pytest_cudaperf.memory.protocol import LeakResult, check_leaks


def test_steady_growth_is_a_leak_with_a_per_run_message() -> None:
    result = LeakResult(series={"cuda:0": [0, 1 << 20, 2 << 20, 3 << 20]}, tolerance=0)
    assert result.leaks == {"cuda:0": 3 << 20}
    assert result.message() == "leak: +3.0 MiB over 3 runs (+1.0 MiB each) on cuda:0"


def test_steps_that_read_alike_are_one_step_each() -> None:
    # a few bytes of the allocator's bookkeeping in one step do not make three different steps
    result = LeakResult(series={"cpu tensors": [0, 4096, 8200, 12288]}, tolerance=0)
    assert result.message() == "leak: +12.0 KiB over 3 runs (+4.0 KiB each) on cpu tensors"


def test_plateau_and_tolerance_are_not_leaks() -> None:
    plateau = LeakResult(series={"cuda:0": [0, 512, 1024, 1024]}, tolerance=0)
    assert plateau.leaks == {}
    assert plateau.message() is None
    small = LeakResult(series={"cuda:0": [0, 100, 200, 300]}, tolerance=1024)
    assert small.leaks == {}


def test_a_second_window_must_grow_too() -> None:
    late = LeakResult(series={"cpu tensors": [0, 0, 0, 512, 512, 512, 512]}, tolerance=0)
    assert late.leaks == {}  # flat in the last run
    confirmed = LeakResult(
        series={"cpu tensors": [0, 512, 512, 1024, 1024, 1536, 1536]}, tolerance=0, confirm_from=3
    )
    assert confirmed.leaks == {"cpu tensors": 1536}  # grew again after run 3, not in the last
    settled = LeakResult(
        series={"cpu tensors": [0, 0, 0, 512, 512, 512, 512]}, tolerance=0, confirm_from=3
    )
    assert settled.leaks == {}
    assert LeakResult(series={"cuda:0": [0, 512, 1024, 1536]}, tolerance=0).steady()
    assert not LeakResult(series={"cuda:0": [0, 0, 0, 512]}, tolerance=0).steady()


def test_a_late_one_time_allocation_is_not_a_leak_and_a_periodic_one_is() -> None:
    """A DDP rank on gloo grew +512 B in its third measured run and never again: the check runs
    as many runs again before it calls that a leak; a leak every other call grows again."""
    calls = {"n": 0}
    kept: list[torch.Tensor] = []

    def late() -> None:  # warm-up is call 1; calls 2-4 measured; allocates once, in call 4
        calls["n"] += 1
        if calls["n"] == 4:
            kept.append(torch.ones(128))

    result = check_leaks(late, CpuMemory(), warmup=1, iterations=3, tolerance=0)
    # ran three runs more, flat (at 512 B, or above: the census counts every live tensor of the
    # process, and one another test left for its garbage collection may land in the window)
    tail = result.series["cpu tensors"][-4:]
    assert len(set(tail)) == 1
    assert tail[0] >= 512
    assert result.leaks == {}
    assert result.message() is None

    calls["n"] = 0

    def every_other() -> None:
        calls["n"] += 1
        if calls["n"] % 2 == 0:
            kept.append(torch.ones(128))

    result = check_leaks(every_other, CpuMemory(), warmup=1, iterations=3, tolerance=0)
    assert result.iterations == 6
    assert result.leaks == {"cpu tensors": 3 * 512}
    assert result.message() == (
        "leak: +1.5 KiB over 6 runs (steps +512 B, +0 B, +512 B, +0 B, +512 B, +0 B) on cpu tensors"
    )


def test_irregular_growth_lists_the_steps() -> None:
    result = LeakResult(series={"pinned host": [0, 512, 512, 2048]}, tolerance=0)
    assert (
        result.message()
        == "leak: +2.0 KiB over 3 runs (steps +512 B, +0 B, +1.5 KiB) on pinned host"
    )


_HELD: list[torch.Tensor] = []


def test_cpu_census_flags_a_module_level_list_and_names_the_tensor() -> None:
    def leaky() -> None:
        _HELD.append(torch.ones(1 << 20))

    try:
        result = check_leaks(leaky, CpuMemory(), warmup=1, iterations=3, tolerance=0)
    finally:
        _HELD.clear()
    assert result.leaks == {"cpu tensors": 3 * 4 * (1 << 20)}
    assert result.message() == "leak: +12.0 MiB over 3 runs (+4.0 MiB each) on cpu tensors"
    line = leaky.__code__.co_firstlineno + 1
    assert result.sites == [
        f"4.0 MiB in 1 tensor at tests/unit/test_memory.py:{line} in leaky (float32[1048576])"
    ]
    assert result.settle_steps[0].startswith("gc.collect")


def test_cpu_census_passes_alloc_and_free_and_reference_cycles() -> None:
    def tidy() -> None:
        x = torch.ones(1 << 18)
        cycle: list[object] = [x]
        cycle.append(cycle)
        del x, cycle

    result = check_leaks(tidy, CpuMemory(), warmup=1, iterations=3, tolerance=0)
    assert result.leaks == {}


def test_cpu_census_passes_a_bounded_cache() -> None:
    cache: dict[int, torch.Tensor] = {}
    calls = iter(range(1000))

    def bounded() -> None:
        cache[next(calls) % 2] = torch.ones(1024)

    result = check_leaks(bounded, CpuMemory(), warmup=2, iterations=3, tolerance=0)
    assert result.leaks == {}


def test_user_frame_skips_library_frames() -> None:
    frames = [
        {"filename": "/x/site-packages/torch/nn/modules/linear.py", "line": 1, "name": "f"},
        {"filename": "/x/pytest_cudaperf/memory.py", "line": 2, "name": "g"},
        {"filename": "/repo/tests/test_model.py", "line": 42, "name": "forward"},
    ]
    assert user_frame(frames).endswith("tests/test_model.py:42 in forward")
    assert user_frame([]).startswith("an unknown site")


def test_release_frames_frees_locals_even_after_an_f_locals_read() -> None:
    import gc
    import weakref

    from pytest_cudaperf.memory.oom import release_frames

    refs = {}

    def body() -> None:
        keep = torch.ones(16)
        refs["w"] = weakref.ref(keep)
        raise MemoryError("out of memory")

    try:
        body()
    except MemoryError as exc:
        tb = exc.__traceback__
        assert tb is not None
        assert tb.tb_next is not None
        _ = tb.tb_next.tb_frame.f_locals  # what traceback formatting does
        release_frames(tb)
    gc.collect()
    assert refs["w"]() is None


def test_cpu_census_counts_replaced_state_as_no_growth() -> None:
    """State replaced by every run (like gradients) is no growth; only the kept tensor is."""
    state = {"grad": torch.ones(1 << 18)}
    kept: list[torch.Tensor] = []

    def step() -> None:
        state["grad"] = torch.ones(1 << 18)  # replaces a tensor created before the check
        kept.append(torch.ones(1))

    result = check_leaks(step, CpuMemory(), warmup=1, iterations=3, tolerance=0)
    assert result.message() == "leak: +12 B over 3 runs (+4 B each) on cpu tensors"


def _make(n: int) -> torch.Tensor:
    return torch.zeros(n)


def test_creation_sites_name_the_innermost_user_frame_and_keep_it_through_views() -> None:
    recorder = CreationSites()
    with recorder.recording():
        made = _make(256)
        view = made[:10]
        view.add_(1)  # in place: the same storage, the site stays
        clone_line = sys._getframe().f_lineno + 1
        other = made.clone()
    made_line = _make.__code__.co_firstlineno + 1
    ptr = made.untyped_storage().data_ptr()
    assert recorder.site(ptr) == f"tests/unit/test_memory.py:{made_line} in _make"
    assert recorder.site(other.untyped_storage().data_ptr()).endswith(
        f"test_memory.py:{clone_line} in "
        "test_creation_sites_name_the_innermost_user_frame_and_keep_it_through_views"
    )
    assert recorder.site(12345).startswith("an unknown site")


def test_creation_sites_run_reports_a_body_that_fails_under_the_mode() -> None:
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    def fragile() -> None:
        torch.ones(3)
        if _get_current_dispatch_mode() is not None:
            raise RuntimeError("not under a mode, please")

    recorder = CreationSites()
    assert recorder.run(fragile) is False
    assert recorder.error is not None
    assert "RuntimeError: not under a mode, please" in recorder.error
    assert recorder.sites == {}
    assert CreationSites().run(lambda: torch.ones(3)) is True


def test_line_growth_keeps_what_the_run_did_not_free() -> None:
    pool: list[int] = []

    def body() -> None:
        pool.append(100)  # a temporary, freed below
        pool.append(7)  # kept
        pool.remove(100)

    first = body.__code__.co_firstlineno
    growth = LineGrowth(lambda: sum(pool))
    with growth.tracing():
        body()
    assert growth.error is None
    # the temporary is freed out of order: the decrease is matched by size, not by order
    assert growth.sites() == [(7, f"tests/unit/test_memory.py:{first + 2} in body")]


def test_line_growth_stands_aside_for_another_tracer() -> None:
    def other(frame: object, event: str, arg: object) -> None:
        return None

    previous = sys.gettrace()
    sys.settrace(other)
    try:
        growth = LineGrowth(lambda: 0)
        with growth.tracing():
            pass
        assert sys.gettrace() is other
    finally:
        sys.settrace(previous)
    assert growth.error is not None
    assert "another tracer" in growth.error


def test_group_storages_groups_by_site_largest_first() -> None:
    lines = group_storages(
        [(10, "a[1]", "x.py:1 in f"), (30, "b[2]", "y.py:2 in g"), (5, "c[3]", "x.py:1 in f")],
        "pinned host tensor",
        "something failed",
    )
    assert lines == [
        "30 B in 1 pinned host tensor at y.py:2 in g (b[2])",
        "15 B in 2 pinned host tensors at x.py:1 in f (a[1], c[3])",
        "(pinned host tensor creation sites not traced: something failed)",
    ]


def test_cuda_memory_reads_only_devices_with_a_context(monkeypatch: pytest.MonkeyPatch) -> None:
    """Synchronizing or reading a device without a context would create one."""
    from pytest_cudaperf import _torch_compat

    memory = CudaMemory.__new__(CudaMemory)
    fake_cuda = types.SimpleNamespace(is_initialized=lambda: True, device_count=lambda: 4)
    contexts = {0: True, 1: False, 2: True, 3: False}
    fake_c = types.SimpleNamespace(_cuda_hasPrimaryContext=lambda i: contexts[i])
    monkeypatch.setattr(torch, "_C", fake_c)
    memory._torch = types.SimpleNamespace(cuda=fake_cuda, _C=fake_c)
    assert _torch_compat.has_primary_context(1) is False
    assert memory.devices() == [0, 2]
    fake_cuda.is_initialized = lambda: False
    assert memory.devices() == []


@pytest.mark.parametrize("leaked", [(), ("cpu tensors",)])
def test_cpu_sites_accept_the_leaked_signals(leaked: tuple[str, ...]) -> None:
    held: list[torch.Tensor] = []
    sites = CpuMemory().sites(lambda: held.append(torch.ones(8)), leaked)
    assert len(sites) == 1
    assert "1 tensor at tests/unit/test_memory.py:" in sites[0]


def test_group_storages_without_descriptions_names_blocks_plainly() -> None:
    assert group_storages([(512, "", "m.py:3 in f"), (512, "", "m.py:3 in f")], "block") == [
        "1.0 KiB in 2 blocks at m.py:3 in f"
    ]


def test_cuda_readings_and_memory_outside_torch_with_a_fake_torch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Allocated bytes per device with a context, pinned host bytes, and used minus reserved
    device memory as the outside-torch signal (line tracing sums the latter)."""
    stats = {
        0: {"allocated_bytes.all.current": 100, "reserved_bytes.all.current": 1000},
        1: {"allocated_bytes.all.current": 7, "reserved_bytes.all.current": 50},
    }
    fake_cuda = types.SimpleNamespace(
        is_initialized=lambda: True,
        device_count=lambda: 2,
        memory_stats=lambda i: stats[i],
        mem_get_info=lambda i: (10_000 - 1500 if i == 0 else 10_000 - 80, 10_000),
        host_memory_stats=lambda: {"allocated_bytes.current": 64},
    )
    fake_c = types.SimpleNamespace(_cuda_hasPrimaryContext=lambda i: True)
    # the context check reads the real torch's: on a CUDA host without a context on a device it
    # would leave that device out (this test failed on a 2-GPU H200 host, 2026-11-23)
    monkeypatch.setattr(torch, "_C", fake_c)
    memory = CudaMemory.__new__(CudaMemory)
    memory._torch = types.SimpleNamespace(cuda=fake_cuda, _C=fake_c)
    memory.pinned, memory.outside_torch = True, True
    assert memory.read() == {
        "cuda:0": 100,
        "outside torch on cuda:0": 500,
        "cuda:1": 7,
        "outside torch on cuda:1": 30,
        "pinned host": 64,
    }
    assert memory._outside_torch() == 530


def test_leak_checks_read_the_allocator_of_the_tests_device(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import torch

    from pytest_cudaperf.memory.backends import device_type

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a GPU host
    assert device_type() == "cuda"
    assert device_type("auto", "cuda:1") == "cuda"
    # --cudaperf-device=cpu on a GPU host: a CPU tensor's leak is in the CPU census, not CUDA's
    assert device_type("cpu") == "cpu"
    assert device_type("auto", "cpu") == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert device_type("auto") == "cpu"


def test_frozen_heap_freezes_for_its_body_and_leaves_a_frozen_heap_frozen() -> None:
    """A leak check on an allocator freezes what exists for its body and unfreezes after; where
    the process froze its heap itself, that freeze outlives the check (unfreezing would undo
    it)."""
    import gc

    from pytest_cudaperf.memory.protocol import frozen_heap

    before = gc.get_freeze_count()
    gc.unfreeze()
    try:
        with frozen_heap():
            assert gc.get_freeze_count() > 0
        assert gc.get_freeze_count() == 0  # nothing was frozen before: nothing is after
        gc.freeze()
        frozen = gc.get_freeze_count()
        with frozen_heap():
            pass
        assert gc.get_freeze_count() == frozen  # the process's own freeze, kept
    finally:
        if before:  # the test process's own (tests/conftest.py)
            gc.freeze()
        else:
            gc.unfreeze()


class ScriptedAllocator:
    """torch.cuda's allocator counters as a peak window reads them: ``current`` and its
    ``peak`` since the last reset; ``on_read`` runs as memory_stats is called (what a garbage
    collection or another thread could do meanwhile)."""

    def __init__(self, current: int) -> None:
        self.current = self.peak = current
        self.on_read: list[Callable[[], None]] = []
        self.collector_on: list[bool] = []

    def alloc(self, size: int) -> None:
        self.current += size
        self.peak = max(self.peak, self.current)

    def memory_stats(self, index: int) -> dict[str, int]:
        self.collector_on.append(gc.isenabled())
        stats = {"requested_bytes.all.current": self.current, "requested_bytes.all.peak": self.peak}
        for act in self.on_read:
            act()
        return stats

    def cuda(self) -> types.SimpleNamespace:
        def reset(index: int) -> None:
            self.peak = self.current

        return types.SimpleNamespace(
            is_initialized=lambda: True,
            synchronize=lambda: None,
            current_device=lambda: 0,
            memory_stats=self.memory_stats,
            reset_peak_memory_stats=reset,
        )


def _peak_of(allocator: ScriptedAllocator, body: Callable[[], None]) -> int:
    memory = CudaMemory.__new__(CudaMemory)
    memory._torch = types.SimpleNamespace(cuda=allocator.cuda())
    with memory.peak_window() as window:
        body()
    assert window.result is not None
    return window.result.peak_bytes


def test_a_peak_window_counts_what_its_body_allocated_above_its_start() -> None:
    allocator = ScriptedAllocator(10 << 20)
    assert _peak_of(allocator, lambda: allocator.alloc(3 << 20)) == 3 << 20
    assert allocator.collector_on[0] is False  # entered with the collector held off
    assert gc.isenabled()


def test_a_peak_window_whose_start_was_freed_under_it_reads_zero_not_negative() -> None:
    """6 MiB freed between the entry's reading and the reset, as another thread can (a kornia
    run on the H200, 2026-11-28, read a peak of -6291452 bytes, which failed its report)."""
    allocator = ScriptedAllocator(10 << 20)
    freed = [False]

    def free_once() -> None:
        if not freed[0]:
            freed[0] = True
            allocator.current -= 6 << 20

    allocator.on_read.append(free_once)
    assert _peak_of(allocator, lambda: allocator.alloc(1 << 20)) == 0
