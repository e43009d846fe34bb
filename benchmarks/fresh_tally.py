"""What the fresh-process confirmation did in a ``bench_suite.py`` output folder (CPU suite).

For every run's JSON report (``MODE-PHASE-PLANT-INDEX.json``) it counts, per mode, phase and
plant: time records; REGRESSION as run, and how many of them a fresh process confirmed;
INCONCLUSIVE, and how many of them were a regression in the test's own process that a fresh
process did not confirm (``not confirmed in a fresh process``: without the fresh process these
would have failed); and regressions left standing because no fresh process could measure
(``not re-measured in a fresh process``, e.g. past the 20-per-process limit).

    python benchmarks/fresh_tally.py OUT_DIR [--list]

``--list`` prints each averted or unconfirmed case: the run, the test and its verdict line.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_cudaperf.report.model import TestOutcome
from pytest_cudaperf.verdict import Kind

RUN = re.compile(
    r"^(?P<mode>serial|n\d+)-(?P<phase>unchanged|planted)-(?P<plant>[^-]*)-(?P<i>\d+)$"
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args()
    tally: dict[tuple[str, str, str], Counter[str]] = defaultdict(Counter)
    cases: list[str] = []
    for path in sorted(args.out.glob("*.json")):
        match = RUN.match(path.stem)
        if not match:
            continue
        group = (match["mode"], match["phase"], match["plant"] or "-")
        count = tally[group]
        count["files"] += 1
        for data in json.loads(path.read_text())["tests"]:
            test = TestOutcome.from_json(data)
            for record in test.records:
                if not record.series.startswith("time:"):
                    continue
                kind, message = record.verdict.kind, record.verdict.message
                count["records"] += 1
                count[kind.value] += 1
                if kind is Kind.REGRESSION and message.endswith("confirmed in a fresh process"):
                    count["confirmed fresh"] += 1
                if "not confirmed in a fresh process" in message:
                    count["averted"] += 1
                    cases.append(f"{path.stem} {test.nodeid}: {message[:160]}")
            for line in test.details:
                if "not re-measured in a fresh process" in line:
                    count["unconfirmed"] += 1
                    cases.append(f"{path.stem} {test.nodeid}: {line[:160]}")
    print(
        "| mode | phase | plant | runs | time records | REGRESSION as run | of them confirmed in a "
        "fresh process | INCONCLUSIVE | of them a regression a fresh process did not confirm | "
        "regressions no fresh process measured |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (mode, phase, plant), c in sorted(tally.items()):
        print(
            f"| {mode} | {phase} | {plant} | {c['files']} | {c['records']} | {c['regression']} | "
            f"{c['confirmed fresh']} | {c['inconclusive']} | {c['averted']} | {c['unconfirmed']} |"
        )
    if args.list:
        print()
        print("\n".join(cases))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
