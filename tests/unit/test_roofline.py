"""Speed of light: datasheet peaks by device name, ceilings measured once per device class,
the bound by arithmetic intensity against the ridge point, and the min_peak gate's line."""

from __future__ import annotations

import pytest

from pytest_cudaperf.measure.ceilings import MeasuredCeilings, Peaks, datasheet
from pytest_cudaperf.measure.roofline import Roofline, format_rate
from pytest_cudaperf.measure.work import Work

TB = 1e12


@pytest.mark.parametrize(
    ("name", "source", "tbps", "bf16"),
    [
        ("NVIDIA H100 80GB HBM3", "datasheet H100 SXM", 3.35, 989.4),
        ("NVIDIA H100 PCIe", "datasheet H100 PCIe", 2.0, 756.5),
        ("NVIDIA H100 NVL", "datasheet H100 NVL", 3.9, 835.5),
        ("NVIDIA H200", "datasheet H200 SXM", 4.8, 989.4),
        ("NVIDIA A100-SXM4-80GB", "datasheet A100 80GB SXM", 2.039, 312.0),
        ("NVIDIA A100 80GB PCIe", "datasheet A100 80GB PCIe", 1.935, 312.0),
        ("NVIDIA A100-SXM4-40GB", "datasheet A100 40GB", 1.555, 312.0),
        ("NVIDIA L4", "datasheet L4", 0.3, 121.0),
        ("NVIDIA L40S", "datasheet L40S", 0.864, 362.05),
        ("NVIDIA A10G", "datasheet A10G (A10 figures)", 0.6, 125.0),
        ("NVIDIA GeForce RTX 4090", "datasheet RTX 4090", 1.008, 165.2),
    ],
)
def test_the_datasheet_knows_each_device_class_by_name(
    name: str, source: str, tbps: float, bf16: float
) -> None:
    peaks = datasheet(name)
    assert peaks is not None
    assert peaks.source == source
    assert peaks.bandwidth == pytest.approx(tbps * TB)
    assert peaks.flops["bf16"] == pytest.approx(bf16 * TB)
    assert {"bf16", "fp16", "tf32", "fp32"} <= set(peaks.flops)


def test_an_unknown_device_has_no_datasheet() -> None:
    assert datasheet("NVIDIA T4") is None
    assert datasheet("CPU AMD EPYC") is None


def test_ceilings_are_measured_once_per_device_class_and_gemm_per_class() -> None:
    calls: list[tuple[str, ...]] = []

    def bandwidth(device: object) -> float:
        calls.append(("copy", str(device)))
        return 2.9 * TB

    def gemm(device: object, klass: str) -> float | None:
        calls.append(("gemm", klass))
        return 700 * TB if klass == "bf16" else None

    measured = MeasuredCeilings(bandwidth, gemm)
    first = measured.peaks("H100", "cuda:0", "bf16")
    again = measured.peaks("H100", "cuda:0", "bf16")
    fp8 = measured.peaks("H100", "cuda:0", "fp8")
    assert first == again == Peaks(2.9 * TB, {"bf16": 700 * TB}, "measured")
    assert fp8 == Peaks(2.9 * TB, {}, "measured")
    assert calls == [("copy", "cuda:0"), ("gemm", "bf16"), ("gemm", "fp8")]


MEASURED = Peaks(2.95 * TB, {"bf16": 780 * TB}, "measured")
SHEET = datasheet("NVIDIA H100 80GB HBM3")


def _copy(nbytes: int, ms: float) -> Roofline:
    return Roofline(Work(read_bytes=nbytes, written_bytes=nbytes), ms, MEASURED, SHEET)


def test_a_copy_is_memory_bound_at_its_byte_rate() -> None:
    roof = _copy(256 * 10**6, 0.2)  # 512 MB moved in 0.2 ms: 2.56 TB/s
    assert roof.bound == "memory"
    assert roof.byte_rate == pytest.approx(2.56 * TB)
    assert roof.fraction("measured") == pytest.approx(2.56 / 2.95)
    assert roof.fraction("datasheet") == pytest.approx(2.56 / 3.35)
    assert roof.describe() == (
        "2.56 TB/s: 87% of measured 2.95 TB/s, 76% of datasheet 3.35 TB/s "
        "(memory-bound, 0 FLOP/B, counted)"
    )


def test_a_large_gemm_is_compute_bound_against_its_dtypes_ridge() -> None:
    n = 4096
    work = Work(flops=2 * n**3, read_bytes=2 * n * n * 2, written_bytes=n * n * 2,
                flops_by_class={"bf16": 2 * n**3})  # fmt: skip
    roof = Roofline(work, 0.1757, MEASURED, SHEET)
    assert work.intensity == pytest.approx(n / 3)
    assert roof.bound == "compute"
    assert roof.flop_rate == pytest.approx(782e12, rel=1e-3)
    assert roof.fraction("datasheet") == pytest.approx(0.79, abs=0.005)


def test_intensity_below_the_ridge_is_memory_bound() -> None:
    work = Work(flops=10**6, read_bytes=10**6, written_bytes=0, flops_by_class={"bf16": 10**6})
    assert Roofline(work, 1.0, MEASURED, SHEET).bound == "memory"  # 1 FLOP/B << ~264


def test_min_peak_fails_with_rate_ceiling_and_bound_in_one_line() -> None:
    roof = _copy(int(0.605 * 10**9), 1.0)  # 1.21 TB/s
    assert roof.gate(0.5) == (
        "speed of light: 1.21 TB/s is 41% of the measured 2.95 TB/s (memory-bound, "
        "0 FLOP/B) < min_peak 50%"
    )
    assert roof.gate(0.4) is None


def test_without_a_measured_ceiling_there_is_no_gate_and_the_rates_alone() -> None:
    roof = Roofline(Work(flops=10**9, read_bytes=10**6, flops_by_class={"fp32": 10**9}), 1.0,
                    None, None)  # fmt: skip
    assert roof.gate(0.9) is None
    assert roof.fraction("measured") is None
    assert roof.describe() == "1 TFLOP/s, 1 GB/s (1e+03 FLOP/B, counted; no ceiling known)"


def test_the_roofline_round_trips_through_its_dict() -> None:
    roof = _copy(1000, 1.0)
    assert Roofline.from_dict(roof.to_dict()) == roof


def test_rates_read_with_decimal_prefixes() -> None:
    assert format_rate(1.21e12, "B/s") == "1.21 TB/s"
    assert format_rate(35.2e9, "FLOP/s") == "35.2 GFLOP/s"
    assert format_rate(12.0, "B/s") == "12 B/s"
