"""Breakdowns: names, aggregation, JSON form, diffing (synthetic), and a real CPU profile."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, replace
from typing import Any

import pytest

from pytest_cudaperf.breakdown import capture, html, model, naming, percall
from pytest_cudaperf.breakdown import diff as diffing
from pytest_cudaperf.breakdown import explain as explaining
from pytest_cudaperf.breakdown.capture import RawEvent
from pytest_cudaperf.breakdown.model import Breakdown, Kernel, Other

# -- names ------------------------------------------------------------------------------------

ADD = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
    "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)"
)
EXP = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::exp_kernel_cuda("
    "at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#2}::operator()() "
    "const::{lambda(float)#1}, std::array<char*, 2ul> >(int, at::native::exp_kernel_cuda("
    "at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#2}::operator()() "
    "const::{lambda(float)#1}, std::array<char*, 2ul>)"
)
SUM = (
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
    "at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()"
    "(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4> >("
    "at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float,"
    " float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, "
    "float, 4>)"
)
SM90 = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"
SM80 = "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x128x16_stage4_warpsize2x2x1_tensor16x8x8_execute_kernel__5x_cublas"
CUTLASS = (
    "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>"
    "(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8::Params)"
)


def test_anonymous_namespaces_do_not_empty_a_name() -> None:
    softmax = (
        "void (anonymous namespace)::softmax_warp_forward<float, float, float, 7, false, false>"
        "(float*, float const*, int, int, int, bool const*, int, bool)"
    )
    assert naming.short_name(softmax) == "softmax_warp_forward"
    nested = (
        "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
        "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)"
    )
    assert naming.short_name(nested).startswith("cunn_SoftMaxForward")


@pytest.mark.parametrize(
    ("full", "short"),
    [
        (ADD, "vectorized_elementwise_kernel<CUDAFunctor_add>"),
        (EXP, "vectorized_elementwise_kernel<exp_kernel_cuda>"),
        (SUM, "reduce_kernel<sum_functor>"),
        (SM90, "sm90_xmma_gemm_bf16bf16_.._128x128x64_tn"),
        (SM80, "sm80_xmma_gemm_f32f32_.._128x128x16_nn"),
        (CUTLASS, "Kernel2<cutlass_80_tensorop_bf16_.._64x64_tn>"),
        ("Memcpy HtoD (Pageable -> Device)", "Memcpy HtoD (Pageable -> Device)"),
        ("Memset (Device)", "Memset (Device)"),
        ("aten::linear", "aten::linear"),
        ("triton_poi_fused_add_mul_0", "triton_poi_fused_add_mul_0"),
        (
            "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64, 64, 4, false, false, "
            "cutlass::bfloat16_t>, false, true, false>(Flash_fwd_params)",
            "flash_fwd_kernel",
        ),
        ("", "(unnamed)"),
        (
            "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_kernel0_0",
            "sdpa_sm90_flash_fprop_.._64x128x64",
        ),
    ],
)
def test_short_name(full: str, short: str) -> None:
    assert naming.short_name(full) == short


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (SM90, "gemm"),
        ("Kernel2<cutlass_80_tensorop_bf16_.._64x64_tn>", "gemm"),
        ("ampere_sgemm_128x64_nn", "gemm"),
        ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "gemm"),  # a bf16 matmul, H100
        ("flash_fwd_kernel", "attention"),
        ("sdpa_sm90_flash_fprop_.._64x128x64", "attention"),
        ("fmha_cutlassF_bf16_aligned_64x128_rf_sm80", "attention"),
        ("Memcpy HtoD (Pinned -> Device)", "copy"),
        ("Memset (Device)", "memset"),
        ("vectorized_elementwise_kernel<CUDAFunctor_add>", None),
    ],
)
def test_role(name: str, expected: str | None) -> None:
    assert diffing.role(name) == expected


def test_entry_key_keeps_short_full_names_and_hashes_long_ones() -> None:
    assert naming.entry_key("aten::mm", "aten::mm") == "aten::mm"
    key = naming.entry_key(SUM, naming.short_name(SUM))
    assert key.startswith("reduce_kernel<sum_functor> #")
    assert len(key.split("#")[1]) == 8
    assert key != naming.entry_key(SUM + " ", naming.short_name(SUM))


# -- aggregation ------------------------------------------------------------------------------


def k(name: str, us: float) -> RawEvent:
    return RawEvent(name, us, "kernel")


def test_aggregate_per_call_sorted_and_cut_at_coverage() -> None:
    events = [k("big", 90.0), k("big", 90.0), k("mid", 8.0), k("tiny", 1.0), k("tiny2", 1.0)]
    b = capture.aggregate(events, "cuda", calls=2, host_us=30.0)
    assert b.total_us == 95.0
    assert [e.name for e in b.entries] == ["big", "mid"]
    assert b.entries[0] == Kernel("big", "big", 1.0, 90.0)
    assert b.entries[1] == Kernel("mid", "mid", 0.5, 4.0)
    assert b.other == Other(count=2, launches=1.0, time_us=1.0, keys=("tiny", "tiny2"))
    assert b.other.complete


def test_aggregate_rounds_to_six_significant_digits_and_ties_sort_by_key() -> None:
    b = capture.aggregate(
        [k("b", 1 / 3), k("a", 1 / 3)], "cuda", calls=1, host_us=1 / 7, coverage=1
    )
    assert [e.key for e in b.entries] == ["a", "b"]
    assert b.entries[0].time_us == 0.333333
    assert b.host_us == 0.142857


def test_aggregate_cuda_lists_host_ops_and_cpu_does_not() -> None:
    events = [k("kern", 5.0), RawEvent("aten::add", 12.0, "op"), RawEvent("aten::mul", 20.0, "op")]
    cuda = capture.aggregate(events, "cuda", 1, 40.0)
    assert [e.name for e in cuda.host_ops] == ["aten::mul", "aten::add"]
    assert [e.name for e in cuda.entries] == ["kern"]
    cpu = capture.aggregate(events, "cpu", 1, 40.0)
    assert cpu.host_ops == ()
    assert [e.name for e in cpu.entries] == ["aten::mul", "aten::add"]


def test_an_op_stretched_in_one_call_moves_no_entry() -> None:
    """The 2-core CI host under load (2026-11-27) preempted one of three profiled calls of
    ``relu(linear(x)).sum()`` for 20 ms inside its ``aten::sum`` (these times): averaged over the
    calls, the sum was the profile and ``aten::linear`` fell into ``other``; each op's median over
    its calls keeps the profile."""

    def op(name: str, us: float, call: int) -> RawEvent:
        return RawEvent(name, us, "op", call)

    events = [op("aten::linear", 80.0, c) for c in range(3)] + [
        op("aten::relu", 10.0, c) for c in range(3)
    ]
    events += [op("aten::sum", us, c) for c, us in enumerate([20_150.0, 18.0, 4.0])]
    b = capture.aggregate(events, "cpu", calls=3, host_us=100.0)
    assert [(e.name, e.time_us) for e in b.entries] == [
        ("aten::linear", 80.0),
        ("aten::sum", 18.0),
        ("aten::relu", 10.0),
    ]
    assert b.entries[1].launches == 1.0
    summed = capture.aggregate(
        [RawEvent(e.name, e.duration_us, "op") for e in events], "cpu", 3, 100.0
    )
    assert [e.name for e in summed.entries] == ["aten::sum"]  # events without their call: summed


def test_an_op_missing_from_some_calls_counts_zero_there() -> None:
    events = [RawEvent("aten::add", 9.0, "op", 0), RawEvent("aten::add", 9.0, "op", 1)]
    events.append(RawEvent("aten::mul", 30.0, "op", 2))
    b = capture.aggregate(
        events + [RawEvent("aten::mm", 5.0, "op", c) for c in range(3)], "cpu", 3, 1.0
    )
    assert {e.name: e.time_us for e in b.entries} == {"aten::add": 9.0, "aten::mm": 5.0}
    assert b.other.keys == ("aten::mul",)  # a median of 0: its one call is not its typical time


def test_graph_replay_notes() -> None:
    graph = RawEvent("cudaGraphLaunch", 3.0, "graph_launch")
    hidden = capture.aggregate([graph], "cuda", 1, 5.0)
    assert model.GRAPH_NOT_VISIBLE in hidden.notes
    assert hidden.graph_launches == 1.0
    seen = capture.aggregate([graph, k("kern", 2.0)], "cuda", 1, 5.0)
    assert model.GRAPH_VISIBLE in seen.notes
    assert "no kernels seen" in capture.aggregate([], "cuda", 1, 5.0).notes[0]
    assert capture.aggregate([], "cpu", 1, 5.0).notes == ()
    with pytest.raises(ValueError, match="calls"):
        capture.aggregate([], "cpu", 0, 5.0)


@dataclass
class FakeRange:
    start: float
    end: float


@dataclass
class FakeEvent:
    name: str
    start: float
    end: float
    device_type: str = "DeviceType.CPU"
    device_index: int = 0
    cpu_parent: Any = None
    is_user_annotation: bool = False
    activity_type: str | None = None

    @property
    def time_range(self) -> FakeRange:
        return FakeRange(self.start, self.end)

    @property
    def cpu_time_total(self) -> float:
        return self.end - self.start


def test_raw_events_keeps_top_level_ops_device_activity_and_graph_launches() -> None:
    annotation = FakeEvent("my_block", 0, 100, is_user_annotation=True)
    linear = FakeEvent("aten::linear", 1, 50, cpu_parent=annotation)
    mm = FakeEvent("aten::mm", 2, 40, cpu_parent=linear)
    launch = FakeEvent("cudaLaunchKernel", 3, 4, cpu_parent=mm)
    graph = FakeEvent("cudaGraphLaunch", 60, 62)
    kern = FakeEvent(SM90, 10, 30, device_type="DeviceType.CUDA", device_index=0)
    other_gpu = FakeEvent("elsewhere", 10, 30, device_type="DeviceType.CUDA", device_index=1)
    copy = FakeEvent("Memcpy DtoD (Device -> Device)", 31, 32, device_type="DeviceType.CUDA")
    cuda = "DeviceType.CUDA"
    sync = FakeEvent("Context Sync", 5, 90, device_type=cuda, activity_type="cuda_sync")
    mirror = FakeEvent("my_block", 5, 90, device_type=cuda, activity_type="gpu_user_annotation")
    raw = capture.raw_events(
        [annotation, linear, mm, launch, graph, kern, other_gpu, copy, sync, mirror], 0
    )
    assert raw == [
        RawEvent("aten::linear", 49.0, "op"),
        RawEvent("cudaGraphLaunch", 2.0, "graph_launch"),
        RawEvent(SM90, 20.0, "kernel"),
        RawEvent("Memcpy DtoD (Device -> Device)", 1.0, "kernel"),
    ]


def test_raw_events_without_activity_types_drop_syncs_and_annotation_mirrors_by_name() -> None:
    cuda = "DeviceType.CUDA"
    events = [
        FakeEvent("blk", 0, 100, is_user_annotation=True),
        FakeEvent("blk", 1, 90, device_type=cuda),
        FakeEvent("Stream Sync", 1, 90, device_type=cuda),
        FakeEvent("Stream Wait Event", 1, 90, device_type=cuda),
        FakeEvent("gemm_kernel", 2, 12, device_type=cuda, activity_type="kernel"),
        FakeEvent("Memset (Device)", 12, 13, device_type=cuda, activity_type="gpu_memset"),
    ]
    assert capture.raw_events(events, 0) == [
        RawEvent("gemm_kernel", 10.0, "kernel"),
        RawEvent("Memset (Device)", 1.0, "kernel"),
    ]


def test_raw_events_give_each_top_level_op_the_call_range_it_started_in() -> None:
    first = FakeEvent(capture.CALL_RANGE, 0, 100, is_user_annotation=True)
    second = FakeEvent(capture.CALL_RANGE, 100, 200, is_user_annotation=True)
    events = [
        first,
        second,
        FakeEvent("aten::add", 10, 20, cpu_parent=first),
        FakeEvent("aten::add", 110, 115, cpu_parent=second),
        FakeEvent("aten::mul", 250, 260),  # outside every call
    ]
    assert capture.raw_events(events, None) == [
        RawEvent("aten::add", 10.0, "op", 0),
        RawEvent("aten::add", 5.0, "op", 1),
        RawEvent("aten::mul", 10.0, "op", None),
    ]


# -- JSON -------------------------------------------------------------------------------------


def sample() -> Breakdown:
    return Breakdown(
        backend="cuda",
        calls=5,
        total_us=120.5,
        host_us=80.25,
        entries=(
            Kernel(SUM, "reduce_kernel<sum_functor>", 1.0, 100.0),
            Kernel("k2", "k2", 2.0, 15.0),
        ),
        other=Other(3, 3.0, 5.5, ("x", "y", "z")),
        host_ops=(Kernel("aten::sum", "aten::sum", 1.0, 20.0),),
        graph_launches=0.0,
        notes=("a note",),
    )


def test_json_round_trip_is_exact_and_deterministic() -> None:
    b = sample()
    data = b.to_json()
    text = json.dumps(data, sort_keys=True)
    assert Breakdown.from_json(json.loads(text)) == b
    assert json.dumps(Breakdown.from_json(json.loads(text)).to_json(), sort_keys=True) == text
    assert list(data) == sorted(data)
    assert list(data["entries"][0]) == sorted(data["entries"][0])
    assert list(data["other"]) == sorted(data["other"])
    assert data["entries"][0]["key"] == SUM


def test_from_json_rounds_floats_to_six_digits() -> None:
    data = sample().to_json()
    data["total_us"] = 1.23456789
    assert Breakdown.from_json(data).total_us == 1.23457


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.pop("host_us"), "breakdown.host_us"),
        (lambda d: d.update(schema=2), "breakdown.schema"),
        (lambda d: d.update(backend="tpu"), "breakdown.backend"),
        (lambda d: d.update(calls=1.5), "breakdown.calls"),
        (lambda d: d.update(calls=True), "breakdown.calls"),
        (lambda d: d.update(total_us="fast"), "breakdown.total_us"),
        (lambda d: d.update(total_us=float("nan")), "breakdown.total_us"),
        (lambda d: d.update(entries={}), "breakdown.entries"),
        (lambda d: d["entries"][1].pop("name"), r"breakdown.entries\[1\].name"),
        (lambda d: d["entries"][0].update(launches=-1), r"breakdown.entries\[0\].launches"),
        (lambda d: d["host_ops"].append(3), r"breakdown.host_ops\[1\]"),
        (lambda d: d.update(other=None), "breakdown.other"),
        (lambda d: d["other"].pop("count"), "breakdown.other.count"),
        (lambda d: d.update(notes=[1]), r"breakdown.notes\[0\]"),
        (lambda d: d["other"].update(keys="x"), "breakdown.other.keys"),
    ],
)
def test_from_json_names_the_bad_field(mutate: Any, message: str) -> None:
    data = json.loads(json.dumps(sample().to_json()))
    mutate(data)
    with pytest.raises(ValueError, match=message):
        Breakdown.from_json(data)


def test_from_json_rejects_non_objects() -> None:
    with pytest.raises(ValueError, match="breakdown: expected an object"):
        Breakdown.from_json([1, 2])


# -- diff -------------------------------------------------------------------------------------


def make(*entries: tuple[str, float, float], host: float = 50.0, **kw: Any) -> Breakdown:
    es = tuple(Kernel(n, n, launches, us) for n, launches, us in entries)
    return Breakdown(
        backend=kw.pop("backend", "cuda"),
        calls=5,
        total_us=sum(e.time_us for e in es) + kw.get("other", Other()).time_us,
        host_us=host,
        entries=es,
        **kw,
    )


BASE = make(("flash_fwd_kernel", 1, 48.1), ("gemm_a", 1, 100.0), ("ew", 2, 10.0))


def test_launch_count_change_is_named_with_its_time() -> None:
    cur = make(("flash_fwd_kernel", 2, 96.2), ("gemm_a", 1, 100.0), ("ew", 2, 10.0))
    d = diffing.diff(BASE, cur)
    assert [ch.kind for ch in d.changes] == ["launches"]
    assert d.lines()[1].strip() == "+48.1 µs  flash_fwd_kernel: 1 -> 2 launches per call"
    assert d.lines()[0] == "kernels: 158.1 µs -> 206.2 µs per call (+48.1 µs, +30.4%)"


def test_time_change_above_noise_only() -> None:
    cur = make(("flash_fwd_kernel", 1, 48.2), ("gemm_a", 1, 130.0), ("ew", 2, 10.0))
    d = diffing.diff(BASE, cur)
    assert [(ch.kind, ch.name) for ch in d.changes] == [("time", "gemm_a")]
    assert "gemm_a: 100.0 µs -> 130.0 µs" in d.lines()[1]
    assert round(d.changes[0].delta_us, 6) == 30.0


def test_appeared_and_vanished() -> None:
    cur = make(("flash_fwd_kernel", 1, 48.1), ("gemm_a", 1, 100.0), ("copy_kernel_x", 1, 20.0))
    d = diffing.diff(BASE, cur)
    kinds = {ch.kind: ch for ch in d.changes}
    assert kinds["appeared"].name == "copy_kernel_x"
    assert kinds["vanished"].name == "ew"
    lines = d.lines()
    assert lines[1].strip() == "+20.0 µs  new: copy_kernel_x (1x per call)"
    assert lines[2].strip() == "-10.0 µs  gone: ew (2x per call)"
    # the delta column is aligned
    assert lines[1].index("new:") == lines[2].index("gone:")


def test_changed_gemm_pairs_as_replaced() -> None:
    base = make(("elem", 1, 5.0), (SM90, 1, 100.0))
    cur = make(("elem", 1, 5.0), (SM80, 1, 180.0))
    base = replace(base, entries=(Kernel(SM90, naming.short_name(SM90), 1, 100.0), base.entries[0]))
    cur = replace(cur, entries=(Kernel(SM80, naming.short_name(SM80), 1, 180.0), cur.entries[0]))
    d = diffing.diff(base, cur)
    assert [ch.kind for ch in d.changes] == ["replaced"]
    assert d.changes[0].role == "gemm"
    assert d.lines()[1].strip() == (
        "+80.0 µs  gemm: sm90_xmma_gemm_bf16bf16_.._128x128x64_tn -> "
        "sm80_xmma_gemm_f32f32_.._128x128x16_nn"
    )


def test_entry_that_moved_into_the_other_bucket_is_not_called_vanished() -> None:
    base = make(("big", 1, 100.0), ("small", 1, 2.0))
    cur = make(("big", 1, 100.0), other=Other(2, 2.0, 3.0, ("small", "tiny")))
    d = diffing.diff(base, cur)
    assert [ch.kind for ch in d.changes] == ["other"]
    assert d.lines()[1].strip() == "+3.0 µs  (other 0 -> 2 kernels; new: tiny)"
    # an incomplete keys list: an entry small enough to hide there is not called vanished
    vague = make(("big", 1, 100.0), other=Other(70, 70.0, 3.0, ()))
    assert all(ch.kind != "vanished" for ch in diffing.diff(base, vague).changes)
    # but one too big to hide is
    assert [
        ch.name
        for ch in diffing.diff(make(("big", 1, 100.0), ("mid", 1, 9.0)), vague).changes
        if ch.kind == "vanished"
    ] == ["mid"]


def test_other_bucket_names_what_left_it_even_below_the_noise_cut() -> None:
    base = make(("big", 1, 1000.0), other=Other(2, 2.0, 2.0, ("a", "b")))
    cur = make(("big", 1, 1000.0), other=Other(2, 2.0, 2.0, ("a", "c")))
    assert (
        diffing.diff(base, cur).lines()[1].strip()
        == "+0.0 µs  (other 2 -> 2 kernels; new: c; gone: b)"
    )


def test_host_regression_names_the_ops_that_grew() -> None:
    ops = (Kernel("aten::add", "aten::add", 1, 10.0), Kernel("aten::mul", "aten::mul", 1, 10.0))
    base = make(("k", 1, 10.0), host=50.0, host_ops=ops)
    grown = (
        Kernel("aten::add", "aten::add", 1, 10.0),
        Kernel("aten::mul", "aten::mul", 2, 20.0),
        Kernel("aten::exp", "aten::exp", 1, 15.0),
    )
    cur = make(("k", 1, 10.0), host=80.0, host_ops=grown)
    d = diffing.diff(base, cur)
    assert [ch.name for ch in d.host_ops] == ["aten::exp", "aten::mul"]
    assert d.host_ops[0].kind == "appeared"
    assert d.lines()[-1] == (
        "  host: 50.0 µs -> 80.0 µs per call (+60.0%); grew: aten::exp +15.0 µs, aten::mul +10.0 µs"
    )
    # host time within HOST_GROWTH: no host line, no ops
    calm = diffing.diff(base, replace(cur, host_us=52.0))
    assert calm.host_ops == ()
    assert not any("host:" in line for line in calm.lines())


def test_lines_truncate_with_a_summary_and_say_when_nothing_moved() -> None:
    base = make(*[(f"k{i}", 1, 10.0) for i in range(10)])
    cur = make(*[(f"k{i}", 1, 10.0 + i) for i in range(10)])
    d = diffing.diff(base, cur)
    lines = d.lines(max_lines=5)
    assert len(lines) == 5
    assert lines[1].strip().startswith("+9.0 µs  k9:")
    assert lines[-1].strip() == "(5 more changes, +20.0 µs)"
    same = diffing.diff(base, base).lines()
    assert same[1] == "  no kernel changed by more than the noise cut"
    assert diffing.diff(base, base).changes == ()


def test_graph_note_is_shown() -> None:
    base = make(("k", 1, 10.0), notes=(model.GRAPH_NOT_VISIBLE,))
    assert f"  note: {model.GRAPH_NOT_VISIBLE}" in diffing.diff(base, base).lines()


def test_diff_rejects_mixed_backends() -> None:
    with pytest.raises(ValueError, match="cpu"):
        diffing.diff(BASE, replace(BASE, backend="cpu"))


def test_diff_json_is_plain_json() -> None:
    cur = make(("flash_fwd_kernel", 2, 96.2), ("gemm_a", 1, 100.0), ("ew", 2, 10.0), host=90.0)
    data = diffing.diff(BASE, cur).to_json()
    assert json.loads(json.dumps(data)) == data
    assert data["changes"][0]["kind"] == "launches"
    assert data["changes"][0]["base"] == {"launches": 1, "time_us": 48.1}
    assert data["changes"][0]["delta_us"] == 48.1
    assert data["host_us"] == {"base": 50.0, "current": 90.0}


def test_side_by_side_html_escapes_and_lists_both_sides() -> None:
    cur = make(("flash_fwd_kernel", 2, 96.2), ("gemm_a", 1, 100.0), ("f<x>&", 1, 3.0))
    page = html.side_by_side_html(BASE, cur)
    assert page.startswith('<table class="cudaperf-breakdown">')
    assert "f&lt;x&gt;&amp;" in page
    assert "<x>" not in page
    rows = [r for r in page.splitlines() if r.startswith("<tr><td")]
    assert "flash_fwd_kernel" in rows[0]  # ranked by |delta|
    assert "<td>–</td><td>–</td>" in page  # a kernel missing on one side
    assert "host/call" in page


# -- real profiles (CPU) ----------------------------------------------------------------------


def test_real_cpu_profile_names_a_planted_extra_op() -> None:
    torch = pytest.importorskip("torch")
    x = torch.randn(64, 128)
    lin = torch.nn.Linear(128, 128)

    def plain() -> object:
        with torch.no_grad():
            return torch.relu(lin(x)).sum()

    def planted() -> object:
        with torch.no_grad():
            return torch.exp(torch.relu(lin(x))).sum()

    base = capture.profile(plain, "cpu", calls=3, warmup=2)
    assert base.backend == "cpu"
    names = {e.name for e in base.entries}
    assert "aten::linear" in names
    assert not names & {"aten::addmm", "aten::mm", "aten::t"}  # children are not listed
    assert base.entries[0].launches == 1.0
    assert Breakdown.from_json(json.loads(json.dumps(base.to_json()))) == base
    d = diffing.diff(base, capture.profile(planted, "cpu", calls=3, warmup=2), noise=0.0)
    lines = d.lines(max_lines=20)
    # aten::exp is either a top entry of its own or named among the (other) bucket's new ops
    named = [
        line
        for line in lines
        if "new: aten::exp" in line or ("new:" in line and "aten::exp" in line.split("new:")[1])
    ]
    assert named, lines
    assert not any("gone" in line or "new: aten::linear" in line for line in lines), lines


def test_profile_under_another_profiler_refuses_and_leaves_it_running() -> None:
    torch = pytest.importorskip("torch")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as outer:
        with pytest.raises(model.BreakdownUnavailable, match="another profiler is active"):
            capture.profile(lambda: torch.ones(2) + 1, "cpu", calls=1, warmup=1)
        torch.ones(3).mul(2)
    assert any(e.name == "aten::mul" for e in outer.events())


def test_module_import_does_not_import_torch() -> None:
    code = (
        "import sys, pytest_cudaperf.breakdown.explain, pytest_cudaperf.breakdown.html; "
        "assert 'torch' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# -- the wiring API ---------------------------------------------------------------------------


def names_exp_as_new(lines: list[str] | tuple[str, ...]) -> bool:
    return any("new:" in line and "aten::exp" in line.split("new:", 1)[1] for line in lines)


def cpu_pair() -> tuple[Any, Any]:
    torch = pytest.importorskip("torch")
    x = torch.randn(256, 256)
    return (lambda: torch.relu(x).sum()), (lambda: torch.exp(torch.relu(x)).sum())


def test_top_lines_lists_entries_and_the_rest() -> None:
    b = make(*[(f"k{i}", 1, 10.0 - i) for i in range(6)], other=Other(2, 2.0, 1.0, ("x", "y")))
    lines = diffing.top_lines(b, max_lines=4)
    assert lines[0] == "kernels: 46.0 µs per call, host 50.0 µs per call"
    assert lines[1] == "  10.0 µs  k0 (1x per call)"
    assert lines[3].strip() == "(other 6 kernels)"
    assert len(lines) == 4


def test_record_and_explain_name_the_planted_op() -> None:
    plain, planted = cpu_pair()
    taken = explaining.taken(plain, "cpu")
    assert isinstance(taken, model.Breakdown)
    stored = json.loads(json.dumps(taken.to_json(), sort_keys=True))  # as the store keeps it
    ex = explaining.explain(stored, explaining.taken(planted, "cpu"))
    assert ex.lines[0].startswith("ops: ")
    assert names_exp_as_new(ex.lines), ex.lines
    assert ex.compared is not None
    base, current = ex.compared
    assert base == model.Breakdown.from_json(stored)
    assert current.backend == "cpu"
    assert html.side_by_side_html(base, current).startswith("<table")


def test_explain_without_a_usable_stored_breakdown() -> None:
    plain, _ = cpu_pair()
    current = explaining.taken(plain, "cpu")
    none = explaining.explain(None, current)
    assert none.lines[0].startswith("breakdown: none stored")
    assert any("aten::relu" in line or "aten::sum" in line for line in none.lines[1:])
    assert none.compared is None
    bad = explaining.explain({"schema": 1}, current)
    assert bad.lines == (
        "breakdown: stored one unreadable: breakdown.backend: expected a non-empty string, got None",
    )
    cuda = explaining.explain(BASE.to_json(), current)
    assert cuda.lines == ("breakdown: stored on cuda, measured on cpu: not compared",)


def test_explain_pair_diffs_candidate_against_reference() -> None:
    plain, planted = cpu_pair()
    ex = explaining.explain_pair(planted, plain, "cpu")
    assert ex.lines[0].startswith("reference -> candidate ops: ")
    assert names_exp_as_new(ex.lines), ex.lines
    assert ex.compared is not None
    current = ex.compared[1]  # the candidate's side: exp listed, or below the cut on a busy host
    named = [e.name for e in current.entries] + [k.split(" #")[0] for k in current.other.keys]
    assert named.count("aten::exp") == 1


def test_record_and_explain_under_an_active_profiler_say_why() -> None:
    torch = pytest.importorskip("torch")
    plain, _ = cpu_pair()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        why = explaining.taken(plain, "cpu")
        assert why == "torch.profiler could not run: another profiler is active"
        assert explaining.explain(None, why).lines == (
            "breakdown: torch.profiler could not run: another profiler is active",
        )


def test_profile_of_a_slow_callable_profiles_fewer_calls() -> None:
    torch = pytest.importorskip("torch")
    import time

    def slow() -> object:
        time.sleep(0.03)
        return torch.ones(4).add(1)

    b = capture.profile(slow, "cpu", calls=5, warmup=1, budget_s=0.05)
    assert b.calls == 1
    assert b.host_us >= 30_000
    assert capture.profile(lambda: torch.ones(4).add(1), "cpu", calls=5, warmup=1).calls == 5
    with pytest.raises(ValueError, match="calls"):
        capture.profile(slow, "cpu", calls=0)


@pytest.mark.parametrize(
    ("sessions", "names"),
    [
        # the first saw nothing (a detach of CUPTI inside it): the second is the breakdown
        ([[], [RawEvent("gemm", 5.0, "kernel")]], ["gemm"]),
        # a loaded host's detach fell inside the second as well: the third, later, sees it
        ([[], [], [RawEvent("gemm", 5.0, "kernel")]], ["gemm"]),
        ([[RawEvent("gemm", 5.0, "kernel")]], ["gemm"]),
        ([[RawEvent("cudaGraphLaunch", 2.0, "graph_launch")]], []),  # a replay: work seen
        ([[], [], []], []),  # it launches nothing: three sessions, no more
    ],
)
def test_a_cuda_profile_that_saw_no_device_work_is_taken_again(
    monkeypatch: pytest.MonkeyPatch, sessions: list[list[RawEvent]], names: list[str]
) -> None:
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda index=None: None)
    slept: list[float] = []
    monkeypatch.setattr(capture.time, "sleep", slept.append)
    left, taken = list(sessions), []

    def session(torch: Any, fn: object, calls: int, is_cuda: bool, index: int | None) -> Any:
        taken.append((is_cuda, index))
        return left.pop(0)

    monkeypatch.setattr(capture, "_session", session)
    b = capture.profile(lambda: None, "cuda:0", warmup=1)
    assert taken == [(True, 0)] * len(sessions)
    assert [k.name for k in b.entries] == names
    assert slept == list(capture.EMPTY_SETTLES_S[: len(sessions) - 1])  # 10 ms, then longer
    taken.clear()
    left = [[]]
    assert capture.profile(lambda: None, "cpu", warmup=1).entries == ()  # the CPU's: once
    assert taken == [(False, None)]


def test_explain_stored_for_the_cli() -> None:
    cur = make(("flash_fwd_kernel", 2, 96.2), ("gemm_a", 1, 100.0), ("ew", 2, 10.0))
    ex = explaining.explain_stored(BASE.to_json(), cur.to_json())
    assert "flash_fwd_kernel: 1 -> 2 launches per call" in ex.lines[1]
    assert ex.compared == (BASE, cur)
    assert explaining.explain_stored(None, cur.to_json()).lines == (
        "breakdown: none stored in BASE",
    )
    assert explaining.explain_stored(BASE.to_json(), None).lines == (
        "breakdown: none stored in CURRENT",
    )
    assert explaining.explain_stored(BASE.to_json(), {"schema": 9}).lines == (
        "breakdown: stored one unreadable: breakdown.schema: expected 1, got 9",
    )
    cpu = replace(cur, backend="cpu").to_json()
    assert explaining.explain_stored(BASE.to_json(), cpu).lines == (
        "breakdown: cuda in BASE, cpu in CURRENT: not compared",
    )


def test_entry_and_other_key_caps() -> None:
    events = [k(f"k{i:03d}", 1.0 + i / 1000) for i in range(200)]
    b = capture.aggregate(events, "cuda", 1, 1.0)
    assert len(b.entries) == capture.MAX_ENTRIES
    assert b.other.count == 200 - capture.MAX_ENTRIES
    assert len(b.other.keys) == capture.MAX_OTHER_KEYS
    assert not b.other.complete
    assert b.other.keys == tuple(f"k{i:03d}" for i in range(96, 160))  # the largest of the rest
    assert b.total_us == 219.9


@pytest.mark.parametrize(
    "odd", ["void f<", "a::b(", ">)(", "void ::<>", "x" * 500, "void k<(anonymous namespace)::T>()"]
)
def test_short_name_never_fails_on_odd_names(odd: str) -> None:
    name = naming.short_name(odd)
    assert name
    assert len(name) <= 120


def test_per_call_device_time_counts_each_kernel_in_the_call_it_started_in() -> None:
    from pytest_cudaperf.breakdown.capture import CALL_RANGE
    from pytest_cudaperf.breakdown.percall import per_call_device_us

    cuda = "DeviceType.CUDA"
    events = [
        FakeEvent(CALL_RANGE, 0, 100, is_user_annotation=True),
        FakeEvent(CALL_RANGE, 100, 200, is_user_annotation=True),
        FakeEvent(CALL_RANGE, 10, 90, device_type=cuda, is_user_annotation=True),  # its mirror
        FakeEvent("k1", 10, 30, device_type=cuda),
        FakeEvent("k2", 40, 45, device_type=cuda),
        FakeEvent("Memcpy HtoD (Pageable -> Device)", 50, 80, device_type=cuda),  # host-paced
        FakeEvent("k1", 110, 132, device_type=cuda),
        FakeEvent("on another GPU", 110, 190, device_type=cuda, device_index=1),
        FakeEvent("Context Sync", 50, 99, device_type=cuda, activity_type="cuda_sync"),
        FakeEvent("after every call", 250, 260, device_type=cuda),
    ]
    assert per_call_device_us(events, 0) == [25.0, 22.0]


#: kineto's raw times are Unix-epoch ns (2026: about 1.8e18)
EPOCH_NS = 1_795_000_000_000_000_000


class FakeKinetoEvent:
    """What torch's raw kineto events (``prof.kineto_results.events()``) answer: methods,
    Unix-epoch ns."""

    def __init__(self, event: FakeEvent, cpu_op: bool = False) -> None:
        self._event = event
        self._cpu_op = cpu_op

    def name(self) -> str:
        return self._event.name

    def device_type(self) -> str:
        return self._event.device_type

    def start_ns(self) -> int:
        return EPOCH_NS + round(self._event.start * 1000)

    def end_ns(self) -> int:
        return EPOCH_NS + round(self._event.end * 1000)

    def activity_type(self) -> str:
        if self._event.activity_type:
            return self._event.activity_type
        if self._event.device_type == "DeviceType.CPU":
            return "cpu_op" if self._cpu_op else "user_annotation"
        return "gpu_user_annotation" if self._event.is_user_annotation else "kernel"

    def device_index(self) -> int:
        return self._event.device_index

    def is_user_annotation(self) -> bool:
        return self._event.is_user_annotation

    def is_async(self) -> bool:
        return False

    def start_thread_id(self) -> int:
        return 1

    def end_thread_id(self) -> int:
        return 1


def test_per_call_device_time_reads_raw_kineto_events_as_function_events() -> None:
    from pytest_cudaperf.breakdown.capture import CALL_RANGE, kineto_events
    from pytest_cudaperf.breakdown.percall import per_call_device_us

    cuda = "DeviceType.CUDA"
    events = [
        FakeEvent(CALL_RANGE, 0, 100, is_user_annotation=True),
        FakeEvent(CALL_RANGE, 100, 200, is_user_annotation=True),
        FakeEvent(CALL_RANGE, 10, 90, device_type=cuda, is_user_annotation=True),
        FakeEvent("k1", 10, 30, device_type=cuda),
        FakeEvent("k1", 110, 132.1, device_type=cuda),
        FakeEvent("Memset (Device)", 150, 151.5, device_type=cuda, activity_type="gpu_memset"),
        FakeEvent("Event Sync", 120, 199, device_type=cuda, activity_type="cuda_sync"),
        FakeEvent("before the first call", -20, -10, device_type=cuda),
    ]
    ops = [FakeEvent("aten::add", 5, 8), FakeEvent("cudaLaunchKernel", 6, 7)]

    class Result:
        def events(self) -> list[FakeKinetoEvent]:
            raw = [FakeKinetoEvent(ev) for ev in events]
            return raw + [FakeKinetoEvent(ev, cpu_op=True) for ev in ops]

        def trace_start_ns(self) -> int:
            return EPOCH_NS - 5_000

    raw = kineto_events(Result(), ops=False)
    assert {e.name for e in raw if e.device_type.endswith("CPU")} == {CALL_RANGE}  # no ops
    # counted from the trace's start: µs since 1970 in a float are 0.25 µs apart
    assert per_call_device_us(raw, 0) == pytest.approx([20.0, 23.6], abs=1e-9)
    assert per_call_device_us(events, 0) == pytest.approx([20.0, 23.6], abs=1e-9)


def test_launches_per_call_count_the_entries_and_the_rest() -> None:
    from pytest_cudaperf.breakdown.model import Breakdown, Kernel, Other

    found = Breakdown(
        "cuda",
        5,
        30.0,
        100.0,
        (Kernel("a", "a", 16.0, 15.9), Kernel("b", "b", 6.0, 10.0)),
        Other(count=3, launches=4.0, time_us=4.1),
    )
    assert found.launches == pytest.approx(26.0)


def test_a_profile_read_raw_gives_the_events_its_function_events_give() -> None:
    """The breakdown's events from the raw kineto results (``kineto_events``) are those torch's
    FunctionEvents give, top-level ops and their calls included, on a real CPU profile of
    nested ops (linear -> addmm, a user annotation, an op inside a Python function)."""
    torch = pytest.importorskip("torch")
    from pytest_cudaperf.breakdown.capture import CALL_RANGE, _profiler, kineto_events, raw_events

    weight, x = torch.rand(64, 64), torch.rand(8, 64)

    def call() -> None:
        with torch.autograd.profiler.record_function("user block"):
            torch.nn.functional.linear(x, weight).relu()
        torch.cat([x, x]).sum()

    with _profiler(torch, False) as prof:
        for _ in range(3):
            with torch.autograd.profiler.record_function(CALL_RANGE):
                call()

    def read(events: list[capture.RawEvent]) -> list[tuple[str, str, int | None, float]]:
        return sorted((e.name, e.kind, e.call, round(e.duration_us, 3)) for e in events)

    raw = read(raw_events(kineto_events(prof.kineto_results), None))
    assert raw == read(raw_events(prof.function_events, None))
    ops = {name for name, kind, _, _ in raw if kind == "op"}
    assert {"aten::linear", "aten::relu", "aten::cat", "aten::sum"} <= ops
    assert "aten::addmm" not in ops  # inside aten::linear: not top level
    assert {call for _, _, call, _ in raw} == {0, 1, 2}


class FakeProfile:
    """torch.autograd.profiler.profile's signature, recording what it was built with."""

    def __init__(self, use_kineto: bool = False, use_device: str | None = None) -> None:
        self.kwargs = {"use_kineto": use_kineto, "use_device": use_device}


def fake_torch(cuda: str | None) -> Any:
    from types import SimpleNamespace

    profiler = SimpleNamespace(profile=FakeProfile)
    return SimpleNamespace(
        version=SimpleNamespace(cuda=cuda), autograd=SimpleNamespace(profiler=profiler)
    )


@pytest.mark.parametrize(
    ("cuda", "given", "detached", "left"),
    [
        ("12.8", None, True, "1"),
        ("13.0", None, True, "1"),
        ("12.6", None, True, "1"),
        ("12.4", None, False, None),  # CUDA graphs may crash re-attaching: torch keeps it there
        ("11.8", None, False, None),
        (None, None, False, None),  # a CPU or ROCm build
        ("12.8", "0", False, "0"),  # the user's choice stands
        ("12.4", "1", True, "1"),
    ],
)
def test_cupti_is_detached_after_a_profile_from_cuda_12_6_unless_the_environment_says(
    monkeypatch: pytest.MonkeyPatch,
    cuda: str | None,
    given: str | None,
    detached: bool,
    left: str | None,
) -> None:
    """Left attached, CUPTI slows every later CUDA call of the process, so a kernel pass would
    slow the host-bound tests measured after it: kineto is told to detach it when a profile
    stops, where the CUDA allows it and the environment did not already choose."""
    import os

    monkeypatch.setenv("TEARDOWN_CUPTI", given or "")  # restored (or removed) after the test
    if given is None:
        monkeypatch.delenv("TEARDOWN_CUPTI")
    assert capture.detach_cupti_after_profiles(fake_torch(cuda)) is detached
    assert os.environ.get("TEARDOWN_CUPTI") == left


def test_a_cuda_profiler_is_built_with_cupti_detached_after_it_and_a_cpu_one_leaves_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import os

    monkeypatch.setenv("TEARDOWN_CUPTI", "")  # restored (or removed) after the test
    monkeypatch.delenv("TEARDOWN_CUPTI")
    cpu = capture._profiler(fake_torch("12.8"), False)
    assert cpu.kwargs == {"use_kineto": True, "use_device": None}
    assert "TEARDOWN_CUPTI" not in os.environ
    cuda = capture._profiler(fake_torch("12.8"), True)
    assert cuda.kwargs == {"use_kineto": True, "use_device": "cuda"}
    assert os.environ["TEARDOWN_CUPTI"] == "1"


class Attaching:
    """What :func:`capture.attach_kept_cupti` did: profiles entered and kernels queued."""

    def __init__(
        self, monkeypatch: pytest.MonkeyPatch, detached: bool, fails: bool = False
    ) -> None:
        import contextlib

        torch = pytest.importorskip("torch")
        self.profiles = 0
        self.kernels: list[int] = []

        @contextlib.contextmanager
        def profiler(*_: Any, **__: Any) -> Any:
            if fails:
                raise RuntimeError("kineto is missing")
            self.profiles += 1
            yield None

        monkeypatch.setattr(capture, "_KEPT_ATTACHED", set())
        monkeypatch.setattr(capture, "detach_cupti_after_profiles", lambda _torch: detached)
        monkeypatch.setattr(capture, "_profiler_active", lambda _torch: False)
        monkeypatch.setattr(capture, "_profiler", profiler)
        monkeypatch.setattr(capture, "cuda_sleep", self.kernels.append)
        monkeypatch.setattr(torch.cuda, "device", lambda _device: contextlib.nullcontext())
        monkeypatch.setattr(torch.cuda, "synchronize", lambda *_: None)


def test_cupti_kept_attached_is_attached_before_a_process_first_measures_on_a_gpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where a profile leaves CUPTI attached (CUDA before 12.6, TEARDOWN_CUPTI=0), every
    measurement after a process's first kernel pass runs with it: one profile of a tiny kernel
    before the first measurement on each GPU makes the first test run as the later ones."""
    import contextlib

    seen = Attaching(monkeypatch, detached=False)
    held: list[int] = []

    @contextlib.contextmanager
    def lock() -> Any:  # the device held while it profiles
        held.append(seen.profiles)
        yield
        held.append(seen.profiles)

    assert capture.attach_kept_cupti("cuda", lock) is True
    assert (seen.profiles, seen.kernels) == (1, [1])
    assert held == [0, 1]
    assert capture.attach_kept_cupti("cuda") is False  # once per process and device
    assert capture.attach_kept_cupti("cuda:1") is True
    assert capture.attach_kept_cupti("cpu") is False
    assert seen.profiles == 2


@pytest.mark.parametrize(("detached", "fails"), [(True, False), (False, True)])
def test_cupti_detached_after_profiles_or_a_profiler_that_cannot_run_attaches_nothing(
    monkeypatch: pytest.MonkeyPatch, detached: bool, fails: bool
) -> None:
    seen = Attaching(monkeypatch, detached=detached, fails=fails)
    assert capture.attach_kept_cupti("cuda") is False
    assert seen.profiles == 0
    assert seen.kernels == []


def span(name: str, start: float, end: float, **kw: Any) -> FakeEvent:
    """A device event (µs)."""
    return FakeEvent(name, start, end, **{"device_type": "DeviceType.CUDA", **kw})


def test_device_work_is_given_to_the_host_window_its_start_falls_in() -> None:
    """Windows are the calls' host spans (µs), 1 ms apart: a kernel belongs to the window that
    holds its start, widened by a quarter of the gap (the profiler's clock and the host's agree
    to µs, not exactly); one in the middle of a gap, before the first window or after the last
    is no call's and counted apart; one on another GPU, or a sync, is no work; a copy through
    pageable host memory is counted apart, in no call's time."""
    windows = [(1000.0, 1100.0), (2100.0, 2200.0)]
    spans = [
        span("k", 1010, 1030),
        span("k", 1090, 1105),  # ends after its start's window: counted whole
        span("memcpy", 2099, 2104, activity_type="gpu_memcpy"),  # 1 µs before the host saw the call
        span("k", 2150, 2170),
        span("k", 2150, 2190, device_index=1),  # another GPU
        span("Context Sync", 2100, 2200, activity_type="cuda_sync"),
        FakeEvent("aten::add", 1000, 1100),  # the CPU's
    ]
    assert percall.per_window_device_us(spans, windows, 0) == percall.DevicePass([35.0, 25.0], 0, 0)
    for stray in (1600.0, 700.0, 2500.0):  # mid-gap, before the first, after the last
        found = percall.per_window_device_us([*spans, span("k", stray, stray + 5)], windows, 0)
        assert found == percall.DevicePass([35.0, 25.0], 1, 0), stray
    edges = [span("k", 1340, 1345), span("k", 1860, 1865)]  # within a quarter gap of a call
    assert percall.per_window_device_us(edges, windows, 0).totals_us == [5.0, 5.0]
    staged = [
        span("Memcpy HtoD (Pageable -> Device)", 1040, 1080, activity_type="gpu_memcpy"),
        span("Memcpy DtoH (Device -> Pageable)", 2180, 2185, activity_type="gpu_memcpy"),
        span("Memcpy HtoD (Pinned -> Device)", 2120, 2130, activity_type="gpu_memcpy"),
    ]
    found = percall.per_window_device_us([*spans, *staged], windows, 0)
    assert found == percall.DevicePass([35.0, 35.0], 0, 2)


def test_a_copy_through_pageable_memory_is_told_from_other_copies_by_its_name() -> None:
    """kineto names a copy by its direction and both ends' memory kinds."""
    paced = ["Memcpy HtoD (Pageable -> Device)", "Memcpy DtoH (Device -> Pageable)"]
    device = ["Memcpy HtoD (Pinned -> Device)", "Memcpy DtoD (Device -> Device)", "Memset (Device)"]
    kernels = ["void at::native::copy_kernel<Pageable>(float*)"]  # a kernel named so: not a copy
    assert [percall.host_paced(span(name, 0, 1)) for name in paced] == [True, True]
    assert [percall.host_paced(span(name, 0, 1)) for name in device + kernels] == [False] * 4


def fake_kernel_pass(
    monkeypatch: pytest.MonkeyPatch, events: list[FakeEvent], alone: list[list[float] | None]
) -> None:
    """:func:`percall.kernel_times` with its profiles replaced: the ranged one reads ``events``,
    the device-only one ``alone[0]`` (None: it cannot run)."""
    torch = pytest.importorskip("torch")
    from contextlib import nullcontext

    monkeypatch.setattr(torch.cuda, "synchronize", lambda *args: None)
    monkeypatch.setattr(percall, "_profiler_active", lambda torch: False)
    monkeypatch.setattr(percall, "_profiler", lambda *args, **kw: nullcontext())
    monkeypatch.setattr(percall, "same_draws", lambda index: nullcontext())
    monkeypatch.setattr(percall, "profiled_events", lambda prof, ops: events)
    monkeypatch.setattr(percall, "device_only_times", lambda *args: alone[0])


@pytest.mark.parametrize("device_only", [True, False])
def test_calls_whose_device_work_is_pageable_copies_alone_have_no_kernels_time(
    monkeypatch: pytest.MonkeyPatch, device_only: bool
) -> None:
    """Read by a device-only pass or by ranges, calls that ran only copies through pageable
    host memory have no kernels' time (it would be the host's pace); one kernel beside the
    copies is a kernels' time, the copies left out."""
    cuda = "DeviceType.CUDA"
    copy = FakeEvent("Memcpy HtoD (Pageable -> Device)", 10, 50, device_type=cuda)
    events = [FakeEvent(capture.CALL_RANGE, 0, 100, is_user_annotation=True), copy]
    alone: list[list[float] | None] = [[0.0] if device_only else None]
    fake_kernel_pass(monkeypatch, events, alone)
    with pytest.raises(model.BreakdownUnavailable, match="pageable host memory alone"):
        percall.kernel_times(lambda: None, "cuda:0", calls=1, exact=True)
    events.append(FakeEvent("k", 60, 64, device_type=cuda))
    alone[0] = [0.004] if device_only else None
    assert percall.kernel_times(lambda: None, "cuda:0", calls=1, exact=True) == [0.004]


@pytest.mark.parametrize("device_only", [True, False])
def test_calls_half_of_which_ran_no_device_work_have_no_kernels_time(
    monkeypatch: pytest.MonkeyPatch, device_only: bool
) -> None:
    """Three calls of which only the first ran a kernel of its own (8 µs; the others copies
    through pageable memory, or nothing): a median of zero, against which no change is a
    ratio, is no kernels' time (an H200 run divided by it, 2026-11-29). Two of three with a
    kernel have one."""
    cuda = "DeviceType.CUDA"
    calls = [
        FakeEvent(capture.CALL_RANGE, 100 * i, 100 * i + 90, is_user_annotation=True)
        for i in range(3)
    ]
    events = [*calls, FakeEvent("k", 10, 18, device_type=cuda)]
    alone: list[list[float] | None] = [[0.008, 0.0, 0.0] if device_only else None]
    fake_kernel_pass(monkeypatch, events, alone)
    with pytest.raises(model.BreakdownUnavailable, match="half or more of its calls"):
        percall.kernel_times(lambda: None, "cuda:0", calls=3, exact=True)
    events.append(FakeEvent("k", 110, 118, device_type=cuda))
    alone[0] = [0.008, 0.008, 0.0] if device_only else None
    assert percall.kernel_times(lambda: None, "cuda:0", calls=3, exact=True) == [
        pytest.approx(0.008),
        pytest.approx(0.008),
        0.0,
    ]


def test_device_only_passes_stop_for_the_process_once_one_reads_a_kernel_outside(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first pass of a process tries the device-only profile; where one cannot run, finds
    work outside every window or no work at all, the ranged profile takes over for the
    process."""
    monkeypatch.setattr(percall, "_DEVICE_ONLY", {})
    passes: list[percall.DevicePass | None] = [percall.DevicePass([1000.0, 2000.0], 0, 0, 9)]
    asked: list[int] = []

    def device_only_pass(torch: object, fn: object, index: int, calls: int) -> Any:
        asked.append(index)
        found = passes.pop(0)
        if found is None:
            raise RuntimeError("kineto: no activities")
        return found

    monkeypatch.setattr(percall, "device_only_pass", device_only_pass)
    assert percall.device_only_times(None, lambda: None, 0, 2) == [1.0, 2.0]
    passes.append(percall.DevicePass([1000.0, 0.0], 1, 0, 9))  # a kernel outside: ranges take over
    assert percall.device_only_times(None, lambda: None, 0, 2) is None
    assert percall.device_only_times(None, lambda: None, 0, 2) is None
    assert asked == [0, 0]  # not tried again on that GPU
    passes.append(None)  # another GPU, whose pass cannot run
    assert percall.device_only_times(None, lambda: None, 1, 2) is None
    passes.append(percall.DevicePass([0.0, 0.0], 0, 0, 9))  # no work at all: not zeros, ranges
    assert percall.device_only_times(None, lambda: None, 2, 2) is None
    passes.append(percall.DevicePass([0.0, 0.0], 0, 2, 9))  # pageable copies alone: zeros
    assert percall.device_only_times(None, lambda: None, 3, 2) == [0.0, 0.0]
    assert percall._DEVICE_ONLY == {0: False, 1: False, 2: False, 3: True}
