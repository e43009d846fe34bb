from __future__ import annotations

import torch

from pytest_cudaperf.memory import CpuMemory, LeakResult, check_leaks, user_frame


def test_steady_growth_is_a_leak_with_a_per_run_message() -> None:
    result = LeakResult(series={"cuda:0": [0, 1 << 20, 2 << 20, 3 << 20]}, tolerance=0)
    assert result.leaks == {"cuda:0": 3 << 20}
    assert result.message() == "leak: +3.0 MiB over 3 runs (+1.0 MiB each) on cuda:0"


def test_plateau_and_tolerance_are_not_leaks() -> None:
    plateau = LeakResult(series={"cuda:0": [0, 512, 1024, 1024]}, tolerance=0)
    assert plateau.leaks == {}
    assert plateau.message() is None
    small = LeakResult(series={"cuda:0": [0, 100, 200, 300]}, tolerance=1024)
    assert small.leaks == {}


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
    assert result.sites == [
        "4.0 MiB in 1 tensor float32[1048576] left alive by one run of the body"
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

    from pytest_cudaperf.memory import release_frames

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
