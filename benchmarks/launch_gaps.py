"""How far did each test's device time move between its fastest and slowest unchanged
processes of a ``bench_suite.py`` output folder, per kernel launch (launches per call from the
recorded breakdown)?

Per test: the median of the ``--extremes`` fastest and slowest unchanged processes, their
difference per launch, and the gap per launch of the fast ones (device time minus the kernels'
time, over the launches). The verdicts with this checkout's rules:
``python benchmarks/rejudge.py OUT_DIR --series time:device``.

    python benchmarks/launch_gaps.py OUT_DIR [--extremes 4]
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
from pytest_cudaperf.store.baselines import BaselineStore


def launch_table(folder: Path, extremes: int) -> list[str]:
    """Per test: launches per call, fast and slow process medians (µs) and the move per launch."""
    store = BaselineStore.load(folder / "baselines")
    medians: dict[tuple[str, SeriesKey, str], list[float]] = {}
    for path in sorted(folder.glob("serial-unchanged-*.json")):
        for record, _ in report_records(read_report(path)):
            if record.series.startswith("time:device"):
                found = (record.device_class, record.key, record.series)
                medians.setdefault(found, []).append(record.value * 1e3)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--extremes", type=int, default=4)
    args = parser.parse_args()
    print("\n".join(launch_table(args.folder, args.extremes)))


if __name__ == "__main__":
    main()
