from __future__ import annotations

import os
import sys
import types

import pytest

from pytest_cudaperf.devices import probe as devices
from pytest_cudaperf.devices.probe import GpuFacts, Probe, fingerprint

H100 = GpuFacts(
    0,
    "NVIDIA H100 80GB HBM3",
    (9, 0),
    80 << 30,
    132,
    50 << 20,
    "GPU-1",
    nvml=(("ecc", "on"), ("mig", "off"), ("power_limit_w", "700")),
)
PROBE = Probe("2.11.0+cu130", "13.0", True, (H100,), driver="580.159.04", cpu="Xeon")


def test_gpu_fingerprint_is_flat_strings_with_nvml_settings() -> None:
    assert fingerprint("cuda:0", PROBE) == {
        "model": "NVIDIA H100 80GB HBM3",
        "torch": "2.11.0+cu130",
        "cuda": "13.0",
        "driver": "580.159.04",
        "ecc": "on",
        "mig": "off",
        "power_limit_w": "700",
    }


def test_gpu_fingerprint_leaves_out_what_is_unknown() -> None:
    bare = Probe("2.11.0+cu130", "13.0", True, (GpuFacts(0, "A10", (8, 6), 24 << 30),))
    assert fingerprint("cuda", bare) == {"model": "A10", "torch": "2.11.0+cu130", "cuda": "13.0"}


def test_cpu_fingerprint(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_torch = types.SimpleNamespace(get_num_threads=lambda: 4)
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    assert fingerprint("cpu", PROBE) == {
        "cpu": "Xeon",
        "logical_cores": str(os.cpu_count()),
        "torch": "2.11.0+cu130",
        "torch_threads": "4",
    }
    monkeypatch.delitem(sys.modules, "torch")  # never imported here: no thread count
    assert "torch_threads" not in fingerprint("cpu", PROBE)


def test_probe_reads_nvml_facts_per_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []

    def facts(uuid: str) -> dict[str, str]:
        asked.append(uuid)
        return {"mig": "off", "ecc": "on"}

    from pytest_cudaperf.measure import nvml

    monkeypatch.setattr(nvml, "device_facts", facts)
    assert devices._nvml_facts("GPU-9") == (("ecc", "on"), ("mig", "off"))
    assert devices._nvml_facts("") == ()
    assert asked == ["GPU-9"]
    hash(H100)  # the probe stays hashable plain data
