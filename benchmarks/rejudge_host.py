"""Re-judge the host-bound series of a ``bench_suite.py --suite host`` output folder, with any
``--recordings`` of its unchanged runs standing in for the baseline and every other unchanged run
judged by this checkout's ``verdict.judge``, every such choice of runs in turn.

Each run's ``time:host`` measurement gives its ratio (loops), CI, launch reference and, from the
same test's ``time:kernels`` measurement, the kernels' time. Two columns: the ratio alone (no
reference, no kernels: the rule before the host's speed was weighed) and this checkout's rules
with both. ``--plant 1.25`` multiplies each judged ratio by 1.25 (a slowdown of the whole call in
loops) to count what would be caught. A slowdown left undecided with the host in another
state than at recording (held back for it, or INCONCLUSIVE with the launch reference beyond
``HOST_MIN`` of the recordings') stands for the test's other runs in the recordings' state:
the plugin waits for that state and measures again (``Verdict.awaits_host``); the plugin's
confirmation in a fresh process is not modelled.

``--state-slope S`` asks what more noise for the host's state would do: where the launch
reference ran more than ``HOST_MIN`` slower or faster than at recording, this side's noise is
``factor ** S - 1`` instead of ``LAUNCH_STRETCH * (factor - 1)`` (a Python-heavy call's loops
rise by up to ``factor ** 0.4`` with the reference; the rule is patched in for this run only).

``--baseline FILE`` re-judges instead the final ``time:host`` measurement of each test in each
run JSON given as ``folder`` (``--cudaperf-json``) against that baseline file's recordings, with
this checkout's rules (the series rebuilt from them, as ``cudaperf record`` would write it now):
what the plugin would say of that run now, before any re-measurement.

``--slopes`` prints instead, per test, the least-squares slope of log(loops) on log(launch
reference) over its unchanged runs: 0 where the reference follows the call, above 0 where the
call slows more than the reference on a slow host.

``--references`` prints instead, per run JSON given as ``folder``, the launch reference beside
the calls of its first host-bound test, of the next, and the median and least of the others':
whether a process's first host-bound measurement meets another launch path than the later ones.

    python benchmarks/rejudge_host.py OUT_DIR [--recordings 3] [--plant 1.25] [--tolerance 0.05]
    python benchmarks/rejudge_host.py OUT_DIR [--plant 1.25] --state-slope 0.3
    python benchmarks/rejudge_host.py OUT_DIR --slopes
    python benchmarks/rejudge_host.py RUN.json [RUN.json ...] --baseline BASELINE.json
    python benchmarks/rejudge_host.py RUN.json [RUN.json ...] --references
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import random
import statistics
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_cudaperf import verdict
from pytest_cudaperf.keys import SeriesKey
from pytest_cudaperf.measure import instability
from pytest_cudaperf.observation import Observation
from pytest_cudaperf.series import Record, Recording, entry_of
from pytest_cudaperf.settings import Settings
from pytest_cudaperf.store.baselines import BaselineStore
from pytest_cudaperf.store.schema import read_file
from pytest_cudaperf.units import LOOPS


def host_figures(path: Path) -> dict[str, dict[str, Any]]:
    """Per test of one ``--cudaperf-json`` report with both host-bound series measured, its
    ``time:host`` figures and, from its ``time:kernels``, the kernels' time per call."""
    found: dict[str, dict[str, Any]] = {}
    for test in json.loads(path.read_text())["tests"]:
        records = {r["series"]: r for r in test["records"]}
        host, kernels = records.get("time:host"), records.get("time:kernels")
        if host is None or kernels is None or None in (host["measurement"], kernels["measurement"]):
            continue
        m = host["measurement"]
        low, high = m["in_loops_ci"]
        found[test["nodeid"]] = {
            "loops": m["in_loops"],
            "halfwidth": (high - low) / 2 / m["in_loops"],
            "ci": (low, high),
            "n": m["n"],
            "reference_ms": m["reference_ms"],
            "fixed_ms": kernels["measurement"]["median_ms"],
        }
    return found


def host_runs(folder: Path) -> dict[str, list[dict[str, Any]]]:
    """Per test, each unchanged run's host-bound figures (:func:`host_figures`)."""
    tests: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(folder.glob("serial-unchanged-*.json")):
        for nodeid, figures in host_figures(path).items():
            tests.setdefault(nodeid, []).append(figures)
    return tests


def observation(run: dict[str, Any], plant: float = 1.0, weigh: bool = True) -> Observation:
    """One run's host-bound time as the verdict takes it (``weigh``: with its launch reference
    and kernels' time), ``plant`` times slower."""
    return Observation(
        run["loops"] * plant,
        run["halfwidth"],
        unit=LOOPS,
        reference_ms=run["reference_ms"] if weigh else None,
        fixed_ms=run["fixed_ms"] if weigh else None,
    )


def judged(
    runs: list[dict[str, Any]], recordings: int, plant: float, weigh: bool, tolerance: float
) -> defaultdict[str, float]:
    """Verdict kinds over every choice of ``recordings`` runs as the baseline. A slowdown left
    undecided with the host in another state than at recording (``Verdict.awaits_host``) is
    measured again in a live run once the host is back: here it counts as the verdicts of the
    other judged runs of the test whose host was in the recordings' state, in equal shares
    (INCONCLUSIVE where there is none); those shares are also counted under ``other state``."""
    kinds: defaultdict[str, float] = defaultdict(float)
    for chosen in itertools.combinations(range(len(runs)), recordings):
        entry = entry_of(
            [
                Recording(
                    "2026-11-25",
                    runs[i]["loops"],
                    runs[i]["halfwidth"],
                    runs[i]["n"],
                    ci=runs[i]["ci"],
                    reference_ms=runs[i]["reference_ms"] if weigh else None,
                    fixed_ms=runs[i]["fixed_ms"] if weigh else None,
                )
                for i in chosen
            ],
            LOOPS,
            {},
            "host",
        )
        found = {}
        for j, run in enumerate(runs):
            if j in chosen:
                continue
            found[j] = verdict.judge(observation(run, plant, weigh), entry, tolerance, "GPU")
        for j, judged_j in found.items():
            if not judged_j.awaits_host:
                kinds[judged_j.kind.value] += 1
                continue
            kinds["other state"] += 1
            same = [v.kind.value for k, v in found.items() if k != j and v.host_state is None]
            for kind in same or ["inconclusive"]:
                kinds[kind] += 1 / len(same or [kind])
    return kinds


def slopes(tests: dict[str, list[dict[str, Any]]]) -> dict[str, float]:
    """Per test with three runs or more, the slope of log(loops) on log(reference)."""
    found: dict[str, float] = {}
    for nodeid, runs in tests.items():
        if len(runs) < 3:
            continue
        x = [math.log(r["reference_ms"]) for r in runs]
        y = [math.log(r["loops"]) for r in runs]
        with contextlib.suppress(statistics.StatisticsError):  # references that did not vary
            found[nodeid] = statistics.linear_regression(x, y).slope
    return found


def against(baseline: Path, run: Path, tolerance: float) -> Counter[str]:
    """Verdict kinds of the run's final ``time:host`` measurements against ``baseline``, each
    series rebuilt from its recordings by this checkout's rules (its value and noise as
    ``cudaperf record`` would write them now); "other state" also counts those the host's
    state held back."""
    entries = read_file(baseline)[1]
    kinds: Counter[str] = Counter()
    for nodeid, figures in host_figures(run).items():
        stored = entries.get(SeriesKey(nodeid), {}).get("time:host")
        if stored is None:
            continue
        entry = entry_of(stored.recordings, stored.unit, stored.env, stored.metric, stored.since)
        found = verdict.judge(observation(figures), entry, tolerance, "GPU")
        kinds[found.kind.value] += 1
        kinds["other state"] += found.other_state
    return kinds


def references(run: Path) -> str:
    """One run's line for ``--references``: the first host-bound test's launch reference (µs),
    the next test's, and the others' median and least; the report's order is the run's."""
    found = [(nodeid, f["reference_ms"] * 1e3) for nodeid, f in host_figures(run).items()]
    if len(found) < 3:
        return f"{run}: fewer than three host-bound tests"
    (first, at), (_, then), rest = found[0], found[1], [x for _, x in found[2:]]
    return (
        f"{run}: `{first.rsplit('::', 1)[-1]}` {at:.0f} µs, the next {then:.0f} µs, the other "
        f"{len(rest)} a median {statistics.median(rest):.0f} µs, the least {min(rest):.0f} µs"
    )


def with_state_slope(slope: float) -> None:
    """Judge the launch reference's host-speed finding with noise ``factor ** slope - 1``."""
    launch = instability.LAUNCH_STRETCH
    plain = instability.host_speed

    def host_speed(
        now_ms: float | None,
        then_ms: float | None,
        stretch: float = instability.HOST_STRETCH,
        reference: str = "a reference loop",
    ) -> instability.Finding | None:
        found = plain(now_ms, then_ms, stretch, reference)
        if found is None or stretch != launch or now_ms is None or then_ms is None:
            return found
        factor = max(now_ms / then_ms, then_ms / now_ms)
        return instability.Finding(found.reason, factor**slope - 1)

    instability.host_speed = host_speed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, nargs="+")
    parser.add_argument("--recordings", type=int, default=3)
    parser.add_argument("--plant", type=float, default=1.0)
    default = Settings().host_tolerance
    parser.add_argument(
        "--tolerance", type=float, default=default, help=f"(default: {default}, the plugin's)"
    )
    parser.add_argument("--slopes", action="store_true")
    parser.add_argument("--state-slope", type=float, default=None, metavar="S")
    parser.add_argument("--baseline", type=Path, default=None, metavar="FILE")
    parser.add_argument("--references", action="store_true")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a smoke run: every mode over a host folder made up in FOLDER/host-suite",
    )
    args = parser.parse_args()
    if args.smoke:
        smoke(args.folder[0], args.tolerance)
        return
    if args.references:
        print("\n".join(references(run) for run in args.folder))
        return
    if args.state_slope is not None:
        with_state_slope(args.state_slope)
    if args.baseline is None and len(args.folder) > 1:
        parser.error("several paths are run JSON files for --baseline; without it, one folder")
    if args.baseline is not None:
        for run in args.folder:
            kinds = against(args.baseline, run, args.tolerance)
            print(f"{run}: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))
        return
    tests = host_runs(args.folder[0])
    if args.slopes:
        found = slopes(tests)
        for nodeid, slope in sorted(found.items(), key=lambda item: item[1]):
            print(f"{slope:+.2f}  {nodeid}")
        print(f"median {statistics.median(found.values()):+.2f} over {len(found)} tests")
        return
    print("\n".join(table(tests, args.recordings, args.plant, args.tolerance)))


def table(
    tests: dict[str, list[dict[str, Any]]], recordings: int, plant: float, tolerance: float
) -> list[str]:
    """Verdicts over every test's runs, by the ratio alone and by this checkout's rules."""
    runs = {len(r) for r in tests.values()}
    lines = [
        f"{len(tests)} host-bound tests, {sorted(runs)} unchanged runs each",
        "| rule | verdicts | REGRESSION | INCONCLUSIVE | IMPROVED | PASS | other state |",
        "|---|---|---|---|---|---|---|",
    ]
    for weigh, name in ((False, "the ratio alone"), (True, "this checkout")):
        total: defaultdict[str, float] = defaultdict(float)
        for test_runs in tests.values():
            if len(test_runs) > recordings:
                found = judged(test_runs, recordings, plant, weigh, tolerance)
                for kind, count in found.items():
                    total[kind] += count
        n = round(sum(v for k, v in total.items() if k != "other state"))
        cells = [f"{total[k]:.0f} ({total[k] / n:.1%})" for k in ("regression", "inconclusive")]
        lines.append(
            f"| {name} | {n} | {' | '.join(cells)} | {total['improved']:.0f} | "
            f"{total['pass']:.0f} | {total['other state']} |"
        )
    return lines


#: the smoke run's tests and their loops at a launch reference of 0.05 ms
SMOKE_TESTS = {
    "test_host.py::test_affine": 40.0,
    "test_host.py::test_mixup": 90.0,
    "test_host.py::test_jigsaw": 60.0,
}


def smoke_folder(folder: Path) -> tuple[Path, Path]:
    """A ``bench_suite.py --suite host`` folder made up for the smoke run: five unchanged runs of
    three host-bound tests (``time:host`` in loops with its launch reference, ``time:kernels``),
    the launch reference 0.05 ms +-20% between runs and the loops following it by half; and a
    baseline file of the first three runs, written by the package's store."""
    rng = random.Random(5)
    runs: list[dict[str, tuple[float, float, float]]] = []
    for index in range(5):
        reference = 0.05 * (1 + rng.uniform(-0.2, 0.2))
        figures = {}
        for nodeid, loops in SMOKE_TESTS.items():
            moved = loops * (reference / 0.05) ** 0.5 * (1 + rng.gauss(0, 0.01))
            figures[nodeid] = (moved, reference, 0.2)
        runs.append(figures)
        tests = [
            {
                "nodeid": nodeid,
                "records": [
                    {
                        "series": "time:host",
                        "measurement": {
                            "in_loops": loops,
                            "in_loops_ci": [loops * 0.98, loops * 1.02],
                            "n": 60,
                            "reference_ms": reference_ms,
                        },
                    },
                    {"series": "time:kernels", "measurement": {"median_ms": kernels_ms}},
                ],
            }
            for nodeid, (loops, reference_ms, kernels_ms) in figures.items()
        ]
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"serial-unchanged-0-{index}.json").write_text(json.dumps({"tests": tests}))
    store = BaselineStore.load(folder / "baselines")
    records = [
        Record(
            SeriesKey(nodeid),
            "time:host",
            "GPU smoke",
            LOOPS,
            Recording(
                "2026-11-27",
                loops,
                0.02,
                60,
                ci=(loops * 0.98, loops * 1.02),
                reference_ms=reference_ms,
                fixed_ms=kernels_ms,
            ),
            {"torch": "smoke"},
        )
        for figures in runs[:3]
        for nodeid, (loops, reference_ms, kernels_ms) in figures.items()
    ]
    store.replace("GPU smoke", records)
    return folder, store.path_for("GPU smoke")


def smoke(folder: Path, tolerance: float) -> None:
    """Every mode over a made-up folder; exits non-zero where a mode judged nothing."""
    folder, baseline = smoke_folder(folder / "host-suite")
    tests = host_runs(folder)
    print("\n".join(table(tests, 3, 1.25, tolerance)))
    found = slopes(tests)
    print(", ".join(f"{nodeid}: slope {slope:+.2f}" for nodeid, slope in sorted(found.items())))
    kinds = against(baseline, folder / "serial-unchanged-0-4.json", tolerance)
    print(f"against the baseline: {dict(sorted(kinds.items()))}")
    line = references(folder / "serial-unchanged-0-4.json")
    print(line)
    with_state_slope(0.3)
    print("\n".join(table(tests, 3, 1.25, tolerance)[-2:]))
    if len(found) != len(tests) or not sum(kinds.values()) or "the least" not in line:
        sys.exit("rejudge_host: a mode of the smoke run judged nothing")


if __name__ == "__main__":
    main()
