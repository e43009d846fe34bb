"""The hardware's ceilings: datasheet peaks per device class, and ceilings measured on this
device (one large device-to-device copy, one large GEMM per compute class), each measured once
per device and process and kept for the rest of it.

Datasheet FLOP/s are dense (no 2:4 sparsity), tensor-core figures for bf16, fp16, tf32 and fp8
and non-tensor figures for fp32 and fp64, in the units NVIDIA's datasheets state them (TB/s of
HBM or GDDR, TFLOP/s). A device the table does not know has no datasheet peaks; the measured
ceilings stand alone. The CPU has neither: its FLOPs and bytes are counted and its rates
reported, but a ceiling measured on a host that other processes share moves with their load
(why: docs/decisions.md, "Why has the CPU no speed-of-light ceiling?").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

TB = 1e12


@dataclass(frozen=True)
class Peaks:
    """A device's ceilings: memory bandwidth (bytes/s) and FLOP/s per compute class."""

    bandwidth: float | None = None
    flops: Mapping[str, float] = field(default_factory=dict)
    #: where the figures come from: the datasheet's name, or "measured"
    source: str = ""

    def ridge(self, compute_class: str | None) -> float | None:
        """FLOP per byte at which the class's FLOP/s ceiling meets the bandwidth ceiling."""
        peak = self.flops.get(compute_class or "")
        if peak is None or not self.bandwidth:
            return None
        return peak / self.bandwidth

    def to_dict(self) -> dict[str, Any]:
        return {"bandwidth": self.bandwidth, "flops": dict(self.flops), "source": self.source}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Peaks:
        bandwidth = d.get("bandwidth")
        return cls(
            bandwidth=float(bandwidth) if bandwidth is not None else None,
            flops={str(k): float(v) for k, v in dict(d.get("flops", {})).items()},
            source=str(d.get("source", "")),
        )


def _peaks(name: str, tbps: float, **tflops: float) -> Peaks:
    return Peaks(tbps * TB, {k: v * TB for k, v in tflops.items()}, f"datasheet {name}")


_HOPPER = {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp8": 1978.9, "fp32": 66.9, "fp64": 33.5}
_AMPERE = {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5, "fp64": 9.7}

#: (pattern on the lower-cased device name, peaks); the first match wins
DATASHEET: tuple[tuple[str, Peaks], ...] = (
    (
        r"h100.*nvl",
        _peaks(
            "H100 NVL", 3.9, bf16=835.5, fp16=835.5, tf32=417.5, fp8=1670.5, fp32=60.0, fp64=30.0
        ),
    ),
    (
        r"h100.*pcie",
        _peaks(
            "H100 PCIe", 2.0, bf16=756.5, fp16=756.5, tf32=378.0, fp8=1513.0, fp32=51.2, fp64=25.6
        ),
    ),
    (r"h100", _peaks("H100 SXM", 3.35, **_HOPPER)),
    (r"h200", _peaks("H200 SXM", 4.8, **_HOPPER)),
    (r"a100.*80gb.*pcie", _peaks("A100 80GB PCIe", 1.935, **_AMPERE)),
    (r"a100.*80gb", _peaks("A100 80GB SXM", 2.039, **_AMPERE)),
    (r"a100", _peaks("A100 40GB", 1.555, **_AMPERE)),
    (
        r"l40s",
        _peaks("L40S", 0.864, bf16=362.05, fp16=362.05, tf32=183.0, fp8=733.0, fp32=91.6),
    ),
    (r"\bl4\b", _peaks("L4", 0.3, bf16=121.0, fp16=121.0, tf32=60.0, fp8=242.5, fp32=30.3)),
    # the A10G has no datasheet of its own: the A10's figures, its memory bandwidth
    (r"a10g", _peaks("A10G (A10 figures)", 0.6, bf16=125.0, fp16=125.0, tf32=62.5, fp32=31.2)),
    # GeForce: tensor-core figures with FP32 accumulation (what torch's matmuls use)
    (
        r"rtx 4090",
        _peaks(
            "RTX 4090", 1.008, bf16=165.2, fp16=165.2, tf32=82.6, fp8=330.3, fp32=82.6, fp64=1.3
        ),
    ),
)


def datasheet(device_name: str) -> Peaks | None:
    """The datasheet peaks of a device by its name (``NVIDIA H100 80GB HBM3``), None when the
    table does not know it."""
    lowered = device_name.lower()
    for pattern, peaks in DATASHEET:
        if re.search(pattern, lowered):
            return peaks
    return None


#: the measured copy's size (each way) and the GEMMs' size: large enough that launch and tail
#: effects are under 1% on the fastest device in the table
COPY_BYTES = 1 << 30
GEMM_N = 8192
#: timed repetitions of each (the best kept: a ceiling is the fastest the device went)
REPEATS = 5
#: compute classes measured with a GEMM (fp8 GEMMs need scaled matmuls: datasheet only)
GEMM_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "tf32": "float32", "fp32": "float32"}


def _best_seconds(fn: Callable[[], object], device: Any) -> float:
    """The fastest of :data:`REPEATS` timed runs of ``fn`` (CUDA events), after one warm-up."""
    import torch

    cuda: Any = torch.cuda
    fn()
    best = float("inf")
    for _ in range(REPEATS):
        start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3)
    return best


def measure_bandwidth(device: Any) -> float | None:
    """Bytes per second of one large device-to-device copy (read and write counted); None
    where its buffers do not fit (the device nearly full)."""
    import torch

    try:
        buffers = [torch.empty(COPY_BYTES, dtype=torch.uint8, device=device) for _ in range(2)]
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache()
        return None
    try:
        return 2 * COPY_BYTES / _best_seconds(lambda: buffers[1].copy_(buffers[0]), device)
    finally:
        buffers.clear()
        torch.cuda.empty_cache()


def measure_gemm(device: Any, compute_class: str) -> float | None:
    """FLOP/s of one large square GEMM in the class's dtype (tf32: float32 with TF32 allowed,
    fp32: without); None for a class without a GEMM here."""
    import torch

    dtype_name = GEMM_DTYPES.get(compute_class)
    if dtype_name is None:
        return None
    dtype = getattr(torch, dtype_name)
    try:
        pair = [torch.randn(GEMM_N, GEMM_N, device=device, dtype=dtype) for _ in range(2)]
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache()
        return None
    allowed = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = compute_class == "tf32"
    try:
        return 2 * GEMM_N**3 / _best_seconds(lambda: pair[0] @ pair[1], device)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allowed
        pair.clear()
        torch.cuda.empty_cache()


@dataclass
class MeasuredCeilings:
    """The ceilings measured in this process, per device class: the copy's bandwidth once, a
    GEMM per compute class on first need. ``bandwidth_of`` and ``gemm_of`` measure (injected
    in tests)."""

    bandwidth_of: Callable[[Any], float | None] = measure_bandwidth
    gemm_of: Callable[[Any, str], float | None] = measure_gemm
    _bandwidth: dict[str, float | None] = field(default_factory=dict)
    _flops: dict[tuple[str, str], float | None] = field(default_factory=dict)

    def peaks(self, device_class: str, device: Any, compute_class: str | None) -> Peaks:
        """The measured peaks of ``device_class`` for a call of ``compute_class``."""
        if device_class not in self._bandwidth:
            self._bandwidth[device_class] = self.bandwidth_of(device)
        flops: dict[str, float] = {}
        if compute_class is not None:
            key = (device_class, compute_class)
            if key not in self._flops:
                self._flops[key] = self.gemm_of(device, compute_class)
            found = self._flops[key]
            if found is not None:
                flops[compute_class] = found
        return Peaks(self._bandwidth[device_class], flops, "measured")
