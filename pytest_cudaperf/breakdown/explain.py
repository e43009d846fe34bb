"""What the plugin calls: the breakdown an update stores, and what a non-pass verdict, a
``min_speedup`` miss or ``cudaperf compare`` shows: the lines under the failure and the two
breakdowns they diff."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass

from pytest_cudaperf.breakdown.capture import profile
from pytest_cudaperf.breakdown.diff import diff, top_lines
from pytest_cudaperf.breakdown.model import Breakdown, BreakdownUnavailable


@dataclass(frozen=True)
class Explanation:
    """What a failure shows: ``lines`` under the verdict line, and the two breakdowns they diff,
    ``compared`` = (base, current), for the reports (None when there was nothing to diff). The
    HTML report renders them side by side when the run ends (:mod:`.html`)."""

    lines: tuple[str, ...]
    compared: tuple[Breakdown, Breakdown] | None = None


def ran_no_op(device: str) -> bool:
    """Calls on the CPU in a process that never imported torch ran no torch op: the profiler
    has nothing to break down, and torch is not imported for it. Callers profile nothing then
    (no breakdown recorded, none shown)."""
    return device == "cpu" and "torch" not in sys.modules


def taken(fn: Callable[[], object], device: str) -> Breakdown | str:
    """``fn``'s breakdown, profiled now: what an update stores (``Breakdown.to_json``) and what a
    non-pass verdict is diffed with (:func:`explain`), one profile for both; or, where the
    profiler cannot run, why (one line)."""
    try:
        return profile(fn, device)
    except BreakdownUnavailable as exc:
        return str(exc)


def explain(stored: object, current: Breakdown | str, max_lines: int = 8) -> Explanation:
    """For a non-pass verdict: ``current`` (:func:`taken`: the breakdown profiled now, or why
    there is none) diffed against the breakdown stored with the baseline (``stored``: the
    entry's "breakdown" value, or None when it has none)."""
    if isinstance(current, str):
        return Explanation((f"breakdown: {current}",))
    if stored is None:
        lines = ["breakdown: none stored with the baseline (--cudaperf-update records one)"]
        return Explanation(tuple(lines + top_lines(current, max_lines - 1)))
    try:
        base = Breakdown.from_json(stored)
    except ValueError as exc:
        return Explanation((f"breakdown: stored one unreadable: {exc}",))
    if base.backend != current.backend:
        line = f"breakdown: stored on {base.backend}, measured on {current.backend}: not compared"
        return Explanation((line,))
    return Explanation(tuple(diff(base, current).lines(max_lines)), (base, current))


def explain_pair(
    candidate: Callable[[], object],
    reference: Callable[[], object],
    device: str,
    max_lines: int = 8,
) -> Explanation:
    """For ``cuda_timer.compare`` (e.g. a ``min_speedup`` miss): both sides profiled now, the
    candidate diffed against the reference (positive deltas: the candidate spends more)."""
    try:
        ref = profile(reference, device)
        cand = profile(candidate, device)
    except BreakdownUnavailable as exc:
        return Explanation((f"breakdown: {exc}",))
    lines = diff(ref, cand).lines(max_lines)
    lines[0] = "reference -> candidate " + lines[0]
    return Explanation(tuple(lines), (ref, cand))


def explain_stored(base: object, current: object, max_lines: int = 8) -> Explanation:
    """For ``cudaperf compare BASE CURRENT``: the diff of two stored breakdowns (the entries'
    "breakdown" values), or one line saying why there is none."""
    if base is None or current is None:
        side = "BASE" if base is None else "CURRENT"
        return Explanation((f"breakdown: none stored in {side}",))
    try:
        b = Breakdown.from_json(base)
        c = Breakdown.from_json(current)
    except ValueError as exc:
        return Explanation((f"breakdown: stored one unreadable: {exc}",))
    if b.backend != c.backend:
        return Explanation(
            (f"breakdown: {b.backend} in BASE, {c.backend} in CURRENT: not compared",)
        )
    return Explanation(tuple(diff(b, c).lines(max_lines)), (b, c))
