"""GPU tests of the measurement engine and verdicts: launch-hidden events, cache modes, graph
mode, sync detection, host-bound flag, regions, compare, peak memory, baselines."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytestmark = pytest.mark.gpu

TIMED = """
import json, os
import pytest
import torch

SCALE = float(os.environ.get("SCALE", "1"))

def _dump(name, m):
    with open(f"m-{name}.json", "w") as f:
        json.dump(m.to_dict(), f)

def test_matmul_cold(cuda_timer, cuda_device):
    n = int(1024 * SCALE)
    a = torch.randn(n, n, device=cuda_device)
    m = cuda_timer(torch.mm, a, a)
    _dump("cold", m)

@pytest.mark.perf(cache="hot")
def test_add_hot(cuda_timer, cuda_device):
    x = torch.randn(1 << 20, device=cuda_device)
    _dump("hot", cuda_timer(torch.add, x, x))

@pytest.mark.perf(graph=True)
def test_add_graph(cuda_timer, cuda_device):
    x = torch.randn(1 << 12, device=cuda_device)
    _dump("graph", cuda_timer(lambda: x.add_(1.0)))

def test_synchronizing_callable(cuda_timer, cuda_device):
    x = torch.randn(1 << 16, device=cuda_device)
    _dump("sync", cuda_timer(lambda: x.sum().item()))

def test_host_bound(cuda_timer, cuda_device):
    x = torch.randn(16, device=cuda_device)
    def many_tiny_ops():
        y = x
        for _ in range(20):
            y = y + 1
    _dump("hostbound", cuda_timer(many_tiny_ops, cache="hot"))

def test_region_and_compare(cuda_timer, cuda_device):
    a = torch.randn(2048, 2048, device=cuda_device)
    b = torch.randn(512, 512, device=cuda_device)
    for _ in range(20):
        with cuda_timer.region("loop"):
            a @ a
    assert cuda_timer.result("loop").n == 20
    c = cuda_timer.compare(lambda: b @ b, lambda: a @ a, name="small_vs_big")
    assert c.speedup > 4, c.describe()
    assert c.ci[0] <= c.speedup <= c.ci[1]

def test_backend_reused_without_carrying_warnings(cuda_timer, cuda_device, monkeypatch):
    from pytest_cudaperf.measure import cuda as cuda_timing

    dry_runs = []
    real = cuda_timing._synchronizes
    monkeypatch.setattr(
        cuda_timing, "_synchronizes", lambda *a: dry_runs.append(real(*a)) or dry_runs[-1]
    )
    x = torch.randn(1 << 16, device=cuda_device)
    _dump("reuse_sync", cuda_timer(lambda: x.sum().item(), name="sync"))
    _dump("reuse_plain", cuda_timer(torch.add, x, x, name="plain"))
    (backend,) = cuda_timer._backends.built().values()  # one cold backend served both
    # one 20 ms dry run per measured callable, not one per round; none kept afterwards
    assert dry_runs == [True, False]
    assert backend._synchronizing == []

@pytest.mark.perf(max_ms=1000)
def test_whole_body(cuda_device):
    a = torch.randn(512, 512, device=cuda_device)
    (a @ a).sum()
"""


def _assert_one_launch_gap(m: dict[str, Any]) -> None:
    """The GPU's time per launch of back-to-back kernels, probed once per process: the same
    figure on every device-time measurement, none on graphs (their launches are the graph's)."""
    gaps = {m[name]["launch_gap_us"] for name in ("cold", "hot", "reuse_plain")}
    assert len(gaps) == 1, gaps
    assert 0.3 < gaps.pop() < 20
    assert m["graph"]["launch_gap_us"] is None


def test_cuda_measurements(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_timed=TIMED)
    result = pytester.runpytest("--cudaperf-json=out.json", "--cudaperf-max-time=0.5")
    result.assert_outcomes(passed=8)
    m = {
        name: json.loads((pytester.path / f"m-{name}.json").read_text())
        for name in ("cold", "hot", "graph", "sync", "hostbound", "reuse_sync", "reuse_plain")
    }
    assert len(m["cold"]["round_medians_ms"]) == 3  # the default: three independent rounds
    # a reused backend: the second measurement is blocked again and carries no sync warning
    assert any("synchroniz" in w for w in m["reuse_sync"]["warnings"])
    assert m["reuse_plain"]["blocking"] in ("spin", "sleep")
    assert not any("synchroniz" in w for w in m["reuse_plain"]["warnings"])
    assert m["cold"]["metric"] == "device"
    assert m["cold"]["cache"] == "cold"
    assert m["cold"]["blocking"] in ("spin", "sleep"), m["cold"]["warnings"]
    # the read-then-discard flush wherever Triton and sm_80+ allow it; hot never flushes
    import importlib.util

    import torch

    triton = importlib.util.find_spec("triton") is not None
    sm80 = torch.cuda.get_device_capability() >= (8, 0)
    flush = ("read+discard" if sm80 else "read") if triton else "torch.sum"
    assert m["cold"]["flush"] == flush, m["cold"]["flush"]
    assert m["hot"]["flush"] == "none"
    # the SM clock read by the spin blocker before every sample, NVML or not
    for name in ("cold", "hot"):
        spin = m[name]["clocks"].get("spin_sm_mhz")
        if m[name]["blocking"] == "spin":
            assert spin is not None, m[name]["clocks"]
            assert 300 < spin["p10"] <= spin["median"] <= spin["p90"] < 4000, spin
            # the readings' own jitter is not taken for a dip on these light kernels
            assert not any(w.startswith("SM clock dipped") for w in m[name]["warnings"]), m[name]
        else:
            assert spin is None
    assert "spin_sm_mhz" not in m["sync"]["clocks"]  # never blocked: no readings
    assert m["cold"]["host_ms_per_call"] > 0
    assert m["hot"]["cache"] == "hot"
    assert m["graph"]["metric"] == "graph"
    assert m["graph"]["graph"] is True
    _assert_one_launch_gap(m)
    assert m["hot"]["blocking"] in ("spin", "sleep"), m["hot"]["warnings"]
    assert m["sync"]["blocking"] == "none"
    assert any("synchroniz" in w for w in m["sync"]["warnings"])
    assert any(w.startswith("host-bound") for w in m["hostbound"]["warnings"])
    report = json.loads((pytester.path / "out.json").read_text())
    series = {
        (r["nodeid"].split("::")[-1] + (f"#{r['name']}" if r["name"] else ""), r["series"])
        for t in report["tests"]
        for r in t["records"]
    }
    assert ("test_matmul_cold", "time:device/cold") in series
    assert ("test_matmul_cold", "memory:peak") in series
    assert ("test_add_hot", "time:device/hot") in series
    assert ("test_add_graph", "time:graph/cold") in series
    assert ("test_region_and_compare#loop", "time:region") in series
    assert ("test_whole_body", "time:wall") in series
    peaks = [r for t in report["tests"] for r in t["records"] if r["series"] == "memory:peak"]
    assert all(r["recording"]["median"] >= 0 for r in peaks)
    compares = [c for t in report["tests"] for c in t["comparisons"]]
    assert compares[0]["name"] == "small_vs_big"
    assert report["environment"]["gpus"]


def test_gpu_baselines_catch_a_planted_slowdown(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_timed=TIMED)
    args = ["-k", "matmul_cold", "--cudaperf-max-time=0.5"]
    pytester.runpytest(*args, "--cudaperf-update").assert_outcomes(passed=1)
    files = list((pytester.path / ".cudaperf").glob("*.json"))
    assert len(files) == 1
    document = json.loads(files[0].read_text())
    assert document["device_class"].startswith("NVIDIA")
    entry = document["entries"]["test_timed.py::test_matmul_cold"][""]  # the test's own series
    assert set(entry) == {"time:device/cold", "memory:peak"}
    assert len(entry["time:device/cold"]["recordings"]) == 1
    pytester.runpytest(*args).assert_outcomes(passed=1)
    monkeypatch.setenv("SCALE", "1.5")  # 3.4x the flops
    slow = pytester.runpytest(*args)
    slow.assert_outcomes(failed=1)
    slow.stdout.fnmatch_lines(["perf regression: median * vs baseline * — NVIDIA *"])


STABILITY = """
import dataclasses, json
import torch
from pytest_cudaperf.devices import probe as devices
from pytest_cudaperf.measure.cuda import CudaBackend
from pytest_cudaperf.measure.timing import Budget, measure
from pytest_cudaperf.measure.measurement import Measurement

def test_stability_fields_and_fingerprint():
    probe = devices.probe()
    gpu = probe.gpus[0]
    backend = CudaBackend(torch.device("cuda:0"), "cold", gpu.l2_bytes, gpu.uuid)
    x = torch.randn(1024, device="cuda:0")
    m = measure(backend, lambda: x.sum(), Budget(max_time=0.6))
    backend.close()
    again = Measurement.from_dict(json.loads(json.dumps(m.to_dict())))
    fp = devices.fingerprint("cuda:0", probe)
    with open("stability.json", "w") as f:
        json.dump({"m": m.to_dict(), "again_equal": again == m, "fp": fp}, f)
"""


def test_cuda_measurement_carries_sm_clock_instability_and_fingerprint(
    pytester: pytest.Pytester,
) -> None:
    """A cold x.sum() over 1,024 floats (a launch-bound reduction): the spin blocker's SM clock is on
    the measurement, instability fields are typed and round-trip, and the probe's fingerprint
    names the GPU and, with nvidia-ml-py, its power limit."""
    pytester.makepyfile(test_stability=STABILITY)
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)
    data = json.loads((pytester.path / "stability.json").read_text())
    m, fp = data["m"], data["fp"]
    assert data["again_equal"]
    if m["blocking"] == "spin" and "spin_sm_mhz" in m["clocks"]:
        assert 300 < m["sm_mhz"] < 4000, m["sm_mhz"]
        assert m["sm_mhz"] == m["clocks"]["spin_sm_mhz"]["median"]
    else:
        assert m["sm_mhz"] is None
    assert isinstance(m["instability"], list)
    assert m["instability_noise"] >= 0.0
    if any(r.startswith(("rounds", "warm-up", "samples")) for r in m["instability"]):
        assert m["instability_noise"] > 0, m["instability"]
    assert m["recompiles"] == 0
    import importlib.util

    import torch

    assert fp["model"] == torch.cuda.get_device_name(0)
    assert fp["cuda"]
    assert fp["torch"]
    assert fp["driver"]
    if importlib.util.find_spec("pynvml") is not None:
        assert float(fp["power_limit_w"]) > 0, fp
        assert fp.get("mig") in ("on", "off", None)
    assert all(isinstance(v, str) for v in fp.values())
