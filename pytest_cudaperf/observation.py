"""The current side of a comparison (:class:`Observation`) and what the host says about it before
:mod:`pytest_cudaperf.verdict` judges it: the host's speed against the recordings' (its reason
and its noise), the GPU's launch gap (a per-launch move set aside), the part of a host-bound call
the host's speed does not move (set aside toward the baseline), and the host's state that a
host-bound change is judged only in (:func:`host_state`). Pure functions; no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from pytest_cudaperf import series
from pytest_cudaperf.breakdown.model import Breakdown
from pytest_cudaperf.measure import instability
from pytest_cudaperf.units import LOOPS, format_ms, format_pct, format_value

if TYPE_CHECKING:
    from pytest_cudaperf.series import Entry

#: a host-speed shift of a host-bound ratio under this (relative to the baseline) is not set
#: aside (:func:`fixed_part`): within any measurement's noise
FIXED_PART_MIN = 0.005


@dataclass(frozen=True)
class Observation:
    """The current side of a comparison, built by the judging layer from a Measurement (or a
    peak): ``value`` in ``unit``; ``halfwidth`` the relative CI half-width (``rel_halfwidth``);
    ``instability_noise`` and ``instability`` what the measurement's instability implies and why;
    ``sm_mhz`` the SM clock while sampling (CUDA); ``env`` this run's environment/fingerprint;
    ``reference_ms`` the host's reference time while sampling (the CPU backend's loop; for
    ``unit == "loops"`` the launch reference); ``traced`` the tracer or profiler it ran under (its
    verdict is then never a regression or an improvement); ``fixed_ms`` (``unit == "loops"``) the
    part of each call that does not follow the host's speed: its kernels; ``launch_gap_us``
    (device time on CUDA) the GPU's time per launch of back-to-back tiny kernels in this
    process."""

    value: float
    halfwidth: float = 0.0
    instability_noise: float = 0.0
    instability: tuple[str, ...] = ()
    sm_mhz: float | None = None
    env: Mapping[str, Any] = field(default_factory=dict)
    unit: str = "ms"
    reference_ms: float | None = None
    traced: str | None = None
    fixed_ms: float | None = None
    launch_gap_us: float | None = None

    @property
    def noise(self) -> float:
        """The relative half-width the verdict uses for this side (NaN/negative count as 0): the
        larger of the CI's and the instability's (see ``Measurement.noise``)."""
        return max(clean(self.halfwidth), clean(self.instability_noise))


def clean(x: float) -> float:
    return x if isinstance(x, (int, float)) and math.isfinite(x) and x > 0 else 0.0


def usable(x: float | None) -> bool:
    return x is not None and math.isfinite(x) and x > 0


def with_host_speed(obs: Observation, entry: Entry) -> tuple[Observation, str | None]:
    """``obs`` with what the host's speed says (:func:`instability.host_speed`: this run's
    reference loop against the recordings'), first among its reasons: it is the one a reader
    needs when the machine itself was slower; and that reason, or None."""
    if obs.unit == LOOPS:  # most of the host's speed is in the ratio already
        found = instability.host_speed(
            obs.reference_ms,
            entry.reference_ms,
            instability.LAUNCH_STRETCH,
            "the launch reference",
        )
    else:
        found = instability.host_speed(obs.reference_ms, entry.reference_ms)
    if found is None:
        return obs, None
    return _widened(obs, found, first=True), found.reason


def _widened(obs: Observation, found: instability.Finding, first: bool = False) -> Observation:
    """``obs`` with ``found`` among its reasons (``first``: before the others) and its noise in
    the instability noise's."""
    reasons = (found.reason, *obs.instability) if first else (*obs.instability, found.reason)
    return replace(
        obs,
        instability=reasons,
        instability_noise=max(clean(obs.instability_noise), found.noise),
    )


def queued_launches(entry: Entry) -> float | None:
    """The kernels and copies one call of ``entry`` launches, from its recorded CUDA breakdown;
    None without one."""
    if entry.breakdown is None:
        return None
    try:
        breakdown = Breakdown.from_json(entry.breakdown)
    except ValueError:
        return None
    return breakdown.launches if breakdown.backend == "cuda" else None


def with_launch_gaps(obs: Observation, entry: Entry) -> tuple[Observation, str | None]:
    """Device time (``entry.metric == "device"``) of a call whose recorded breakdown launches
    many kernels: the GPU's time between two queued kernels moves between processes. Where
    both sides probed it (``launch_gap_us``: this process's, the recordings' median), the
    difference times the launches is set aside (moved toward the baseline, never past it) and
    returned as the message's reason, and what the probe leaves unexplained
    (:data:`instability.LAUNCH_GAP_RESIDUAL_US` per launch) joins this side's noise; without a
    probe on either side the whole move (:data:`instability.LAUNCH_GAP_US` per launch) does
    (:func:`instability.launch_gaps`). ``obs`` as it is, and None, for any other series or
    without a CUDA breakdown."""
    found_launches = queued_launches(entry) if entry.metric == "device" else None
    if obs.unit != "ms" or found_launches is None:
        return obs, None
    launches, now, then = found_launches, obs.launch_gap_us, entry.launch_gap_us
    if launches < instability.LAUNCH_GAP_MIN_LAUNCHES:
        return obs, None
    probed = now is not None and then is not None and usable(now) and usable(then)
    found = instability.launch_gaps(launches, obs.value, probed)
    obs = obs if found is None else _widened(obs, found)
    if not probed or now is None or then is None:  # (None: never, once probed)
        return obs, None
    shift = launches * (now - then) / 1e3
    base = float(entry.value)
    if abs(shift) < FIXED_PART_MIN * base:
        return obs, None
    value = series.toward(obs.value, base, shift)
    reason = (
        f"the GPU took {now:.3f} µs per launch between queued kernels in this process, "
        f"{then:.3f} µs at recording: {format_pct(shift / base)} over {launches:.0f} launches "
        f"set aside, judged as {format_value(value, obs.unit)}"
    )
    return replace(obs, value=value), reason


def fixed_part(obs: Observation, entry: Entry) -> tuple[Observation, str | None]:
    """GPU code that synchronizes inside, judged in reference loops (call / launch reference):
    the reference follows the host's speed, the call's kernels (``obs.fixed_ms``) do not. Where
    the host ran the reference faster than when the series was recorded, the unchanged call
    reads up to ``fixed_ms * (1 / now - 1 / then)`` loops more (fewer where it ran slower): how
    much of the kernels the call waits for is anything from none to all of them, or what its
    recordings show where they saw the host in two states (``Entry.unmoved_ms``). The
    observation is moved by the part they show for certain and toward the baseline by as much
    of the rest as it needs (never past it: :func:`series.at_reference`), and the reason is
    returned for the message; ``obs`` as it is and None where a side lacks its reference or the
    kernels' time, or the move could be under 0.5% (why: docs/decisions.md, "How much of a
    host-bound call's kernels does the host's speed not move?")."""
    now, then, fixed, base = obs.reference_ms, entry.reference_ms, obs.fixed_ms, entry.value
    if obs.unit != LOOPS or now is None or then is None or fixed is None:
        return obs, None
    if not (usable(now) and usable(then) and usable(fixed) and usable(base)):
        return obs, None
    unmoved = entry.unmoved_ms
    low, high = series.unmoved_part(fixed, unmoved)
    per_ms = 1 / now - 1 / then
    if abs(high * per_ms) < FIXED_PART_MIN * float(base):
        return obs, None
    value = series.at_reference(obs.value, float(base), fixed, (now, then), unmoved)
    reason = (
        f"{_unmoved_text(low, high, fixed, unmoved is not None)} (launch reference "
        f"{format_ms(now)}, {format_ms(then)} at recording): "
        f"{_range_text(low * per_ms / base, high * per_ms / base)} set aside, judged as "
        f"{format_value(value, LOOPS)}"
    )
    return replace(obs, value=value), reason


def _unmoved_text(low: float, high: float, fixed: float, shown: bool) -> str:
    """Which of a host-bound call's ``fixed`` ms of kernels the host's speed does not move:
    ``low``–``high`` ms, ``shown`` by its recordings (else anything up to all of them)."""
    least, most, whole = format_ms(low), format_ms(high), format_ms(fixed)
    kernels = f"its kernels ({whole} per call) do not follow the host's speed"
    if not shown or (low == 0 and most == whole):
        return kernels
    said = "as its recordings show"
    if least == whole:
        return f"{kernels}, all of them {said}"
    part = f"up to {most}" if low == 0 else least if least == most else f"{least}–{most}"
    return f"{part} of its kernels' {whole} per call do not follow the host's speed, {said}"


def _range_text(low: float, high: float) -> str:
    """A relative move known to lie between ``low`` and ``high``: ``up to +5.0%`` from none."""
    least, most = format_pct(low), format_pct(high)
    if low == 0:
        return f"up to {most}"
    return most if least == most else f"{least}…{most}"


def host_state(obs: Observation, entry: Entry) -> float | None:
    """For a host-bound time (in reference loops): how many times slower (above 1) or faster
    (below 1) this process ran the launch reference than the recordings' median, where that is
    beyond ``instability.HOST_MIN`` either way; None otherwise or where a side has no
    reference. The host has states that last seconds to minutes, and in its slow one
    Python-heavy code slows more than the reference, so a slowdown in loops within that factor
    to the power of the series' reach (``Entry.state_reach``: its own slope of loops on the
    reference where its recordings saw two states, else ``series.STATE_REACH``) beyond the band,
    read in a slow state (a speed-up in a fast one), is not judged (why: docs/decisions.md,
    "Why is a host-bound change judged only in the recordings' state?")."""
    if obs.unit != LOOPS:
        return None
    return instability.host_ratio(obs.reference_ms, entry.reference_ms)


def as_recorded(obs: Observation, entry: Entry | None) -> bool:
    """Whether a host-bound time (in reference loops) was measured with the host in its
    recordings' state: both sides timed the launch reference, within ``instability.HOST_MIN``
    of each other. Such a measurement ends a spell of the other state
    (:class:`pytest_cudaperf.run.hoststate.Spell`)."""
    if entry is None or obs.unit != LOOPS or entry.reference_ms is None:
        return False
    now = obs.reference_ms
    return now is not None and math.isfinite(now) and now > 0 and host_state(obs, entry) is None


@dataclass(frozen=True)
class Adjusted:
    """An observation as the verdict judges it (:func:`adjusted`): ``obs`` with the host's speed
    among its noise and what it sets aside moved; ``state`` the host's state it was read in
    (:func:`host_state`), ``host`` the host-speed finding's reason, ``set_aside`` what was set
    aside (the launch gaps, or the part of a host-bound call the host's speed does not move),
    each None where there is none."""

    obs: Observation
    state: float | None
    host: str | None
    set_aside: str | None


def adjusted(obs: Observation, entry: Entry) -> Adjusted:
    """What the host says of ``obs`` against ``entry``, before it is judged."""
    state = host_state(obs, entry)
    obs, host = with_host_speed(obs, entry)
    obs, gaps = with_launch_gaps(obs, entry)
    obs, fixed = fixed_part(obs, entry)
    return Adjusted(obs, state, host, gaps or fixed)  # one of the two at most
