from __future__ import annotations

import sys
import types

import pytest

from pytest_cudaperf.measure.nvml import ClockWatch, decode_reasons


def test_decode_reasons_ignores_idle_and_application_clocks() -> None:
    assert decode_reasons(0x1 | 0x2) == []
    assert decode_reasons(0x4 | 0x40) == ["sw-power-cap", "hw-thermal"]


def test_without_nvml_clocks_are_not_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    watch = ClockWatch("abc")
    watch.observe(10)
    assert watch.report()[0] == {"recorded": False}
    assert watch.report()[1] is None


def test_throttled_batches_are_counted_and_named(monkeypatch: pytest.MonkeyPatch) -> None:
    reasons = iter([0x0, 0x4, 0x1])
    fake = types.SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlDeviceGetHandleByUUID=lambda uuid: uuid,
        NVML_CLOCK_SM=0,
        nvmlDeviceGetClockInfo=lambda handle, clock: 1980,
        nvmlDeviceGetCurrentClocksEventReasons=lambda handle: next(reasons),
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    watch = ClockWatch("abc")
    for _ in range(3):
        watch.observe(8)
    assert watch.report()[0] == {
        "recorded": True,
        "sm_mhz_min": 1980,
        "sm_mhz_max": 1980,
        "throttle_reasons": ["sw-power-cap"],
        "throttled_samples": 8,
    }
    assert watch.report()[1] == "throttled: 8 of 24 samples taken while sw-power-cap"


def test_reset_starts_a_new_measurement() -> None:
    watch = ClockWatch("GPU-none")
    watch.sm_mhz, watch.reasons, watch.throttled_samples, watch.samples = [1980], {"x"}, 4, 8
    watch.reset()
    assert (watch.sm_mhz, watch.reasons, watch.throttled_samples, watch.samples) == (
        [],
        set(),
        0,
        0,
    )
    assert watch.report()[1] is None


def test_blocker_clock_readings_without_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    watch = ClockWatch("abc")
    # single readings jitter by a few percent: no warning
    watch.observe_spin([1980.0, 1950.0, 2010.0, 1975.0, 1990.0] * 4)
    summary = watch.report()[0]
    assert summary["recorded"] is False  # NVML's readings: absent
    assert summary["spin_sm_mhz"] == {"p10": 1950.0, "median": 1980.0, "p90": 2010.0}
    assert watch.report()[1] is None
    # a tenth of the samples or more well below the median: a dip, said with its numbers
    watch.observe_spin([1650.0] * 6)
    assert watch.report()[1] == (
        "SM clock dipped: a tenth of the samples at or below 1650 MHz, median 1975 MHz "
        "(measured in the stream blocker)"
    )
    watch.reset()
    assert watch.spin_mhz == []
    assert "spin_sm_mhz" not in watch.report()[0]


def test_nvml_throttling_is_said_before_a_blocker_dip(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlDeviceGetHandleByUUID=lambda uuid: uuid,
        NVML_CLOCK_SM=0,
        nvmlDeviceGetClockInfo=lambda handle, clock: 1650,
        nvmlDeviceGetCurrentClocksEventReasons=lambda handle: 0x4,
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    watch = ClockWatch("abc")
    watch.observe(4)
    watch.observe_spin([1980.0, 1980.0, 1650.0, 1650.0])
    assert watch.report()[1] == "throttled: 4 of 4 samples taken while sw-power-cap"
    assert watch.report()[0]["spin_sm_mhz"]["median"] == 1815.0


def _fake_nvml(**getters: object) -> types.SimpleNamespace:
    base: dict[str, object] = {
        "nvmlInit": lambda: None,
        "nvmlDeviceGetHandleByUUID": lambda uuid: uuid,
        "NVML_CLOCK_SM": 0,
        "NVML_CLOCK_MEM": 2,
    }
    return types.SimpleNamespace(**{**base, **getters})


def test_device_facts_read_what_nvml_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_cudaperf.measure.nvml import device_facts

    seen: list[object] = []

    def app_clock(handle: object, clock: int) -> int:
        seen.append(handle)
        return {0: 1755, 2: 2619}[clock]

    def unsupported(handle: object) -> object:
        raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")

    fake = _fake_nvml(
        nvmlDeviceGetEnforcedPowerLimit=lambda handle: 700000,
        nvmlDeviceGetApplicationsClock=app_clock,
        nvmlDeviceGetMaxClockInfo=lambda handle, clock: 1980,
        nvmlDeviceGetEccMode=lambda handle: (1, 1),
        nvmlDeviceGetMigMode=unsupported,  # a device without MIG: absent
        nvmlDeviceGetBoardPartNumber=lambda handle: b"692-2G520-0200-000",
        # no nvmlDeviceGetVbiosVersion in this nvidia-ml-py: absent
        nvmlDeviceGetPersistenceMode=lambda handle: 0,
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert device_facts("abc") == {
        "power_limit_w": "700",
        "app_clock_sm_mhz": "1755",
        "app_clock_mem_mhz": "2619",
        "max_clock_sm_mhz": "1980",
        "ecc": "on",
        "board_part": "692-2G520-0200-000",
        "persistence": "off",
    }
    assert seen == ["GPU-abc", "GPU-abc"]  # the handle by the UUID, GPU- prefixed


def test_device_facts_without_nvml_are_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_cudaperf.measure.nvml import device_facts

    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert device_facts("GPU-abc") == {}

    def no_device(uuid: str) -> object:
        raise RuntimeError("NVML_ERROR_NOT_FOUND")

    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml(nvmlDeviceGetHandleByUUID=no_device))
    assert device_facts("GPU-abc") == {}
