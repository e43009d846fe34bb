"""Is a slow drift told apart from flat noise and from a single step? Synthetic series of nightly
runs with Gaussian noise of 1, 1.5 and 2%: a creep of +0.5% per run over 30 runs, flat noise over
60 runs, and a step of 5% or 10% at run 5, 15 or 25 of 30. Each is given to
``pytest_cudaperf.history.drift.drift`` and counted as a drift when it finds an upward one.

    python benchmarks/bench_drift.py --trials 1000 --out out/drift
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from _table import publish  # noqa: E402

from pytest_cudaperf.history.drift import drift  # noqa: E402

Series = Callable[[np.random.Generator, float], np.ndarray]


def creep(rng: np.random.Generator, noise: float) -> np.ndarray:
    return 1.005 ** np.arange(30) * (1 + rng.normal(0, noise, 30))


def flat(rng: np.random.Generator, noise: float) -> np.ndarray:
    return 1 + rng.normal(0, noise, 60)


def step(at: int, size: float) -> Series:
    def series(rng: np.random.Generator, noise: float) -> np.ndarray:
        return np.where(np.arange(30) >= at, 1 + size, 1.0) * (1 + rng.normal(0, noise, 30))

    return series


def share(series: Series, noise: float, trials: int) -> float:
    found = 0
    for seed in range(trials):
        d = drift(list(series(np.random.default_rng(seed), noise)))
        found += d is not None and d.slope > 0
    return found / trials


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--out", default="out/drift")
    parser.add_argument("--smoke", action="store_true", help="a smoke run: 5 trials a cell")
    args = parser.parse_args()
    if args.smoke:
        args.trials = 5
    cases: list[tuple[str, Series]] = [("+0.5%/run over 30 runs", creep), ("flat, 60 runs", flat)]
    cases += [(f"{size:.0%} step at run {at} of 30", step(at, size)) for size in (0.05, 0.10)
              for at in (5, 15, 25)]  # fmt: skip
    noises = (0.01, 0.015, 0.02)
    lines = [
        "| series | " + " | ".join(f"noise {n:.1%}" for n in noises) + " |",
        "|---|" + "---:|" * len(noises),
    ]
    for name, series in cases:
        shares = [share(series, noise, args.trials) for noise in noises]
        lines.append(f"| {name} | " + " | ".join(f"{s:.1%}" for s in shares) + " |")
    publish(lines, args.out, "table.md")


if __name__ == "__main__":
    main()
