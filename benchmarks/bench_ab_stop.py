"""Can a stopping rule end an A/A ``cudaperf ab`` comparison of the GPU suite in three pairs (six
processes) and still call a +3% slowdown SLOWER? Simulated comparisons of many time series, each
with its own pair noise, judged pair by pair with the package's own interval, calls, projection
and shared pair noise (:func:`pytest_cudaperf.ab.paired.interval`,
:func:`~pytest_cudaperf.ab.paired.decide`, :func:`~pytest_cudaperf.ab.paired.reachable`,
:func:`pytest_cudaperf.ab.prior.fit`), as ``ab`` stops: from the third pair a decided series
leaves the pairs, the comparison ends once none is undecided or at ``--pairs``, and a SLOWER or
FASTER adds its three fresh confirming pairs. The rules side by side:

- ``ab``: the rule as it is: the comparison also ends once no undecided series leans toward a
  change (:func:`~pytest_cudaperf.ab.paired.leans`: a change reachable by ``--pairs`` from where
  it stands); the undecided series are measured while it goes on;
- ``until-decided``: ``ab --until-decided`` (and each ``cudaperf bisect`` step): the pairs go on
  while any series is undecided;
- ``futility``: until decided, also dropping a series that can reach neither SAME nor a change
  from where it stands;
- ``robust``: until decided, the shared pair noise fitted again without the series whose own
  noise lies beyond the fitted prior's 99th percentile (F distribution), those keeping their
  own noise alone;
- ``robust+futility``: both.

The pair noise of each series comes from ``--reports`` (``cudaperf ab --json`` reports of A/A
comparisons: the spread of each time series' log pair ratios, from its three or more pairs) or,
without them, from a model of the H200 A/A of 2026-11-28 that benchmarks/RESULTS.md describes:
28 series moving 0.2-1.0% a pair and 7 moving 1.1-7.0%. Pairs are drawn independently
(log-normal), so runs of disturbed processes are not modelled. ``--cap`` caps every series' pair
noise: what making the noisiest series quieter could buy at most.

    python benchmarks/bench_ab_stop.py --out out/ab-stop [--pairs 3] [--cap 0.015] \\
        [--reports 'out/ab/*/ab.json']
"""

from __future__ import annotations

import argparse
import functools
import glob
import json
import math
import random
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from _table import publish  # noqa: E402

from pytest_cudaperf.ab import prior  # noqa: E402
from pytest_cudaperf.ab.paired import (  # noqa: E402
    CONFIRM_PAIRS,
    MIN_EFFECT,
    MIN_PAIRS,
    Call,
    decide,
    interval,
    leans,
    reachable,
)

#: the pair noise (sd of log ratios) of the modelled H200 A/A: 28 quiet series, 7 noisy ones
MODEL = (
    *(0.002 + 0.008 * i / 27 for i in range(28)),
    *(0.011, 0.015, 0.02, 0.03, 0.05, 0.07, 0.07),
)
#: a series this quiet or quieter counts among the quiet ones in the catch column
QUIET = 0.01
RULES = ("ab", "until-decided", "futility", "robust", "robust+futility")


@dataclass(frozen=True)
class Outcome:
    processes: int
    calls: tuple[Call, ...]


@functools.cache
def f_quantile(d1: int, d2: float, p: float, draws: int = 4000) -> float:
    """The ``p`` quantile of F(d1, d2) (d2 infinite: chi-square over d1), by drawing."""
    rng = random.Random(1)
    found = []
    for _ in range(draws):
        num = rng.gammavariate(d1 / 2, 2) / d1
        den = 1.0 if math.isinf(d2) else rng.gammavariate(d2 / 2, 2) / d2
        found.append(num / den)
    found.sort()
    return found[min(draws - 1, int(p * draws))]


def robust_fit(variances: Sequence[tuple[float, int]]) -> tuple[prior.Prior | None, set[int]]:
    """:func:`prior.fit` again without the series beyond the fitted prior's 99th percentile,
    until the set left out settles; (the prior, the indices left out)."""
    shared, out = prior.fit(variances), set[int]()
    for _ in range(5):
        if shared is None:
            return None, set()
        beyond = {
            i
            for i, (v, d) in enumerate(variances)
            if v / shared.variance > f_quantile(d, round(shared.df, 1), 0.99)
        }
        if beyond == out:
            break
        out = beyond
        shared = prior.fit([v for i, v in enumerate(variances) if i not in out])
    return shared, out


def compare(
    sigmas: Sequence[float], change: float, rule: str, pairs: int, rng: random.Random
) -> Outcome:
    """One simulated comparison of series of pair noise ``sigmas``, every one changed by
    ``change`` (1.03: +3%), under ``rule``."""
    logs: list[list[float]] = [[] for _ in sigmas]
    calls: dict[int, Call] = {}
    processes = 0
    for pair in range(1, pairs + 1):
        open_ = [i for i in range(len(sigmas)) if i not in calls]
        if not open_:
            break
        processes += 2
        for i in open_:
            logs[i].append(rng.gauss(math.log(change), sigmas[i]))
        if pair < MIN_PAIRS:
            continue
        variances = [prior.variance_of(x) for x in logs]
        usable = [v for v in variances if v is not None]
        if rule.startswith("robust"):
            shared, out = robust_fit(usable)
        else:
            shared, out = prior.fit(usable), set()
        leaning = False
        for i in open_:
            weigh = None if i in out else shared
            ratios = [math.exp(x) for x in logs[i]]
            call = decide(interval(ratios, weigh)[1], pair, MIN_EFFECT)
            if call is not Call.UNDECIDED:
                calls[i] = call
            elif (
                rule.endswith("futility")
                and pair < pairs
                and reachable(ratios, weigh, pairs, MIN_EFFECT) == (False, False)
            ):
                calls[i] = Call.UNDECIDED
            elif call is Call.UNDECIDED:
                leaning = leaning or leans(ratios, weigh, pairs, MIN_EFFECT)
        if rule == "ab" and not leaning:
            break
    if any(c in (Call.SLOWER, Call.FASTER) for c in calls.values()):
        processes += 2 * CONFIRM_PAIRS
    return Outcome(processes, tuple(calls.get(i, Call.UNDECIDED) for i in range(len(sigmas))))


def report_sigmas(pattern: str) -> list[float]:
    """Each time series' spread of log pair ratios over the reports (three ratios or more)."""
    by_series: dict[tuple[str, str], list[float]] = {}
    for path in sorted(glob.glob(pattern)):
        for series in json.loads(Path(path).read_text())["series"]:
            if series["unit"] != "bytes":
                logs = prior.log_ratios([r for r in series["ratios"] if r is not None])
                by_series.setdefault((series["nodeid"], series["series"]), []).extend(logs)
    return [statistics.stdev(v) for v in by_series.values() if len(v) >= MIN_PAIRS]


def smoke_reports(out: Path) -> str:
    """Two ``cudaperf ab --json``-shaped A/A reports of twelve time series (pair noise 0.5-6%),
    a pair without a reading among them, and a peak-memory series that is not read."""
    rng = random.Random(3)
    out.mkdir(parents=True, exist_ok=True)
    for name in ("a", "b"):
        series: list[dict[str, object]] = [
            {
                "nodeid": f"test_ops.py::test_{i}",
                "series": "time:device",
                "unit": "ms",
                "ratios": [math.exp(rng.gauss(0, 0.005 * (i + 1))) for _ in range(3)] + [None],
            }
            for i in range(12)
        ]
        series.append({"nodeid": "test_ops.py::test_0", "series": "memory:peak", "unit": "bytes"})
        (out / f"{name}-ab.json").write_text(json.dumps({"series": series}))
    return str(out / "*-ab.json")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reports", help="a glob of cudaperf ab --json reports of A/A comparisons")
    parser.add_argument("--pairs", type=int, default=6, help="ab's --pairs (default 6)")
    parser.add_argument("--trials", type=int, default=200, help="comparisons per rule and change")
    parser.add_argument("--out", default="out/ab-stop")
    parser.add_argument(
        "--cap",
        type=float,
        help="cap every series' pair noise at this (0.015: 1.5%%): what a lower noise of the "
        "noisiest series, as setting their launch gaps aside might give, could buy at most",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a smoke run: 3 trials each, over two small A/A reports written for it",
    )
    args = parser.parse_args()
    if args.smoke:
        args.trials, args.reports = 3, smoke_reports(Path(args.out))
    sigmas = report_sigmas(args.reports) if args.reports else list(MODEL)
    if args.cap is not None:
        sigmas = [min(s, args.cap) for s in sigmas]
    if len(sigmas) < prior.MIN_SERIES:
        parser.error(
            f"--reports: {len(sigmas)} time series with {MIN_PAIRS} pairs or more; "
            f"need {prior.MIN_SERIES}"
        )
    quiet = [i for i, s in enumerate(sigmas) if s <= QUIET]
    source = f"`--reports {args.reports}`" if args.reports else "the H200 model"
    source += f", capped at {args.cap:.1%}" if args.cap is not None else ""
    lines = [
        f"{len(sigmas)} time series ({len(quiet)} moving {QUIET:.0%} a pair or less), pair noise "
        f"from {source}; --pairs {args.pairs}, {args.trials} comparisons each",
        "",
        "| rule | A/A processes: median (90th pct) | A/A SAME, per comparison | A/A SLOWER or "
        "FASTER before confirming, per comparison | +3%: processes, median | +3%: quiet series "
        "SLOWER | +3%: all SLOWER |",
        "|---|---|---|---|---|---|---|",
    ]
    for rule in RULES:
        rng = random.Random(7)
        aa = [compare(sigmas, 1.0, rule, args.pairs, rng) for _ in range(args.trials)]
        planted = [compare(sigmas, 1.03, rule, args.pairs, rng) for _ in range(args.trials)]
        procs = sorted(o.processes for o in aa)
        same = statistics.fmean(sum(c is Call.SAME for c in o.calls) for o in aa)
        false = statistics.fmean(sum(c in (Call.SLOWER, Call.FASTER) for c in o.calls) for o in aa)
        caught = statistics.fmean(
            sum(o.calls[i] is Call.SLOWER for i in quiet) / max(1, len(quiet)) for o in planted
        )
        every = statistics.fmean(
            sum(c is Call.SLOWER for c in o.calls) / len(sigmas) for o in planted
        )
        lines.append(
            f"| {rule} | {statistics.median(procs):.0f} ({procs[int(0.9 * (len(procs) - 1))]}) "
            f"| {same:.1f} | {false:.2f} | {statistics.median(o.processes for o in planted):.0f} "
            f"| {caught:.1%} | {every:.1%} |"
        )
    publish(lines, args.out, "table.md")


if __name__ == "__main__":
    main()
