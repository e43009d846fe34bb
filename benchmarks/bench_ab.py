"""``cudaperf ab`` on a suite: A/A comparisons (both sides the same code), comparisons with a
slowdown planted in the head side, and one plain suite run to set an ``ab`` run's wall time
against. Both sides are the working tree here (``--base-python``/``--head-python``); the planted
side's Python is a wrapper that sets CUDAPERF_PLANT (see _plant.py), so no git history is needed.
The plugin is loaded from this checkout as ``bench_suite.py`` loads it (``plugin_env``).

    python benchmarks/bench_ab.py --suite gpu --aa 4 --planted 1 --plant 0.03 --pairs 3 \\
        --out out/ab [--pytest-arg=--cudaperf-max-time=0.2] [--resume]

Writes each comparison's JSON (``aa-N.json``, ``planted-N.json``), ``plain.json``,
``plant-ref.json`` and ``table.md`` into --out; comparisons already there are kept (``--resume``
also keeps the plain run), so a long evidence run can be split over several calls with
``--max-seconds``.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _table import publish
from bench_suite import ROOT, plugin_env, read_report

sys.path.insert(0, str(ROOT))

from pytest_cudaperf.ab import prior
from pytest_cudaperf.ab.paired import (
    MIN_EFFECT,
    MIN_PAIRS,
    Call,
    decide,
    interval,
    reachable,
)

HERE = Path(__file__).resolve().parent


def run(cmd: list[str], cwd: Path, log: Path, env: dict[str, str]) -> tuple[int, float]:
    began = time.monotonic()
    with log.open("w") as out:
        rc = subprocess.call(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
    return rc, time.monotonic() - began


def medians(report: Path) -> dict[str, float]:
    """nodeid -> the median of its first time series, from a --cudaperf-json report."""
    return {nodeid: r.median_ms for nodeid, r in read_report(report).items() if r.median_ms}


def ab(args: argparse.Namespace, suite: Path, out: Path, name: str, head: str) -> None:
    target = out / f"{name}.json"
    cmd = [sys.executable, "-m", "pytest_cudaperf.cli", "ab", "--base-python", sys.executable]
    cmd += ["--head-python", head, "--pairs", str(args.pairs), "--no-kernels"]
    cmd += ["--json", str(target), "--", *args.pytest_arg]
    rc, wall = run(cmd, suite, out / f"{name}.log", plugin_env())
    document = json.loads(target.read_text()) if target.exists() else {}
    document["wall_s"] = round(wall, 1)
    document["rc"] = rc
    target.write_text(json.dumps(document, indent=1))
    print(f"{name}: exit {rc}, {wall:.0f} s, {document.get('summary')}", flush=True)
    if rc not in (0, 1):
        print((out / f"{name}.log").read_text()[-2000:], flush=True)


def _pairs(doc: dict[str, Any]) -> int:
    return max((len(s["ratios"]) for s in doc.get("series", [])), default=0)


def _summary_row(name: str, doc: dict[str, Any]) -> str:
    counts = doc.get("summary", {})
    cells = [name, f"{doc.get('wall_s')} s", str(len(doc.get("processes", []))), str(_pairs(doc))]
    cells += [str(counts.get(call, 0)) for call in ("slower", "faster", "same", "undecided")]
    return "| " + " | ".join(cells) + " |"


def _planted_rows(out: Path, base_ms: dict[str, float]) -> list[str]:
    """Per test: its median, the realised change, how often the planted side read SLOWER."""
    found: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(out.glob("planted-*.json")):
        for s in json.loads(path.read_text()).get("series", []):
            if s["unit"] == "ms" and s["name"] == "" and s["ratio"]:
                found.setdefault(s["nodeid"], []).append(s)
    lines = ["| test | median | realised | SLOWER |", "|---|---|---|---|"]
    big = [0, 0]
    small = [0, 0]
    for nodeid, series in sorted(found.items()):
        realised = statistics.median(s["ratio"] for s in series) - 1
        caught = sum(s["call"] == "slower" for s in series)
        ms = base_ms.get(nodeid)
        size = f"{ms:.4g} ms" if ms else "—"
        lines.append(f"| `{nodeid}` | {size} | {realised:+.1%} | {caught}/{len(series)} |")
        tally = big if (ms or 0.0) >= 0.020 else small
        tally[0] += caught
        tally[1] += len(series)
    lines.append("")
    lines.append(f"tests of 20 µs or more: {big[0]}/{big[1]} SLOWER")
    lines.append(f"smaller tests: {small[0]}/{small[1]} SLOWER")
    return lines


def first_pairs(
    doc: dict[str, Any], plant: float = 0.0
) -> tuple[list[tuple[dict[str, Any], list[float]]], prior.Prior | None, float]:
    """A comparison's time series with :data:`MIN_PAIRS` pairs or more, each with its first
    :data:`MIN_PAIRS` ratios times ``1 + plant``; the pair noise they share there
    (``prior.fit``, as ``cudaperf ab`` weighs it); and the comparison's minimum effect."""
    series = [
        (s, [r * (1 + plant) for r in s["ratios"][:MIN_PAIRS] if r])
        for s in doc.get("series", [])
        if s["unit"] != "bytes"
    ]
    series = [(s, r) for s, r in series if len(r) == MIN_PAIRS]
    shared = prior.fit([v for _, r in series if (v := prior.log_variance(r))])
    return series, shared, float(doc.get("min_effect", MIN_EFFECT))


def redecided(doc: dict[str, Any], plant: float) -> tuple[dict[str, int], dict[str, int]]:
    """A comparison's time series decided again on their :func:`first_pairs` (``plant`` added),
    against the comparison's minimum effect: the calls with each series' own interval and with
    the pair noise the series share."""
    series, shared, min_effect = first_pairs(doc, plant)
    counts: tuple[dict[str, int], dict[str, int]] = ({}, {})
    for _, r in series:
        for tally, weighed in zip(counts, (None, shared), strict=True):
            call = decide(interval(r, weighed)[1], len(r), min_effect).value
            tally[call] = tally.get(call, 0) + 1
    return counts


def _redecided_rows(out: Path, plant: float) -> list[str]:
    """Each A/A comparison decided again at three pairs, as it is and with ``plant`` added to
    every ratio, each series alone and with the shared pair noise."""
    calls = [c.value for c in (Call.SLOWER, Call.FASTER, Call.SAME, Call.UNDECIDED)]
    lines = ["| comparison | added | interval | " + " | ".join(calls) + " |"]
    lines.append("|---|---|---|" + "---|" * len(calls))
    for path in sorted(out.glob("aa-*.json")):
        doc = json.loads(path.read_text())
        for added in (0.0, plant):
            for label, tally in zip(("alone", "shared"), redecided(doc, added), strict=True):
                cells = [path.stem, f"{added:+.0%}", label, *(str(tally.get(c, 0)) for c in calls)]
                lines.append("| " + " | ".join(cells) + " |")
    return lines


def projected(doc: dict[str, Any], pairs: int) -> list[tuple[str, bool, bool, str]]:
    """What a stop at :data:`MIN_PAIRS` pairs would see: for each time series still UNDECIDED on
    its :func:`first_pairs` (their shared pair noise weighed in), its id, whether its interval
    projected to ``pairs`` pairs is narrower than the minimum effect (SAME reachable), whether
    its centre lies beyond that half-width plus the effect (a change reachable:
    :func:`~pytest_cudaperf.ab.paired.reachable`), and the comparison's final call. A series
    with neither is one a futility stop would drop; ``ab`` ends a comparison none of whose
    undecided series can reach a change (docs/decisions.md, "Why does cudaperf ab stop when no
    undecided series leans toward a change?")."""
    series, shared, min_effect = first_pairs(doc)
    seen = []
    for s, r in series:
        found = reachable(r, shared, pairs, min_effect)
        if decide(interval(r, shared)[1], len(r), min_effect) is not Call.UNDECIDED or not found:
            continue
        name = f"{s['nodeid']} {s['name']}".strip()
        seen.append((name, *found, s["call"]))
    return seen


def _futility_rows(out: Path, pairs: int) -> list[str]:
    lines = ["| comparison | undecided at three pairs | SAME reachable | change reachable |"]
    lines += ["|---|---|---|---|"]
    dropped = []
    for path in sorted(out.glob("aa-*.json")) + sorted(out.glob("planted-*.json")):
        seen = projected(json.loads(path.read_text()), pairs)
        same, change = sum(x[1] for x in seen), sum(x[2] for x in seen)
        lines.append(f"| {path.stem} | {len(seen)} | {same} | {change} |")
        dropped += [f"- {path.stem}: `{n}`, in the end {c}" for n, a, b, c in seen if not (a or b)]
    lines += ["", f"a futility stop would drop ({pairs} pairs projected):", *dropped]
    return lines


def smoke_comparisons(out: Path, plain: dict[str, float]) -> None:
    """``aa-0.json`` and ``planted-0.json`` for the tests of the plain run, with the fields of
    ``cudaperf ab --json`` that this script reads: log-normal pair ratios (1%), the planted
    side's 3x slower."""
    rng = random.Random(0)
    for name, change in (("aa-0", 1.0), ("planted-0", 3.0)):
        series = []
        for nodeid in sorted(plain):
            ratios = [change * math.exp(rng.gauss(0, 0.01)) for _ in range(MIN_PAIRS)]
            call = "slower" if change > 1 else "same"
            ratio = statistics.geometric_mean(ratios)
            series.append(
                {"nodeid": nodeid, "name": "", "unit": "ms", "ratios": ratios, "ratio": ratio}
                | {"call": call}
            )
        summary = {"slower": sum(s["call"] == "slower" for s in series)}
        summary["same"] = len(series) - summary["slower"]
        document = {"series": series, "summary": summary, "wall_s": 0.0, "rc": int(change > 1)}
        (out / f"{name}.json").write_text(json.dumps(document, indent=1))


def table(out: Path, plant: str, pairs: int) -> list[str]:
    plain = json.loads((out / "plain.json").read_text())
    lines = ["# bench_ab", "", f"plain suite run: {plain.get('wall_s', '?')} s", ""]
    lines += ["| comparison | wall | processes | pairs | slower | faster | same | undecided |"]
    lines += ["|---|---|---|---|---|---|---|---|"]
    for path in sorted(out.glob("aa-*.json")) + sorted(out.glob("planted-*.json")):
        lines.append(_summary_row(path.stem, json.loads(path.read_text())))
    if any(out.glob("planted-*.json")):
        lines += ["", f"## Planted {plant}: per test", ""]
        lines += _planted_rows(out, medians(out / "plain.json"))
    added = float(plant[:-1]) - 1 if plant.endswith("x") else float(plant)  # 3x: +200%
    lines += ["", "## A/A comparisons decided again at three pairs", ""]
    lines += _redecided_rows(out, added)
    lines += ["", "## Undecided at three pairs, projected to the last pair", ""]
    lines += _futility_rows(out, pairs)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", choices=["gpu", "cpu", "ops"], help="(required)")
    parser.add_argument("--aa", type=int, default=2, help="A/A comparisons")
    parser.add_argument("--planted", type=int, default=1, help="comparisons with a planted head")
    parser.add_argument("--plant", default="0.03", help="CUDAPERF_PLANT of the head side")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--pytest-arg", action="append", default=[])
    parser.add_argument("--resume", action="store_true")
    parser.add_argument(
        "--max-seconds", type=float, default=0.0, help="start no comparison that would end past it"
    )
    parser.add_argument("--out", required=True)
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a smoke run: the plain run of suite_ops' test_add (--cudaperf-max-time=0.05); the "
        "A/A and planted comparisons made of log-normal pair ratios, not run",
    )
    args = parser.parse_args()
    if args.smoke:
        args.suite, args.aa, args.planted, args.plant, args.pairs = "ops", 1, 1, "3x", MIN_PAIRS
        args.pytest_arg += ["-k", "test_add", "--cudaperf-max-time=0.05"]
    elif args.suite is None:
        parser.error("--suite: gpu, cpu or ops")
    suite = HERE / f"suite_{args.suite}"
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if not (args.resume and (out / "plain.json").exists()):
        cmd = [sys.executable, "-m", "pytest", *args.pytest_arg, "-p", "no:cacheprovider"]
        cmd += [f"--cudaperf-json={out / 'plain.json'}"]
        cmd += [f"--cudaperf-baseline-dir={out / 'scratch'}"]
        rc, wall = run(cmd, suite, out / "plain.log", plugin_env())
        document = json.loads((out / "plain.json").read_text())
        document["wall_s"] = round(wall, 1)
        (out / "plain.json").write_text(json.dumps(document))
        print(f"plain: exit {rc}, {wall:.0f} s", flush=True)
    (out / "plant-ref.json").write_text(json.dumps(medians(out / "plain.json")))
    wrapper = out / "planted-python"
    wrapper.write_text(
        f"#!/bin/sh\nCUDAPERF_PLANT={args.plant} CUDAPERF_PLANT_REF={out / 'plant-ref.json'} "
        f'exec {sys.executable} "$@"\n'
    )
    wrapper.chmod(0o755)
    began = time.monotonic()
    longest = 0.0
    runs = [(f"aa-{i}", sys.executable) for i in range(args.aa)]
    runs += [(f"planted-{i}", str(wrapper)) for i in range(args.planted)]
    if args.smoke:  # a comparison is 6 to 12 pytest processes: far past a smoke run's seconds
        smoke_comparisons(out, medians(out / "plain.json"))
    for name, python in runs:
        if (out / f"{name}.json").exists():
            continue
        elapsed = time.monotonic() - began
        if args.max_seconds and elapsed + longest > args.max_seconds:
            print(f"stopping before {name}: --max-seconds {args.max_seconds:g}", flush=True)
            break
        ab(args, suite, out, name, python)
        longest = max(longest, time.monotonic() - began - elapsed)
    publish(table(out, args.plant, args.pairs), out, "table.md")


if __name__ == "__main__":
    main()
