from __future__ import annotations

import importlib.machinery
import sys
from pathlib import Path

import pytest

from pytest_cudaperf.devices import probe as probing
from pytest_cudaperf.devices.faults import FaultState, is_sticky_cuda_error
from pytest_cudaperf.devices.placement import (
    assign_gpu,
    choose_device,
    gpu_skip_reason,
    worker_index,
)
from pytest_cudaperf.devices.probe import GpuFacts, Probe, header_lines, torch_support
from pytest_cudaperf.markers import GpuRequirement

GIB = 2**30
H100 = GpuFacts(0, "NVIDIA H100 80GB HBM3", (9, 0), 80 * GIB, 132, 50 * 2**20, "abc")
A10 = GpuFacts(1, "NVIDIA A10G", (8, 6), 24 * GIB, 80, 6 * 2**20, "def")
TWO = Probe("2.11.0+cu130", "13.0", True, (H100, A10), driver="580.159.04")
CPU_BUILD = Probe("2.13.0+cpu", None, False, cpu="Xeon")
HIDDEN = Probe("2.11.0+cu130", "13.0", False, visible_devices="", driver="580.1")


def test_worker_index_and_assignment() -> None:
    assert worker_index(None) == 0
    assert worker_index("gw7") == 7
    assert [assign_gpu(w, 2) for w in range(5)] == [0, 1, 0, 1, 0]


def test_choose_device() -> None:
    assert choose_device("auto", TWO, 3) == ("cuda:1", None)
    assert choose_device("auto", CPU_BUILD, 0) == ("cpu", None)
    assert choose_device("cpu", TWO, 0) == ("cpu", None)
    name, reason = choose_device("cuda", CPU_BUILD, 0)
    assert name == "cpu"
    assert reason is not None
    assert reason.startswith("--cudaperf-device=cuda but no GPU: ")


def test_gpu_skip_reasons_say_what_is_missing() -> None:
    assert gpu_skip_reason(GpuRequirement(), TWO) is None
    assert gpu_skip_reason(GpuRequirement(), CPU_BUILD) == (
        "needs a GPU: torch 2.13.0+cpu is built without CUDA"
    )
    assert gpu_skip_reason(GpuRequirement(count=3), TWO) == "needs 3 GPUs, 2 visible"
    assert gpu_skip_reason(GpuRequirement(min_memory=40 * GIB), TWO, first=1) == (
        "needs 40.0 GiB of GPU memory, cuda:1 (NVIDIA A10G) has 24.0 GiB"
    )
    assert gpu_skip_reason(GpuRequirement(capability=(9, 0)), TWO, first=1) == (
        "needs sm_90, cuda:1 (NVIDIA A10G) is sm_86"
    )
    hidden = gpu_skip_reason(GpuRequirement(), HIDDEN)
    assert hidden is not None
    assert "CUDA_VISIBLE_DEVICES='' hides every device" in hidden


def test_unavailable_reason_names_the_build() -> None:
    assert "torch build 2.13.0+cpu has no CUDA" in CPU_BUILD.unavailable_reason()
    assert TWO.unavailable_reason() == ""


def test_header_lines() -> None:
    lines = header_lines(TWO, "auto")
    assert lines[0] == (
        "cudaperf: torch 2.11.0+cu130, CUDA runtime 13.0, driver 580.159.04, device mode auto"
    )
    assert lines[1].startswith("cudaperf: cuda:0 NVIDIA H100 80GB HBM3, sm_90, 80.0 GiB, 132 SMs")
    assert "CPU: Xeon" in header_lines(CPU_BUILD, "auto")[1]


def test_sticky_errors_and_fault_state() -> None:
    assert is_sticky_cuda_error("CUDA error: device-side assert triggered")
    assert is_sticky_cuda_error("CUDA error: an illegal memory access was encountered")
    assert not is_sticky_cuda_error("CUDA out of memory. Tried to allocate 2.00 GiB")
    faults = FaultState()
    assert faults.message() is None
    faults.record("t.py::a", "device-side assert triggered")
    faults.record("t.py::b", "later")
    assert faults.message() == ("CUDA context unusable since t.py::a: device-side assert triggered")


def test_a_torch_outside_the_tested_releases_is_one_header_line() -> None:
    assert torch_support("2.13.0+cpu") is None
    assert torch_support("2.4.1") is None
    assert torch_support("2.14.0.dev20261201+cu130") == (
        "cudaperf: torch 2.14.0.dev20261201+cu130 is outside the releases this plugin is tested "
        "with (2.4–2.13); its private calls are feature-detected, but measurements and checks may "
        "differ"
    )
    assert torch_support("2.3.1") is not None
    assert torch_support("nightly") is None  # not a version to judge
    old = Probe("2.3.1", None, False, cpu="Xeon")
    assert header_lines(old, "auto")[-1].startswith("cudaperf: torch 2.3.1 is outside")
    assert not any("outside" in line for line in header_lines(TWO, "auto"))


def _fake_torch(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, version_py: str | None) -> None:
    """A torch package at ``tmp_path`` whose ``version.py`` holds ``version_py`` (None: no such
    file), not yet imported."""
    package = tmp_path / "torch"
    package.mkdir()
    if version_py is not None:
        (package / "version.py").write_text(version_py)
    spec = importlib.machinery.ModuleSpec("torch", None, is_package=True)
    spec.submodule_search_locations = [str(package)]
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    monkeypatch.setattr(probing.importlib.util, "find_spec", lambda name: spec)


CPU_VERSION_PY = "__version__ = '2.13.0+cpu'\ndebug = False\ncuda: Optional[str] = None\n"


def test_a_cpu_build_is_read_from_its_version_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _fake_torch(monkeypatch, tmp_path, CPU_VERSION_PY)
    assert probing.cpu_build() == "2.13.0+cpu"
    found = probing.probe()
    assert "torch" not in sys.modules
    assert (found.torch_version, found.cuda_version, found.available, found.gpus) == (
        "2.13.0+cpu",
        None,
        False,
        (),
    )
    assert "torch build 2.13.0+cpu has no CUDA" in found.unavailable_reason()


@pytest.mark.parametrize(
    "version_py",
    [
        "__version__ = '2.13.0+cu130'\ncuda: Optional[str] = '13.0'\n",
        "__version__ = '2.13.0'\ncuda = '12.8'\n",
        "cuda: Optional[str] = None\n",  # no version
        "__version__ = '2.13.0+cpu'\n",  # no CUDA field
        None,  # no version.py
    ],
    ids=["cuda-build", "cuda-build-untyped", "no-version", "no-cuda-field", "no-file"],
)
def test_a_cuda_build_or_an_unreadable_version_file_imports_torch(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, version_py: str | None
) -> None:
    _fake_torch(monkeypatch, tmp_path, version_py)
    assert probing.cpu_build() is None


def test_the_version_file_and_torch_describe_a_cpu_build_alike(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On this machine's torch: the probe read from ``version.py`` is the one torch gives (a
    CUDA build reads None from the file and is probed through torch both times)."""
    import torch

    through_torch = probing.probe()  # torch is loaded: probed through it
    monkeypatch.delitem(sys.modules, "torch")
    from_file = probing.probe()
    if torch.version.cuda is None:
        assert from_file == through_torch
    else:
        assert probing.cpu_build() is None
