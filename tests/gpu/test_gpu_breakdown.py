"""Kernel breakdowns on a real GPU: kernel names, launches per call, memcpy as a kernel, doubled
attention launches, a GEMM that changed dtype, CUDA graph replays, host ops.

Run with ``-s`` to see the diff lines each test prints (for docs/breakdown.md and the README)."""

from __future__ import annotations

import pytest

from pytest_cudaperf.breakdown import capture, model
from pytest_cudaperf.breakdown import diff as diffing

pytestmark = pytest.mark.gpu


@pytest.fixture
def torch():  # type: ignore[no-untyped-def]
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    return torch


def show(title: str, lines: list[str]) -> None:
    print(f"\n--- {title}")
    print("\n".join(lines))


def test_add_is_one_elementwise_kernel_per_call_with_host_ops(torch) -> None:  # type: ignore[no-untyped-def]
    a = torch.randn(1 << 22, device="cuda")
    b = capture.profile(lambda: a + a, "cuda", calls=5)
    assert b.backend == "cuda"
    top = b.entries[0]
    assert "elementwise" in top.name, b.entries
    assert top.launches == 1.0
    assert top.time_us > 1.0
    assert b.total_us >= top.time_us
    assert any(op.name == "aten::add" for op in b.host_ops), b.host_ops
    assert b.host_us > 0
    assert model.Breakdown.from_json(b.to_json()) == b
    show("add", [f"{e.name}  {e.launches}x  {e.time_us} µs" for e in b.entries])


def test_memcpy_and_memset_count_as_kernels(torch) -> None:  # type: ignore[no-untyped-def]
    host = torch.randn(1 << 20).pin_memory()
    dev = torch.empty(1 << 20, device="cuda")

    def fn() -> None:
        dev.copy_(host, non_blocking=True)
        dev.zero_()

    b = capture.profile(fn, "cuda")
    names = [e.name for e in b.entries] + list(b.other.keys)
    assert any(n.startswith("Memcpy HtoD") for n in names), names
    show("memcpy", names)


def test_attention_done_twice_shows_doubled_launches(torch) -> None:  # type: ignore[no-untyped-def]
    f = torch.nn.functional
    q = torch.randn(8, 16, 1024, 64, device="cuda", dtype=torch.bfloat16)

    def once() -> object:
        return f.scaled_dot_product_attention(q, q, q)

    def twice() -> object:
        f.scaled_dot_product_attention(q, q, q)
        return f.scaled_dot_product_attention(q, q, q)

    d = diffing.diff(capture.profile(once, "cuda"), capture.profile(twice, "cuda"))
    show("attention twice", d.lines())
    doubled = [ch for ch in d.changes if ch.kind == "launches"]
    assert doubled, d.lines()
    assert doubled[0].base_launches == 1.0
    assert doubled[0].current_launches == 2.0
    assert diffing.role(doubled[0].name) == "attention", doubled[0].name
    assert "1 -> 2 launches per call" in d.lines()[1]


def test_gemm_that_changed_dtype_names_both_kernels(torch) -> None:  # type: ignore[no-untyped-def]
    a32 = torch.randn(4096, 4096, device="cuda")
    a16 = a32.bfloat16()
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        d = diffing.diff(
            capture.profile(lambda: a32 @ a32, "cuda"), capture.profile(lambda: a16 @ a16, "cuda")
        )
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    show("gemm fp32 -> bf16", d.lines())
    gemm = [
        ch
        for ch in d.changes
        if ch.kind in ("replaced", "appeared", "vanished") and diffing.role(ch.name) == "gemm"
    ]
    assert gemm, d.lines()
    assert any(ch.kind == "replaced" for ch in gemm), d.lines()


def test_cuda_graph_replay_is_broken_down_or_says_it_cannot(torch) -> None:  # type: ignore[no-untyped-def]
    a = torch.randn(1 << 20, device="cuda")
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for _ in range(3):
            out = a * 2 + 1
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = a * 2 + 1
    del out
    b = capture.profile(graph.replay, "cuda")
    show(
        "graph replay",
        [f"graph launches per call: {b.graph_launches}", *b.notes]
        + [f"{e.name} {e.launches}x" for e in b.entries],
    )
    if b.entries:  # CUPTI sees inside the graph: its two kernels (mul, add) per replay
        assert sum(e.launches for e in b.entries) + b.other.launches >= 2
        assert model.GRAPH_NOT_VISIBLE not in b.notes
        if b.graph_launches:  # the runtime's cudaGraphLaunch is visible on this torch
            assert b.graph_launches == 1.0
            assert model.GRAPH_VISIBLE in b.notes
    else:
        assert b.graph_launches == 1.0
        assert model.GRAPH_NOT_VISIBLE in b.notes


def test_profile_cost_is_bounded(torch) -> None:  # type: ignore[no-untyped-def]
    import time

    a = torch.randn(1024, 1024, device="cuda")
    capture.profile(lambda: a @ a, "cuda")  # the first profile pays CUPTI's start-up
    began = time.perf_counter()
    capture.profile(lambda: a @ a, "cuda")
    cost = time.perf_counter() - began
    print(f"\n--- profile cost (warm CUPTI): {cost * 1e3:.1f} ms")
    assert cost < 2.0


def test_cupti_detached_after_a_profile_attaches_again_for_the_next_graphs_included(torch) -> None:  # type: ignore[no-untyped-def]
    """Each profile detaches CUPTI when it stops (TEARDOWN_CUPTI=1 from CUDA 12.6): the next
    profile attaches it again and still sees the kernels, of an op and of a CUDA graph's replay
    (where torch keeps CUPTI attached on older CUDA, as re-attaching could crash there)."""
    import os

    version = tuple(int(part) for part in str(torch.version.cuda).split(".")[:2])
    if version < capture.DETACH_CUPTI_FROM or os.environ.get("TEARDOWN_CUPTI") == "0":
        pytest.skip(f"CUPTI stays attached here (CUDA {torch.version.cuda})")
    a = torch.randn(1 << 20, device="cuda")
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for _ in range(3):
            a * 2 + 1
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        a * 2 + 1
    seen = []
    for fn in (lambda: a + a, graph.replay, lambda: a + a, graph.replay):
        b = capture.profile(fn, "cuda", calls=3)
        assert os.environ["TEARDOWN_CUPTI"] == "1"
        seen.append(sum(e.launches for e in b.entries) + b.other.launches)
    show("profiles with CUPTI detached between them", [f"launches per call: {seen}"])
    assert seen[0] == seen[2] == 1.0
    assert seen[1] == seen[3]  # the graph's replay reads as it did before the detach


def test_cupti_kept_attached_is_attached_before_the_first_measurement(torch) -> None:  # type: ignore[no-untyped-def]
    """With TEARDOWN_CUPTI=0 (as on CUDA before 12.6) a profile leaves CUPTI attached, so the
    plugin attaches it before a process's first measurement: in a process of its own, the
    attaching profile runs once, and a breakdown after it still sees the op's kernel."""
    import os
    import subprocess
    import sys

    code = (
        "import torch\n"
        "from pytest_cudaperf.breakdown import capture\n"
        "print(capture.attach_kept_cupti('cuda'), capture.attach_kept_cupti('cuda'))\n"
        "a = torch.randn(1 << 20, device='cuda')\n"
        "b = capture.profile(lambda: a + a, 'cuda', calls=3)\n"
        "print(sum(e.launches for e in b.entries) + b.other.launches)\n"
    )
    env = {**os.environ, "TEARDOWN_CUPTI": "0"}
    done = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    show("CUPTI attached before the first measurement", done.stdout.splitlines())
    assert done.stdout.splitlines() == ["True False", "1.0"]
