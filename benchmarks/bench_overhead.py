"""Plugin overhead on 2,000 trivial tests: wall time of `pytest` with the plugin and without it
(`-p no:cudaperf`, or without PYTEST_PLUGINS when run from a checkout). Runs alternate (without,
with, without, ...) so that drifting machine state hits both arms alike; --repeat pairs (default
7); the table gives the median and the best of each arm. Default verbosity, so the report header
(and the plugin's device probe behind it) is part of the run, as it is for a user.
Two suites: one whose test module imports torch (as a PyTorch project's tests do), one that
does not. Neither uses a cudaperf marker or fixture, so the plugin imports no torch for them.
Identical whole-process runs vary by far more than 2% on a busy machine; bench_own_time.py
measures the plugin's own share from inside the session.

    python benchmarks/bench_overhead.py --out out/
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _table import publish

SUITES = {
    "imports torch": "import torch\nimport pytest\n\n@pytest.mark.parametrize('i', range({n}))\n"
    "def test_trivial(i):\n    assert torch.__version__\n",
    "pure Python": "import pytest\n\n@pytest.mark.parametrize('i', range({n}))\n"
    "def test_trivial(i):\n    assert i >= 0\n",
}


def run(folder: Path, plugin: bool, tests: int = 2000) -> tuple[float, float]:
    """Wall time and CPU time (user + system) of one pytest run."""
    env = dict(os.environ)
    args = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", str(folder)]
    if not plugin:
        if "pytest_cudaperf" in env.get("PYTEST_PLUGINS", ""):
            env.pop("PYTEST_PLUGINS")
        else:
            args += ["-p", "no:cudaperf"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    proc = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if f"{tests} passed" not in proc.stdout:
        raise SystemExit(proc.stdout[-2000:] + proc.stderr[-2000:])
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="out")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a smoke run: the pure-Python suite of 20 tests, one pair, no warm-up runs",
    )
    args = parser.parse_args()
    tests, suites = 2000, SUITES
    if args.smoke:
        args.repeat, tests, suites = 1, 20, {"pure Python": SUITES["pure Python"]}
    lines = [
        f"| suite ({tests:,} trivial tests) | clock | without plugin (median / best of "
        f"{args.repeat}) | with plugin (median / best) | overhead (median / best) |",
        "|---|---|---|---|---|",
    ]
    for name, source in suites.items():
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            (folder / "test_trivial.py").write_text(source.replace("{n}", str(tests)))
            if not args.smoke:
                run(folder, True)  # warm the file system caches
                run(folder, False)
            without: list[tuple[float, float]] = []
            with_plugin: list[tuple[float, float]] = []
            for _ in range(args.repeat):
                without.append(run(folder, False, tests))
                with_plugin.append(run(folder, True, tests))
        for column, clock in enumerate(("wall", "CPU")):
            off = [r[column] for r in without]
            on = [r[column] for r in with_plugin]
            a, b = statistics.median(off), statistics.median(on)
            lines.append(
                f"| {name} | {clock} | {a:.2f} / {min(off):.2f} s | {b:.2f} / {min(on):.2f} s "
                f"| {b / a - 1:+.1%} / {min(on) / min(off) - 1:+.1%} |"
            )
    publish(lines, args.out, "RESULTS-overhead.md")


if __name__ == "__main__":
    main()
