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
    python benchmarks/launch_gaps.py --smoke OUT_DIR   # both tables over a made-up GPU folder
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_cudaperf.breakdown.model import Breakdown, Kernel
from pytest_cudaperf.cli.sources import report_records
from pytest_cudaperf.keys import SeriesKey
from pytest_cudaperf.report.document import Report, dumps, read_report
from pytest_cudaperf.report.model import JudgedRecord, TestOutcome
from pytest_cudaperf.series import Record, Recording
from pytest_cudaperf.store.baselines import BaselineStore
from pytest_cudaperf.verdict import Kind, Verdict

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


def smoke_folder(folder: Path) -> Path:
    """A ``bench_suite.py`` folder of a GPU suite, made up for the smoke run through the
    package's own writers: two tests' device-time series recorded with a breakdown and the
    launch-gap probe (2 µs), and four unchanged runs whose times follow each process's probe."""
    device, date = "GPU smoke", "2026-11-27"
    tests = {"test_gpu.py::test_add": (12.0, 8.0), "test_gpu.py::test_sort": (40.0, 20.0)}

    def record(nodeid: str, gap_us: float) -> Record:
        kernels_us, launches = tests[nodeid]
        entry = Kernel("k", "kernel", launches, kernels_us)
        breakdown = Breakdown("cuda", 5, kernels_us, kernels_us + 10, (entry,))
        device_us = kernels_us + launches * gap_us
        recording = Recording(date, device_us / 1e3, 0.01, 50, launch_gap_us=gap_us)
        key = SeriesKey(nodeid)
        env = {"torch": "smoke"}
        return Record(key, "time:device/cold", device, "ms", recording, env, breakdown.to_json())

    store = BaselineStore.load(folder / "baselines")
    store.replace(device, [record(nodeid, gap) for nodeid in tests for gap in (1.9, 2.0, 2.1)])
    runs = []
    for index, gap in enumerate((1.8, 2.0, 2.2, 2.6)):
        runs.append({"mode": "serial", "phase": "unchanged", "plant": "", "index": index})
        outcomes = tuple(
            TestOutcome(nodeid, records=(JudgedRecord(record(nodeid, gap), Verdict(Kind.PASS)),))
            for nodeid in tests
        )
        report = folder / f"serial-unchanged-0-{index}.json"
        report.write_text(dumps(Report(tests=outcomes)))
    (folder / "runs.jsonl").write_text("".join(json.dumps(run) + "\n" for run in runs))
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--extremes", type=int, default=4)
    parser.add_argument("--probe", action="store_true", help="how device time followed the probe")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a smoke run: both tables over a GPU folder made up in FOLDER/gpu-suite",
    )
    args = parser.parse_args()
    if args.smoke:
        folder = smoke_folder(args.folder / "gpu-suite")
        for rows in (launch_table(folder, 1), probe_table(folder)):
            print("\n".join(rows))
            if len(rows) < 4:
                sys.exit("launch_gaps: a test of the smoke folder is missing from the table")
        return
    if args.probe:
        print("\n".join(probe_table(args.folder)))
    else:
        print("\n".join(launch_table(args.folder, args.extremes)))


if __name__ == "__main__":
    main()
