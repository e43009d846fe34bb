"""The paired comparison of two sides measured in alternating fresh processes: per series, the ratio
head / base of each pair of processes, their 95% interval, and a verdict against the smallest
effect worth a word. Pure functions over the processes' medians.

Pairs are what make it sharp: the two processes of a pair ran one after the other on the same
machine, so whatever moved the machine between pairs moves both sides of a pair alike. The
interval is Student's t on the log ratios (the pairs are few), its variance weighed with the
pair noise the comparison's series share where a prior was fitted
(:mod:`pytest_cudaperf.ab.prior`), and a series with fewer than :data:`MIN_PAIRS` pairs is
UNDECIDED whatever its ratios say.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from pytest_cudaperf.ab.prior import Prior, log_ratios, weighed

#: pairs below which nothing is decided (two pairs give a t interval with one degree of freedom)
MIN_PAIRS = 3
#: the smallest change called SLOWER or FASTER by default (why: docs/decisions.md, "Why does
#: cudaperf ab call 2% a change?")
MIN_EFFECT = 0.02
#: fresh pairs, of the SLOWER and FASTER tests only, that confirm (or withdraw) their calls (see
#: :mod:`pytest_cudaperf.ab.session`)
CONFIRM_PAIRS = 3
#: peak memory is exact: a change beyond this is LARGER or SMALLER
MEMORY_TOLERANCE = 0.01

#: Student's t, two-sided 95%, by degrees of freedom (1..30); above, the normal's 1.96
_T95 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def t95(df: float) -> float:
    """The two-sided 95% quantile of Student's t with ``df`` degrees of freedom (a fraction is
    rounded down; above 30, the normal's 1.96 plus the first Cornish-Fisher term,
    ``(z³ + z) / 4df``, within 0.001 of the exact value)."""
    if df < 1:
        return math.inf
    if df <= len(_T95):
        return _T95[int(df) - 1]
    return 1.96 + (1.96**3 + 1.96) / (4 * df)


class Call(str, Enum):
    """What a paired comparison says of one series."""

    SLOWER = "slower"
    FASTER = "faster"
    SAME = "same"
    UNDECIDED = "undecided"
    #: a peak-memory series with no reading on a side: nothing to compare, and nothing that more
    #: pairs would decide
    UNMEASURED = "unmeasured"


@dataclass(frozen=True)
class Paired:
    """A series' paired ratios (head / base, one per pair) and what they say."""

    ratios: tuple[float, ...]
    ratio: float
    ci: tuple[float, float]
    call: Call
    #: the ratios were taken in cycle space (time x SM clock): the clocks differed
    cycles: bool = False

    @property
    def pairs(self) -> int:
        return len(self.ratios)


def interval(
    ratios: Sequence[float], prior: Prior | None = None
) -> tuple[float, tuple[float, float]]:
    """The geometric mean of ``ratios`` and its 95% interval (Student's t on their logs, the
    variance and degrees of freedom weighed with ``prior`` when given); an infinite interval
    below two ratios."""
    logs = log_ratios(ratios)
    if not logs:
        return math.nan, (0.0, math.inf)
    centre = statistics.fmean(logs)
    found = weighed(logs, prior)
    if found is None:
        return math.exp(centre), (0.0, math.inf)
    variance, df = found
    half = t95(df) * math.sqrt(variance / len(logs))
    return math.exp(centre), (math.exp(centre - half), math.exp(centre + half))


def decide(ci: tuple[float, float], pairs: int, min_effect: float) -> Call:
    """SLOWER when the whole interval lies above ``1 + min_effect``, FASTER below
    ``1 / (1 + min_effect)``, SAME inside the band between them, UNDECIDED otherwise (and below
    :data:`MIN_PAIRS` pairs)."""
    if pairs < MIN_PAIRS:
        return Call.UNDECIDED
    low, high = ci
    if low > 1 + min_effect:
        return Call.SLOWER
    if high < 1 / (1 + min_effect):
        return Call.FASTER
    if low >= 1 / (1 + min_effect) and high <= 1 + min_effect:
        return Call.SAME
    return Call.UNDECIDED


def reachable(
    ratios: Sequence[float], prior: Prior | None, pairs: int, min_effect: float
) -> tuple[bool, bool] | None:
    """Whether a series of ``ratios`` so far could still be called SAME, and a change, at
    ``pairs`` pairs, were the pairs left to read as these did: its interval projected there (its
    weighed variance so far, the degrees of freedom the pairs left add) narrower than the
    minimum effect (SAME), and its centre beyond that half-width plus the effect (a change).
    None below two ratios."""
    logs = log_ratios(ratios)
    found = weighed(logs, prior)
    if found is None:
        return None
    variance, df = found
    half = t95(df + pairs - len(logs)) * math.sqrt(variance / pairs)
    edge = math.log1p(min_effect)
    return half < edge, abs(statistics.fmean(logs)) - half > edge


def leans(ratios: Sequence[float], prior: Prior | None, pairs: int, min_effect: float) -> bool:
    """Whether an undecided series keeps the pairs going: a change is :func:`reachable` by
    ``pairs`` pairs from where its ratios stand, or too few ratios say otherwise. A series whose
    ratios point at no change that the pairs left could show does not: more pairs would at
    most call it SAME (why: docs/decisions.md, "Why does cudaperf ab stop when no undecided
    series leans toward a change?")."""
    found = reachable(ratios, prior, pairs, min_effect)
    return found is None or found[1]


def repeats(call: Call, fresh: Sequence[float], min_effect: float) -> bool:
    """Whether fresh pairs' ratios (head / base) repeat a SLOWER or FASTER: their geometric mean
    shows at least half of ``min_effect`` in the call's direction, and none of them reads more
    than half of it the other way. A fresh pair that does says one of its processes moved
    further than the change; two pairs leaning the call's way do not outweigh it (why:
    docs/decisions.md, "Why is a SLOWER from cudaperf ab confirmed?")."""
    if call not in (Call.SLOWER, Call.FASTER) or not fresh:
        return False
    edge = 1 + min_effect / 2
    ratio, _ = interval(fresh)
    if call is Call.SLOWER:
        return ratio > edge and min(fresh) > 1 / edge
    return ratio < 1 / edge and max(fresh) < edge


def pair_ratios(
    base: Sequence[float | None],
    head: Sequence[float | None],
    base_mhz: Sequence[float | None] = (),
    head_mhz: Sequence[float | None] = (),
) -> tuple[tuple[float, ...], bool]:
    """head / base of each pair (``base[i]``, ``head[i]`` measured one after the other), in cycle
    space (time x clock) when every pair knows both SM clocks and they differ by more than 1%
    somewhere; pairs missing a value (a process that did not run the test) are left out first,
    so they neither count nor decide the space."""
    clocks = list(zip(base_mhz, head_mhz, strict=False))
    if len(clocks) != len(base):
        clocks = [(None, None)] * len(base)
    present = [
        (b, h, cb, ch)
        for b, h, (cb, ch) in zip(base, head, clocks, strict=False)
        if b and h and b > 0 and h > 0
    ]
    known = [(cb, ch) for _, _, cb, ch in present if cb and ch]
    differ = len(known) == len(present) and any(abs(ch / cb - 1) > 0.01 for cb, ch in known)
    if not differ:
        return tuple(h / b for b, h, _, _ in present), False
    cycles = (h / b * ch / cb for (b, h, _, _), (cb, ch) in zip(present, known, strict=True))
    return tuple(cycles), True


def compare_times(
    base: Sequence[float | None],
    head: Sequence[float | None],
    min_effect: float,
    clocks: tuple[Sequence[float | None], Sequence[float | None]] = ((), ()),
    prior: Prior | None = None,
) -> Paired:
    """A time series' paired comparison (see :func:`pair_ratios`, :func:`interval`,
    :func:`decide`); ``clocks`` are each side's SM clocks (MHz), pair by pair."""
    ratios, cycles = pair_ratios(base, head, *clocks)
    ratio, ci = interval(ratios, prior)
    return Paired(ratios, ratio, ci, decide(ci, len(ratios), min_effect), cycles)


def compare_peaks(base: Sequence[float | None], head: Sequence[float | None]) -> Paired:
    """Peak memory: exact readings, so the medians of each side against :data:`MEMORY_TOLERANCE`
    (SLOWER reads 'more memory'). A peak of 0 bytes (a call that allocates nothing) is a reading:
    0 on both sides is SAME, an allocation on one side only is a change. A side with no reading
    at all is UNMEASURED (no pairs)."""
    b = [x for x in base if x is not None]
    h = [x for x in head if x is not None]
    if not b or not h:
        return Paired((), math.nan, (0.0, math.inf), Call.UNMEASURED)
    mb, mh = statistics.median(b), statistics.median(h)
    if mb <= 0 or mh <= 0:
        ratio = 1.0 if mb <= 0 and mh <= 0 else math.inf if mh > 0 else 0.0
    else:
        ratio = mh / mb
    if ratio > 1 + MEMORY_TOLERANCE:
        call = Call.SLOWER
    elif ratio < 1 / (1 + MEMORY_TOLERANCE):
        call = Call.FASTER
    else:
        call = Call.SAME
    return Paired((ratio,), ratio, (ratio, ratio), call)


def abba(pairs: int) -> list[str]:
    """The order of ``pairs`` pairs of processes, balanced: ``A B B A A B B A …`` (each side goes
    first in half the pairs, so a drift of the machine falls on both alike)."""
    order: list[str] = []
    for i in range(pairs):
        order += ["base", "head"] if i % 2 == 0 else ["head", "base"]
    return order
