"""GPU tests of the foundation: probing without a context, device mapping, async errors, pinned
memory, @gpu requirements, OOM handling. Each runs an inner pytest in a subprocess, since a CUDA
context belongs to one process."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.gpu


def test_header_and_probe_create_no_cuda_context(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("""
        import json, torch

        def pytest_sessionfinish(session):
            if not hasattr(session.config, "workerinput"):
                with open("controller.json", "w") as f:
                    json.dump({"context": torch._C._cuda_hasPrimaryContext(0)}, f)
    """)
    pytester.makepyfile("""
        import pytest, torch

        @pytest.mark.gpu  # a test that uses the plugin: the device lines follow collection
        def test_no_context_before_gpu_use():
            assert not torch._C._cuda_hasPrimaryContext(0)
    """)
    for args in ([], ["-n2"]):
        result = pytester.runpytest(*args)
        result.assert_outcomes(passed=1)
        result.stdout.fnmatch_lines(["cudaperf: cuda:0 * sm_*, * GiB, * SMs, L2 *"])
        assert json.loads((pytester.path / "controller.json").read_text()) == {"context": False}


def test_workers_map_to_gpus_and_tests_run_on_them(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import json, os, torch
        import pytest

        @pytest.mark.parametrize("i", range(4))
        def test_device(i, cuda_device, worker_id):
            assert cuda_device.type == "cuda"
            assert torch.cuda.current_device() == cuda_device.index
            x = torch.ones(8, device=cuda_device)
            assert x.sum().item() == 8
            with open(f"map-{worker_id}-{i}.json", "w") as f:
                json.dump({"worker": worker_id, "index": cuda_device.index,
                           "count": torch.cuda.device_count()}, f)
    """)
    pytester.runpytest("-n2").assert_outcomes(passed=4)
    rows = [json.loads(p.read_text()) for p in pytester.path.glob("map-*.json")]
    assert len(rows) == 4
    for row in rows:
        assert row["index"] == int(row["worker"][2:]) % row["count"]


def test_async_error_is_attributed_to_its_test_and_later_gpu_tests_fail_fast(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile("""
        import torch

        def test_1_device_assert(cuda_device):
            x = torch.zeros(4, device=cuda_device)
            index = torch.tensor([10], device=cuda_device)
            x[index] = 1.0  # out of bounds: a device-side assert, raised asynchronously

        def test_2_next_gpu_test(cuda_device):
            torch.ones(1, device=cuda_device)

        def test_3_cpu_only():
            assert 1 + 1 == 2
    """)
    result = pytester.runpytest("-p", "no:randomly")
    # test_1's call phase passes; its teardown errors; test_2 errors at setup
    result.assert_outcomes(passed=2, errors=2)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_1_device_assert*",
            "*asynchronous CUDA error raised by this test: *device-side assert*",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "*ERROR at setup of test_2_next_gpu_test*",
            "*CUDA context unusable since test_async_error*::test_1_device_assert: *",
        ]
    )


def test_pinned_batch_is_page_locked_and_released(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import torch

        STATE = {}

        def _pinned_now():
            torch._C._host_emptyCache()
            return torch.cuda.host_memory_stats()["allocated_bytes.current"]

        def test_0_before(cuda_device):
            STATE["before"] = _pinned_now()

        def test_1_use(pinned_batch, cuda_device):
            batch = pinned_batch((1024, 1024))
            assert batch.is_pinned()
            on_gpu = batch.to(cuda_device, non_blocking=True)
            torch.cuda.synchronize()
            assert torch.equal(on_gpu.cpu(), batch)
            assert _pinned_now() >= STATE["before"] + 4 * 1024 * 1024

        def test_2_after(cuda_device):
            assert _pinned_now() == STATE["before"]
    """)
    pytester.runpytest("-p", "no:randomly").assert_outcomes(passed=3)


def test_gpu_requirements_skip_with_reasons(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest

        @pytest.mark.gpu
        def test_any_gpu():
            pass

        @pytest.mark.gpu(min_memory="1000 GiB")
        def test_huge():
            pass

        @pytest.mark.gpu(capability=(99, 0))
        def test_future():
            pass

        @pytest.mark.gpu(count=64)
        def test_many():
            pass
    """)
    result = pytester.runpytest("-rs", "--cudaperf-require-gpu")
    result.assert_outcomes(passed=1, skipped=3)
    result.stdout.fnmatch_lines_random(
        [
            "SKIPPED*needs 1000.0 GiB of GPU memory, cuda:0 (*) has *",
            "SKIPPED*needs sm_990, cuda:0 (*) is sm_*",
            "SKIPPED*needs 64 GPUs, * visible",
        ]
    )


def test_oom_fails_alone_and_the_next_test_runs(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import torch

        def test_1_oom(cuda_device):
            keep = torch.empty(1 << 30, device=cuda_device)
            torch.empty(1 << 50, dtype=torch.uint8, device=cuda_device)

        def test_2_next(cuda_device):
            assert torch.cuda.memory_allocated() < (1 << 30)
            torch.ones(1 << 20, device=cuda_device).sum().item()
    """)
    result = pytester.runpytest("-p", "no:randomly")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*cudaperf memory at OOM*",
            "cuda:0: allocated *, reserved *, largest free cached block *, device free * of *",
        ]
    )
