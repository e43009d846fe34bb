"""Which device a test gets (:class:`DeviceContext`, with its lock): xdist worker *i* gets
visible GPU *i mod n*; and what a ``@gpu`` test needs that this machine lacks."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pytest_cudaperf.devices.probe import Probe
from pytest_cudaperf.locks import DeviceLock
from pytest_cudaperf.markers import GpuRequirement
from pytest_cudaperf.units import format_size

if TYPE_CHECKING:
    import torch


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


@dataclass
class DeviceContext:
    """The device a test runs on, and its lock. ``name`` (``"cuda:0"``, ``"cpu"``) is what the
    plugin reads: a run that measures code on the CPU never imports torch for its device;
    :attr:`device` is the torch.device (the ``cuda_device`` fixture's value)."""

    name: str
    device_class: str
    lock: DeviceLock
    l2_bytes: int = 0
    uuid: str = ""

    @property
    def device(self) -> torch.device:
        import torch

        return torch.device(self.name)

    @property
    def is_cuda(self) -> bool:
        return self.name.startswith("cuda")
