"""Instability: evidence in a measurement's own samples (and in its process's surroundings) that
its median would land elsewhere in another process. Each detector returns a :class:`Finding` — a
short reason and the relative spread it implies — or None; :func:`combine` folds findings into
``Measurement.instability`` and ``Measurement.instability_noise``.

The noise terms are relative half-widths on the scale the verdict uses (0.05 = 5%).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pytest_cudaperf.measure import stats

#: round medians that disagree by less than this (relative range) are left to the CI, which
#: already covers every round's median; above it, and beyond what the rounds' own CIs explain,
#: the disagreement is a state that holds for a whole round (why: docs/decisions.md, "What does the
#: plugin do with a round that runs high?")
ROUNDS_MIN_SPREAD = 0.01
#: two modes closer than this (relative) are not reported: CUDA events tick in 32 ns steps, so a
#: 2 µs kernel's samples fall on levels 1.6% apart, and such levels are not two states
BIMODAL_MIN_GAP = 0.03
#: a gap must be this many times wider than the spread (IQR) of the wider of the two sides
BIMODAL_GAP_TO_IQR = 2.0
#: each side of a bimodal split holds at least this share of the samples
BIMODAL_MIN_SHARE = 0.10
#: run-queue wait below this share of the sampling wall time is not reported
CONTENTION_MIN = 0.01
#: a reference loop's time within this (relative, either way) of its time when the baseline was
#: recorded is not named: the loop itself moves that much between processes (why:
#: docs/decisions.md, "Why does a CPU measurement time a reference loop?")
HOST_MIN = 0.25
#: a test's slowdown beyond 1 during a slow stretch, as a multiple of the reference loop's: the
#: loop is one workload and others suffer more (why: docs/decisions.md, "Why does a CPU measurement
#: time a reference loop?")
HOST_STRETCH = 1.5
#: the same for GPU code that synchronizes inside, judged in launch references (its time over
#: the reference's): the reference follows most of a slow stretch, not all of it; a small
#: share, since a larger one hides real slowdowns without sparing a false one (why:
#: docs/decisions.md, "How is GPU code that synchronizes inside judged?")
LAUNCH_STRETCH = 0.10
#: how far the GPU's time between two kernels launched back to back moves between processes, in
#: µs per launch: device time behind the blocker includes it once per launch (why:
#: docs/decisions.md, "Why does device time of many small kernels carry a noise per launch?")
LAUNCH_GAP_US = 0.17
#: what the process's own launch-gap probe leaves unexplained, in µs per launch: the noise that
#: stays once the probe's difference from the recordings' is set aside
LAUNCH_GAP_RESIDUAL_US = 0.05
#: a launch-gap noise below this share of the median is not named
LAUNCH_GAP_MIN = 0.005
#: calls of fewer launches than this are not given a launch-gap noise: the move was seen in calls
#: of 10 to 158 launches, and suites of one or two kernels a call gave no false regression
#: without it
LAUNCH_GAP_MIN_LAUNCHES = 8
#: other processes' share of the machine's CPU time below this is not reported: a quiet machine's
#: daemons use a few percent; one busy process on a 2-core machine is 50%
BUSY_MIN = 0.25


@dataclass(frozen=True)
class Finding:
    reason: str
    #: the relative spread this finding implies for the median
    noise: float


def combine(findings: Iterable[Finding | None]) -> tuple[tuple[str, ...], float]:
    """Reasons in order, and the largest noise term.

    The largest, not the sum: one state usually shows in several detectors at once (a level that
    holds for a round makes the rounds disagree *and* the pooled samples bimodal *and* may leave
    the warm-up unsettled); adding the terms would count the same spread two or three times.
    """
    found = [f for f in findings if f is not None]
    reasons = tuple(dict.fromkeys(f.reason for f in found))
    return reasons, max((f.noise for f in found), default=0.0)


def _values(values_ms: Sequence[float]) -> str:
    """``4.60 / 5.49 / 4.59 µs``: the values in the unit of the smallest, to three significant
    digits of the smallest."""
    low = min(values_ms)
    if low < 1e-3:
        unit, scale = "ns", 1e6
    elif low < 1.0:
        unit, scale = "µs", 1e3
    elif low < 1e3:
        unit, scale = "ms", 1.0
    else:
        unit, scale = "s", 1e-3
    decimals = max(0, 2 - math.floor(math.log10(low * scale))) if low > 0 else 2
    return " / ".join(f"{v * scale:.{decimals}f}" for v in values_ms) + f" {unit}"


def rounds_disagree(rounds_ms: Sequence[Sequence[float]]) -> Finding | None:
    """The rounds' medians spread beyond what each round's own CI of the median explains
    (two rounds whose CIs do not overlap) and by at least :data:`ROUNDS_MIN_SPREAD`.

    Noise: the relative range of the round medians — a process could sit at either end, so a
    ratio between two processes can be off by the whole range."""
    if len(rounds_ms) < 2 or any(not r for r in rounds_ms):
        return None
    summaries = [stats.summarize(r) for r in rounds_ms]
    medians = [s.median for s in summaries]
    low, high = min(medians), max(medians)
    if low <= 0:
        return None
    spread = (high - low) / low
    overlap = max(s.ci[0] for s in summaries) <= min(s.ci[1] for s in summaries)
    if overlap or spread < ROUNDS_MIN_SPREAD:
        return None
    return Finding(f"rounds disagree by {spread:.0%} ({_values(medians)})", spread)


def warmup_unsettled(last_two_ms: tuple[float, float] | None) -> Finding | None:
    """The warm-up ran out of time with its last two batch medians still apart.

    Noise: their relative distance (the level the samples sit at was still moving)."""
    if last_two_ms is None:
        return None
    before, after = last_two_ms
    if min(before, after) <= 0:
        return None
    moved = abs(after - before) / min(before, after)
    return Finding(
        f"warm-up never settled ({_values([before, after]).replace(' / ', ' → ')})", moved
    )


def bimodal(samples_ms: Sequence[float]) -> Finding | None:
    """Two modes in the pooled samples: the widest gap between neighbouring sorted samples that
    leaves at least :data:`BIMODAL_MIN_SHARE` on each side is wider than
    :data:`BIMODAL_GAP_TO_IQR` times the IQR of either side, and at least
    :data:`BIMODAL_MIN_GAP` of the lower side's median.

    Why this test: it needs one sort and no fitting; a heavy tail (log-normal, exponential) has
    its wide gaps *in* the tail, outside the central 80% searched here, and within the centre its
    gaps are a small fraction of the IQR; two levels (a state that holds for a round, a clock
    step) leave an empty stretch wider than the spread of each level. The gap-to-IQR rule is
    scale-free, the relative floor keeps timer quantisation out.

    Noise: the distance of the two sides' medians relative to the lower one, scaled by how
    close the smaller side is to half the samples (``2 x share``, at most 1): the median moves to
    the other mode only when the shares swap, so a minority of 11% (seen on a loaded 2-core
    machine: a 2 ms sleep with a slow mode 173% above) weighs 22% of the gap, not all of it.
    """
    import numpy as np

    data = np.sort(np.asarray(samples_ms, dtype=np.float64))
    n = int(data.size)
    first = max(1, int(np.ceil(BIMODAL_MIN_SHARE * n)))  # smallest count on the lower side
    last = n - first  # largest count on the lower side
    if n < 10 or last < first:
        return None
    gaps = np.diff(data)  # gaps[i] lies between data[i] and data[i + 1]: i + 1 below it
    i = first - 1 + int(np.argmax(gaps[first - 1 : last]))
    lower, upper = data[: i + 1], data[i + 1 :]
    gap = float(gaps[i])
    spread = max(
        float(np.subtract(*np.quantile(lower, [0.75, 0.25]))),
        float(np.subtract(*np.quantile(upper, [0.75, 0.25]))),
    )
    low_mode, high_mode = float(np.median(lower)), float(np.median(upper))
    if low_mode <= 0 or gap < BIMODAL_MIN_GAP * low_mode or gap <= BIMODAL_GAP_TO_IQR * spread:
        return None
    minority = min(i + 1, n - i - 1) / n
    return Finding(
        f"samples are bimodal ({_values([low_mode, high_mode])}, {(i + 1) / n:.0%} in the lower)",
        (high_mode - low_mode) / low_mode * min(1.0, 2 * minority),
    )


def recompiled(times: int) -> Finding | None:
    """torch.compile recompiled while samples were taken.

    Noise: none of its own. The compile lands in one or a few samples, which the median ignores;
    when the recompiled code runs at another speed, the samples show it (bimodal, rounds)."""
    if times <= 0:
        return None
    return Finding(f"recompiled {times} time{'s' if times != 1 else ''} while sampling", 0.0)


#: the words of the findings below that say other processes competed for the CPU
_CONTENTION_WORDS = ("waited for a CPU", "other processes used", "load average", "xdist workers on")


def is_contention(reason: str) -> bool:
    """Is ``reason`` one of :func:`contention`, :func:`busy_machine`, :func:`oversubscribed`,
    :func:`overloaded`?"""
    return any(words in reason for words in _CONTENTION_WORDS)


def contention(waited: float | None) -> Finding | None:
    """The sampling thread waited for a CPU (run queue) ``waited`` of its wall time.

    The CPU sampler subtracts each sample's own run-queue wait (``CpuSampler``), so what is left
    is what sharing the cores did besides taking them away (caches, clock): noise ``waited``.
    (``waited / (1 - waited)``, the bound before the subtraction, made one contended process
    ±587% on a loaded 2-core machine, and a 6x slowdown then read inconclusive.)"""
    if waited is None or waited < CONTENTION_MIN:
        return None
    waited = min(waited, 0.99)
    return Finding(f"waited for a CPU {waited:.0%} of the time", waited)


def busy_machine(others: float | None) -> Finding | None:
    """Other processes used ``others`` of the machine's CPU time while the samples were taken.

    They need not have taken this thread's core (no run-queue wait) to slow it. Noise ``others``,
    the share of the machine that was somebody else's: not a measured stretch, but on top of the
    verdict's 2x contention threshold it keeps an unchanged process slowed that way from failing
    (why: docs/decisions.md, "Why does a CPU wall time under contention fail only beyond twice its
    baseline?")."""
    if others is None or others < BUSY_MIN:
        return None
    return Finding(f"other processes used {others:.0%} of the machine's CPU time", others)


def host_ratio(now_ms: float | None, then_ms: float | None) -> float | None:
    """``now_ms / then_ms`` (a reference's time in this process over the recordings') where it
    lies beyond :data:`HOST_MIN` either way; None within it or without two finite positive
    times: the host then ran as fast as at recording."""
    if now_ms is None or then_ms is None or not (now_ms > 0 and then_ms > 0):
        return None
    if not (math.isfinite(now_ms) and math.isfinite(then_ms)):
        return None
    ratio = now_ms / then_ms
    return None if 1 / (1 + HOST_MIN) < ratio < 1 + HOST_MIN else ratio


def host_speed(
    now_ms: float | None,
    then_ms: float | None,
    stretch: float = HOST_STRETCH,
    reference: str = "a reference loop",
) -> Finding | None:
    """The host ran the fixed reference loop (``cpu.ReferenceProbe``) in ``now_ms`` while this
    measurement sampled, against ``then_ms`` when the baseline was recorded: beyond
    :data:`HOST_MIN` either way, the whole machine was slower (or faster) than the baseline's,
    and the samples are too (why: docs/decisions.md, "Why does a CPU measurement time a reference
    loop?").

    Noise: ``stretch`` (:data:`HOST_STRETCH`) times the ratio's distance from 1 (``now / then -
    1`` slower, ``then / now - 1`` faster): an unchanged test slows with the machine, some
    workloads more than the loop, so its ratio's CI then reaches back into the band, while a 3x
    slowdown in a 1.6x slow stretch still lies beyond it. ``reference`` names the reference in
    the reason (GPU code that synchronizes inside is timed against the launch reference, with
    :data:`LAUNCH_STRETCH`)."""
    ratio = host_ratio(now_ms, then_ms)
    if ratio is None or now_ms is None or then_ms is None:  # (None: never, given a ratio)
        return None
    slower = ratio > 1
    factor = ratio if slower else 1 / ratio
    return Finding(
        f"the machine ran {reference} {factor:.1f}x {'slower' if slower else 'faster'} "
        f"than when the baseline was recorded ({_values([now_ms, then_ms])})",
        stretch * (factor - 1),
    )


def launch_gaps(launches: float, median_ms: float, probed: bool = False) -> Finding | None:
    """Device time of a call that launches ``launches`` kernels (and copies) per call: the GPU
    spends a gap between each two, and that gap moved by up to :data:`LAUNCH_GAP_US` per launch
    between processes while the kernels did not. Noise: that much per launch over
    ``median_ms``, or :data:`LAUNCH_GAP_RESIDUAL_US` where both sides ``probed`` the gap and its
    difference was set aside; None under :data:`LAUNCH_GAP_MIN`, under
    :data:`LAUNCH_GAP_MIN_LAUNCHES` launches or without a count."""
    if not (launches >= LAUNCH_GAP_MIN_LAUNCHES and median_ms > 0):
        return None
    if not math.isfinite(launches * median_ms):
        return None
    per_launch_us = LAUNCH_GAP_RESIDUAL_US if probed else LAUNCH_GAP_US
    noise = launches * per_launch_us / (median_ms * 1e3)
    if noise < LAUNCH_GAP_MIN:
        return None
    return Finding(
        f"{launches:.0f} kernel launches per call: the GPU's gaps between them move between "
        f"processes (±{noise:.1%}{', beyond what its probe explains' if probed else ''})",
        noise,
    )


def oversubscribed(workers: int | None, cores: int) -> Finding | None:
    """More xdist workers than usable CPU cores.

    The timing lock keeps the others from *sampling* at the same time, not from setting up,
    tearing down and reporting their tests on the cores this one needs. As many workers as cores
    is not named: slow stretches at as many workers as cores are judged by what they did to the
    host's speed (:func:`host_speed`), not by the worker count.

    Noise: ``workers / cores - 1``, the stretch of a wall time when every worker is busy and they
    share the cores evenly, whether or not a run-queue wait was measured (why: docs/decisions.md,
    "Why is one xdist worker per core not contention, but more workers than cores is?")."""
    if workers is None or cores <= 0 or workers <= cores:
        return None
    return Finding(
        f"{workers} xdist workers on {cores} CPU core{'s' if cores != 1 else ''}",
        workers / cores - 1,
    )


def overloaded(load: float | None, cores: int, measured: bool) -> Finding | None:
    """The 1-minute load average (runnable tasks, this process included) above usable cores.

    Noise: ``load / cores - 1`` (the stretch if the load shares the cores evenly), unless this
    thread's run-queue wait was ``measured``: then the wait says what the load did to this
    measurement and this finding is the reason only (noise 0)."""
    if load is None or cores <= 0 or load <= cores:
        return None
    return Finding(
        f"load average {load:.1f} on {cores} CPU core{'s' if cores != 1 else ''}",
        0.0 if measured else load / cores - 1,
    )
