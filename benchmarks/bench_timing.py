"""Timing benchmark driver: runs bench_worker.py in N separate processes, one after another, and
writes a Markdown table (per-sample spread, cross-process spread of the median, cost, A/A false
regressions, planted-slowdown detection) plus the raw rows.

    python benchmarks/bench_timing.py --processes 16 --out out/
    python benchmarks/bench_timing.py --from-raw raw.jsonl --out out/   # table from raw rows
    python benchmarks/bench_timing.py --smoke --out out/smoke   # bench_worker.py --smoke twice

The published run's raw rows are no longer in the tree; git keeps them:
``git show 2c3608c:benchmarks/data/timing-raw-discard.jsonl > raw.jsonl``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
from _table import publish

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench_worker import SLOWDOWNS, TOLERANCE

from pytest_cudaperf.observation import Observation
from pytest_cudaperf.series import Recording, entry_of
from pytest_cudaperf.verdict import Kind, judge


def regression(tool: str, base: dict[str, Any], cur: dict[str, Any], tol: float) -> bool:
    """Our tool: the plugin's verdict rule today, the baseline one process's recording (as one
    ``--cudaperf-update`` stores it). Others: a threshold on their median."""
    if tool.startswith("cudaperf"):
        recording = Recording("2026-01-01", base["median_ms"], base["halfwidth"], 1)
        entry = entry_of([recording], "ms", {}, "device")
        observed = Observation(cur["median_ms"], cur["halfwidth"])
        return bool(judge(observed, entry, tol, "x").kind is Kind.REGRESSION)
    return bool(cur["median_ms"] / base["median_ms"] > 1 + tol)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--processes", type=int, default=16)
    parser.add_argument("--out", default="out")
    parser.add_argument(
        "--from-raw",
        metavar="JSONL",
        help="build the table from the raw rows of an earlier run (the published run's rows: "
        "benchmarks/data/timing-raw-discard.jsonl in git history at commit 2c3608c)",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a smoke run: 2 worker processes on the CPU (bench_worker.py --smoke)",
    )
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.from_raw:
        rows = [json.loads(line) for line in Path(args.from_raw).read_text().splitlines()]
    else:
        rows = collect(2 if args.smoke else args.processes, out, args.smoke)
    write_table(rows, out)


def collect(processes: int, out: Path, smoke: bool = False) -> list[dict[str, Any]]:
    """Run the worker in ``processes`` separate processes (``smoke``: on the CPU, tiny); keep
    the raw rows."""
    worker = Path(__file__).with_name("bench_worker.py")
    rows = []
    with open(out / "timing-raw.jsonl", "w") as raw:
        for seed in range(processes):
            proc = subprocess.run(
                [sys.executable, str(worker), "--seed", str(seed), *(["--smoke"] if smoke else [])],
                capture_output=True,
                text=True,
                check=False,
            )
            if proc.returncode != 0:
                print(proc.stderr[-3000:], file=sys.stderr)
                raise SystemExit(f"worker {seed} failed")
            for line in proc.stdout.splitlines():
                if line.startswith("{"):
                    raw.write(line + "\n")
                    rows.append(json.loads(line))
            print(f"process {seed + 1}/{processes} done", flush=True)
    return rows


def write_table(rows: list[dict[str, Any]], out: Path) -> None:
    by = defaultdict(list)
    for row in rows:
        by[(row["kernel"], row["tool"], row["scale"])].append(row)
    kernels = list(dict.fromkeys(r["kernel"] for r in rows))
    toolnames = list(dict.fromkeys(r["tool"] for r in rows))
    lines = [
        "| kernel | tool | median | per-sample rel. IQR (median over processes) | "
        "spread of the median across processes (max/min − 1) | rel. std of the median across "
        "processes | median cost / measurement | A/A false regressions | planted slowdown caught |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for kernel in kernels:
        tol = TOLERANCE.get(kernel, 0.05)
        for tool in toolnames:
            base = by[(kernel, tool, 1.0)]
            if not base:  # a control run for some kernels only
                continue
            medians = np.array([r["median_ms"] for r in base])
            iqr = float(np.median([r["rel_iqr"] for r in base]))
            spread = float(medians.max() / medians.min() - 1)
            relstd = float(medians.std() / medians.mean())
            cost = float(np.median([r["cost_s"] for r in base]))
            pairs = list(itertools.permutations(base, 2))
            false_pos = sum(regression(tool, a, b, tol) for a, b in pairs)
            caught = "—"
            if kernel in SLOWDOWNS:
                slow = by[(kernel, tool, SLOWDOWNS[kernel])]
                hits = [
                    regression(tool, a, b, tol)
                    for a in base
                    for b in slow
                    if a["process"] != b["process"]
                ]
                realised = np.median([r["median_ms"] for r in slow]) / np.median(medians) - 1
                caught = (
                    f"{sum(hits)}/{len(hits)} ({sum(hits) / len(hits):.0%}) of "
                    f"+{SLOWDOWNS[kernel] - 1:.0%} planted (realised {realised:+.1%})"
                )
            lines.append(
                f"| {kernel} | {tool} | {np.median(medians) * 1e3:.2f} µs | {iqr:.2%} | "
                f"{spread:.2%} | {relstd:.2%} | {cost:.3f} s | "
                f"{false_pos}/{len(pairs)} (tol {tol:.0%}) | {caught} |"
            )
    publish(lines, out, "RESULTS-timing.md")


if __name__ == "__main__":
    main()
