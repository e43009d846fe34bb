from __future__ import annotations

import sys
import types

import pytest

from pytest_cudaperf.measure.nvml import clock_readers, clock_report, decode_reasons


def test_decode_reasons_ignores_idle_and_application_clocks() -> None:
    assert decode_reasons(0x1 | 0x2) == []
    assert decode_reasons(0x4 | 0x40) == ["sw-power-cap", "hw-thermal"]


def _batches(readers: object, counts: list[int]) -> list[tuple[int, object, object]]:
    """One measurement's batches of ``counts`` samples, read as the CUDA backend's batches read
    them: NVML's raw readings through the bound readers, (None, None) without them."""
    if readers is None:
        return [(n, None, None) for n in counts]
    sm_clock, reasons = readers  # type: ignore[misc]
    return [(n, sm_clock(), reasons()) for n in counts]


def test_without_nvml_clocks_are_not_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    readers = clock_readers("abc")
    assert readers is None
    assert clock_report(_batches(readers, [10]), [], recorded=False) == ({"recorded": False}, None)


def test_throttled_batches_are_counted_and_named(monkeypatch: pytest.MonkeyPatch) -> None:
    reasons = iter([0x0, 0x4, 0x1])
    handles: list[object] = []

    def clock_info(handle: object, clock: int) -> int:
        handles.append(handle)
        return 1980

    fake = types.SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlDeviceGetHandleByUUID=lambda uuid: uuid,
        NVML_CLOCK_SM=0,
        nvmlDeviceGetClockInfo=clock_info,
        nvmlDeviceGetCurrentClocksEventReasons=lambda handle: next(reasons),
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    readers = clock_readers("abc")
    batches = _batches(readers, [8, 8, 8])
    assert handles == ["GPU-abc"] * 3  # bound to the handle by the UUID, GPU- prefixed
    assert clock_report(batches, [], recorded=True) == (
        {
            "recorded": True,
            "sm_mhz_min": 1980,
            "sm_mhz_max": 1980,
            "throttle_reasons": ["sw-power-cap"],
            "throttled_samples": 8,
        },
        "throttled: 8 of 24 samples taken while sw-power-cap",
    )


def test_an_older_nvml_reads_the_throttle_reasons(monkeypatch: pytest.MonkeyPatch) -> None:
    """nvidia-ml-py before 12.535 names the reasons' getter ``...ThrottleReasons``."""
    fake = types.SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlDeviceGetHandleByUUID=lambda uuid: uuid,
        NVML_CLOCK_SM=0,
        nvmlDeviceGetClockInfo=lambda handle, clock: 1650,
        nvmlDeviceGetCurrentClocksThrottleReasons=lambda handle: 0x40,
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    summary, warning = clock_report(_batches(clock_readers("abc"), [4]), [], recorded=True)
    assert summary["throttle_reasons"] == ["hw-thermal"]
    assert warning == "throttled: 4 of 4 samples taken while hw-thermal"


def test_a_measurement_without_batches_records_no_clock() -> None:
    """NVML there but no batch read (a host-bound measurement's rounds): recorded, no range."""
    assert clock_report([], [], recorded=True) == (
        {
            "recorded": True,
            "sm_mhz_min": None,
            "sm_mhz_max": None,
            "throttle_reasons": [],
            "throttled_samples": 0,
        },
        None,
    )


def test_blocker_clock_readings_without_nvml() -> None:
    # single readings jitter by a few percent: no warning
    spin = [1980.0, 1950.0, 2010.0, 1975.0, 1990.0] * 4
    summary, warning = clock_report(_batches(None, [20]), spin, recorded=False)
    assert summary["recorded"] is False  # NVML's readings: absent
    assert summary["spin_sm_mhz"] == {"p10": 1950.0, "median": 1980.0, "p90": 2010.0}
    assert warning is None
    # a tenth of the samples or more well below the median: a dip, said with its numbers
    spin += [1650.0] * 6
    assert clock_report(_batches(None, [20, 6]), spin, recorded=False)[1] == (
        "SM clock dipped: a tenth of the samples at or below 1650 MHz, median 1975 MHz "
        "(measured in the stream blocker)"
    )
    assert "spin_sm_mhz" not in clock_report([], [], recorded=False)[0]


def test_nvml_throttling_is_said_before_a_blocker_dip() -> None:
    batches = [(4, 1650, 0x4)]
    summary, warning = clock_report(batches, [1980.0, 1980.0, 1650.0, 1650.0], recorded=True)
    assert warning == "throttled: 4 of 4 samples taken while sw-power-cap"
    assert summary["spin_sm_mhz"]["median"] == 1815.0


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
