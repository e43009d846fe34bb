"""``bench_bisect.py --smoke``'s stand-in for the pytest processes of the kernel repository: a
real one imports torch (seconds of CPU each) and a bisection starts dozens. It reads the
checked-out ``kernels/ops.py`` as the test would run it: a kernel's time is its element count
(``SIZES``) at 1 ms per 2^20 elements, with 1% noise, so the padding commit is slower by its
padding and every neutral commit is not. It writes the ``--cudaperf-json`` report the process
was asked for (with a one-op breakdown where ``--cudaperf-breakdown=auto`` asks for one).

    python benchmarks/_bisect_stand_in.py ARGS...   # ``cudaperf ARGS``, pytest stood in for

Everything else is the package's own: ``cudaperf bisect``'s worktrees, ab's pairs, its
confirmation and kernel diff, the history's step and its confirmation.
"""

from __future__ import annotations

import random
import re
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_cudaperf.ab.sides import Side  # noqa: E402
from pytest_cudaperf.breakdown.model import Breakdown, Kernel  # noqa: E402
from pytest_cudaperf.cli import main  # noqa: E402
from pytest_cudaperf.keys import SeriesKey  # noqa: E402
from pytest_cudaperf.report.document import Report, write_report  # noqa: E402
from pytest_cudaperf.report.model import JudgedRecord, TestOutcome  # noqa: E402
from pytest_cudaperf.series import Record, Recording  # noqa: E402
from pytest_cudaperf.verdict import Kind, Verdict  # noqa: E402

#: the series every stood-in process measures (a CPU run's)
SERIES = "time:wall"
DEVICE_CLASS = "CPU stand-in"
#: the op a kernel's breakdown names
OP = "aten::copy_"


def kernel_ms(tree: Path, test: str) -> float:
    """The time of ``test`` (``tests/test_kernels.py::test_NAME``) in the checkout at ``tree``:
    its kernel's ``SIZES`` entry in ``kernels/ops.py``, 1 ms per 2^20 elements."""
    name = test.rsplit("::test_", 1)[-1]
    source = (tree / "kernels" / "ops.py").read_text()
    found = re.search(rf'^\s*"{name}": (1 << \d+|\d+),$', source, re.MULTILINE)
    if found is None:
        raise SystemExit(f"_bisect_stand_in: no size for {name!r} in {tree}/kernels/ops.py")
    size = found.group(1)
    elements = 1 << int(size.split("<<")[1]) if "<<" in size else int(size)
    return elements / 2**20


def report(tree: Path, tests: Sequence[str], rng: random.Random, breakdown: bool) -> Report:
    """One process's report: each test's time at the checkout ``tree``."""
    outcomes = []
    for nodeid in tests:
        ms = kernel_ms(tree, nodeid) * rng.gauss(1, 0.01)
        profile = None
        if breakdown:
            us = ms * 1000
            profile = Breakdown("cpu", 1, us, us, (Kernel(OP, OP, 1.0, us),)).to_json()
        recording = Recording("2026-11-27", ms, 0.01, 20)
        record = Record(SeriesKey(nodeid, ""), SERIES, DEVICE_CLASS, "ms", recording, {}, profile)
        outcomes.append(TestOutcome(nodeid, records=(JudgedRecord(record, Verdict(Kind.NEW)),)))
    return Report(tests=tuple(outcomes))


def history_report(tree: Path, test: str, commit: str, when: str, rng: random.Random) -> Report:
    """One history run's report of ``test`` at ``commit`` (checked out at ``tree``)."""
    found = report(tree, [test], rng, breakdown=False)
    source = {"commit": commit, "dirty": False, "branch": "main"}
    return Report(tests=found.tests, environment={"source": source, "recorded_at": when})


class CheckedOutKernels:
    """The ab runner: one side's pytest process, stood in for."""

    def __init__(self) -> None:
        self.rng = random.Random(7)

    def __call__(self, side: Side, args: Sequence[str]) -> tuple[int, str]:
        target = next(a.split("=", 1)[1] for a in args if a.startswith("--cudaperf-json="))
        skip = {a.split("=", 1)[1] for a in args if a.startswith("--cudaperf-deselect=")}
        chosen = [a for a in args if "::" in a and not a.startswith("-") and a not in skip]
        breakdown = "--cudaperf-breakdown=auto" in args
        write_report(Path(target), report(side.root, chosen, self.rng, breakdown))
        return 0, f"{len(chosen)} passed (stood in for)"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], ab_runner=CheckedOutKernels()))
