"""How often does ``cudaperf ab``'s confirmation keep a false call, and how often a real change?
Resampled from real paired ratios: every pair ratio of one unchanged test in ``cudaperf ab --json``
reports (both sides ran the same code for it), drawn with replacement into four first pairs and
three fresh ones, judged as ``ab`` judges them; a real change multiplies every ratio by
``--change``. ``--lognormal SD`` draws the ratios from a log-normal of that spread instead (a
GPU's pairs, which move by 1-2% without jumps). The current rule
(:func:`pytest_cudaperf.ab.paired.repeats`) beside the fresh pairs' mean alone, the rule before a
fresh pair the other way withdrew a call. Pairs are drawn
independently, so clusters of disturbed processes (which made the false calls seen) are not
modelled: the rates are lower bounds for a host like the one measured.

    python benchmarks/bench_ab_confirm.py --reports 'out/abflake/*/ab.json' --test test_steady \\
        --out out/ab-confirm
    python benchmarks/bench_ab_confirm.py --lognormal 0.015 --change 1 1.03 1.05 --out out/ab-gauss
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import random
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from _table import publish  # noqa: E402

from pytest_cudaperf.ab.paired import (  # noqa: E402
    CONFIRM_PAIRS,
    Call,
    decide,
    interval,
    repeats,
)

Rule = Callable[[Call, Sequence[float], float], bool]
FIRST_PAIRS = 4


def mean_only(call: Call, fresh: Sequence[float], min_effect: float) -> bool:
    """The fresh pairs' geometric mean beyond half the minimum effect, nothing else."""
    ratio, _ = interval(fresh)
    edge = 1 + min_effect / 2
    return ratio > edge if call is Call.SLOWER else ratio < 1 / edge


def null_ratios(pattern: str, test: str) -> list[float]:
    ratios: list[float] = []
    for path in sorted(glob.glob(pattern)):
        for series in json.loads(Path(path).read_text())["series"]:
            if series["unit"] == "ms" and series["nodeid"].endswith(test):
                ratios += [r for r in series["ratios"] if r > 0 and math.isfinite(r)]
    return ratios


def smoke_report(out: Path) -> str:
    """A ``cudaperf ab --json``-shaped report: 40 log-normal (2%) pair ratios of one test."""
    rng = random.Random(3)
    ratios = [math.exp(rng.gauss(0, 0.02)) for _ in range(40)]
    series = [{"nodeid": "test_ops.py::test_steady", "unit": "ms", "ratios": ratios}]
    out.mkdir(parents=True, exist_ok=True)
    path = out / "smoke-ab.json"
    path.write_text(json.dumps({"series": series}))
    return str(path)


def rates(
    pool: Sequence[float], change: float, rule: Rule, min_effect: float, trials: int
) -> tuple[float, float]:
    """(called by the first pairs, still called after the confirmation), as fractions of trials;
    one seed, so both rules judge the same draws."""
    rng = random.Random(1)
    called = kept = 0
    for _ in range(trials):
        first = [rng.choice(pool) * change for _ in range(FIRST_PAIRS)]
        call = decide(interval(first)[1], len(first), min_effect)
        if call not in (Call.SLOWER, Call.FASTER):
            continue
        called += 1
        fresh = [rng.choice(pool) * change for _ in range(CONFIRM_PAIRS)]
        together = first + fresh
        if decide(interval(together)[1], len(together), min_effect) is call:
            kept += rule(call, fresh, min_effect)
    return called / trials, kept / trials


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reports", help="a glob of cudaperf ab --json reports")
    parser.add_argument("--test", help="the unchanged test's name (node id end)")
    parser.add_argument("--lognormal", type=float, help="draw ratios from exp(N(0, SD)) instead")
    parser.add_argument("--change", type=float, nargs="*", default=[1.0, 1.1, 1.3])
    parser.add_argument("--min-effect", type=float, default=0.02)
    parser.add_argument("--trials", type=int, default=100_000)
    parser.add_argument("--out", default="out/ab-confirm")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a smoke run: 200 trials over the ratios of a small A/A report written for it",
    )
    args = parser.parse_args()
    if args.smoke:
        args.reports, args.test, args.trials = smoke_report(Path(args.out)), "test_steady", 200
    if args.lognormal:
        rng = random.Random(2)
        pool = [math.exp(rng.gauss(0, args.lognormal)) for _ in range(10_000)]
        source = f"log-normal ratios (spread {args.lognormal:.1%})"
    elif args.reports and args.test:
        pool = null_ratios(args.reports, args.test)
        if len(pool) < 2 * FIRST_PAIRS:
            parser.error(f"--reports: {len(pool)} ratios of {args.test} found; need at least 8")
        source = f"{len(pool)} pair ratios of `{args.test}`"
    else:
        parser.error("give --reports and --test, or --lognormal")
    lines = [
        f"{source}, {FIRST_PAIRS} first pairs, {CONFIRM_PAIRS} "
        f"fresh, min effect {args.min_effect:.0%}, {args.trials} trials each",
        "",
        "| change | called by the first pairs | kept: fresh mean alone | kept: none the other way"
        " |",
        "|---|---|---|---|",
    ]
    for change in args.change:
        called, old = rates(pool, change, mean_only, args.min_effect, args.trials)
        _, new = rates(pool, change, repeats, args.min_effect, args.trials)
        lines.append(f"| {change - 1:+.0%} | {called:.2%} | {old:.2%} | {new:.2%} |")
    publish(lines, args.out, "table.md")


if __name__ == "__main__":
    main()
