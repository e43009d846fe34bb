"""SM clock and throttle reasons through NVML (optional: the `nvml` extra, ``nvidia-ml-py``),
and the SM clock the stream blocker measured before each sample (no NVML needed).

NVML reads device state without a CUDA context. Without ``nvidia-ml-py`` NVML's readings are
absent (``recorded: False``); the blocker's are there whenever the Triton spin blocker is. The
CUDA backend keeps a measurement's raw readings itself (NVML's through the readers
:func:`clock_readers` binds once, at its build) and has them summarised once, at its finish
(:func:`clock_report`): its batches enter no module of this one.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
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


#: NVML's readers of one GPU's clock state, pynvml's own functions bound to its handle
#: (:func:`clock_readers`): the SM clock (MHz) and the clock-event reasons mask
ClockReaders = tuple[Callable[[], Any], Callable[[], Any]]

#: one batch's clock readings: its sample count, then NVML's SM clock and clock-event reasons
#: mask as pynvml returned them (None and None without NVML)
BatchClocks = tuple[int, Any, Any]


def clock_readers(uuid: str) -> ClockReaders | None:
    """NVML's SM clock and clock-event reasons of the GPU ``uuid``, as pynvml's own functions
    bound to its handle (called once per batch of samples, they enter no module of this
    package); None without NVML, a driver, or the device known to NVML."""
    try:
        import pynvml

        pynvml.nvmlInit()
        key = uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"
        handle = pynvml.nvmlDeviceGetHandleByUUID(key)
        reasons = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        if reasons is None:  # nvidia-ml-py before 12.535
            reasons = pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
        sm_clock = functools.partial(pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_SM)
        return sm_clock, functools.partial(reasons, handle)
    # NVML missing, no driver, or the device unknown to NVML: clocks are not recorded
    except Exception:  # noqa: BLE001
        return None


def clock_report(
    batches: Sequence[BatchClocks], spin_mhz: Sequence[float], recorded: bool
) -> tuple[dict[str, Any], str | None]:
    """One measurement's clocks from its raw readings, summarised once: NVML's (``recorded``:
    the readers were there; each batch's SM clock and reasons mask, :data:`BatchClocks`) and
    the stream blocker's SM clock before each sample (``spin_sm_mhz``: p10, median, p90), each
    where available, and the warning they give, if any: throttling NVML saw (the samples of the
    batches it saw a slowdown reason in), else a dip of the blocker's clock
    (:data:`CLOCK_DIP`)."""
    samples = sum(batch[0] for batch in batches)
    sm_mhz: list[int] = []
    reasons: set[str] = set()
    throttled = 0
    for count, sm_clock, mask in batches:
        if sm_clock is None:
            continue
        sm_mhz.append(int(sm_clock))
        found = decode_reasons(int(mask))
        if found:
            reasons.update(found)
            throttled += count
    spin = spin_quantiles(spin_mhz)
    out: dict[str, Any] = {"recorded": False}
    if recorded:
        out = {
            "recorded": True,
            "sm_mhz_min": min(sm_mhz, default=None),
            "sm_mhz_max": max(sm_mhz, default=None),
            "throttle_reasons": sorted(reasons),
            "throttled_samples": throttled,
        }
    if spin is not None:
        out["spin_sm_mhz"] = {
            "p10": round(spin[0], 1),
            "median": round(spin[1], 1),
            "p90": round(spin[2], 1),
        }
    if throttled:
        warning = (
            f"throttled: {throttled} of {samples} samples taken while {', '.join(sorted(reasons))}"
        )
        return out, warning
    if spin is not None and spin[0] < CLOCK_DIP * spin[1]:
        return out, (
            f"SM clock dipped: a tenth of the samples at or below {spin[0]:.0f} MHz, "
            f"median {spin[1]:.0f} MHz (measured in the stream blocker)"
        )
    return out, None


def spin_quantiles(spin_mhz: Sequence[float]) -> tuple[float, float, float] | None:
    """10th percentile, median and 90th percentile of the blocker's SM clock readings
    (single readings jitter by a few percent: the spin lasts ~10-50 µs of a coarse timer)."""
    if not spin_mhz:
        return None
    from pytest_cudaperf.measure.stats import quantiles

    p10, median, p90 = quantiles(spin_mhz, (0.1, 0.5, 0.9))
    return p10, median, p90


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
