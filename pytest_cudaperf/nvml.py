"""SM clock and throttle reasons through NVML (optional: ``pip install pytest-cudaperf[nvml]``).

NVML reads device state without a CUDA context. Without ``nvidia-ml-py`` every reading is None
and measurements say that clocks were not recorded.
"""

from __future__ import annotations

from typing import Any

#: NVML clock-event reasons that slow the clock (idle and application-clock settings are not)
SLOWDOWN_REASONS = {
    0x4: "sw-power-cap",
    0x8: "hw-slowdown",
    0x20: "sw-thermal",
    0x40: "hw-thermal",
    0x80: "hw-power-brake",
}


def decode_reasons(mask: int) -> list[str]:
    return [name for bit, name in SLOWDOWN_REASONS.items() if mask & bit]


class ClockWatch:
    """Polls one GPU's SM clock and throttle reasons around batches of samples."""

    def __init__(self, uuid: str) -> None:
        self.available = False
        self._nvml: Any = None
        self._handle: Any = None
        self.sm_mhz: list[int] = []
        self.reasons: set[str] = set()
        self.throttled_samples = 0
        self.samples = 0
        try:
            import pynvml

            pynvml.nvmlInit()
            key = uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"
            self._handle = pynvml.nvmlDeviceGetHandleByUUID(key)
            self._nvml = pynvml
            self.available = True
        # NVML missing, no driver, or the device unknown to NVML: clocks are not recorded
        except Exception:  # noqa: BLE001
            self.available = False

    def observe(self, samples: int) -> None:
        """Record the clock state once for a batch of ``samples`` samples."""
        self.samples += samples
        if not self.available:
            return
        nvml = self._nvml
        self.sm_mhz.append(int(nvml.nvmlDeviceGetClockInfo(self._handle, nvml.NVML_CLOCK_SM)))
        getter = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        if getter is None:  # nvidia-ml-py before 12.535
            getter = nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        reasons = decode_reasons(int(getter(self._handle)))
        if reasons:
            self.reasons.update(reasons)
            self.throttled_samples += samples

    def reset(self) -> None:
        """Start a new measurement: forget the readings, keep the NVML handle."""
        self.sm_mhz = []
        self.reasons = set()
        self.throttled_samples = 0
        self.samples = 0

    def summary(self) -> dict[str, Any]:
        if not self.available:
            return {"recorded": False}
        return {
            "recorded": True,
            "sm_mhz_min": min(self.sm_mhz, default=None),
            "sm_mhz_max": max(self.sm_mhz, default=None),
            "throttle_reasons": sorted(self.reasons),
            "throttled_samples": self.throttled_samples,
        }

    def warning(self) -> str | None:
        if self.throttled_samples:
            return (
                f"throttled: {self.throttled_samples} of {self.samples} samples taken while "
                f"{', '.join(sorted(self.reasons))}"
            )
        return None
