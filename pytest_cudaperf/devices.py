"""Device facts, device choice, xdist GPU assignment, capability checks and CUDA fault state.

The pure functions here take plain data; only :func:`probe` imports torch. Probing reads device
properties without creating a CUDA context (``get_device_properties`` needs none; the GPU suite
checks this with ``torch._C._cuda_hasPrimaryContext``).
"""

from __future__ import annotations

import os
import platform
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_cudaperf.markers import GpuRequirement
from pytest_cudaperf.units import format_size

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class GpuFacts:
    index: int
    name: str
    capability: tuple[int, int]
    total_memory: int
    multiprocessors: int = 0
    l2_bytes: int = 0
    uuid: str = ""
    #: NVML's settings of this GPU (:func:`pytest_cudaperf.measure.nvml.device_facts`), as
    #: sorted pairs (the probe stays hashable and crosses to xdist workers as plain data)
    nvml: tuple[tuple[str, str], ...] = ()

    @property
    def sm(self) -> str:
        return f"sm_{self.capability[0]}{self.capability[1]}"


@dataclass(frozen=True)
class Probe:
    """What this process can see: torch build, CUDA availability, visible GPUs, driver."""

    torch_version: str
    cuda_version: str | None
    available: bool
    gpus: tuple[GpuFacts, ...] = ()
    driver: str | None = None
    visible_devices: str | None = None
    error: str | None = None
    cpu: str = "unknown CPU"

    def unavailable_reason(self) -> str:
        """Why no GPU is usable, in the words a user needs to fix it."""
        if self.available and self.gpus:
            return ""
        if self.cuda_version is None:
            return (
                f"torch.cuda.is_available() is False: torch build {self.torch_version} has no "
                "CUDA (install a CUDA build of torch)"
            )
        parts = [
            f"torch.cuda.is_available() is False (torch {self.torch_version}, CUDA "
            f"{self.cuda_version})"
        ]
        if self.visible_devices is not None and self.visible_devices.strip() in ("", "-1"):
            parts.append(f"CUDA_VISIBLE_DEVICES={self.visible_devices!r} hides every device")
        elif self.driver is None:
            parts.append("no NVIDIA driver found (/proc/driver/nvidia/version is missing)")
        else:
            parts.append(f"driver {self.driver} reports no usable device")
        if self.error:
            parts.append(self.error)
        return "; ".join(parts)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return " ".join(line.split(":", 1)[1].split())
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def driver_version() -> str | None:
    """The NVIDIA kernel driver version, read without NVML or a CUDA context."""
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        return None
    match = re.search(r"Kernel Module\s+(?:for \S+\s+)?([0-9][0-9.]+)", text)
    return match.group(1) if match else None


def probe() -> Probe:
    """Import torch and describe what it sees; never creates a CUDA context."""
    import torch

    cuda_version = str(torch.version.cuda) if torch.version.cuda else None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    error = None
    gpus: list[GpuFacts] = []
    try:
        available = bool(cuda_version) and torch.cuda.is_available()
        if available:
            for index in range(torch.cuda.device_count()):
                props = torch.cuda.get_device_properties(index)
                uuid = str(getattr(props, "uuid", ""))
                gpus.append(
                    GpuFacts(
                        index=index,
                        name=props.name,
                        capability=(props.major, props.minor),
                        total_memory=int(props.total_memory),
                        multiprocessors=int(props.multi_processor_count),
                        l2_bytes=int(getattr(props, "L2_cache_size", 0)),
                        uuid=uuid,
                        nvml=_nvml_facts(uuid),
                    )
                )
    except RuntimeError as exc:  # a broken driver raises from is_available/get_device_properties
        available, error = False, str(exc).splitlines()[0]
    return Probe(
        torch_version=str(torch.__version__),  # a str subclass that xdist cannot send
        cuda_version=cuda_version,
        available=available and bool(gpus),
        gpus=tuple(gpus),
        driver=driver_version(),
        visible_devices=visible,
        error=error,
        cpu=cpu_model(),
    )


def _nvml_facts(uuid: str) -> tuple[tuple[str, str], ...]:
    from pytest_cudaperf.measure.nvml import device_facts

    return tuple(sorted(device_facts(uuid).items())) if uuid else ()


def fingerprint(device: torch.device | str, probe: Probe) -> dict[str, str]:
    """The environment a measurement on ``device`` was taken in, as flat strings, for the
    baseline entry's ``env`` and for naming what changed since the baseline.

    A GPU: ``model``, ``torch``, ``cuda``, ``driver`` and NVML's settings where it gives them
    (``power_limit_w``, ``app_clock_sm_mhz``, ``app_clock_mem_mhz``, ``max_clock_sm_mhz``,
    ``ecc``, ``mig``, ``board_part``, ``vbios``, ``persistence``). The CPU: ``cpu``,
    ``logical_cores``, ``torch``, ``torch_threads``. A field that is unknown is absent.
    """
    text = str(device)
    out: dict[str, str] = {"torch": probe.torch_version}
    if text.startswith("cuda") and probe.gpus:
        index = int(text.split(":", 1)[1]) if ":" in text else 0
        gpu = probe.gpus[index]
        out["model"] = gpu.name
        if probe.cuda_version:
            out["cuda"] = probe.cuda_version
        if probe.driver:
            out["driver"] = probe.driver
        out.update(gpu.nvml)
        return out
    out["cpu"] = probe.cpu
    out["logical_cores"] = str(os.cpu_count() or 0)
    threads = _torch_threads()
    if threads is not None:
        out["torch_threads"] = str(threads)
    return out


def _torch_threads() -> int | None:
    """torch's intra-op threads, only where torch is already imported (never imports it)."""
    torch_mod = sys.modules.get("torch")
    getter = getattr(torch_mod, "get_num_threads", None)
    return int(getter()) if getter is not None else None


def worker_index(workerid: str | None) -> int:
    """``gw3`` -> 3; the controller or a run without xdist is worker 0."""
    if not workerid:
        return 0
    match = re.search(r"(\d+)$", workerid)
    return int(match.group(1)) if match else 0


def assign_gpu(worker: int, visible: int) -> int:
    """Worker *i* gets visible GPU *i mod n*."""
    if visible <= 0:
        raise ValueError("no visible GPU to assign")
    return worker % visible


def choose_device(mode: str, probe: Probe, worker: int) -> tuple[str, str | None]:
    """(``"cuda:N"`` or ``"cpu"``, skip reason or None) for the ``cuda_device`` fixture."""
    if mode == "cpu":
        return "cpu", None
    if probe.available:
        return f"cuda:{assign_gpu(worker, len(probe.gpus))}", None
    if mode == "cuda":
        return "cpu", f"--cudaperf-device=cuda but no GPU: {probe.unavailable_reason()}"
    return "cpu", None


def gpu_skip_reason(req: GpuRequirement, probe: Probe, first: int = 0) -> str | None:
    """Why a ``@gpu`` test cannot run here, or None. ``first`` is this worker's assigned GPU."""
    if probe.cuda_version is None:
        return f"needs a GPU: torch {probe.torch_version} is built without CUDA"
    if not probe.available:
        return f"needs a GPU: {probe.unavailable_reason()}"
    if len(probe.gpus) < req.count:
        return f"needs {req.count} GPUs, {len(probe.gpus)} visible"
    chosen = [probe.gpus[(first + k) % len(probe.gpus)] for k in range(req.count)]
    for gpu in chosen:
        if req.min_memory is not None and gpu.total_memory < req.min_memory:
            return (
                f"needs {format_size(req.min_memory)} of GPU memory, cuda:{gpu.index} "
                f"({gpu.name}) has {format_size(gpu.total_memory)}"
            )
        if req.capability is not None and gpu.capability < req.capability:
            need = f"sm_{req.capability[0]}{req.capability[1]}"
            return f"needs {need}, cuda:{gpu.index} ({gpu.name}) is {gpu.sm}"
    return None


def device_class(device: torch.device | str, probe: Probe) -> str:
    """The key baselines are compared under: the GPU model, or ``CPU <model>``."""
    text = str(device)
    if text.startswith("cuda"):
        index = int(text.split(":", 1)[1]) if ":" in text else 0
        return probe.gpus[index].name
    return f"CPU {probe.cpu}"


def header_lines(probe: Probe, mode: str) -> list[str]:
    lines = [
        f"cudaperf: torch {probe.torch_version}, CUDA runtime {probe.cuda_version or 'none'}, "
        f"driver {probe.driver or 'none'}, device mode {mode}"
    ]
    for gpu in probe.gpus:
        lines.append(
            f"cudaperf: cuda:{gpu.index} {gpu.name}, {gpu.sm}, {format_size(gpu.total_memory)}, "
            f"{gpu.multiprocessors} SMs, L2 {format_size(gpu.l2_bytes)}"
        )
    if not probe.gpus:
        lines.append(f"cudaperf: no usable GPU ({probe.unavailable_reason()}); CPU: {probe.cpu}")
    return lines


_STICKY = (
    "illegal memory access",
    "device-side assert",
    "unspecified launch failure",
    "misaligned address",
    "illegal instruction",
    "an illegal",
    "cuda error: unknown error",
    "uncorrectable ecc",
)


def is_sticky_cuda_error(message: str) -> bool:
    """Errors after which the CUDA context of this process is unusable."""
    lowered = message.lower()
    return any(marker in lowered for marker in _STICKY)


@dataclass
class FaultState:
    """Per-process: the first sticky CUDA error, so later GPU tests fail fast."""

    nodeid: str | None = None
    error: str | None = None

    def record(self, nodeid: str, error: str) -> None:
        if self.nodeid is None:
            self.nodeid, self.error = nodeid, error

    def message(self) -> str | None:
        if self.nodeid is None:
            return None
        return f"CUDA context unusable since {self.nodeid}: {self.error}"
