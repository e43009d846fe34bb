"""The table of a ``judged-at-defaults.sh`` folder: what each step cost against pytest-benchmark's
run of the same tests, and what the judged runs said.

    python benchmarks/public_suites/defaults_table.py OUTDIR [--planted-tests a,b,c]

Per step (``pytest-benchmark``, ``record``, ``unchanged-N``, ``planted``; one line each, in that
order): its exit code and wall time (the last line of ``run-on-device.sh``'s env file, ``exit RC
after N s``; a recording made in parts, its parts' summed and each named), that wall over
pytest-benchmark's, the tests JUnit counts (passed, failed, errors, skipped) and their median
pytest time; for the judged runs the verdicts of every series of their
``--cudaperf-json`` report, by series; for the planted run, how many of the planted tests
(``--planted-tests``: the ``CUDAPERF_PLANT_TESTS`` it ran with, each a part of a test id) failed
a time series as REGRESSION. Then the rows an acceptance reads: the unchanged runs' median wall
(a run cut by its time limit counted as the slowest) over pytest-benchmark's, the median pytest
time a test over every finished unchanged run's tests pooled (and each run's), the test-runs
with a time series INCONCLUSIVE or REGRESSION, why each INCONCLUSIVE time verdict was one (what
its message says: a speed-up or a failing test's regression left without a fresh process, a
change not confirmed, the host in another state or speed, within the series' band, else its CI
across the threshold), where the unchanged runs' wall goes against pytest-benchmark's (the
tests' times summed, the rest of the wall, the tests furthest over theirs, the waits for the
host's state each run made: in vain, the state back, or a single look; the tests left
INCONCLUSIVE by a speed-up whose CI rules out a regression, with their pytest time against
pytest-benchmark's), the planted run's wall over pytest-benchmark's and its waits, and each
judged run's fresh processes (their suspects and controls, and the measurements they did not
take, by why).
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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent.parent))

from _table import publish  # noqa: E402

from pytest_cudaperf.report.document import read_report  # noqa: E402
from pytest_cudaperf.run.confirm import ALONE, FAILS_ANYWAY  # noqa: E402
from pytest_cudaperf.verdict import Kind  # noqa: E402

#: the steps of judged-at-defaults.sh, in the order they run
ORDER = ("pytest-benchmark", "record", "unchanged", "planted")


def steps(out: Path) -> list[Path]:
    """The step folders of ``out``, in the order the script runs them."""

    def rank(path: Path) -> tuple[int, int]:
        found = re.fullmatch(r"(.+?)(?:-(\d+))?", path.name)
        name, index = (found.group(1), found.group(2)) if found else (path.name, None)
        return (ORDER.index(name) if name in ORDER else len(ORDER)), int(index or 0)

    return sorted((p for p in out.iterdir() if p.is_dir() and rank(p)[0] < len(ORDER)), key=rank)


def part_walls(step: Path) -> list[tuple[int, float] | None]:
    """(exit code, seconds) of each part of the step, from its env files: the step's own and,
    for a recording made in parts, those judged-at-defaults.sh moved to ``part-N`` (in order,
    the step's own last); None for a part that did not finish (a call's limit cut it)."""
    folders = sorted(
        step.glob("part-*"), key=lambda p: int(p.name[5:]) if p.name[5:].isdigit() else 0
    )
    found: list[tuple[int, float] | None] = []
    for folder in [*folders, step]:
        for env in folder.glob("*-env.txt"):
            line = re.search(r"^exit (\d+) after (\d+) s$", env.read_text(), re.MULTILINE)
            found.append((int(line.group(1)), float(line.group(2))) if line else None)
    return found


def wall(step: Path) -> tuple[int, float] | None:
    """(exit code, seconds) of the step, None where it did not finish (:func:`whole`)."""
    return whole(part_walls(step))


def whole(parts: list[tuple[int, float] | None]) -> tuple[int, float] | None:
    """(exit code, seconds) of a step made of ``parts`` (:func:`part_walls`), None where none
    finished: the first non-zero exit code of its finished parts and their seconds summed (a
    part cut by a call's limit and recorded again whole counts once, as it ended)."""
    done = [w for w in parts if w is not None]
    if not done:
        return None
    return next((rc for rc, _ in done if rc != 0), 0), sum(s for _, s in done)


@dataclass(frozen=True)
class Step:
    """What one step folder holds, each of its files read once."""

    #: its name in the table (the folder's, led by its OUTDIR's where there are several)
    name: str
    #: the script's step: pytest-benchmark, record, unchanged-N or planted
    step: str
    wall: tuple[int, float] | None
    #: JUnit outcomes, and the pytest time of each test not skipped (s), by its name
    outcomes: Counter[str]
    by_test: dict[str, float]
    #: each test of the report: its id and (series, verdict kind) of each of its records
    verdicts: list[tuple[str, list[tuple[str, str]]]]
    #: why each INCONCLUSIVE time verdict was one (:func:`reason`)
    unsure: Counter[str]
    #: the waits for the host's state or a free CPU the tests' details name (:func:`waits`):
    #: (how the wait ended, seconds) each
    waited: list[tuple[str, float]]
    #: each part's (exit code, seconds), None where cut (:func:`part_walls`): one for most steps
    parts: list[tuple[int, float] | None]
    #: each INCONCLUSIVE time measured again (:func:`measured_again`): (times, last verdict)
    again: list[tuple[int, str]]
    #: the tests with an INCONCLUSIVE time read as a speed-up whose CI rules out a regression
    #: (``Verdict.speed_up_only``), by their JUnit names (:func:`junit_name`)
    speed_ups: list[str]
    #: the fresh processes at the loops' ends (:func:`fresh_batches`): (suspects, controls,
    #: seconds or None) each
    batches: list[tuple[int, int, float | None]] = field(default_factory=list)
    #: why each measurement left out of them was (:func:`not_remeasured`)
    unmeasured: list[str] = field(default_factory=list)

    @property
    def times(self) -> list[float]:
        return list(self.by_test.values())

    @property
    def kinds(self) -> Counter[tuple[str, str]]:
        return Counter(v for _, found in self.verdicts for v in found)

    def regressed(self) -> set[str]:
        """The tests with a time series judged REGRESSION."""
        return {n for n, found in self.verdicts if "regression" in _time_kinds(found)}


def _time_kinds(found: list[tuple[str, str]]) -> set[str]:
    return {kind for series, kind in found if not series.startswith("memory")}


#: why a time verdict read INCONCLUSIVE, from what its message says: the first that matches
REASONS = (
    (ALONE, "a speed-up, no fresh process of its own"),
    (FAILS_ANYWAY, "a regression of a test that fails anyway"),
    ("not confirmed", "a change not confirmed"),
    ("judged only with the host as fast as at recording", "the host in another state"),
    ("the series cannot support the tolerance", "within the series' band"),
    ("than when the baseline was recorded", "the host's speed"),
)


def reason(message: str) -> str:
    """Why an INCONCLUSIVE time verdict was one (:data:`REASONS`; else its CI reached across
    the threshold)."""
    return next((why for said, why in REASONS if said in message), "its CI across the threshold")


#: how a wait for the host's state (or for a free CPU) ended, from the line it left in the test's
#: details (``run.hoststate``'s ``describe``): the first that matches
WAITS = (
    (re.compile(r"waited ([0-9.]+) s for .*, in vain"), "in vain"),
    (re.compile(r"waited ([0-9.]+) s for .*, then (?:measured|took)"), "back"),
    (re.compile(r"a look of ([0-9.]+) s found"), "looked once"),
)


def waits(details: tuple[str, ...] | list[str]) -> list[tuple[str, float]]:
    """The waits a test's details name: (how it ended, seconds) each (:data:`WAITS`)."""
    found = []
    for line in details:
        for pattern, ended in WAITS:
            match = pattern.search(line)
            if match:
                found.append((ended, float(match.group(1))))
                break
    return found


#: the line a time measured again leaves in its test's details (``run.judging.measured_again``)
AGAIN = re.compile(r"measured again (once|twice|(\d+) times): .* (\w+)(?: \(\d+x the budget\))?$")


def measured_again(details: tuple[str, ...] | list[str]) -> list[tuple[int, str]]:
    """The times a test's details say were measured again: (how often, the last verdict) each."""
    found = []
    for line in details:
        match = AGAIN.search(line)
        if match:
            times = {"once": 1, "twice": 2}.get(match.group(1)) or int(match.group(2))
            found.append((times, match.group(3)))
    return found


def junit_name(nodeid: str) -> str:
    """A report's node id as JUnit names the test (``classname::name``):
    ``tests/nn/test_x.py::TestA::test_f[a]`` is ``tests.nn.test_x.TestA::test_f[a]``."""
    *path, test = nodeid.split("::")
    module = path[0].removesuffix(".py").replace("/", ".")
    return f"{'.'.join([module, *path[1:]])}::{test}"


def read_step(path: Path, name: str) -> Step:
    """The step folder ``path``, shown as ``name``."""
    outcomes: Counter[str] = Counter()
    by_test = {}
    for junit in path.glob("*-junit.xml"):
        for case in ET.parse(junit).getroot().iter("testcase"):
            tags = {child.tag for child in case}
            outcome = next((k for k in ("failure", "error", "skipped") if k in tags), "passed")
            outcomes[outcome] += 1
            if outcome != "skipped":
                by_test[f"{case.get('classname')}::{case.get('name')}"] = float(
                    case.get("time", "0")
                )
    report = path / "report.json"
    tests = read_report(report).tests if report.exists() else []
    verdicts = [
        (test.nodeid, [(j.record.series.split("/")[0], j.verdict.kind.value) for j in test.records])
        for test in tests
    ]
    unsure = Counter(
        reason(j.verdict.message)
        for test in tests
        for j in test.records
        if j.verdict.kind is Kind.INCONCLUSIVE and not j.record.series.startswith("memory")
    )
    waited = [w for test in tests for w in waits(test.details)]
    again = [a for test in tests for a in measured_again(test.details)]
    speed_ups = [
        junit_name(test.nodeid)
        for test in tests
        if any(
            j.verdict.kind is Kind.INCONCLUSIVE and j.verdict.speed_up_only
            for j in test.records
            if not j.record.series.startswith("memory")
        )
    ]
    parts = part_walls(path)
    return Step(
        name,
        path.name,
        whole(parts),
        outcomes,
        by_test,
        verdicts,
        unsure,
        waited,
        parts,
        again,
        speed_ups,
        fresh_batches(path),
        [why for test in tests for why in not_remeasured(test.details)],
    )


#: the line a test loop's fresh process starts with (``run.confirm.progress_line``)
BATCH = re.compile(
    r"cudaperf: ((?:confirming|measuring) .*?) in a fresh process"
    r"(?:, beside (\d+) tests? that passed)?"
)
#: the tests a fresh process's line names: suspected changes, and tests whose change the host's
#: state left undecided (``run.confirm.progress_line``)
BATCH_TESTS = re.compile(r"(?:confirming|measuring) (\d+)")
#: the line a fresh process ends with: how long it took (``run.child._Told.close``)
BATCH_END = re.compile(r"cudaperf: the fresh process measured \d+ of \d+ tests in (\d+) s")
#: a measurement the fresh process did not take, and why (``run.confirm.fresh_verdict``)
UNMEASURED = re.compile(r"not re-measured in a fresh process: (.*)")


def fresh_batches(step: Path) -> list[tuple[int, int, float | None]]:
    """The fresh processes the step's pytest log names: (suspects, controls, seconds) each, a
    test whose change the host's state left undecided counted as a suspect; seconds None where
    the log does not say (a process that measured nothing, or a plugin before it said)."""
    found: list[tuple[int, int, float | None]] = []
    for log in sorted(step.glob("*.log")):
        for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
            if match := BATCH.search(line):
                tests = sum(int(n) for n in BATCH_TESTS.findall(match[1]))
                found.append((tests, int(match[2] or 0), None))
            elif (end := BATCH_END.search(line)) and found and found[-1][2] is None:
                found[-1] = (*found[-1][:2], float(end[1]))
    return found


def not_remeasured(details: tuple[str, ...] | list[str]) -> list[str]:
    """Why each measurement of a test's ``details`` was not taken in a fresh process, its
    numbers as N and the process's last line left out."""
    return [
        re.sub(r"\d+", "N", match[1].split(" (")[0])
        for line in details
        if (match := UNMEASURED.search(line))
    ]


def _parts(step: Step) -> str:
    """`` (3 parts: 250 s, 343 s, 345 s; 1 cut)`` for a step made in parts, else nothing."""
    if len(step.parts) < 2:
        return ""
    ended = [f"{w[1]:.0f} s" for w in step.parts if w is not None]
    cut = len(step.parts) - len(ended)
    return f" ({len(ended)} parts: {', '.join(ended)}{f'; {cut} cut' if cut else ''})"


def _ratio(seconds: float, reference: tuple[int, float] | None) -> str:
    return f" = {seconds / reference[1]:.2f}x" if reference and reference[1] > 0 else ""


def rows(found: list[Step], reference: tuple[int, float] | None) -> list[str]:
    """The lines an acceptance reads (see the module's docstring)."""
    unchanged = [s for s in found if s.step.startswith("unchanged")]
    finished = [s for s in unchanged if s.wall]
    lines = ["", "## The rows", ""]
    if unchanged:
        walls = sorted(s.wall[1] for s in finished if s.wall)
        walls += [math.inf] * (len(unchanged) - len(finished))
        middle = statistics.median(walls)
        said = f"{middle:.0f} s{_ratio(middle, reference)}" if math.isfinite(middle) else "cut"
        lines.append(
            f"- unchanged runs: {len(finished)} finished, {len(unchanged) - len(finished)} cut; "
            f"median wall {said}"
            + (f" (pytest-benchmark {reference[1]:.0f} s)" if reference else "")
        )
        per_run = [s.times for s in finished if s.times]
        if per_run:
            medians = [statistics.median(t) for t in per_run]
            line = "- pytest time a test, finished unchanged runs pooled: median "
            line += f"{statistics.median([x for t in per_run for x in t]):.2f} s "
            line += f"(each run's median {min(medians):.2f}–{max(medians):.2f} s)"
            theirs = [t for s in found if s.step == "pytest-benchmark" for t in s.times]
            if theirs:
                line += f"; pytest-benchmark {statistics.median(theirs):.2f} s"
            lines.append(line)
        kinds = [_time_kinds(v) for s in finished for _, v in s.verdicts]
        if kinds:
            unsure = sum("inconclusive" in k for k in kinds)
            failed = sum("regression" in k for k in kinds)
            lines.append(
                f"- test-runs with a time series INCONCLUSIVE: {unsure} of {len(kinds)} "
                f"({unsure / len(kinds):.1%}); REGRESSION: {failed}"
            )
            reasons = sum((s.unsure for s in finished), Counter[str]())
            said = ", ".join(f"{r} {n}" for r, n in reasons.most_common())
            lines.append(f"- INCONCLUSIVE time verdicts by why, runs pooled: {said or 'none'}")
    benchmark = next((s for s in found if s.step == "pytest-benchmark" and s.wall), None)
    if benchmark is not None and finished:
        lines += where_it_goes([s for s in finished if s.by_test], benchmark)
    for s in found:
        if s.step == "planted" and s.wall:
            lines.append(f"- {s.name}: wall {s.wall[1]:.0f} s{_ratio(s.wall[1], reference)}")
    judged = [s for s in found if s.step.startswith("unchanged") or s.step == "planted"]
    return lines + waits_line([s for s in judged if s.step == "planted"]) + fresh_line(judged)


def fresh_line(runs: list[Step]) -> list[str]:
    """The fresh processes at the loops' ends of each judged run: their suspects and controls,
    and the measurements they did not take, by why (none: no line)."""

    def told(s: Step) -> str:
        said = [
            f"{n} suspects beside {c} controls" + (f" ({sec:.0f} s)" if sec is not None else "")
            for n, c, sec in s.batches
        ]
        left = Counter(s.unmeasured)
        said += [f"{n} measurements not taken there: {why}" for why, n in left.items()]
        return ", ".join(said)

    return per_run("fresh processes at the loop's end", runs, told)


#: the tests named as costing most over pytest-benchmark's time
MOST = 5


def where_it_goes(runs: list[Step], theirs: Step) -> list[str]:
    """Where the unchanged runs' wall goes against pytest-benchmark's: the tests' pytest times
    summed and the rest of the wall (start-up, collection, what runs after the last test), the
    median over the runs; and the tests whose time is furthest over pytest-benchmark's, each by
    its median over the runs."""
    assert theirs.wall is not None
    if not runs:
        return []
    ours = statistics.median(sum(s.times) for s in runs)
    rest = statistics.median(s.wall[1] - sum(s.times) for s in runs if s.wall)
    base = sum(theirs.times)
    lines = [
        f"- the tests' pytest times summed: {ours:.1f} s a run against pytest-benchmark's "
        f"{base:.1f} s; the rest of the wall (start-up, collection, what runs after the last "
        f"test): {rest:.1f} s against {theirs.wall[1] - base:.1f} s"
    ]
    over = {
        name: statistics.median(s.by_test[name] for s in runs if name in s.by_test) - their
        for name, their in theirs.by_test.items()
        if any(name in s.by_test for s in runs)
    }
    most = sorted(over, key=lambda n: -over[n])[:MOST]
    named = ", ".join(
        f"`{n.rsplit('::', 1)[-1]}` {theirs.by_test[n]:.2f} → {theirs.by_test[n] + over[n]:.2f} s"
        for n in most
    )
    return [
        *lines,
        f"- most over pytest-benchmark's time (pytest-benchmark → median of the runs): {named}",
        *waits_line(runs),
        *again_line(runs),
        *speed_up_line(runs, theirs),
    ]


def per_run(head: str, runs: list[Step], told: Callable[[Step], str]) -> list[str]:
    """One line, ``- HEAD: unchanged-1: …; unchanged-2: …``, of what ``told`` says of each run
    (none where it says nothing of any)."""
    said = [f"{s.name}: {line}" for s in runs if (line := told(s))]
    return [f"- {head}: {'; '.join(said)}"] if said else []


def speed_up_line(runs: list[Step], theirs: Step) -> list[str]:
    """The tests of each unchanged run that ended with an INCONCLUSIVE speed-up whose CI rules
    out a regression: how many, their pytest time and pytest-benchmark's (none: no line)."""

    def told(s: Step) -> str:
        if not s.speed_ups:
            return ""
        ours = sum(s.by_test.get(n, 0.0) for n in s.speed_ups)
        base = sum(theirs.by_test.get(n, 0.0) for n in s.speed_ups)
        return f"{len(s.speed_ups)} ({ours:.1f} s against {base:.1f} s)"

    head = "tests left INCONCLUSIVE by a speed-up that rules out a regression"
    return per_run(head, runs, told)


def summed(taken: list[float]) -> str:
    """``26.1 s`` for one wait, ``26.1 s, the longest 13.1 s`` for several."""
    said = f"{sum(taken):.1f} s"
    return f"{said}, the longest {max(taken):.1f} s" if len(taken) > 1 else said


def again_line(runs: list[Step]) -> list[str]:
    """The INCONCLUSIVE times measured again in each unchanged run: how many, how many
    measurements that took, and how the last ones read (none: no line)."""

    def told(s: Step) -> str:
        if not s.again:
            return ""
        ended = Counter(kind for _, kind in s.again)
        how = ", ".join(f"{n} {kind}" for kind, n in sorted(ended.items()))
        taken = sum(times for times, _ in s.again)
        return f"{len(s.again)} ({taken} measurements; then {how})"

    return per_run("INCONCLUSIVE times measured again", runs, told)


def waits_line(runs: list[Step]) -> list[str]:
    """The waits for the host's state in each of ``runs``: how many ended each way, the seconds
    they took and the longest (none: no line)."""

    def told(s: Step) -> str:
        by: dict[str, list[float]] = {}
        for ended, seconds in s.waited:
            by.setdefault(ended, []).append(seconds)
        return ", ".join(f"{len(v)} {k} ({summed(v)})" for k, v in sorted(by.items()))

    return per_run("waits for the host's state", runs, told)


def table(outs: list[Path], planted_tests: list[str]) -> list[str]:
    several = len(outs) > 1
    found = [
        read_step(p, f"{out.name}/{p.name}" if several else p.name)
        for out in outs
        for p in steps(out)
    ]
    reference = next((s.wall for s in found if s.step == "pytest-benchmark" and s.wall), None)
    lines = [f"# {', '.join(o.name for o in outs)}: judged at both tools' defaults", ""]
    lines += ["| step | exit | wall | vs pytest-benchmark | tests | median a test |"]
    lines += ["|---|---|---|---|---|---|"]
    for step in found:
        done = step.wall
        ratio = (
            f"{done[1] / reference[1]:.2f}x"
            if done and reference and reference[1] > 0 and step.step != "pytest-benchmark"
            else "—"
        )
        counted = ", ".join(f"{n} {k}" for k, n in sorted(step.outcomes.items())) or "—"
        cells = [
            step.name,
            str(done[0]) if done else "did not finish",
            (f"{done[1]:.0f} s" if done else "—") + _parts(step),
            ratio,
            counted,
            f"{statistics.median(step.times):.2f} s" if step.times else "—",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "| step | series | PASS | INCONCLUSIVE | REGRESSION | IMPROVED | NEW |"]
    lines += ["|---|---|---|---|---|---|---|"]
    for step in found:
        kinds = step.kinds
        for series in sorted({s for s, _ in kinds}):
            counts = [kinds[(series, k)] for k in ("pass", "inconclusive", "regression")]
            counts += [kinds[(series, k)] for k in ("improved", "new")]
            lines.append(f"| {step.name} | `{series}` | " + " | ".join(map(str, counts)) + " |")
        if step.step == "planted" and planted_tests:
            regressed = step.regressed()
            planted = {n for n, _ in step.verdicts if any(t in n for t in planted_tests)}
            others = sorted(regressed - planted)
            matching = ", ".join(planted_tests)
            hit = len(regressed & planted)
            lines += ["", f"planted tests with a time REGRESSION: {hit} of {len(planted)} "]
            lines[-1] += f"(the tests matching {matching}); other tests: {len(others)}"
            lines += [f"- `{n}`" for n in others]
    return lines + rows(found, reference)


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
