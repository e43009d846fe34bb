"""@no_leak, memory_guard and pinned_batch on the CPU backend."""

from __future__ import annotations

import json

import pytest


def test_no_leak_and_memory_guard(pytester: pytest.Pytester, mode: list[str]) -> None:
    pytester.makepyfile("""
        import pytest
        import torch

        HISTORY = []

        @pytest.mark.no_leak
        def test_appends_to_module_list():
            HISTORY.append(torch.ones(1 << 20))  # 4 MiB per call

        @pytest.mark.no_leak
        def test_allocates_and_frees():
            x = torch.ones(1 << 20)
            assert x.sum() == 1 << 20

        @pytest.mark.no_leak
        def test_body_failure_is_not_judged():
            HISTORY.append(torch.ones(10))
            assert False, "the body's own failure"

        def test_guard_block_leaks(memory_guard):
            with memory_guard() as guard:
                HISTORY.append(torch.ones(1 << 18))
            assert guard.leaked_bytes == 1 << 20

        def test_guard_block_clean(memory_guard):
            with memory_guard() as guard:
                y = torch.ones(1 << 18)
                del y
            assert guard.leaked_bytes == 0

        def test_guard_check(memory_guard):
            memory_guard.check(lambda: HISTORY.append(torch.ones(256)))
    """)
    result = pytester.runpytest(*mode)
    result.assert_outcomes(passed=2, failed=4)
    result.stdout.fnmatch_lines_random(
        [
            "leak: +12.0 MiB over 3 runs (+4.0 MiB each) on cpu tensors",
            "    4.0 MiB in 1 tensor at test_*.py:* in test_appends_to_module_list"
            " (float32[[]1048576[]])",
            "leak: +1.0 MiB in the guarded block on cpu tensors",
            "leak: +3.0 KiB over 3 runs (+1.0 KiB each) on cpu tensors",
            "*AssertionError: the body's own failure",
            "cudaperf: 0 measured, 0 regressions, 0 improved, 0 new, 0 inconclusive, 3 leaks",
        ]
    )
    result.stdout.fnmatch_lines(["LEAKED *test_appends_to_module_list - leak: *"])


def test_a_guard_used_wrongly_fails_its_test_with_one_line(pytester: pytest.Pytester) -> None:
    """Called without ``with`` (it checked nothing), a block run twice, ``g.peak_bytes`` read
    from the call, a ``pinned`` that is not a boolean: each fails its test with one line."""
    pytester.makepyfile("""
        import torch

        def test_without_with(memory_guard):
            memory_guard(max_peak=1)
            torch.ones(1 << 18)

        def test_twice(memory_guard):
            block = memory_guard()
            with block:
                pass
            with block:
                pass

        def test_read_from_the_call(memory_guard):
            memory_guard().peak_bytes

        def test_pinned_not_a_boolean(memory_guard):
            with memory_guard(pinned="no"):
                pass
    """)
    result = pytester.runpytest()
    result.assert_outcomes(passed=1, failed=3, errors=1)  # the first fails after its body
    result.stdout.fnmatch_lines_random(
        [
            "memory_guard(...) was called without `with`: it checked nothing — write "
            "`with memory_guard(...) as g:` around the block",
            "memory_guard: this guard's block ran already; call memory_guard(...) again for "
            "another block",
            "memory_guard: peak_bytes is read from the guard a `with` block gives: "
            "`with memory_guard(...) as g:` then g.peak_bytes",
            "memory_guard: pinned: expected True or False, got 'no'",
        ]
    )
    assert "Traceback" not in result.stdout.str()


def test_check_takes_the_guards_leak_tolerance(pytester: pytest.Pytester) -> None:
    """``memory_guard.check(leak_tolerance=)``, as ``memory_guard(leak_tolerance=)``; its earlier
    name ``tolerance=`` still holds, with a DeprecationWarning; a bad one is named as given."""
    pytester.makepyfile("""
        import torch

        HISTORY = []

        def grow():
            HISTORY.append(torch.ones(256))  # 1 KiB a run

        def test_within(memory_guard):
            memory_guard.check(grow, leak_tolerance="1MiB")

        def test_within_by_the_old_name(memory_guard):
            memory_guard.check(grow, tolerance="1MiB")

        def test_beyond(memory_guard):
            memory_guard.check(grow, leak_tolerance=0)

        def test_not_a_size(memory_guard):
            memory_guard.check(grow, leak_tolerance="lots")
    """)
    result = pytester.runpytest("-W", "always::DeprecationWarning")
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines_random(
        [
            "*memory_guard.check(tolerance=...) is now leak_tolerance=..., as in memory_guard(...)",
            "leak: +3.0 KiB over 3 runs (+1.0 KiB each) on cpu tensors",
            "*memory_guard.check: leak_tolerance: *'lots'*",
        ]
    )


def test_pinned_batch_on_cpu(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest
        import torch

        def test_batches(pinned_batch, cuda_device):
            a = pinned_batch((4, 8))
            assert a is pinned_batch((4, 8))  # reused within a test
            assert torch.equal(a, pinned_batch((4, 8), seed=0))
            assert not torch.equal(a, pinned_batch((4, 8), seed=1))
            assert torch.equal(pinned_batch(5, fill="arange"), torch.arange(5.0))
            assert pinned_batch((2, 2), torch.int64, fill="ones").dtype == torch.int64
            assert pinned_batch(3, torch.int32, fill="zeros").sum() == 0
            ints = pinned_batch(1000, torch.int16, fill="rand")
            assert 0 <= int(ints.min()) and int(ints.max()) < 100
            assert a.is_pinned() == torch.cuda.is_available()
            on_device = a.to(cuda_device, non_blocking=True)
            assert torch.equal(on_device.cpu(), a)

        def test_same_values_in_another_test(pinned_batch):
            expected = torch.randn((4, 8), generator=torch.Generator().manual_seed(0))
            assert torch.equal(pinned_batch((4, 8)), expected)

        def test_bad_arguments(pinned_batch):
            with pytest.raises(ValueError, match="fill must be one of randn"):
                pinned_batch(3, fill="noise")
            with pytest.raises(ValueError, match="shape must be non-negative integers"):
                pinned_batch((-1, 2))
    """)
    pytester.runpytest().assert_outcomes(passed=3)


def test_body_rerun_by_the_plugin_records_its_measurements_once(pytester: pytest.Pytester) -> None:
    """@no_leak and a whole-test @perf re-run the body: the cuda_timer and memory_guard calls
    inside it record on the test's own call only (not #2, #3… for every re-run), and the timer
    does not measure again."""
    pytester.makepyfile("""
        import time

        import pytest

        @pytest.mark.no_leak
        def test_timer_and_guard_under_no_leak(cuda_timer, memory_guard):
            m = cuda_timer(lambda: time.sleep(0.001), max_time=0.1)
            with memory_guard():
                pass
            with open("samples.txt", "a") as f:
                f.write(f"{m.n}\\n")

        @pytest.mark.perf
        def test_guard_in_whole_test_perf(memory_guard):
            with memory_guard():
                time.sleep(0.001)
    """)
    result = pytester.runpytest("--cudaperf-json=out.json")
    result.assert_outcomes(passed=2)
    runs = [int(n) for n in (pytester.path / "samples.txt").read_text().split()]
    assert len(runs) >= 3, runs
    assert runs[0] > 1, runs  # the test's own call measured
    assert set(runs[1:]) == {1}, runs  # the re-runs only ran the callable
    report = json.loads((pytester.path / "out.json").read_text())
    keys = sorted(r["key"].split("::")[-1] for t in report["tests"] for r in t["records"])
    assert keys == ["test_guard_in_whole_test_perf", "test_timer_and_guard_under_no_leak"]
