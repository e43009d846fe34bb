"""What this process can see: the torch build, CUDA, the visible GPUs and their settings, the
driver and the CPU (:func:`probe`); the fingerprint and device class a measurement is filed under;
the environment a record or a run names; the header lines.

Only :func:`probe` imports torch, and only for a torch build with CUDA: a CPU build's version
and CUDA field are read from its ``torch/version.py`` (:func:`cpu_build`), so a suite that never
imports torch does not pay for it in each of its processes. It reads device properties without
creating a CUDA context (``get_device_properties`` needs none; the GPU suite checks this with
``torch._C._cuda_hasPrimaryContext``).
"""

from __future__ import annotations

import datetime
import importlib.util
import os
import platform
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

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


def cpu_build() -> str | None:
    """The version of the installed torch when it is a build without CUDA (``2.13.0+cpu``), read
    from its ``version.py`` without importing torch; None for a CUDA build, or where that file
    does not say (then :func:`probe` imports torch to know)."""
    if "torch" in sys.modules:
        return None  # already paid for: torch itself answers
    try:
        spec = importlib.util.find_spec("torch")
        locations = spec.submodule_search_locations if spec is not None else None
        text = (Path(next(iter(locations or ()))) / "version.py").read_text()
    except (ImportError, OSError, StopIteration, ValueError):
        return None
    version = re.search(r"^__version__\s*=\s*'([^']+)'", text, re.MULTILINE)
    cuda = re.search(r"^cuda\s*(?::[^=\n]*)?=\s*(.+?)\s*$", text, re.MULTILINE)
    if version is None or cuda is None or cuda.group(1) != "None":
        return None
    return version.group(1)


def probe() -> Probe:
    """Describe what torch sees, importing it only where the build has CUDA (:func:`cpu_build`);
    never creates a CUDA context."""
    version = cpu_build()
    if version is not None:
        return _with_host(Probe(torch_version=version, cuda_version=None, available=False))
    import torch

    cuda_version = str(torch.version.cuda) if torch.version.cuda else None
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
    return _with_host(
        Probe(
            torch_version=str(torch.__version__),  # a str subclass that xdist cannot send
            cuda_version=cuda_version,
            available=available and bool(gpus),
            gpus=tuple(gpus),
            error=error,
        )
    )


def _with_host(found: Probe) -> Probe:
    """What torch says (``found``) with what the host says whatever torch is: the driver,
    ``CUDA_VISIBLE_DEVICES`` and the CPU."""
    return replace(
        found,
        driver=driver_version(),
        visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
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


def device_class(device: torch.device | str, probe: Probe) -> str:
    """The key baselines are compared under: the GPU model, or ``CPU <model>``."""
    text = str(device)
    if text.startswith("cuda"):
        index = int(text.split(":", 1)[1]) if ":" in text else 0
        return probe.gpus[index].name
    return f"CPU {probe.cpu}"


#: the torch releases the plugin is tested with (oldest and newest, major.minor): pyproject.toml
SUPPORTED_TORCH = ((2, 4), (2, 13))


def torch_support(version: str) -> str | None:
    """One line when ``version`` (``2.14.0+cu130``) is outside :data:`SUPPORTED_TORCH`."""
    match = re.match(r"(\d+)\.(\d+)", version)
    if match is None:
        return None
    release = (int(match.group(1)), int(match.group(2)))
    (low, high) = SUPPORTED_TORCH
    if low <= release <= high:
        return None
    return (
        f"cudaperf: torch {version} is outside the releases this plugin is tested with "
        f"({low[0]}.{low[1]}–{high[0]}.{high[1]}); its private calls are feature-detected, but "
        "measurements and checks may differ"
    )


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
    support = torch_support(probe.torch_version)
    if support:
        lines.append(support)
    return lines


def environment(
    probe: Probe | None, device: object = None, *, run: bool = False, seed: str | None = None
) -> dict[str, Any]:
    """Where a value was measured. A record's (``device`` given): the date, the seed its test's
    random draws started from where given (``seed``: :func:`pytest_cudaperf.seeding.written`)
    and the device's fingerprint (model, torch, CUDA, driver, NVML's power limit, clocks, ECC,
    MIG… — see :func:`pytest_cudaperf.devices.fingerprint`); a run's (``run=True``): torch,
    CUDA, driver, the GPUs, CPU and Python."""
    env: dict[str, Any] = {} if run else {"date": datetime.date.today().isoformat()}
    if seed is not None:
        env["seed"] = seed
    if probe is None:
        return env
    if run:
        env.update(
            torch=probe.torch_version,
            cuda=probe.cuda_version,
            driver=probe.driver,
            gpus=[f"{g.name} ({g.sm})" for g in probe.gpus],
            cpu=probe.cpu,
            python=".".join(map(str, sys.version_info[:3])),
        )
    else:
        env.update(fingerprint(str(device or "cpu"), probe))
    return env
