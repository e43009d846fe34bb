"""Counting a call's work from what it dispatched: FLOPs by torch's rules, bytes as the distinct
storages each op read and wrote, against the analytic figures."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from pytest_cudaperf.measure.work import Work, count_work  # noqa: E402


def _within(found: int, expected: int, share: float = 0.01) -> bool:
    return abs(found - expected) <= share * expected


def test_gemm_flops_are_2mnk_exactly_and_bytes_its_three_matrices() -> None:
    m, n, k = 64, 48, 96
    a, b = torch.randn(m, k), torch.randn(k, n)
    work = count_work(lambda: a @ b)
    assert work.flops == 2 * m * n * k
    assert work.flops_by_class == {"fp32": 2 * m * n * k}
    assert work.bytes == (m * k + k * n + m * n) * 4


def test_addmm_and_bmm_follow_torchs_rules() -> None:
    bias, a, b = torch.randn(32), torch.randn(16, 24), torch.randn(24, 32)
    assert count_work(lambda: torch.addmm(bias, a, b)).flops == 2 * 16 * 24 * 32
    x, y = torch.randn(4, 8, 16), torch.randn(4, 16, 12)
    assert count_work(lambda: torch.bmm(x, y)).flops == 2 * 4 * 8 * 16 * 12


@pytest.mark.parametrize(
    "copy",
    [
        lambda src, dst: dst.copy_(src),
        lambda src, dst: src.clone(),
        lambda src, dst: src.t().contiguous(),
    ],
    ids=["copy_", "clone", "transposed"],
)
def test_a_copy_moves_twice_its_bytes(copy: object) -> None:
    src, dst = torch.randn(512, 512), torch.empty(512, 512)
    work = count_work(lambda: copy(src, dst))  # type: ignore[operator]
    assert _within(work.bytes, 2 * src.nbytes)
    assert work.flops == 0
    assert work.read_bytes == src.nbytes


@pytest.mark.parametrize(
    "add",
    [
        lambda x, y, out: x + y,
        lambda x, y, out: x.add_(y),
        lambda x, y, out: torch.add(x, y, out=out),
    ],
    ids=["add", "add_", "out="],
)
def test_an_elementwise_add_moves_three_times_its_bytes(add: object) -> None:
    x, y, out = torch.randn(256, 256), torch.randn(256, 256), torch.empty(256, 256)
    assert _within(count_work(lambda: add(x, y, out)).bytes, 3 * x.nbytes)  # type: ignore[operator]


def test_a_sum_moves_the_bytes_it_reads() -> None:
    x = torch.randn(1024, 256)
    work = count_work(x.sum)
    assert _within(work.bytes, x.nbytes)
    assert _within(work.read_bytes, x.nbytes, 0.0)


def test_a_view_counts_the_span_it_reaches_not_its_whole_storage() -> None:
    x = torch.randn(1024, 256)
    head = x[:64]
    assert _within(count_work(lambda: head * 2).bytes, 2 * head.nbytes)


def test_conv2d_flops_are_torchs_count() -> None:
    from torch.utils.flop_counter import FlopCounterMode

    x, w = torch.randn(2, 3, 32, 32), torch.randn(8, 3, 3, 3)
    with FlopCounterMode(display=False) as reference:
        F.conv2d(x, w, padding=1)
    work = count_work(lambda: F.conv2d(x, w, padding=1))
    assert work.flops == reference.get_total_flops() == 2 * 2 * 8 * 3 * 9 * 32 * 32


def test_sdpa_flops_are_attentions_and_bytes_q_k_v_and_out() -> None:
    batch, heads, length, dim = 2, 4, 64, 128
    q, k, v = (torch.randn(batch, heads, length, dim) for _ in range(3))
    work = count_work(lambda: F.scaled_dot_product_attention(q, k, v))
    assert work.flops == 4 * batch * heads * length * length * dim  # QK^T and PV
    assert _within(work.bytes, 4 * q.nbytes)  # + the log-sum-exp the kernel writes (<1%)


def test_counting_leaves_the_call_running_as_before() -> None:
    x = torch.ones(8)
    assert count_work(lambda: x.add_(1)).ops == 1
    assert torch.equal(x, torch.full((8,), 2.0))


def test_declared_figures_win_and_are_labelled() -> None:
    counted = Work(flops=10, read_bytes=20, written_bytes=20, flops_by_class={"bf16": 10})
    work = counted.with_declared(1e9, None)
    assert (work.flops, work.bytes, work.compute_class) == (10**9, 40, "bf16")
    assert (work.source("flops"), work.source("bytes")) == ("declared", "counted")
    both = counted.with_declared(None, 4096)
    assert (both.flops, both.bytes, both.declared) == (10, 4096, ("bytes",))


def test_work_round_trips_through_its_dict() -> None:
    work = Work(1, 2, 3, {"fp16": 1}, 4, ("flops",))
    assert Work.from_dict(work.to_dict()) == work


def test_two_views_of_one_storage_count_the_bytes_they_reach_once() -> None:
    x = torch.randn(1024, 256)
    top, bottom, overlap = x[:256], x[256:512], x[128:384]
    assert _within(count_work(lambda: top + bottom).read_bytes, 2 * top.nbytes, 0.0)
    assert _within(count_work(lambda: top + overlap).read_bytes, 384 * 256 * 4, 0.0)
    assert _within(count_work(lambda: top + top).read_bytes, top.nbytes, 0.0)
