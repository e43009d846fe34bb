"""The table of a ``judged-at-defaults.sh`` folder: what each step cost against pytest-benchmark's
run of the same tests, and what the judged runs said.

    python benchmarks/public_suites/defaults_table.py OUTDIR [--planted-tests a,b,c]

Per step (``pytest-benchmark``, ``record``, ``unchanged-N``, ``planted``; one line each, in that
order): its exit code and wall time (the last line of ``run-on-device.sh``'s env file, ``exit RC
after N s``), that wall over pytest-benchmark's, the tests JUnit counts (passed, failed, errors,
skipped) and their median pytest time; for the judged runs the verdicts of every series of their
``--cudaperf-json`` report, by series; for the planted run, how many of the planted tests
(``--planted-tests``: the ``CUDAPERF_PLANT_TESTS`` it ran with, each a part of a test id) failed
a time series as REGRESSION. Then the rows an acceptance reads: the unchanged runs' median wall
(a run cut by its time limit counted as the slowest) over pytest-benchmark's, the median pytest
time a test over every finished unchanged run's tests pooled (and each run's), the test-runs
with a time series INCONCLUSIVE or REGRESSION, and the planted run's wall over pytest-benchmark's.
Several OUTDIRs (one selection run over several device calls into separate folders) make one
table, the steps named by folder. Writes ``defaults.md`` into the first OUTDIR and prints it.
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent.parent))

from _table import publish  # noqa: E402

from pytest_cudaperf.report.document import read_report  # noqa: E402

#: the steps of judged-at-defaults.sh, in the order they run
ORDER = ("pytest-benchmark", "record", "unchanged", "planted")


def steps(out: Path) -> list[Path]:
    """The step folders of ``out``, in the order the script runs them."""

    def rank(path: Path) -> tuple[int, int]:
        found = re.fullmatch(r"(.+?)(?:-(\d+))?", path.name)
        name, index = (found.group(1), found.group(2)) if found else (path.name, None)
        return (ORDER.index(name) if name in ORDER else len(ORDER)), int(index or 0)

    return sorted((p for p in out.iterdir() if p.is_dir() and rank(p)[0] < len(ORDER)), key=rank)


def wall(step: Path) -> tuple[int, float] | None:
    """(exit code, seconds) from the step's env file, None where it did not finish."""
    for env in step.glob("*-env.txt"):
        found = re.search(r"^exit (\d+) after (\d+) s$", env.read_text(), re.MULTILINE)
        if found:
            return int(found.group(1)), float(found.group(2))
    return None


def case_times(step: Path) -> tuple[Counter[str], list[float]]:
    """The outcomes of the step's JUnit file and the pytest time of each test not skipped (s)."""
    outcomes: Counter[str] = Counter()
    times = []
    for path in step.glob("*-junit.xml"):
        for case in ET.parse(path).getroot().iter("testcase"):
            kinds = {child.tag for child in case}
            outcome = next((k for k in ("failure", "error", "skipped") if k in kinds), "passed")
            outcomes[outcome] += 1
            if outcome != "skipped":
                times.append(float(case.get("time", "0")))
    return outcomes, times


def junit(step: Path) -> tuple[Counter[str], float | None]:
    """The outcomes of the step's JUnit file and the median time of a test (s)."""
    outcomes, times = case_times(step)
    return outcomes, statistics.median(times) if times else None


def time_kinds(step: Path) -> list[set[str]]:
    """The verdict kinds of each test's time series in the step's report, a set per test."""
    path = step / "report.json"
    if not path.exists():
        return []
    return [
        {j.verdict.kind.value for j in test.records if not j.record.series.startswith("memory")}
        for test in read_report(path).tests
    ]


def verdicts(step: Path) -> tuple[Counter[tuple[str, str]], set[str]]:
    """(series, verdict kind) of every judged record of the step's report, and the tests with a
    time series judged REGRESSION."""
    path = step / "report.json"
    kinds: Counter[tuple[str, str]] = Counter()
    regressed: set[str] = set()
    if not path.exists():
        return kinds, regressed
    for test in read_report(path).tests:
        for judged in test.records:
            series = judged.record.series.split("/")[0]
            kind = judged.verdict.kind.value
            kinds[(series, kind)] += 1
            if kind == "regression" and not series.startswith("memory"):
                regressed.add(test.nodeid)
    return kinds, regressed


def _ratio(seconds: float, reference: tuple[int, float] | None) -> str:
    return f" = {seconds / reference[1]:.2f}x" if reference and reference[1] > 0 else ""


def rows(
    found: list[Path], reference: tuple[int, float] | None, named: dict[Path, str]
) -> list[str]:
    """The lines an acceptance reads (see the module's docstring), each step by its name in
    ``named``."""
    unchanged = [s for s in found if s.name.startswith("unchanged")]
    finished = [s for s in unchanged if wall(s)]
    lines = ["", "## The rows", ""]
    if unchanged:
        walls = sorted(w[1] for s in finished if (w := wall(s)))
        walls += [math.inf] * (len(unchanged) - len(finished))
        middle = statistics.median(walls)
        cut = len(unchanged) - len(finished)
        said = f"{middle:.0f} s{_ratio(middle, reference)}" if math.isfinite(middle) else "cut"
        lines.append(
            f"- unchanged runs: {len(finished)} finished, {cut} cut; median wall {said}"
            + (f" (pytest-benchmark {reference[1]:.0f} s)" if reference else "")
        )
        per_run = [t for s in finished if (t := case_times(s)[1])]
        pooled = [x for t in per_run for x in t]
        if pooled:
            spread = f"{min(map(statistics.median, per_run)):.2f}–"
            spread += f"{max(map(statistics.median, per_run)):.2f} s"
            line = "- pytest time a test, finished unchanged runs pooled: median "
            line += f"{statistics.median(pooled):.2f} s (each run's median {spread})"
            theirs = [t for s in found if s.name == "pytest-benchmark" for t in case_times(s)[1]]
            if theirs:
                line += f"; pytest-benchmark {statistics.median(theirs):.2f} s"
            lines.append(line)
        kinds = [k for s in finished for k in time_kinds(s)]
        if kinds:
            unsure = sum("inconclusive" in k for k in kinds)
            failed = sum("regression" in k for k in kinds)
            lines.append(
                f"- test-runs with a time series INCONCLUSIVE: {unsure} of {len(kinds)} "
                f"({unsure / len(kinds):.1%}); REGRESSION: {failed}"
            )
    for step in found:
        if step.name.endswith("planted") and (done := wall(step)):
            lines.append(f"- {named[step]}: wall {done[1]:.0f} s{_ratio(done[1], reference)}")
    return lines


def table(outs: list[Path], planted_tests: list[str]) -> list[str]:
    several = len(outs) > 1
    found = [s for out in outs for s in steps(out)]
    named = {s: f"{s.parent.name}/{s.name}" if several else s.name for s in found}
    reference = next((w for out in outs if (w := wall(out / "pytest-benchmark"))), None)
    lines = [f"# {', '.join(o.name for o in outs)}: judged at both tools' defaults", ""]
    lines += ["| step | exit | wall | vs pytest-benchmark | tests | median a test |"]
    lines += ["|---|---|---|---|---|---|"]
    for step in found:
        done = wall(step)
        ratio = (
            f"{done[1] / reference[1]:.2f}x"
            if done and reference and reference[1] > 0 and step.name != "pytest-benchmark"
            else "—"
        )
        outcomes, median = junit(step)
        counted = ", ".join(f"{n} {k}" for k, n in sorted(outcomes.items())) or "—"
        cells = [
            named[step],
            str(done[0]) if done else "did not finish",
            f"{done[1]:.0f} s" if done else "—",
            ratio,
            counted,
            f"{median:.2f} s" if median is not None else "—",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "| step | series | PASS | INCONCLUSIVE | REGRESSION | IMPROVED | NEW |"]
    lines += ["|---|---|---|---|---|---|---|"]
    for step in found:
        kinds, regressed = verdicts(step)
        for series in sorted({s for s, _ in kinds}):
            counts = [kinds[(series, k)] for k in ("pass", "inconclusive", "regression")]
            counts += [kinds[(series, k)] for k in ("improved", "new")]
            lines.append(f"| {named[step]} | `{series}` | " + " | ".join(map(str, counts)) + " |")
        if step.name == "planted" and planted_tests:
            hit = sorted(n for n in regressed if any(t in n for t in planted_tests))
            others = sorted(n for n in regressed if not any(t in n for t in planted_tests))
            matching = ", ".join(planted_tests)
            lines += ["", f"planted tests failed: {len(hit)} (of the tests matching {matching}); "]
            lines[-1] += f"other tests failed: {len(others)}"
            lines += [f"- `{n}`" for n in others]
    return lines + rows(found, reference, named)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "out", type=Path, nargs="+", help="the folder(s) judged-at-defaults.sh wrote"
    )
    parser.add_argument("--planted-tests", default="", help="CUDAPERF_PLANT_TESTS of its run")
    args = parser.parse_args(argv)
    for out in args.out:
        if not out.is_dir():
            parser.error(f"OUTDIR: {out} is not a folder")
    planted = [t for t in args.planted_tests.split(",") if t]
    publish(table(args.out, planted), args.out[0], "defaults.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
