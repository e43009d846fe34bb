"""The ``cudaperf`` console script: record, show, merge and compare baselines and JSON reports.

    cudaperf record [--runs K] [--baseline-dir DIR] [--] PYTEST_ARGS...
                                           record fresh baselines from K separate pytest processes
    cudaperf show FILE                     a table of a baseline file or a --cudaperf-json report
    cudaperf merge OUT A.json B.json ...   merge shard reports (or baseline files of one class)
    cudaperf compare BASE CURRENT          judge CURRENT against BASE; exit 1 on a regression

Exit codes: 0 fine, 1 a regression (compare), 2 a file that cannot be used (one line on stderr);
``record`` exits with pytest's code when a run failed for another reason than perf verdicts.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_cudaperf import breakdown, evidence
from pytest_cudaperf.baselines import (
    BaselineError,
    BaselineStore,
    Entries,
    Entry,
    Record,
    dumps_baseline,
    parse_document,
    to_document,
)
from pytest_cudaperf.keys import SeriesKey
from pytest_cudaperf.measure import instability
from pytest_cudaperf.report import render_table
from pytest_cudaperf.units import format_ms, format_pct, parse_fraction
from pytest_cudaperf.verdict import Kind, Observation, ci_text, format_value, judge

#: a series of one device class: (device class, key, series name)
Where = tuple[str, SeriesKey, str]
#: runs a pytest command line (arguments after ``python -m pytest``) and returns its exit code
Runner = Callable[[Sequence[str]], int]


class CliError(Exception):
    """A file or argument that cannot be used; one line for stderr."""


@dataclass
class Baseline:
    device_class: str
    entries: Entries


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CliError(f"{path}: cannot read ({exc.strerror})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CliError(f"{path}: not valid JSON ({exc})") from None


def load(path: Path) -> Baseline | dict[str, Any]:
    """A baseline file (strictly validated, any schema) or a JSON report."""
    document = _read_json(path)
    if isinstance(document, dict) and "entries" in document:
        try:
            return Baseline(*parse_document(path, document))
        except BaselineError as exc:
            raise CliError(str(exc)) from None
    if not isinstance(document, dict) or not (
        isinstance(document.get("records"), list) or isinstance(document.get("tests"), list)
    ):
        raise CliError(f"{path}: neither a baseline file nor a --cudaperf-json report")
    return document


def report_records(document: dict[str, Any], where: str = "report") -> list[tuple[Record, bool]]:
    """Every (record, body passed) of a ``--cudaperf-json`` report: the items of its top-level
    ``records`` list (Record JSON plus ``body_passed``), or of each test's ``records``. The one
    place that knows the report's layout."""
    items: list[tuple[Any, Any]] = []
    if isinstance(document.get("records"), list):
        items = [(r, isinstance(r, dict) and r.get("body_passed")) for r in document["records"]]
    else:
        for test in document.get("tests", []):
            if isinstance(test, dict):
                passed = test.get("body_passed")
                items.extend((r, passed) for r in test.get("records", []))
    found = []
    for i, (data, passed) in enumerate(items):
        try:
            found.append((Record.from_json(data, f"{where}: records[{i}]"), passed is True))
        except BaselineError as exc:
            raise CliError(str(exc)) from None
    return found


def failed_bodies_of(document: dict[str, Any], found: Sequence[tuple[Record, bool]]) -> int:
    """How many test bodies failed in a run: the report's top-level ``failed_bodies`` count (every
    test, measured or not) where it has one, else the measured series whose body failed."""
    count = document.get("failed_bodies")
    if isinstance(count, int) and not isinstance(count, bool):
        return count
    return sum(1 for _, passed in found if not passed)


def _rows(source: Baseline | dict[str, Any]) -> list[tuple[str, SeriesKey, str, Entry]]:
    """(device class, key, series, entry) from a baseline, or one-recording entries of a report."""
    if isinstance(source, Baseline):
        return [
            (source.device_class, key, series, entry)
            for key, by_series in sorted(source.entries.items())
            for series, entry in sorted(by_series.items())
        ]
    rows = []
    for record, _ in report_records(source):
        metric = evidence.metric_of(record.series, record.unit)
        entry = Entry.of(
            [record.recording], record.unit, record.env, metric, breakdown=record.breakdown
        )
        rows.append((record.device_class, record.key, record.series, entry))
    return rows


def cmd_show(path: Path, tolerance: float) -> int:
    rows = []
    for device_class, key, series, entry in _rows(load(path)):
        moving = evidence.drift(entry, tolerance)
        rows.append(
            [
                key.nodeid,
                key.name,
                series,
                format_value(entry.value, entry.unit),
                f"±{entry.noise:.2%}",
                str(entry.processes),
                entry.since,
                moving.text() if moving else "",
                device_class,
            ]
        )
    header = ["test", "name", "series", "value", "noise", "processes", "since", "drift", "class"]
    for line in render_table(rows, header):
        print(line)
    return 0


def _write_text(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise CliError(f"{path}: cannot write ({exc.strerror or exc})") from None


def cmd_merge(out: Path, inputs: Sequence[Path]) -> int:
    sources = [load(p) for p in inputs]
    baselines = [s for s in sources if isinstance(s, Baseline)]
    reports = [s for s in sources if not isinstance(s, Baseline)]
    if baselines and reports:
        raise CliError("merge: give only reports or only baseline files, not both")
    if baselines:
        classes = {b.device_class for b in baselines}
        if len(classes) != 1:
            raise CliError(f"merge: baseline files of different device classes: {sorted(classes)}")
        merged: Entries = {}
        for baseline in baselines:
            for key, by_series in baseline.entries.items():
                merged.setdefault(key, {}).update(by_series)
        device_class = classes.pop()
        _write_text(out, dumps_baseline(to_document(device_class, merged)))
        print(
            f"cudaperf: merged {len(baselines)} baseline files into {out} "
            f"({len({k.nodeid for k in merged})} tests)"
        )
        return 0
    tests: dict[str, Any] = {}
    for document in reports:
        for test in document.get("tests", []):
            tests[test["nodeid"]] = test
    report = dict(reports[0])
    report["tests"] = [tests[k] for k in sorted(tests)]
    if any("records" in d for d in reports):
        report["records"] = [r for d in reports for r in d.get("records", [])]
    report["updates"] = [u for d in reports for u in d.get("updates", [])]
    report["complete_run"] = all(d.get("complete_run", False) for d in reports)
    summary: dict[str, int] = {}
    for document in reports:  # shards run disjoint tests: their counts add up
        for name, count in (document.get("summary") or {}).items():
            if isinstance(count, int):
                summary[name] = summary.get(name, 0) + count
    report["summary"] = summary
    _write_text(out, json.dumps(report, indent=2, sort_keys=True) + "\n")
    print(f"cudaperf: merged {len(reports)} reports into {out} ({len(tests)} tests)")
    return 0


def cmd_compare(base_path: Path, current_path: Path, tolerance: float) -> int:
    base = {(cls, key, series): entry for cls, key, series, entry in _rows(load(base_path))}
    base_any = {(key, series): (cls, entry) for (cls, key, series), entry in base.items()}
    rows = []
    regressions = 0
    #: regressed or improved series: their stored breakdowns are diffed under the table
    flagged: list[tuple[SeriesKey, str, object, object]] = []
    for cls, key, series, current in _rows(load(current_path)):
        entry = base.get((cls, key, series))
        other = base_any.get((key, series))
        cells = [key.nodeid, key.name, series, format_value(current.value, current.unit)]
        if entry is None and other is not None:
            rows.append([*cells, format_value(other[1].value, other[1].unit), "", "",
                         f"OTHER CLASS ({other[0]}), not enforced"])  # fmt: skip
            continue
        observation = Observation(
            current.value,
            current.noise,
            env=current.env,
            unit=current.unit,
            reference_ms=current.reference_ms,
        )
        verdict = judge(observation, entry, tolerance, cls)
        regressions += verdict.kind is Kind.REGRESSION
        rows.append(
            [
                *cells,
                format_value(entry.value, entry.unit) if entry else "—",
                format_pct(verdict.ratio - 1) if verdict.ratio is not None else "",
                ci_text(verdict.ci) if verdict.ci is not None else "",
                verdict.kind.value.upper(),
            ]
        )
        if entry is not None and verdict.kind in (Kind.REGRESSION, Kind.IMPROVED):
            flagged.append((key, series, entry.breakdown, current.breakdown))
    header = ["test", "name", "series", "current", "baseline", "change", "95% CI", "verdict"]
    for line in render_table(rows, header):
        print(line)
    for key, series, base_breakdown, current_breakdown in flagged:
        print(f"{key} {{{series}}}:")
        for line in breakdown.explain_stored(base_breakdown, current_breakdown).lines:
            print(f"    {line}")
    print(
        f"cudaperf: {len(rows)} compared, {regressions} regression"
        f"{'s' if regressions != 1 else ''} (tolerance {tolerance:.1%})"
    )
    return 1 if regressions else 0


def run_pytest(args: Sequence[str]) -> int:
    """The default :data:`Runner`: ``python -m pytest ARGS`` in its own process."""
    return subprocess.call([sys.executable, "-m", "pytest", *args])


def _attach_breakdowns(
    runner: Runner, args: Sequence[str], tmp: Path, series: dict[Where, list[Record]]
) -> None:
    """One more run, profiling only: each series' kernel (or op) breakdown, put on its last
    recording's record. Apart from the measuring runs, because a profiler that ran earlier in a
    process slowed the CUDA-graph replays measured after it (+10% on the H100)."""
    report = tmp / "breakdowns.json"
    scratch = f"--cudaperf-baseline-dir={tmp / 'scratch'}"  # its timings are not kept
    rc = runner(
        [
            *args,
            "--cudaperf-update",
            scratch,
            "--cudaperf-breakdown=auto",
            f"--cudaperf-json={report}",
        ]
    )
    document = _read_json(report) if report.exists() else None
    if not isinstance(document, dict):
        print(f"cudaperf record: breakdowns: pytest exited {rc} without a report; none kept")
        return
    found = 0
    for record, _ in report_records(document, "breakdown run report"):
        where = (record.device_class, record.key, record.series)
        if record.breakdown is not None and where in series:
            series[where][-1] = dataclasses.replace(series[where][-1], breakdown=record.breakdown)
            found += 1
    print(f"cudaperf record: breakdowns: pytest exited {rc}, {found} series profiled")


def cmd_record(  # noqa: PLR0912 - each run's outcome and each series' evidence
    runs: int, baseline_dir: Path | None, pytest_args: Sequence[str], runner: Runner = run_pytest
) -> int:
    """Run the pytest command ``runs`` times, each its own process writing a JSON report (with
    breakdowns off, nothing written to the baseline; a test may fail against the old baseline, its
    recording counts all the same); then every series whose test body passed in every run becomes
    a fresh series made of its ``runs`` recordings, in the baseline folder the runs used, and one
    more run in update mode into a scratch folder records the breakdowns."""
    args = [a for a in pytest_args if a != "--"]
    for bad in ("--cudaperf-json", "--cudaperf-prune", "--cudaperf-update"):
        if any(a == bad or a.startswith(bad + "=") for a in args):
            raise CliError(f"record: leave {bad} out of the pytest arguments (record sets it)")
    if baseline_dir is not None:  # one argument: pytest takes a bare existing path for a
        # test path when it looks for the rootdir, and the folder exists from the second run on
        args.append(f"--cudaperf-baseline-dir={baseline_dir}")
    folder = baseline_dir
    loops: list[float | None] = []
    collected: dict[Where, list[Record]] = {}
    failed_bodies: set[Where] = set()
    worst = 0
    with tempfile.TemporaryDirectory(prefix="cudaperf-record-") as tmp:
        for run in range(1, runs + 1):
            report = Path(tmp) / f"run{run}.json"
            rc = runner([*args, "--cudaperf-breakdown=off", f"--cudaperf-json={report}"])
            if not report.exists():
                print(f"cudaperf record: run {run}/{runs}: pytest exited {rc} without a report")
                return rc or 2
            document = _read_json(report)
            if not isinstance(document, dict):
                raise CliError(f"{report}: not a --cudaperf-json report")
            found = report_records(document, f"run {run} report")
            loops.append(_median_loop(record for record, _ in found))
            if folder is None and isinstance(document.get("baseline_dir"), str):
                folder = Path(document["baseline_dir"]) if document["baseline_dir"] else None
            for record, passed in found:
                where = (record.device_class, record.key, record.series)
                if passed:
                    collected.setdefault(where, []).append(record)
                else:
                    failed_bodies.add(where)
            bodies_failed = failed_bodies_of(document, found)
            if rc not in (0, 1) or bodies_failed:
                worst = worst or rc or 1
            print(
                f"cudaperf record: run {run}/{runs}: pytest exited {rc}, {len(found)} series"
                + (f", {bodies_failed} with a failed test body" if bodies_failed else "")
            )
        complete = {
            where: records
            for where, records in collected.items()
            if len(records) == runs and where not in failed_bodies
        }
        if complete:
            _attach_breakdowns(runner, args, Path(tmp), complete)
    skipped = len(collected.keys() | failed_bodies) - len(complete)
    uneven = uneven_host(loops)
    if uneven:
        print(uneven)
    store = BaselineStore(folder or Path(".cudaperf"))
    by_class: dict[str, list[Record]] = {}
    for (device_class, _, _), records in sorted(complete.items()):
        by_class.setdefault(device_class, []).extend(records)
    try:
        for device_class, records in sorted(by_class.items()):
            print(store.replace(device_class, records).line())
    except BaselineError as exc:
        raise CliError(str(exc)) from None
    if skipped:
        print(f"cudaperf record: {skipped} series not recorded (not passed in every run)")
    return worst


def _median_loop(records: Iterable[Record]) -> float | None:
    """A run's median reference-loop time (CPU backend on the CPU), or None."""
    loops = [
        r.recording.reference_ms
        for r in records
        if r.recording.reference_ms is not None and math.isfinite(r.recording.reference_ms)
    ]
    return statistics.median(loops) if loops else None


def uneven_host(loops: Sequence[float | None]) -> str | None:
    """The line ``cudaperf record`` prints when its runs' reference loops (each run's median)
    differ by more than ``instability.HOST_MIN``: the host itself ran at different speeds, so the
    series move more between the recordings than the code does, and a slowdown is harder to tell
    from that (session 8's CPU A/A recorded with loops of 0.36-0.49 ms per run: series up to
    ±487%, and 88.6% of realised 3x slowdowns failed serially, against 95.5% in session 6)."""
    known = [x for x in loops if x is not None]
    if len(known) < 2 or instability.host_speed(max(known), min(known)) is None:
        return None
    return (
        f"cudaperf record: the host ran at different speeds during the runs (a reference loop "
        f"took {format_ms(min(known))}-{format_ms(max(known))}, median per run): the series "
        f"recorded move with it and fewer slowdowns will fail; record again on a quiet machine"
    )


def main(argv: Sequence[str] | None = None, runner: Runner = run_pytest) -> int:
    parser = argparse.ArgumentParser(prog="cudaperf", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    record = sub.add_parser("record", help="record fresh baselines from K pytest processes")
    record.add_argument("--runs", type=int, default=5, help="pytest processes (default: 5)")
    record.add_argument("--baseline-dir", type=Path, default=None, help="default: .cudaperf")
    record.add_argument("pytest_args", nargs=argparse.REMAINDER, help="arguments for pytest")
    show = sub.add_parser("show", help="print a baseline file or a JSON report as a table")
    show.add_argument("file", type=Path)
    show.add_argument("--tolerance", default="5%", help="step size for drift (default: 5%%)")
    merge = sub.add_parser("merge", help="merge shard reports, or baseline files of one class")
    merge.add_argument("out", type=Path)
    merge.add_argument("inputs", type=Path, nargs="+")
    compare = sub.add_parser("compare", help="judge CURRENT against BASE; exit 1 on regression")
    compare.add_argument("base", type=Path)
    compare.add_argument("current", type=Path)
    compare.add_argument("--tolerance", default="5%", help="as 0.05 or 5%% (default: 5%%)")
    args = parser.parse_args(argv)
    try:
        if args.command == "record":
            if args.runs < 1:
                raise CliError(f"record: --runs must be at least 1, got {args.runs}")
            return cmd_record(args.runs, args.baseline_dir, args.pytest_args, runner)
        if args.command == "merge":
            return cmd_merge(args.out, args.inputs)
        try:
            tolerance = parse_fraction(args.tolerance)
        except ValueError as exc:
            raise CliError(f"--tolerance: {exc}") from None
        if args.command == "show":
            return cmd_show(args.file, tolerance)
        return cmd_compare(args.base, args.current, tolerance)
    except CliError as exc:
        print(f"cudaperf: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `cudaperf show FILE | head`
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the flush at exit
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
