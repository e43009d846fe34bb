"""--cudaperf-leak-sweep on the CPU backend: unmarked tests read before and after their body,
those that grew re-run under @no_leak's protocol, with and without xdist."""

from __future__ import annotations

import json

import pytest

SUITE = """
    import torch

    HISTORY = []

    def test_keeps_a_tensor_per_call():
        HISTORY.append(torch.ones(1 << 10) * 2)

    def test_frees_what_it_allocates():
        x = torch.ones(1 << 12)
        assert float(x.sum()) == 1 << 12
"""


def test_a_leak_fails_with_its_site_and_a_clean_test_passes(
    pytester: pytest.Pytester, mode: list[str]
) -> None:
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest("--cudaperf-json=out.json", "--cudaperf-leak-sweep", *mode)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "leak: +12.0 KiB over 3 runs (+4.0 KiB each) on cpu tensors",
            "    4.0 KiB in 1 tensor at test_suite.py:6 in test_keeps_a_tensor_per_call"
            " (float32[[]1024[]])",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "leak sweep (fail): 2 checked (1 re-run), 1 leaking, 0 unchecked, "
            "0 without allocations; the sweep added * s",
            "LEAKED test_suite.py::test_keeps_a_tensor_per_call: leak: +12.0 KiB over 3 runs*",
            "    4.0 KiB in 1 tensor at test_suite.py:6 in test_keeps_a_tensor_per_call*",
            "cudaperf: 0 measured, * 1 leak",
        ]
    )
    result.stdout.fnmatch_lines(["LEAKED test_suite.py::test_keeps_a_tensor_per_call - leak:*"])
    document = json.loads((pytester.path / "out.json").read_text())
    assert document["schema"] == 4
    sweep = document["leak_sweep"]
    assert sweep["mode"] == "fail"
    assert sweep["leaking"] == ["test_suite.py::test_keeps_a_tensor_per_call"]
    assert (sweep["checked"], sweep["rechecked"], sweep["unchecked"]) == (2, 1, {})
    statuses = {t["nodeid"].rsplit("::", 1)[1]: t["sweep"]["status"] for t in document["tests"]}
    assert statuses == {
        "test_keeps_a_tensor_per_call": "leak",
        "test_frees_what_it_allocates": "clean",
    }


def test_unchecked_tests_say_why_and_a_lazy_cache_is_no_leak(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_unchecked="""
        import pytest
        import torch

        KEPT = []
        CACHE = {}

        def test_fills_a_lazy_cache_once():
            if "table" not in CACHE:
                CACHE["table"] = torch.arange(1 << 12, dtype=torch.float32)
            assert CACHE["table"].numel() == 1 << 12

        @pytest.fixture
        def ledger():
            return []

        @pytest.mark.leak_sweep(repeatable=False, reason="appends to a log once")
        def test_marked():
            KEPT.append(torch.ones(64))

        def test_unsafe_fixture(ledger):
            KEPT.append(torch.ones(64))

        def test_raises_when_rerun():
            KEPT.append(torch.ones(64))
            assert len(KEPT) == 3, "ran once"

        def test_body_fails():
            KEPT.append(torch.ones(64))
            assert False, "the body's own failure"

        def test_skips():
            pytest.skip("not here")

        @pytest.mark.leak_sweep(repeatable=False)
        def test_marked_but_clean():
            assert torch.ones(4).sum() == 4
    """
    )
    result = pytester.runpytest(
        "--cudaperf-leak-sweep", "--cudaperf-leak-sweep-unsafe-fixtures=ledger, tmp_path"
    )
    result.assert_outcomes(passed=5, failed=1, skipped=1)
    result.stdout.fnmatch_lines(
        [
            "leak sweep (fail): 2 checked (2 re-run), 0 leaking, 4 unchecked, *",
            "UNCHECKED test_unchecked.py::test_body_fails: the body failed",
            "UNCHECKED test_unchecked.py::test_marked: grew +256 B on cpu tensors in its run, "
            "not re-run: marked leak_sweep(repeatable=False): appends to a log once",
            "UNCHECKED test_unchecked.py::test_raises_when_rerun: its body raised "
            "AssertionError: ran once* when re-run (not repeatable: mark it "
            "@pytest.mark.leak_sweep(repeatable=False))",
            "UNCHECKED test_unchecked.py::test_unsafe_fixture: grew +256 B on cpu tensors in "
            "its run, not re-run: uses the fixture 'ledger', which "
            "--cudaperf-leak-sweep-unsafe-fixtures names: a re-run would corrupt its state",
        ]
    )
    result.stdout.no_fnmatch_line("*test_skips*")
    result.stdout.no_fnmatch_line("*test_fills_a_lazy_cache_once*")
    result.stdout.no_fnmatch_line("*test_marked_but_clean*")


def test_report_mode_lists_a_leak_without_failing(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_report="""
        import torch

        KEPT = []

        def test_keeps():
            KEPT.append(torch.ones(16))
    """
    )
    pytester.makeini("[pytest]\ncudaperf_leak_sweep = report\n")
    result = pytester.runpytest()
    result.assert_outcomes(passed=1)
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            "leak sweep (report): 1 checked (1 re-run), 1 leaking, 0 unchecked, *",
            "LEAKING test_report.py::test_keeps: leak: +192 B over 3 runs (+64 B each) on cpu "
            "tensors",
            "    64 B in 1 tensor at test_report.py:6 in test_keeps (float32[[]16[]])",
        ]
    )


def test_no_leak_tests_check_themselves_and_disable_turns_the_sweep_off(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        test_marked="""
        import pytest
        import torch

        KEPT = []

        @pytest.mark.no_leak
        def test_own_check():
            KEPT.append(torch.ones(16))
    """
    )
    result = pytester.runpytest("--cudaperf-leak-sweep")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["leak sweep (fail): 0 checked (0 re-run), 0 leaking, *"])
    disabled = pytester.runpytest("--cudaperf-leak-sweep", "--cudaperf-disable")
    disabled.assert_outcomes(passed=1)
    disabled.stdout.no_fnmatch_line("*leak sweep*")


def test_a_bad_mode_is_one_line_naming_the_option(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest("--cudaperf-leak-sweep", "everything")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: --cudaperf-leak-sweep: expected fail, report or off, got 'everything' (a "
            "path after the flag? give the mode with '=', as --cudaperf-leak-sweep=report, or "
            "put the flag after the paths) (from the command line)"
        ]
    )
    result.stdout.no_fnmatch_line("*INTERNALERROR*")


def test_a_suite_without_torch_is_swept_without_importing_it(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_plain="""
        import sys

        def test_first():
            assert sum(range(10)) == 45

        def test_second_sees_no_torch():
            assert "torch" not in sys.modules
    """
    )
    # a process of its own: this one has torch imported
    result = pytester.runpytest_subprocess("--cudaperf-leak-sweep=report", "-p", "no:randomly")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        ["leak sweep (report): 0 checked (0 re-run), 0 leaking, 0 unchecked, 2 without alloc*"]
    )
