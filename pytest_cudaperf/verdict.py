"""Comparison policy: a current measurement against a baseline series -> a verdict.

``t = max(tolerance, series noise)``: the series noise is how far an unchanged process's median
lands from the series value, so it widens the band. The ratio current/baseline has a CI from the
current noise (the larger of the measurement's CI half-width and what its instability implies)
and the uncertainty of the series value itself, the median of ``n`` processes' medians:
``noise / sqrt(n)`` (:func:`value_uncertainty`), not the whole series noise again (why:
docs/decisions.md, "Why is the between-process movement counted in t and only the value's
uncertainty in the CI?").

- REGRESSION: CI low > 1 + t.  IMPROVED: CI high < 1 / (1 + t).
- PASS: the point ratio lies within [1 / (1 + t), 1 + t] — unless the noise raised t above the
  tolerance and the point lies between 1 + tolerance and 1 + t: then INCONCLUSIVE, the series cannot
  support the tolerance asked for.
- INCONCLUSIVE otherwise (point beyond the band, CI straddling it), saying why and what to do.
- The host's speed: where both sides timed the CPU backend's reference loop and the times differ
  by more than ``instability.HOST_MIN``, ``HOST_STRETCH`` times the ratio's distance from 1 joins
  this side's noise (a slow stretch of the machine is not the code's regression). A host-bound
  time (in reference loops) that reads as a slowdown while the host ran the launch reference
  that much slower than at recording (a speed-up while it ran that much faster), by no more than
  that factor to the power of the series' reach into the host's state (``Entry.state_reach``)
  beyond the band, is INCONCLUSIVE (:func:`host_state`): measured again, not judged.
- A fingerprint difference (power limit, clocks, ECC, MIG, torch, CUDA, driver…) is named, and turns
  a marginal regression (CI low <= 1 + 2t) into INCONCLUSIVE.
- :func:`confirm`: a REGRESSION stands only if a re-measurement is one too and, where both sides
  know their SM clock, the slowdown holds in cycles (time x clock) as well.

Peak memory (unit ``bytes``) is exact: compared with no noise at the caller's tolerance.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import TYPE_CHECKING, Any

from pytest_cudaperf import series
from pytest_cudaperf.measure import instability, stats
from pytest_cudaperf.observation import (
    Adjusted,
    Observation,
    adjusted,
    clean,
    usable,
)
from pytest_cudaperf.units import format_ms, format_pct, format_size, format_value

if TYPE_CHECKING:
    from pytest_cudaperf.series import Entry

#: environment keys compared between the baseline and now (those present on both sides), beside
#: every key of a nested ``fingerprint`` object
FINGERPRINT_KEYS = (
    "torch",
    "cuda",
    "driver",
    "power_limit_w",
    "app_clocks",
    "locked_clocks",
    "ecc",
    "mig",
    "form_factor",
    "torch_threads",
    "seed",
)


#: a CPU wall time taken under contention fails only beyond twice the baseline (why:
#: docs/decisions.md, "Why does a CPU wall time under contention fail only beyond twice its
#: baseline?")
CONTENDED_WALL_THRESHOLD = 1.0


class Kind(str, Enum):
    PASS = "pass"
    REGRESSION = "regression"
    IMPROVED = "improved"
    NEW = "new"
    INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True)
class Verdict:
    kind: Kind
    ratio: float | None = None
    ci: tuple[float, float] | None = None
    threshold: float | None = None
    message: str = ""
    #: the user's tolerance; ``threshold`` is larger when the baseline's noise is
    tolerance: float | None = None
    #: fingerprint differences with the baseline: ``power_limit_w 700 → 500``
    fingerprint: tuple[str, ...] = ()
    #: the ratio in cycles (time x SM clock), where the confirmation could check it
    cycles_ratio: float | None = None
    #: INCONCLUSIVE only because the host ran in another state than at recording (a host-bound
    #: time, :func:`host_state`): another measurement, when the host is back, can decide
    other_state: bool = False
    #: how many times slower (above 1) or faster the host ran the launch reference than at
    #: recording, where beyond ``instability.HOST_MIN`` (a host-bound time: :func:`host_state`)
    host_state: float | None = None
    #: INCONCLUSIVE only because the series' own noise raised the threshold above the tolerance
    #: and the point lies between the two, with this run's host as at recording (no contention,
    #: no host-speed finding): a more precise measurement of the same median stays between them
    series_bound: bool = False

    @property
    def awaits_host(self) -> bool:
        """A host-bound slowdown left undecided with the host in another state than at
        recording: held back for it (:attr:`other_state`), or INCONCLUSIVE with the host more
        than ``instability.HOST_MIN`` slower or faster. It is measured again once the host runs
        as at recording; a speed-up is not worth the wait, it fails nothing (why:
        docs/decisions.md, "Why does a host-bound change read in the host's other state wait for
        it?")."""
        undecided = self.other_state or (
            self.kind is Kind.INCONCLUSIVE and self.host_state is not None
        )
        return undecided and self.ratio is not None and self.ratio > 1

    @property
    def speed_up_only(self) -> bool:
        """INCONCLUSIVE, read as a speed-up, with a CI that rules out a regression (its high end
        within ``1 + threshold``): another measurement is for its label (PASS or IMPROVED), not
        to decide a failure."""
        ratio, ci, threshold = self.ratio, self.ci, self.threshold
        if self.kind is not Kind.INCONCLUSIVE or ratio is None or ci is None or threshold is None:
            return False
        return ratio < 1 and ci[1] <= 1 + threshold


def ci_text(ci: tuple[float, float] | list[float]) -> str:
    """A ratio's CI as changes: ``+10.1%…+14.0%``."""
    return f"{format_pct(ci[0] - 1)}…{format_pct(ci[1] - 1)}"


def fingerprint_differences(
    baseline_env: Mapping[str, Any], current_env: Mapping[str, Any]
) -> tuple[str, ...]:
    """``("power_limit_w 700 → 500", "torch 2.11 → 2.12")``: keys present on both sides that
    differ (a key only one side knows is not a difference: older baselines lack it)."""

    def flat(env: Mapping[str, Any]) -> dict[str, Any]:
        out = {k: env[k] for k in FINGERPRINT_KEYS if k in env and env[k] is not None}
        nested = env.get("fingerprint")
        if isinstance(nested, Mapping):
            out.update({str(k): v for k, v in nested.items() if v is not None})
        return out

    base, now = flat(baseline_env), flat(current_env)
    return tuple(
        f"{k} {base[k]} → {now[k]}" for k in sorted(base.keys() & now.keys()) if base[k] != now[k]
    )


def value_uncertainty(entry: Entry) -> float:
    """The relative half-width of the series value: its noise over the square root of the
    processes behind it (a one-process series keeps its whole, floored, noise)."""
    return clean(entry.noise) / math.sqrt(max(1, entry.processes))


def _why_and_todo(
    obs: Observation, entry: Entry, tolerance: float, slow_host: bool, contended: bool
) -> tuple[str, str]:
    """Why an INCONCLUSIVE verdict could not decide, and what the user can do about it: each
    follows from what held the threshold (``contended``: this run's CPU contention raised it;
    ``slow_host``: the host-speed finding was made, see :func:`with_host_speed`), and no advice
    repeats what the message already says or what cannot help."""
    parts = series.noise_parts(entry.recordings, entry.metric)
    # what the user can do about it, most useful first
    steps = []
    if contended:
        steps.append("run it where other processes leave the CPU alone (fewer xdist workers)")
    if slow_host:
        steps.append("run again when the machine is as fast as when it was recorded")
    if entry.processes < series.MIN_PROCESSES:
        steps.append(f"record {series.MIN_PROCESSES} processes or more: cudaperf record")
    elif entry.noise > tolerance and parts.floor < entry.noise:
        steps.append("record it again on a quiet machine: cudaperf record")
    if obs.instability and entry.metric == "device":
        steps.append('cache="hot" or graph=True')
    elif not obs.instability and obs.noise >= entry.noise:
        steps.append("a longer --cudaperf-max-time")
    if not contended:  # contention's threshold is the measurement's: no tolerance helps
        needed = math.ceil(100 * max(tolerance, entry.noise, obs.noise))
        steps.append(f"{'or ' if steps else ''}a tolerance above {needed}%")
    return _why(obs, entry, tolerance, parts, contended), ", ".join(steps)


def _why(
    obs: Observation,
    entry: Entry,
    tolerance: float,
    parts: series.NoiseParts,
    contended: bool,
) -> str:
    """Which noise keeps the verdict from being honest at ``tolerance``."""
    reasons = []
    busy = [r for r in obs.instability if instability.is_contention(r)]
    if contended and busy:
        reasons.append(f"this run shared the CPU: {busy[0]}")
    if entry.processes < series.MIN_PROCESSES:
        floor = series.SINGLE_PROCESS_FLOOR.get(entry.metric, 0.0)
        reasons.append(
            f"a series of fewer than {series.MIN_PROCESSES} processes is taken as ±{floor:.0%} "
            "at least"
        )
    elif entry.noise > tolerance:
        reasons.append(series.noise_origin(parts, entry.processes, entry.metric, entry.noise))
    others = [r for r in obs.instability if r not in busy]
    if others:
        reasons.append(f"this measurement was unstable: {others[0]}")
    elif not busy and (obs.noise >= entry.noise or obs.noise > tolerance):
        reasons.append(f"this measurement's CI is ±{obs.noise:.1%}")
    return "; ".join(reasons) or "the CI straddles the tolerance"


#: why a host-bound change read with the host in another state is not a verdict (see host_state)
OTHER_STATE = (
    "a host-bound {change} is judged only with the host as {speed} as at recording "
    "(Python-heavy code {moves} more than the launch reference): measured again when it is"
)


def judge(obs: Observation, entry: Entry | None, tolerance: float, device_class: str) -> Verdict:
    """The verdict for ``obs`` against the baseline series ``entry`` (None: NEW). A measurement
    taken under a tracer or profiler is INCONCLUSIVE, not judged (its numbers are kept)."""
    found = _judge(obs, entry, tolerance, device_class)
    if obs.traced is None or found.kind is Kind.NEW:
        return found
    message = found.message.removeprefix("perf regression: ").removeprefix("inconclusive: ")
    return replace(
        found,
        kind=Kind.INCONCLUSIVE,
        message=f"not judged: measured under {obs.traced}, which slows Python code — {message}",
    )


def judge_all(
    series: Sequence[tuple[Observation, Entry | None, float, str]],
) -> list[Verdict]:
    """The verdicts of the series one measurement measured (its time, then its peak memory),
    in order: each ``(obs, entry, tolerance, device_class)`` as :func:`judge` judges it alone."""
    return [judge(obs, entry, tolerance, klass) for obs, entry, tolerance, klass in series]


def _head(obs: Observation, base: float) -> str:
    """The message's start: ``median 1.500 ms vs baseline 1.000 ms``."""
    what = "peak memory" if obs.unit == "bytes" else "median"
    return f"{what} {format_value(obs.value, obs.unit)} vs baseline {format_value(base, obs.unit)}"


def _judge(obs: Observation, entry: Entry | None, tolerance: float, device_class: str) -> Verdict:
    if entry is None:
        return Verdict(Kind.NEW, message="no baseline for this device class", tolerance=tolerance)
    unit = obs.unit
    tolerance = clean(tolerance)
    diffs = fingerprint_differences(entry.env, obs.env)
    base = float(entry.value)
    head = _head(obs, base)
    where = (
        f"{device_class}; baseline since {entry.since} from {entry.processes} "
        f"process{'es' if entry.processes != 1 else ''}"
        + (f"; now {', '.join(diffs)}" if diffs else "")
    )
    finite = isinstance(obs.value, (int, float)) and math.isfinite(obs.value)
    if not finite or (unit != "bytes" and (obs.value <= 0 or not usable(base))):
        return Verdict(
            Kind.INCONCLUSIVE,
            message=f"inconclusive: {head} — not two finite positive values to compare",
            tolerance=tolerance,
            fingerprint=diffs,
        )
    if unit == "bytes":
        return _exact(obs, base, tolerance, where, diffs)
    seen = adjusted(obs, entry)
    obs, state, host, set_aside = seen.obs, seen.state, seen.host, seen.set_aside
    series_bound = False
    t = max(tolerance, clean(entry.noise))
    raised_by = "the series' noise"
    contended = entry.metric == "wall" and any(map(instability.is_contention, obs.instability))
    if contended and t < CONTENDED_WALL_THRESHOLD:
        # other processes took the CPU while this ran: beyond what the run-queue wait shows
        # (caches, shared cores), processes ran up to 2.4x slower on a loaded 2-core machine
        t, raised_by = CONTENDED_WALL_THRESHOLD, "this run's CPU contention"
    ratio, low, high = stats.ratio_ci(obs.value, obs.noise, base, value_uncertainty(entry))
    allowed = (
        f"tolerance {tolerance:.1%}, raised to {t:.1%} by {raised_by}"
        if t > tolerance
        else f"tolerance {t:.1%}"
    )
    body = f"{head} ({format_pct(ratio - 1)}, 95% CI {ci_text((low, high))}, {allowed}) — {where}"
    body += f"; {set_aside}" if set_aside else ""
    if low > 1 + t:
        if diffs and low <= 1 + 2 * t:
            kind = Kind.INCONCLUSIVE
            body += "; a marginal slowdown on a different setup: re-record the baseline here"
        else:
            kind = Kind.REGRESSION
    elif high < 1 / (1 + t):
        kind = Kind.IMPROVED
    elif t > tolerance and 1 + tolerance < ratio <= 1 + t:
        kind = Kind.INCONCLUSIVE
        why, todo = _why_and_todo(obs, entry, tolerance, host is not None, contended)
        body += f"; the series cannot support the tolerance {tolerance:.1%} ({why}): {todo}"
        series_bound = not contended and host is None
    elif 1 / (1 + t) <= ratio <= 1 + t:
        kind = Kind.PASS
    else:
        kind = Kind.INCONCLUSIVE
        why, todo = _why_and_todo(obs, entry, tolerance, host is not None, contended)
        body += f"; {why}: {todo}"
    kind, tail, other_state = _in_state(kind, (low, high), t, seen, entry)
    prefix = {Kind.REGRESSION: "perf regression: ", Kind.INCONCLUSIVE: "inconclusive: "}
    message = prefix.get(kind, "") + body + tail
    return Verdict(
        kind,
        ratio,
        (low, high),
        t,
        message,
        tolerance,
        diffs,
        other_state=other_state,
        host_state=state,
        series_bound=series_bound,
    )


def _in_state(
    kind: Kind, ci: tuple[float, float], t: float, seen: Adjusted, entry: Entry
) -> tuple[Kind, str, bool]:
    """A REGRESSION or IMPROVED as the host's state lets it stand (``seen.state``:
    :func:`host_state`, None where the host ran as at recording; held back within its power
    ``entry.state_reach``): the kind, the message's tail (the host's speed, where it was found)
    and whether the state held it back (INCONCLUSIVE)."""
    state, host = seen.state, seen.host
    if kind not in (Kind.REGRESSION, Kind.IMPROVED) or host is None:
        return kind, "", False
    if state is not None:
        reach = entry.state_reach
        slower = kind is Kind.REGRESSION
        if (
            (state > 1 and ci[0] <= (1 + t) * state**reach)
            if slower
            else (state < 1 and ci[1] >= state**reach / (1 + t))
        ):
            change, speed, moves = (
                ("slowdown", "fast", "slows") if slower else ("speed-up", "slow", "speeds up")
            )
            text = OTHER_STATE.format(change=change, speed=speed, moves=moves)
            return Kind.INCONCLUSIVE, f"; {host}: {text}", True
    return kind, f"; {host}, counted in the CI", False


def _exact(
    obs: Observation, base: float, tolerance: float, where: str, diffs: tuple[str, ...]
) -> Verdict:
    """Peak memory, or a zero on either side: no noise, the point against the tolerance."""
    head = _head(obs, base)
    if base > 0 and obs.value > 0:
        ratio: float | None = obs.value / base
        assert ratio is not None
        kind = (
            Kind.REGRESSION
            if ratio > 1 + tolerance
            else Kind.IMPROVED
            if ratio < 1 / (1 + tolerance)
            else Kind.PASS
        )
        change = f"{format_pct(ratio - 1)}, tolerance {tolerance:.1%}"
        ci: tuple[float, float] | None = (ratio, ratio)
    else:
        ratio, ci = None, None
        kind = Kind.PASS if obs.value <= base else Kind.REGRESSION
        change = "baseline is zero"
    what = "memory regression: " if obs.unit == "bytes" else "perf regression: "
    prefix = what if kind is Kind.REGRESSION else ""
    message = f"{prefix}{head} ({change}) — {where}"
    return Verdict(kind, ratio, ci, tolerance, message, tolerance, diffs)


def confirm(
    first: Verdict, again: Observation, entry: Entry | None, device_class: str, where: str = ""
) -> Verdict:
    """A REGRESSION (or an IMPROVED: the same evidence either way) stands only if ``again`` (a
    re-measurement) is one too and, where both the baseline and ``again`` know their SM clock,
    also in cycle space (time x clock): ratio x again.sm_mhz / baseline sm_mhz. Anything else is
    INCONCLUSIVE saying why. Other verdicts are returned as they are. ``where`` says where
    ``again`` was taken when not in this process (" in a fresh process"); a verdict it confirms
    says so. ``again`` is judged at the tolerance ``first`` was."""
    if first.kind not in (Kind.REGRESSION, Kind.IMPROVED) or entry is None:
        return first
    assert first.tolerance is not None, "a regression or an improvement has its tolerance"
    tolerance = first.tolerance
    second = _confirmed(judge(again, entry, tolerance, device_class), where)
    if second.kind is not first.kind:
        was = _change(first)
        now = format_pct(second.ratio - 1) if second.ratio is not None else second.kind.value
        return Verdict(
            Kind.INCONCLUSIVE,
            second.ratio,
            second.ci,
            second.threshold,
            f"inconclusive: {was} not confirmed{where}, re-measured {now} "
            f"({second.kind.value}) — {second.message.removeprefix('inconclusive: ')}",
            tolerance,
            second.fingerprint,
            other_state=second.other_state,
            host_state=second.host_state,
        )
    base_mhz, cur_mhz = entry.sm_mhz, again.sm_mhz
    if not (usable(base_mhz) and usable(cur_mhz) and second.ci and second.ratio):
        return second
    assert base_mhz is not None
    assert cur_mhz is not None
    assert second.threshold is not None
    scale = cur_mhz / base_mhz
    cycles, low, high = second.ratio * scale, second.ci[0] * scale, second.ci[1] * scale
    slower = first.kind is Kind.REGRESSION
    if (low > 1 + second.threshold) if slower else (high < 1 / (1 + second.threshold)):
        return Verdict(
            first.kind,
            second.ratio,
            second.ci,
            second.threshold,
            f"{second.message}; {format_pct(cycles - 1)} in cycles "
            f"(SM clock {cur_mhz:.0f} MHz vs {base_mhz:.0f})",
            tolerance,
            second.fingerprint,
            cycles,
        )
    return Verdict(
        Kind.INCONCLUSIVE,
        second.ratio,
        second.ci,
        second.threshold,
        f"inconclusive: SM clock {cur_mhz:.0f} MHz vs {base_mhz:.0f} at baseline: "
        f"{format_pct(cycles - 1)} in cycles — {second.message.removeprefix('perf regression: ')}",
        tolerance,
        second.fingerprint,
        cycles,
    )


def kernels_clause(kernels: Verdict) -> str | None:
    """What a host-bound time's verdict says its kernels (``kernels``, the ``time:kernels``
    verdict of the same calls) did meanwhile, ``; kernels unchanged (+1.0% per call)``: that
    they are unchanged (the host time moved), or how far they moved. None without a ratio."""
    if kernels.ratio is None:
        return None
    said = "unchanged" if kernels.kind is Kind.PASS else kernels.kind.value
    return f"; kernels {said} ({format_pct(kernels.ratio - 1)} per call)"


def left_unconfirmed(first: Verdict, why: str) -> Verdict:
    """A REGRESSION or IMPROVED of process-dependent time that no fresh process measured again
    by choice: INCONCLUSIVE (it fails nothing), saying ``why`` no fresh process measured it."""
    assert first.kind in (Kind.REGRESSION, Kind.IMPROVED), "only a change is left unconfirmed"
    return _withdrawn(first, f" not confirmed in a fresh process ({why})")


def host_moved(confirmed: Verdict, where: str, why: str) -> Verdict:
    """A REGRESSION confirmed ``where`` (a fresh process) in which code that passed in this run
    read slower too (``why`` says which and by how much): INCONCLUSIVE (it fails nothing), for the
    process ran unchanged code slower than this one did."""
    assert confirmed.kind is Kind.REGRESSION, "only a regression is withdrawn"
    unsaid = replace(confirmed, message=confirmed.message.replace(f"; confirmed{where}", ""))
    return _withdrawn(unsaid, f"{where} too, where {why}")


def _withdrawn(change: Verdict, clause: str) -> Verdict:
    """``change`` (a REGRESSION or IMPROVED) as INCONCLUSIVE: what it read, ``clause`` (why it
    does not stand), then its message."""
    said = change.message.removeprefix("perf regression: ")
    return replace(
        change,
        kind=Kind.INCONCLUSIVE,
        message=f"inconclusive: {_change(change)}{clause} — {said}",
    )


def _change(first: Verdict) -> str:
    """What a REGRESSION or IMPROVED that was not confirmed read: ``+21.5%``."""
    if first.ratio is not None:
        return format_pct(first.ratio - 1)
    return "a regression" if first.kind is Kind.REGRESSION else "a speed-up"


def _confirmed(verdict: Verdict, where: str) -> Verdict:
    """A REGRESSION or IMPROVED re-measured elsewhere (``where``) says it was confirmed there."""
    if not where or verdict.kind not in (Kind.REGRESSION, Kind.IMPROVED):
        return verdict
    return replace(verdict, message=f"{verdict.message}; confirmed{where}")


def budget_failure(
    value: float, limit: float | None, unit: str, describe: str, subject: str = ""
) -> str | None:
    """``perf: test_attention median 12.3 ms > max_ms 5 ms (device time, 40 samples, cold L2)``:
    a time (``unit`` ms) over ``max_ms``, a peak (``unit`` bytes) over ``max_peak``."""
    if limit is None or value <= limit:
        return None
    who = f"{subject} " if subject else ""
    if unit == "bytes":
        return (
            f"memory: {who}peak {format_size(value)} > max_peak {format_size(limit)} ({describe})"
        )
    return f"perf: {who}median {format_ms(value)} > max_ms {limit:g} ms ({describe})"
