"""How far did each test's device time move between its fastest and slowest unchanged
processes of a ``bench_suite.py`` output folder, per kernel launch (launches per call from the
recorded breakdown)?

Per test: the median of the ``--extremes`` fastest and slowest unchanged processes, their
difference per launch, and the gap per launch of the fast ones (device time minus the kernels'
time, over the launches). The verdicts with this checkout's rules:
``python benchmarks/rejudge.py OUT_DIR --series time:device``.

``--probe``: instead, per test, how its device time followed the process's own launch-gap probe
(``launch_gap_us``, kept with each recording): the least-squares slope of the device time on the
probe over the unchanged processes, per launch (1: the probe explains the move launch for
launch), the spread of the device time between processes, and that spread once the probe's
difference from the recordings' times the launches is taken off.

    python benchmarks/launch_gaps.py OUT_DIR [--extremes 4]
    python benchmarks/launch_gaps.py OUT_DIR --probe
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_cudaperf.breakdown.model import Breakdown
from pytest_cudaperf.cli.sources import report_records
from pytest_cudaperf.keys import SeriesKey
from pytest_cudaperf.report.document import read_report
from pytest_cudaperf.series import Record
from pytest_cudaperf.store.baselines import BaselineStore

#: a device-time series of the folder: (device class, key, series name)
Found = tuple[str, SeriesKey, str]


def device_runs(folder: Path) -> tuple[BaselineStore, dict[Found, list[Record]]]:
    """The folder's baselines, and per device-time series its records in the unchanged runs."""
    runs: dict[Found, list[Record]] = {}
    for path in sorted(folder.glob("serial-unchanged-*.json")):
        for record, _ in report_records(read_report(path)):
            if record.series.startswith("time:device"):
                runs.setdefault((record.device_class, record.key, record.series), []).append(record)
    return BaselineStore.load(folder / "baselines"), runs


def launch_table(folder: Path, extremes: int) -> list[str]:
    """Per test: launches per call, fast and slow process medians (µs) and the move per launch."""
    store, runs = device_runs(folder)
    medians = {found: [r.value * 1e3 for r in records] for found, records in runs.items()}
    rows = [
        "| test | launches per call | kernels (µs) | fast (µs) | slow (µs) | move per launch "
        "(µs) | gap per launch, fast (µs) |",
        "|---|---|---|---|---|---|---|",
    ]
    for (device_class, key, series), values in sorted(medians.items()):
        entry = store.lookup(device_class, key, series)
        if entry is None or entry.breakdown is None or len(values) < 2 * extremes:
            continue
        breakdown = Breakdown.from_json(entry.breakdown)
        if not breakdown.launches:
            continue
        ordered = sorted(values)
        fast = statistics.median(ordered[:extremes])
        slow = statistics.median(ordered[-extremes:])
        launches, kernels = breakdown.launches, breakdown.total_us
        rows.append(
            f"| `{key.nodeid.split('::')[-1]}` | {launches:.0f} | {kernels:.1f} | {fast:.1f} | "
            f"{slow:.1f} | {(slow - fast) / launches:.3f} | {(fast - kernels) / launches:.2f} |"
        )
    return rows


def probe_table(folder: Path) -> list[str]:
    """Per test: launches, the device time's slope on the probe per launch, and its spread
    between processes before and after the probe's difference is taken off."""
    store, runs = device_runs(folder)
    seen = {
        found: [
            (r.recording.launch_gap_us, r.value * 1e3)
            for r in records
            if r.recording.launch_gap_us is not None
        ]
        for found, records in runs.items()
    }
    rows = [
        "| test | launches per call | slope per launch | spread | spread, probe taken off |",
        "|---|---|---|---|---|",
    ]
    for (device_class, key, series), pairs in sorted(seen.items()):
        entry = store.lookup(device_class, key, series)
        if entry is None or entry.breakdown is None or entry.launch_gap_us is None:
            continue
        launches = Breakdown.from_json(entry.breakdown).launches
        gaps, times = [g for g, _ in pairs], [t for _, t in pairs]
        if not launches or len(pairs) < 3 or statistics.pvariance(gaps) == 0:
            continue
        slope = statistics.linear_regression(gaps, times).slope / launches
        taken_off = [t - launches * (g - entry.launch_gap_us) for g, t in pairs]
        rows.append(
            f"| `{key.nodeid.split('::')[-1]}` | {launches:.0f} | {slope:.2f} | "
            f"{max(times) / min(times) - 1:.1%} | {max(taken_off) / min(taken_off) - 1:.1%} |"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--extremes", type=int, default=4)
    parser.add_argument("--probe", action="store_true", help="how device time followed the probe")
    args = parser.parse_args()
    if args.probe:
        print("\n".join(probe_table(args.folder)))
    else:
        print("\n".join(launch_table(args.folder, args.extremes)))


if __name__ == "__main__":
    main()
