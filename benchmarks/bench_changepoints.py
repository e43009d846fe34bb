"""How well are change points found in a series of nightly runs? Synthetic series whose noise is
real: each point is one pytest process's median of one test, drawn from the processes of
``bench_ab.py``'s A/A comparisons on a GPU (``--noise OUT``, that script's ``--out``); a step of
3%, 5% or 10% is put at a random commit, or none. Methods side by side: this package's
(``pytest_cudaperf.history.changepoints``), a fixed-threshold rule (two consecutive points beyond
the threshold from the median of the ten before, as ratio checks on dashboards do), and, when the
``ruptures`` library is installed, its PELT search with an L2 cost.

    python benchmarks/bench_changepoints.py --noise out/ab --trials 300 --out out/changepoints
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from _table import publish  # noqa: E402

from pytest_cudaperf.history.changepoints import change_points  # noqa: E402

Method = Callable[[Sequence[float]], list[int]]


def noise_pools(folder: Path) -> dict[str, list[float]]:
    """Per test, every process's median over its own median: the between-process spread."""
    pools: dict[str, list[float]] = {}
    for path in sorted(folder.glob("aa-*.json")):
        for series in json.loads(path.read_text())["series"]:
            if series["unit"] != "ms":
                continue
            medians = [r["median"] for r in series["base"] + series["head"] if r]
            pools.setdefault(series["nodeid"], []).extend(medians)
    return {
        test: [m / statistics.median(values) for m in values]
        for test, values in pools.items()
        if len(values) >= 20
    }


def smoke_noise(folder: Path) -> str:
    """An A/A report of two tests whose processes' medians are log-normal (1.5%), in the layout
    that ``noise_pools`` reads from ``cudaperf ab --json``."""
    rng = random.Random(0)

    def sides() -> list[dict[str, float]]:
        return [{"median": math.exp(rng.gauss(0, 0.015))} for _ in range(12)]

    series = [
        {"nodeid": f"test_ops.py::test_{name}", "unit": "ms", "base": sides(), "head": sides()}
        for name in ("add", "mm")
    ]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "aa-0.json").write_text(json.dumps({"series": series}))
    return str(folder)


def ours(values: Sequence[float]) -> list[int]:
    return [c.index for c in change_points(values)]


def threshold(limit: float, window: int = 10) -> Method:
    def rule(values: Sequence[float]) -> list[int]:
        found, start = [], 0
        for i in range(window, len(values) - 1):
            if i - start < window:
                continue
            level = statistics.median(values[i - window : i])
            a, b = values[i] / level - 1, values[i + 1] / level - 1
            if abs(a) > limit and abs(b) > limit and (a > 0) == (b > 0):
                found.append(i)
                start = i
        return found

    return rule


def pelt() -> Method | None:
    try:
        import numpy as np
        import ruptures
    except ImportError:
        return None

    def search(values: Sequence[float]) -> list[int]:
        logs = np.log(np.asarray(values))
        sigma = 1.4826 * float(np.median(np.abs(np.diff(logs)))) / math.sqrt(2)
        penalty = 2 * math.log(len(logs)) * max(sigma, 1e-6) ** 2 * 8
        ends = ruptures.Pelt(model="l2", min_size=3, jump=1).fit(logs).predict(pen=penalty)
        return [e for e in ends if e < len(logs)]

    return search


def series(pool: list[float], n: int, step: float, at: int, rng: random.Random) -> list[float]:
    return [rng.choice(pool) * (1 + step if i >= at else 1.0) for i in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--noise", help="a bench_ab.py output folder")
    parser.add_argument("--trials", type=int, default=300)
    parser.add_argument("--length", type=int, default=60, help="commits per series")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="out/changepoints")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a smoke run: log-normal noise written as an A/A report, 3 series of 30 commits",
    )
    args = parser.parse_args()
    if args.smoke:
        args.noise, args.trials, args.length = smoke_noise(Path(args.out) / "noise"), 3, 30
    elif args.noise is None:
        parser.error("--noise: give a bench_ab.py output folder (or --smoke)")
    pools = noise_pools(Path(args.noise))
    tests = sorted(pools)
    methods: dict[str, Method] = {
        "E-divisive + Welch (this package)": ours,
        "threshold 5%, two in a row": threshold(0.05),
        "threshold 3%, two in a row": threshold(0.03),
    }
    if (found := pelt()) is not None:
        methods["ruptures PELT (L2, BIC-like penalty)"] = found
    lines = [
        "| method | step 3% found ±1 | step 5% | step 10% | false / 1,000 points (no step) "
        "| seconds |",
        "|---|---|---|---|---|---|",
    ]
    for name, method in methods.items():
        rng = random.Random(args.seed)
        began = time.perf_counter()
        cells = []
        for step in (0.03, 0.05, 0.10):
            hits = 0
            for _ in range(args.trials):
                at = rng.randint(10, args.length - 10)
                values = series(pools[rng.choice(tests)], args.length, step, at, rng)
                hits += any(abs(i - at) <= 1 for i in method(values))
            cells.append(f"{hits / args.trials:.1%}")
        false = sum(
            len(method(series(pools[rng.choice(tests)], args.length, 0.0, 0, rng)))
            for _ in range(args.trials)
        )
        per_thousand = 1000 * false / (args.trials * args.length)
        seconds = time.perf_counter() - began
        lines.append(f"| {name} | {' | '.join(cells)} | {per_thousand:.2f} | {seconds:.1f} |")
        print(lines[-1], flush=True)
    print(f"{len(tests)} noise pools from {args.noise}; {args.trials} series per cell")
    publish(lines, args.out, "table.md")


if __name__ == "__main__":
    main()
