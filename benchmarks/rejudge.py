"""Re-judge a ``bench_suite.py`` output folder with this checkout's verdict rules.

The measurements stay what the runs measured; only the judging is redone: each series'
baseline entry is rebuilt from its recordings by ``series.summarize_recordings`` and every
record of every run is judged by ``verdict.judge``. A REGRESSION here would still have been
re-measured by the plugin (``verdict.confirm``), which can only turn it into INCONCLUSIVE, so the
false-failure counts are an upper bound. The one finding that depends on a run's setting alone
(more xdist workers than cores) is added as the current rules would add it; ``--no-host`` judges
without the reference loop's host-speed finding, ``--no-gap-probe`` without the processes'
launch-gap probes (device time), to show what each changed. Use it when the rules changed after
the runs (say so). ``--one-round INDEX`` rebuilds every series from one round of each recording
(what a recording of one round of three would have read); ``--scale 1.10`` judges every
measurement 10% slower (a synthetic slowdown: its REGRESSION count is the catch).

    python benchmarks/rejudge.py OUT_DIR [--series time:device] [--one-round 0] [--scale 1.10]

Prints, per phase and plant, test-runs, REGRESSION, INCONCLUSIVE, and for planted runs the catch
rate against the realised change (planted / unchanged median, per test).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_cudaperf import series
from pytest_cudaperf.cli.sources import report_records
from pytest_cudaperf.measure import instability
from pytest_cudaperf.observation import Observation
from pytest_cudaperf.report.document import read_report
from pytest_cudaperf.series import Entry, Recording, entry_of
from pytest_cudaperf.store.baselines import BaselineStore
from pytest_cudaperf.verdict import Kind, judge


def rebuilt(entry: Entry, round_index: int | None = None) -> Entry:
    """``entry`` rebuilt from its recordings by this checkout's rules; with ``round_index``,
    from each recording's round of that index alone (:func:`one_round`)."""
    recordings = entry.recordings
    if round_index is not None:
        recordings = tuple(one_round(r, round_index) for r in recordings)
    metric = entry.metric
    return entry_of(recordings, entry.unit, entry.env, metric, entry.since, entry.breakdown)


def one_round(recording: Recording, index: int) -> Recording:
    """What one round of ``recording`` would have recorded (``cudaperf record``'s runs take one
    round of three): that round's median, the pooled CI's relative half-width widened by
    sqrt(rounds) (one round's share of the samples), no finding that rounds disagree."""
    if not recording.rounds:
        return recording
    median = recording.rounds[index % len(recording.rounds)]
    low, high = recording.ci or (recording.median, recording.median)
    half = (high - low) / 2 / recording.median * math.sqrt(len(recording.rounds))
    return dataclasses.replace(
        recording,
        median=median,
        rounds=(median,),
        ci=(median * (1 - half), median * (1 + half)),
        noise=half,
        unstable=tuple(u for u in recording.unstable if not u.startswith("rounds disagree")),
        n=max(1, recording.n // len(recording.rounds)),
    )


def _workers_finding(mode: str, env: Mapping[str, Any]) -> instability.Finding | None:
    """The xdist finding the current rules would have added to a CPU run of ``mode`` (``n2``),
    from the cores its report records: it depends on the run's setting only, so runs made before
    the rule changed are re-judged as if they had it (its reason and its noise)."""
    workers = int(mode[1:]) if mode.startswith("n") and mode[1:].isdigit() else None
    try:
        cores = int(env.get("logical_cores", 0))
    except (TypeError, ValueError):
        return None
    return instability.oversubscribed(workers, cores)


Row = tuple[str, str, str, str, float, Kind]


@dataclass(frozen=True)
class Rejudge:
    """What the re-judging changes: the findings it keeps (``host``: the reference loop's
    host-speed finding; ``gap_probe``: the launch-gap probes), the series' recordings
    (``round_index``: one round of each, :func:`one_round`) and each measurement (``scale``: a
    synthetic slowdown, 1.10 for +10%)."""

    host: bool = True
    gap_probe: bool = True
    round_index: int | None = None
    scale: float = 1.0


def judged_rows(out: Path, tolerance: float, prefix: str, change: Rejudge = Rejudge()) -> list[Row]:
    """(mode, phase, plant, key, value, verdict) of every passed test's time record whose series
    starts with ``prefix`` in every run of ``out``, judged by this checkout."""
    store = BaselineStore.load(out / "baselines")
    runs = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    rows: list[Row] = []
    for run in runs:
        name = f"{run['mode']}-{run['phase']}-{run['plant'] or '0'}-{run['index']}"
        report = out / f"{name}.json"
        if not report.exists():
            continue
        for record, passed in report_records(read_report(report)):
            if not (passed and record.series.startswith("time:")):
                continue
            if not record.series.startswith(prefix):
                continue
            entry = store.lookup(record.device_class, record.key, record.series)
            if entry is None:
                continue
            base = rebuilt(entry, change.round_index)
            allowed = record.tolerance if record.tolerance is not None else tolerance
            unstable, noise = record.recording.unstable, record.recording.noise
            workers = _workers_finding(run["mode"], record.env)
            if workers is not None and record.series.startswith("time:wall"):  # CPU backend
                noise = max(noise, workers.noise)
                if workers.reason not in unstable:
                    unstable = (*unstable, workers.reason)
            obs = Observation(
                record.value * change.scale,
                noise,
                instability=unstable,
                reference_ms=record.recording.reference_ms if change.host else None,
                launch_gap_us=record.recording.launch_gap_us if change.gap_probe else None,
            )
            kind = judge(obs, base, allowed, record.device_class).kind
            rows.append(
                (run["mode"], run["phase"], run["plant"], str(record.key), record.value, kind)
            )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--tolerance", type=float, default=0.05)
    parser.add_argument(
        "--realised", type=float, default=0.10, help="catch rate at or above this realised change"
    )
    parser.add_argument(
        "--min-ms", type=float, default=0.0, help="catch rate over tests this slow or slower"
    )
    parser.add_argument(
        "--series", default="time:", help="judge only series whose name starts so (time:device)"
    )
    parser.add_argument(
        "--no-host",
        dest="host",
        action="store_false",
        help="judge without the reference loop's host-speed finding (what it changed)",
    )
    parser.add_argument(
        "--no-gap-probe",
        dest="gap_probe",
        action="store_false",
        help="judge device time without the processes' launch-gap probes (what they changed)",
    )
    parser.add_argument(
        "--one-round",
        type=int,
        metavar="INDEX",
        help="rebuild each recording from its round INDEX alone (what one round of three, "
        "cudaperf record's runs, would have recorded)",
    )
    parser.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="multiply every measurement judged (1.10: a synthetic +10%% slowdown)",
    )
    args = parser.parse_args()
    change = Rejudge(args.host, args.gap_probe, args.one_round, args.scale)
    rows = judged_rows(args.out, args.tolerance, args.series, change)
    unchanged: dict[tuple[str, str], list[float]] = defaultdict(list)
    for mode, phase, _, key, value, _ in rows:
        if phase == "unchanged":
            unchanged[(mode, key)].append(value)
    reference = {k: statistics.median(v) for k, v in unchanged.items()}
    groups: dict[tuple[str, str, str], list[tuple[str, float, Kind]]] = defaultdict(list)
    for mode, phase, plant, key, value, kind in rows:
        groups[(mode, phase, plant)].append((key, value, kind))
    at = f"≥ {args.realised:+.0%}" + (f", tests ≥ {args.min_ms:g} ms" if args.min_ms else "")
    print(f"| mode | phase | plant | test-runs | REGRESSION | INCONCLUSIVE | caught at {at} |")
    print("|---|---|---|---|---|---|---|")
    for (mode, phase, plant), found in sorted(groups.items()):
        regressions = sum(1 for _, _, k in found if k is Kind.REGRESSION)
        inconclusive = sum(1 for _, _, k in found if k is Kind.INCONCLUSIVE)
        big = [
            kind
            for k, value, kind in found
            if (mode, k) in reference
            and reference[(mode, k)] >= args.min_ms
            and value / reference[(mode, k)] - 1 >= args.realised
        ]
        caught = sum(1 for kind in big if kind is Kind.REGRESSION)
        rate = f"{caught}/{len(big)}" if phase != "unchanged" and big else "—"
        print(
            f"| {mode} | {phase} | {plant or '—'} | {len(found)} | {regressions} | {inconclusive} "
            f"| {rate} |"
        )
    print(f"(floors: {series.SINGLE_PROCESS_FLOOR}, wall {series.WALL_FLOOR})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
