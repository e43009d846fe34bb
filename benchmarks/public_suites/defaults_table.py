"""The table of a ``judged-at-defaults.sh`` folder: what each step cost against pytest-benchmark's
run of the same tests, and what the judged runs said.

    python benchmarks/public_suites/defaults_table.py OUTDIR [--planted-tests a,b,c]

Per step (``pytest-benchmark``, ``record``, ``unchanged-N``, ``planted``; one line each, in that
order): its exit code and wall time (the last line of ``run-on-device.sh``'s env file, ``exit RC
after N s``), that wall over pytest-benchmark's, the tests JUnit counts (passed, failed, errors,
skipped) and their median pytest time; for the judged runs the verdicts of every series of their
``--cudaperf-json`` report, by series; for the planted run, how many of the planted tests
(``--planted-tests``: the ``CUDAPERF_PLANT_TESTS`` it ran with, each a part of a test id) failed
a time series as REGRESSION. Writes ``OUTDIR/defaults.md`` and prints it.
"""

from __future__ import annotations

import argparse
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


def junit(step: Path) -> tuple[Counter[str], float | None]:
    """The outcomes of the step's JUnit file and the median time of a test (s)."""
    outcomes: Counter[str] = Counter()
    times = []
    for path in step.glob("*-junit.xml"):
        for case in ET.parse(path).getroot().iter("testcase"):
            kinds = {child.tag for child in case}
            outcome = next((k for k in ("failure", "error", "skipped") if k in kinds), "passed")
            outcomes[outcome] += 1
            if outcome != "skipped":
                times.append(float(case.get("time", "0")))
    return outcomes, statistics.median(times) if times else None


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


def table(out: Path, planted_tests: list[str]) -> list[str]:
    found = steps(out)
    reference = wall(out / "pytest-benchmark")
    lines = [f"# {out.name}: judged at both tools' defaults", ""]
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
            step.name,
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
            lines.append(f"| {step.name} | `{series}` | " + " | ".join(map(str, counts)) + " |")
        if step.name == "planted" and planted_tests:
            hit = sorted(n for n in regressed if any(t in n for t in planted_tests))
            others = sorted(n for n in regressed if not any(t in n for t in planted_tests))
            matching = ", ".join(planted_tests)
            lines += ["", f"planted tests failed: {len(hit)} (of the tests matching {matching}); "]
            lines[-1] += f"other tests failed: {len(others)}"
            lines += [f"- `{n}`" for n in others]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the folder judged-at-defaults.sh wrote")
    parser.add_argument("--planted-tests", default="", help="CUDAPERF_PLANT_TESTS of its run")
    args = parser.parse_args(argv)
    if not args.out.is_dir():
        parser.error(f"OUTDIR: {args.out} is not a folder")
    planted = [t for t in args.planted_tests.split(",") if t]
    publish(table(args.out, planted), args.out, "defaults.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
