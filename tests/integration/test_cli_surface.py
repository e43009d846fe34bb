"""Options, markers, header and start-up errors, as a user sees them."""

from __future__ import annotations

import sys

import pytest
import torch


def test_markers_show_full_signatures(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--markers")
    result.stdout.fnmatch_lines(
        [
            "@pytest.mark.gpu(count=1, min_memory=None, capability=None): needs `count` CUDA GPUs*",
            "@pytest.mark.perf(max_ms=None, tolerance=None, cache=None, graph=False, warmup=None, "
            "min_time=None, max_time=None, min_speedup=None, max_peak=None, rounds=None, "
            "max_recompiles=None, flops=None, bytes=None, min_peak=None, max_joules=None): "
            "performance test*",
            "@pytest.mark.no_leak(tolerance=0, warmup=2, iterations=3, pinned=True, "
            "outside_torch=False, max_peak=None): fails when the test body leaks memory*",
            "@pytest.mark.distributed(world_size=2, backend=None, timeout=300.0): runs the test "
            "body in `world_size` processes with torch.distributed initialised*",
            "@pytest.mark.leak_sweep(repeatable=True, reason=''): for --cudaperf-leak-sweep: "
            "`repeatable=False` says that the test body must not be re-run*",
        ]
    )


def test_help_shows_the_cudaperf_group(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(
        [
            "GPU performance and memory regression testing:",
            "  --cudaperf-device={auto,cuda,cpu}",
            "*--cudaperf-require-gpu*",
            "*--cudaperf-update*",
            "*--cudaperf-tolerance=FRACTION*",
            "*--cudaperf-baseline-dir=DIR*",
            "*--cudaperf-json=PATH*",
            "*--cudaperf-html=PATH*",
            "*--cudaperf-leak-sweep=[[]{fail,report}[]]*",
        ]
    )
    result.stdout.fnmatch_lines(["*cudaperf_device (string):*"])


@pytest.mark.parametrize("args", [["--help"], ["--markers"]])
def test_help_and_markers_never_import_torch(pytester: pytest.Pytester, args: list[str]) -> None:
    code = (
        "import sys, pytest\n"
        f"pytest.main({args!r})\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "print('TORCH-FREE')\n"
    )
    result = pytester.run(sys.executable, "-c", code)
    assert result.ret == 0
    result.stdout.fnmatch_lines(["TORCH-FREE"])


def test_device_lines_follow_collection_when_a_test_uses_the_plugin(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile("def test_x(cuda_device): pass")
    result = pytester.runpytest()
    result.stdout.fnmatch_lines(
        [
            "cudaperf: baselines */.cudaperf (compare)",
            "collected 1 item",
            "cudaperf: torch *, CUDA runtime *, driver *, device mode auto",
            "cudaperf: no usable GPU (torch.cuda.is_available() is False*); CPU: *",
        ]
    )


def test_a_run_that_uses_nothing_of_the_plugin_never_imports_torch(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest("""
        import sys

        def pytest_unconfigure(config):  # after the plugin's summary and report writing
            print("TORCH IMPORTED" if "torch" in sys.modules else "TORCH NOT IMPORTED")
    """)
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest_subprocess("-s")  # this process has torch imported
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["cudaperf: baselines */.cudaperf (compare)", "*TORCH NOT IMPORTED"]
    )
    result.stdout.no_fnmatch_line("cudaperf: torch *")


@pytest.mark.skipif(torch.version.cuda is not None, reason="a CUDA build of torch is imported")
def test_a_run_measuring_code_without_torch_on_a_cpu_build_never_imports_torch(
    pytester: pytest.Pytester,
) -> None:
    """Each entry point measures, is recorded, is judged and is reported, a miss of
    ``min_speedup`` and a regression among them, and torch (seconds to import on a slow host,
    in every process) stays out: its CPU build is read from its version file, and calls that
    ran no torch op are not profiled."""
    pytester.makeconftest("""
        import sys

        def pytest_unconfigure(config):
            print("TORCH IMPORTED" if "torch" in sys.modules else "TORCH NOT IMPORTED")
    """)
    pytester.makepyfile("""
        import os
        import pytest

        N = 1000 * int(os.environ.get("SLOW", "1"))

        @pytest.mark.perf
        def test_body():
            sum(range(N))

        def test_timer(cuda_timer):
            cuda_timer(lambda: sum(range(N)))

        def test_benchmark(benchmark):
            benchmark(sum, range(N))

        @pytest.mark.perf(min_speedup=100)
        def test_compare(cuda_timer):
            cuda_timer.compare(lambda: sum(range(N)), lambda: sum(range(N)))
    """)
    fast = ["-s", "--cudaperf-max-time=0.05", "--cudaperf-confirm-process=off"]
    update = pytester.runpytest_subprocess(*fast, "--cudaperf-update")
    update.assert_outcomes(passed=3, failed=1)
    update.stdout.fnmatch_lines(
        [
            "cudaperf: torch *+cpu, CUDA runtime none*",
            "cudaperf: 3 measured*, 1 too slow",
            "*TORCH NOT IMPORTED",
        ]
    )
    (stored,) = (pytester.path / ".cudaperf").glob("*.json")
    assert "breakdown" not in stored.read_text()  # nothing profiled, nothing stored
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SLOW", "30")
        slow = pytester.runpytest_subprocess(*fast, "--cudaperf-tolerance=50%")
    slow.stdout.fnmatch_lines(["cudaperf: 3 measured, * regression*", "*TORCH NOT IMPORTED"])
    assert slow.parseoutcomes()["failed"] >= 2  # the compare, and a regression at least
    assert "breakdown" not in slow.stdout.str()


def test_device_lines_in_the_header_under_xdist(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest("-n", "2")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "cudaperf: torch *, CUDA runtime *, driver *, device mode auto",
            "cudaperf: baselines */.cudaperf (compare)",
        ]
    )


@pytest.mark.parametrize(
    ("args", "ini", "env", "line"),
    [
        (
            ["--cudaperf-device=gpu0"],
            "",
            {},
            "ERROR: --cudaperf-device: expected auto, cuda or cpu, got 'gpu0' (from the command line)",
        ),
        (
            [],
            "cudaperf_device = gpu0",
            {},
            "ERROR: --cudaperf-device: expected auto, cuda or cpu, got 'gpu0' "
            "(from tox.ini [[]cudaperf_device[]])",
        ),
        (
            [],
            "",
            {"PYTEST_CUDAPERF_TOLERANCE": "fast"},
            "ERROR: --cudaperf-tolerance: expected a fraction such as 0.05 or 5%, got 'fast' "
            "(from the environment variable PYTEST_CUDAPERF_TOLERANCE)",
        ),
        (["--cudaperf-max-time=soon"], "", {}, "ERROR: --cudaperf-max-time: expected seconds*"),
    ],
)
def test_bad_option_values_give_one_line(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    ini: str,
    env: dict[str, str],
    line: str,
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    if ini:
        pytester.makeini(f"[pytest]\n{ini}\n")
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest_subprocess(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([line])
    assert "Traceback" not in result.stderr.str()
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()


def test_require_gpu_on_a_gpu_less_machine_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest_subprocess("--cudaperf-require-gpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: --cudaperf-require-gpu: no usable GPU: torch.cuda.is_available() is False*"]
    )


def test_plugin_can_be_disabled(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest("-p", "no:cudaperf")
    result.assert_outcomes(passed=1)
    assert "cudaperf:" not in result.stdout.str()


def test_a_fixture_given_a_tensor_for_a_function_fails_with_one_line(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        """
        import torch
        x = torch.full((256, 256), 9.3654)
        def test_timer(cuda_timer): cuda_timer(x @ x)
        def test_bench(benchmark): benchmark(x @ x)
        def test_guard(memory_guard): memory_guard.check(x @ x)
        def test_compare(cuda_timer): cuda_timer.compare(x @ x, lambda: x @ x)
        def test_region(cuda_timer):
            with cuda_timer.region(x):
                pass
        """
    )
    result = pytester.runpytest("-p", "no:benchmark", "--cudaperf-device=cpu")
    result.assert_outcomes(failed=5)
    shape = "got a Tensor of shape (256, 256) — "
    result.stdout.fnmatch_lines_random(
        [
            f"cuda_timer: expected a callable, {shape}pass the function and its arguments: "
            "cuda_timer(fn, x)",
            f"benchmark: expected a callable, {shape}pass the function and its arguments: "
            "benchmark(fn, x)",
            f"memory_guard.check: expected a callable, {shape}pass the function and its "
            "arguments: memory_guard.check(fn, x)",
            f"cuda_timer.compare: candidate: expected a callable, {shape}pass two functions of "
            "no arguments: cuda_timer.compare(lambda: new(x), lambda: old(x))",
            f"cuda_timer.region: expected a name, {shape}name the region*",
        ]
    )
    out = result.stdout.str()
    assert "9.3654" not in out  # no tensor's values
    assert "Traceback" not in out
    assert "pytest_cudaperf/" not in out
    failures = out.split(" FAILURES ")[1].split(" short test summary ")[0]
    body = [line for line in failures.splitlines()[1:-1] if not line.startswith("_")]
    assert len(body) == 5  # one line per test


def test_cudaperf_deselect_drops_exactly_the_test_it_names(pytester: pytest.Pytester) -> None:
    """pytest's --deselect takes a prefix (test_add also drops test_add_hot); the plugin's
    --cudaperf-deselect, which cudaperf ab deselects its decided tests with, takes the id."""
    pytester.makepyfile(test_ops="def test_add(): pass\ndef test_add_hot(): pass\n")
    exact = pytester.runpytest("-v", "--cudaperf-deselect=test_ops.py::test_add")
    exact.assert_outcomes(passed=1, deselected=1)
    exact.stdout.fnmatch_lines(["*test_ops.py::test_add_hot PASSED*"])
    prefix = pytester.runpytest("--deselect=test_ops.py::test_add")
    prefix.assert_outcomes(deselected=2)
