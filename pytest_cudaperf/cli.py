"""The ``cudaperf`` console script: show, merge and compare baseline files and JSON reports.

    cudaperf show FILE                     a table of a baseline file or a --cudaperf-json report
    cudaperf merge OUT A.json B.json ...   merge shard reports (or baseline files of one class)
    cudaperf compare BASE CURRENT          judge CURRENT against BASE; exit 1 on a regression

Exit codes: 0 fine, 1 a regression (compare), 2 a file that cannot be used (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_cudaperf.baselines import BaselineError, dumps, read_file
from pytest_cudaperf.report import render_table, write_json
from pytest_cudaperf.results import Results
from pytest_cudaperf.units import format_pct, parse_fraction
from pytest_cudaperf.verdict import Kind, ci_text, format_value, judge


class CliError(Exception):
    """A file or argument that cannot be used; one line for stderr."""


def load(path: Path) -> dict[str, Any]:
    """A baseline file (strictly validated) or a JSON report."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CliError(f"{path}: cannot read ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise CliError(f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno})") from None
    if isinstance(document, dict) and "entries" in document:
        try:
            return read_file(path)
        except BaselineError as exc:
            raise CliError(str(exc)) from None
    if not isinstance(document, dict) or not isinstance(document.get("tests"), list):
        raise CliError(f"{path}: neither a baseline file nor a --cudaperf-json report")
    return document


def records(document: dict[str, Any]) -> list[dict[str, Any]]:
    """Every measured series as a flat record, from either kind of document."""
    if "entries" in document:
        return [
            {"key": key, "series": series, "device_class": document["device_class"], **entry}
            for key, by_series in sorted(document["entries"].items())
            for series, entry in sorted(by_series.items())
        ]
    return [dict(r) for test in document["tests"] for r in test.get("records", [])]


def cmd_show(path: Path) -> int:
    rows = [
        [
            r["key"],
            r["series"],
            format_value(r["value"], r["unit"]),
            f"±{r.get('noise', 0):.2%}",
            str(r.get("n", "")),
            r["device_class"],
        ]
        for r in records(load(path))
    ]
    for line in render_table(rows, ["test", "series", "value", "noise", "n", "device class"]):
        print(line)
    return 0


def cmd_merge(out: Path, inputs: Sequence[Path]) -> int:
    documents = [load(p) for p in inputs]
    kinds = {"entries" in d for d in documents}
    if len(kinds) != 1:
        raise CliError("merge: give only reports or only baseline files, not both")
    if kinds == {True}:
        classes = {d["device_class"] for d in documents}
        if len(classes) != 1:
            raise CliError(f"merge: baseline files of different device classes: {sorted(classes)}")
        merged: dict[str, Any] = {
            "schema": documents[0]["schema"],
            "device_class": classes.pop(),
            "entries": {},
        }
        for document in documents:
            for key, series in document["entries"].items():
                merged["entries"].setdefault(key, {}).update(series)
        out.write_text(dumps(merged), encoding="utf-8")
        print(
            f"cudaperf: merged {len(documents)} baseline files into {out} "
            f"({len(merged['entries'])} tests)"
        )
        return 0
    tests: dict[str, dict[str, Any]] = {}
    for document in documents:
        for test in document["tests"]:
            tests[test["nodeid"]] = test
    report = dict(documents[0])
    report["tests"] = [tests[k] for k in sorted(tests)]
    report["updates"] = [u for d in documents for u in d.get("updates", [])]
    report["complete_run"] = all(d.get("complete_run", False) for d in documents)
    report["summary"] = Results.from_payloads(tests).counts()
    write_json(out, report)
    print(f"cudaperf: merged {len(documents)} reports into {out} ({len(tests)} tests)")
    return 0


def cmd_compare(base_path: Path, current_path: Path, tolerance: float) -> int:
    base = {(r["key"], r["series"]): r for r in records(load(base_path))}
    rows = []
    regressions = 0
    for record in records(load(current_path)):
        entry = base.get((record["key"], record["series"]))
        if entry is not None and entry["device_class"] != record["device_class"]:
            rows.append(
                [
                    record["key"],
                    record["series"],
                    format_value(record["value"], record["unit"]),
                    format_value(entry["value"], entry["unit"]),
                    "",
                    "",
                    f"OTHER CLASS ({entry['device_class']}), not enforced",
                ]
            )
            continue
        verdict = judge(
            float(record["value"]),
            float(record.get("noise", 0.0)),
            record["unit"],
            entry,
            tolerance,
            record["device_class"],
            record.get("env", {}),
        )
        regressions += verdict.kind is Kind.REGRESSION
        change = format_pct(verdict.ratio - 1) if verdict.ratio is not None else ""
        ci = ci_text(verdict.ci) if verdict.ci is not None else ""
        rows.append(
            [
                record["key"],
                record["series"],
                format_value(record["value"], record["unit"]),
                format_value(entry["value"], entry["unit"]) if entry else "—",
                change,
                ci,
                verdict.kind.value.upper(),
            ]
        )
    for line in render_table(
        rows, ["test", "series", "current", "baseline", "change", "95% CI", "verdict"]
    ):
        print(line)
    print(
        f"cudaperf: {len(rows)} compared, {regressions} regression"
        f"{'s' if regressions != 1 else ''} (tolerance {tolerance:.1%})"
    )
    return 1 if regressions else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cudaperf", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    show = sub.add_parser("show", help="print a baseline file or a JSON report as a table")
    show.add_argument("file", type=Path)
    merge = sub.add_parser("merge", help="merge shard reports, or baseline files of one class")
    merge.add_argument("out", type=Path)
    merge.add_argument("inputs", type=Path, nargs="+")
    compare = sub.add_parser("compare", help="judge CURRENT against BASE; exit 1 on regression")
    compare.add_argument("base", type=Path)
    compare.add_argument("current", type=Path)
    compare.add_argument("--tolerance", default="5%", help="as 0.05 or 5%% (default: 5%%)")
    args = parser.parse_args(argv)
    try:
        if args.command == "show":
            return cmd_show(args.file)
        if args.command == "merge":
            return cmd_merge(args.out, args.inputs)
        try:
            tolerance = parse_fraction(args.tolerance)
        except ValueError as exc:
            raise CliError(f"--tolerance: {exc}") from None
        return cmd_compare(args.base, args.current, tolerance)
    except CliError as exc:
        print(f"cudaperf: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `cudaperf show FILE | head`
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the flush at exit
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
