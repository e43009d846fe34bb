"""The leak checker against MEMORY.md's scenarios, through @no_leak on a real GPU: every
look-alike must pass, every true leak must be flagged with its allocation site."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu

MUST_PASS = """
import functools, threading
import pytest
import torch

@pytest.mark.no_leak
def test_first_cuda_use_inside_the_test():
    torch.ones(1 << 20, device="cuda").sum().item()

@pytest.mark.no_leak
def test_first_matmul():
    a = torch.randn(256, 256, device="cuda")
    (a @ a).sum().item()

@pytest.mark.no_leak
def test_matmul_on_a_fresh_side_stream():
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        a = torch.randn(128, 128, device="cuda")
        (a @ a).sum()
    torch.cuda.current_stream().wait_stream(s)

@pytest.mark.no_leak
def test_backward_matmul():
    w = torch.randn(128, 128, device="cuda", requires_grad=True)
    (w @ w).sum().backward()

@pytest.mark.no_leak
def test_fft():
    torch.fft.rfft(torch.randn(4096, device="cuda")).abs().sum().item()

@pytest.mark.no_leak
def test_cudnn_benchmark_conv():
    torch.backends.cudnn.benchmark = True
    try:
        conv = torch.nn.Conv2d(8, 8, 3).cuda()
        conv(torch.randn(2, 8, 32, 32, device="cuda")).sum().item()
    finally:
        torch.backends.cudnn.benchmark = False

@pytest.mark.no_leak
def test_large_alloc_and_free():
    x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    del x

@pytest.mark.no_leak
def test_reference_cycle_holding_a_tensor():
    node = {"t": torch.ones(1024, device="cuda")}
    node["self"] = node

@pytest.mark.no_leak
def test_pytest_raises_holding_a_frame():
    def boom():
        big = torch.ones(1 << 18, device="cuda")
        raise ValueError(str(big.shape))
    with pytest.raises(ValueError):
        boom()

@functools.lru_cache(maxsize=2)
def _cached(n):
    return torch.ones(n, device="cuda")

@pytest.mark.no_leak
def test_bounded_lru_cache():
    _cached(1024)
    _cached(2048)

MODEL = torch.nn.Linear(64, 64).cuda()
OPT = torch.optim.Adam(MODEL.parameters())

@pytest.mark.no_leak
def test_lazily_created_adam_state():
    OPT.zero_grad(set_to_none=True)
    MODEL(torch.randn(8, 64, device="cuda")).sum().backward()
    OPT.step()

@pytest.mark.no_leak
def test_cuda_graph_capture_and_replay():
    x = torch.zeros(1024, device="cuda")
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        x.add_(1)
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        x.add_(1)
    g.replay()
    del g

@pytest.mark.no_leak
def test_record_stream():
    s = torch.cuda.Stream()
    x = torch.ones(1 << 16, device="cuda")
    with torch.cuda.stream(s):
        y = x * 2
    x.record_stream(s)
    del x, y

@pytest.mark.no_leak
def test_pinned_tensor_with_non_blocking_copy_freed():
    host = torch.ones(1 << 16).pin_memory()
    dev = host.to("cuda", non_blocking=True)
    torch.cuda.synchronize()
    del host, dev

_compiled = torch.compile(lambda x: torch.sin(x) * 2)

@pytest.mark.no_leak
def test_torch_compile_default():
    _compiled(torch.randn(1024, device="cuda")).sum().item()

_graphed = torch.compile(lambda x: torch.cos(x) + 1, mode="reduce-overhead")
_INPUT = torch.randn(2048, device="cuda")

@pytest.mark.no_leak
def test_torch_compile_reduce_overhead():
    _graphed(_INPUT).sum().item()
"""

MUST_FLAG = """
import threading
import pytest
import torch

G_LIST = []
HISTORY = []
CACHE = {}
CALLS = [0]
PINNED = []
OUTPUTS = []
GLOBAL_MODULE = torch.nn.Module()

@pytest.mark.no_leak
def test_global_list_of_tensors():
    G_LIST.append(torch.ones(1 << 18, device="cuda"))

@pytest.mark.no_leak
def test_loss_with_graph_in_history():
    w = torch.randn(64, 64, device="cuda", requires_grad=True)
    loss = (w @ w).sum()
    HISTORY.append(loss)

@pytest.mark.no_leak
def test_unbounded_cache():
    CALLS[0] += 1
    CACHE[CALLS[0]] = torch.ones(1024, device="cuda")

@pytest.mark.no_leak
def test_512_bytes_per_call():
    G_LIST.append(torch.empty(128, device="cuda"))

@pytest.mark.no_leak
def test_leak_from_a_background_thread():
    t = threading.Thread(target=lambda: G_LIST.append(torch.ones(4096, device="cuda")))
    t.start()
    t.join()

@pytest.mark.no_leak
def test_pinned_host_tensor_kept():
    PINNED.append(torch.ones(1 << 16).pin_memory())

@pytest.mark.no_leak
def test_caching_allocator_alloc_without_delete():
    torch.cuda.caching_allocator_alloc(1 << 20)

@pytest.mark.no_leak(outside_torch=True)
def test_raw_cudamalloc_never_freed():
    cupy = pytest.importorskip("cupy")
    cupy.cuda.runtime.malloc(8 << 20)  # raw cudaMalloc, outside torch's allocator


def _hook(module, inputs, output):
    OUTPUTS.append(output)

HOOKED = torch.nn.Linear(32, 32).cuda()
HOOKED.register_forward_hook(_hook)

@pytest.mark.no_leak
def test_forward_hook_storing_outputs():
    with torch.no_grad():
        HOOKED(torch.randn(4, 32, device="cuda"))

@pytest.mark.no_leak
def test_register_buffer_on_a_global_module():
    CALLS[0] += 1
    GLOBAL_MODULE.register_buffer(f"b{CALLS[0]}", torch.ones(256, device="cuda"))
"""


def test_look_alikes_pass(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_must_pass=MUST_PASS)
    result = pytester.runpytest("-p", "no:randomly")
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) == 0, result.stdout.str()[-6000:]
    assert outcomes["passed"] == MUST_PASS.count("@pytest.mark.no_leak")


@pytest.mark.gpu_alone  # memory outside torch is read device-wide (conftest.py)
def test_true_leaks_are_flagged_with_their_site(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_must_flag=MUST_FLAG)
    result = pytester.runpytest("-p", "no:randomly")
    text = result.stdout.str()
    expected = MUST_FLAG.count("@pytest.mark.no_leak")
    assert result.parseoutcomes().get("failed") == expected, text[-8000:]
    result.stdout.fnmatch_lines_random(
        [
            "leak: +3.0 MiB over 3 runs (+1.0 MiB each) on cuda:0",
            "*1.0 MiB in 1 block at test_must_flag.py:* in test_global_list_of_tensors",
            "leak: +1.5 KiB over 3 runs (+512 B each) on cuda:0",
            "*on pinned host*",
            "*in 1 pinned host tensor at test_must_flag.py:* in test_pinned_host_tensor_kept *",
            "*1.0 MiB in 1 block at test_must_flag.py:* in test_caching_allocator_alloc_without*",
            "*on outside torch on cuda:0*",
            "* outside torch's allocator at test_must_flag.py:* in "
            "test_raw_cudamalloc_never_freed (by line tracing)",
            # the hook's output is allocated inside Linear: the first frame outside torch is the call
            "*512 B in 1 block at test_must_flag.py:* in test_forward_hook_storing_outputs",
            "*at test_must_flag.py:* in test_register_buffer_on_a_global_module",
            "*at test_must_flag.py:* in <lambda>",
        ]
    )


GUARDED = """
import pytest
import torch

def test_guard_reports_the_block_peak(memory_guard):
    torch.empty(1024, device="cuda")  # CUDA initialised before the guard
    with memory_guard() as guard:
        y = torch.empty(8 << 20, dtype=torch.uint8, device="cuda")
        del y
    assert guard.peak_bytes == 8 << 20, guard.peak_bytes
    assert guard.leaked_bytes == 0

def test_guard_over_its_peak_budget(memory_guard):
    torch.empty(1, device="cuda")
    with memory_guard(max_peak="4 MiB"):
        y = torch.empty(8 << 20, dtype=torch.uint8, device="cuda")
        del y

@pytest.mark.no_leak(max_peak="1 MiB")
def test_no_leak_over_its_peak_budget():
    y = torch.empty(4 << 20, dtype=torch.uint8, device="cuda")
    del y
"""


def test_peak_budgets_of_the_guard_and_the_marker(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_guarded=GUARDED)
    result = pytester.runpytest("-p", "no:randomly")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines_random(
        [
            "memory: peak 8.0 MiB > max_peak 4.0 MiB (requested bytes on cuda:0)",
            "memory: peak 4.0 MiB > max_peak 1.0 MiB (requested bytes on cuda:0)",
        ]
    )
