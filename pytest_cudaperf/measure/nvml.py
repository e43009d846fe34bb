"""SM clock and throttle reasons through NVML (optional: the `nvml` extra, ``nvidia-ml-py``),
and the SM clock the stream blocker measured before each sample (no NVML needed).

NVML reads device state without a CUDA context. Without ``nvidia-ml-py`` NVML's readings are
absent (``recorded: False``); the blocker's are there whenever the Triton spin blocker is.
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


#: a blocker-measured SM clock whose 10th percentile is below this share of its median has
#: dipped: beyond the few percent single readings jitter by (why:
#: docs/decisions.md, "How does the plugin keep a clock dip from failing a test?")
CLOCK_DIP = 0.95


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
        #: the SM clock measured by the stream blocker before each sample (no NVML needed)
        self.spin_mhz: list[float] = []
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

    def observe_spin(self, mhz: list[float]) -> None:
        """The SM clock before each sample of a batch, as the stream blocker measured it."""
        self.spin_mhz.extend(mhz)

    def reset(self) -> None:
        """Start a new measurement: forget the readings, keep the NVML handle."""
        self.spin_mhz = []
        self.sm_mhz = []
        self.reasons = set()
        self.throttled_samples = 0
        self.samples = 0

    def spin_quantiles(self) -> tuple[float, float, float] | None:
        """10th percentile, median and 90th percentile of the blocker's SM clock readings
        (single readings jitter by a few percent: the spin lasts ~10-50 µs of a coarse timer)."""
        if not self.spin_mhz:
            return None
        from pytest_cudaperf.measure.stats import quantiles

        p10, median, p90 = quantiles(self.spin_mhz, (0.1, 0.5, 0.9))
        return p10, median, p90

    def report(self) -> tuple[dict[str, Any], str | None]:
        """One measurement's clocks: NVML's readings (``recorded``) and the blocker's
        (``spin_sm_mhz``: p10, median, p90 over the samples), each where available, and the
        warning they give, if any (throttling NVML saw, else a dip of the blocker's clock); the
        blocker's quantiles taken once for both."""
        spin = self.spin_quantiles()
        return self._summary(spin), self._warning(spin)

    def _summary(self, spin: tuple[float, float, float] | None) -> dict[str, Any]:
        out: dict[str, Any] = {"recorded": False}
        if self.available:
            out = {
                "recorded": True,
                "sm_mhz_min": min(self.sm_mhz, default=None),
                "sm_mhz_max": max(self.sm_mhz, default=None),
                "throttle_reasons": sorted(self.reasons),
                "throttled_samples": self.throttled_samples,
            }
        if spin is not None:
            out["spin_sm_mhz"] = {
                "p10": round(spin[0], 1),
                "median": round(spin[1], 1),
                "p90": round(spin[2], 1),
            }
        return out

    def _warning(self, spin: tuple[float, float, float] | None) -> str | None:
        if self.throttled_samples:
            return (
                f"throttled: {self.throttled_samples} of {self.samples} samples taken while "
                f"{', '.join(sorted(self.reasons))}"
            )
        if spin is not None and spin[0] < CLOCK_DIP * spin[1]:
            return (
                f"SM clock dipped: a tenth of the samples at or below {spin[0]:.0f} MHz, "
                f"median {spin[1]:.0f} MHz (measured in the stream blocker)"
            )
        return None


def _on_off(value: Any) -> str:
    return "on" if int(value) else "off"


def _first(value: Any) -> Any:
    """NVML getters of a (current, pending) pair: the current one."""
    return value[0] if isinstance(value, (tuple, list)) else value


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


#: fingerprint fields read through NVML: (field, getter name, extra arguments by NVML constant
#: name, conversion). Each is read only where this nvidia-ml-py has the getter and the device
#: answers (a field NVML does not support is absent, never a guess).
_FACTS: tuple[tuple[str, str, tuple[str, ...], Any], ...] = (
    ("power_limit_w", "nvmlDeviceGetEnforcedPowerLimit", (), lambda mw: f"{int(mw) / 1000:.0f}"),
    ("app_clock_sm_mhz", "nvmlDeviceGetApplicationsClock", ("NVML_CLOCK_SM",), str),
    ("app_clock_mem_mhz", "nvmlDeviceGetApplicationsClock", ("NVML_CLOCK_MEM",), str),
    ("max_clock_sm_mhz", "nvmlDeviceGetMaxClockInfo", ("NVML_CLOCK_SM",), str),
    ("ecc", "nvmlDeviceGetEccMode", (), lambda v: _on_off(_first(v))),
    ("mig", "nvmlDeviceGetMigMode", (), lambda v: _on_off(_first(v))),
    ("board_part", "nvmlDeviceGetBoardPartNumber", (), _text),
    ("vbios", "nvmlDeviceGetVbiosVersion", (), _text),
    ("persistence", "nvmlDeviceGetPersistenceMode", (), _on_off),
)


def device_facts(uuid: str) -> dict[str, str]:
    """What NVML says about one GPU's settings that can move a timing: enforced power limit
    (W), application clocks and the SM clock's maximum (MHz), ECC and MIG mode, board part
    number (it names the form factor: SXM or PCIe), VBIOS, persistence mode. Empty without
    NVML; a field this driver or device does not answer is absent. NVML has no getter for
    clocks locked with ``nvidia-smi -lgc``; a lock shows in the blocker's SM clock."""
    try:
        import pynvml

        pynvml.nvmlInit()
        key = uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"
        handle = pynvml.nvmlDeviceGetHandleByUUID(key)
    # NVML missing, no driver, or the device unknown to NVML: no facts
    except Exception:  # noqa: BLE001
        return {}
    facts: dict[str, str] = {}
    for field, getter_name, constants, convert in _FACTS:
        getter = getattr(pynvml, getter_name, None)
        try:
            args = [getattr(pynvml, c) for c in constants]
            if getter is not None:
                facts[field] = convert(getter(handle, *args))
        # NVML_ERROR_NOT_SUPPORTED and friends, or a constant this version lacks
        except Exception:  # noqa: BLE001, S112
            continue
    return facts
