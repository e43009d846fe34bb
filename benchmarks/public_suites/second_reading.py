"""Replay a rule the plugin does not have, over stored judged runs: a host-bound time
(``time:host``) left INCONCLUSIVE with its median beyond its threshold (the tolerance, raised by
the series' noise), its CI's low end above the tolerance, and not held back for the host's state
(a *candidate*), failed where a second process reads its median beyond the threshold too.

The plugin's fresh process is not replayed: the second process stands in as the same test's
reading in any other run of the same kind in the folder (unchanged against unchanged, one plant
against the same plant), which ran minutes apart, not right after, and without controls. So the
catches are what the rule could add, and the unchanged pairs what it could cost, before the
controls withdraw what the host's state explains. A verdict counts as held back for the host's
state where its message or its test's details say so (the words of ``verdict.py`` and
``run/hoststate.py`` below).

Folders of either layout: ``bench_suite.py --suite host`` (``serial-unchanged-*.json``,
``serial-planted-PLANT-*.json``) and ``judged-at-defaults.sh`` (``unchanged-*/report.json``,
``planted/report.json``). One Markdown row per folder and kind of run.

    python benchmarks/public_suites/second_reading.py FOLDER [FOLDER ...]
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

#: what a verdict held back for the host's state says, in its message or its test's details
HELD = (
    "judged only with the host as fast as at recording",
    "not judged (--cudaperf-state-wait)",
    "run again when the machine is as fast as when it was recorded",
)


@dataclass(frozen=True)
class Reading:
    """One test's final ``time:host`` verdict in one run."""

    kind: str
    ratio: float
    threshold: float
    tolerance: float
    ci_low: float
    held: bool

    @property
    def beyond(self) -> bool:
        """Its median lies beyond its threshold."""
        return self.ratio - 1 > self.threshold

    @property
    def candidate(self) -> bool:
        """Left INCONCLUSIVE beyond its threshold, its CI above the tolerance, not held back."""
        return (
            self.kind == "inconclusive"
            and not self.held
            and self.beyond
            and self.ci_low > 1 + self.tolerance
        )


def readings(report: Path) -> dict[str, Reading]:
    """Each test's ``time:host`` reading in one JSON report (``--cudaperf-json``)."""
    found: dict[str, Reading] = {}
    for test in json.loads(report.read_text())["tests"]:
        details = " ".join(test.get("details", []))
        for record in test["records"]:
            verdict = record["verdict"]
            if record["series"] != "time:host" or verdict.get("ratio") is None:
                continue
            text = verdict["message"] + " " + details
            found[test["nodeid"]] = Reading(
                verdict["kind"],
                float(verdict["ratio"]),
                float(verdict.get("threshold") or 0.0),
                float(verdict.get("tolerance") or 0.0),
                float((verdict.get("ci") or [0.0])[0]),
                any(words in text for words in HELD),
            )
    return found


def runs_of(folder: Path) -> dict[str, list[Path]]:
    """The folder's JSON reports by kind of run: ``unchanged`` and ``planted[ PLANT]``."""
    kinds: dict[str, list[Path]] = defaultdict(list)
    for path in sorted(folder.glob("serial-*.json")):
        match = re.fullmatch(r"serial-(unchanged|planted-(.+))-\d+(-\d+)?\.json", path.name)
        if match:
            kinds["unchanged" if match[2] is None else f"planted {match[2]}"].append(path)
    kinds["unchanged"] += sorted(folder.glob("unchanged-*/report.json"))
    kinds["planted"] += sorted(folder.glob("planted/report.json"))
    return {kind: paths for kind, paths in kinds.items() if paths}


def tally(runs: Sequence[dict[str, Reading]]) -> tuple[int, int, int, int]:
    """Over runs of one kind: verdicts, REGRESSIONs, candidates, and candidates whose test read
    beyond its threshold in another of the runs."""
    verdicts = regressions = candidates = seconded = 0
    for i, run in enumerate(runs):
        for nodeid, reading in run.items():
            verdicts += 1
            regressions += reading.kind == "regression"
            if reading.candidate:
                candidates += 1
                others = (r[nodeid] for j, r in enumerate(runs) if j != i and nodeid in r)
                seconded += any(other.beyond for other in others)
    return verdicts, regressions, candidates, seconded


def rows(folders: Sequence[Path]) -> list[str]:
    """The Markdown table: one row per folder and kind of run."""
    lines = [
        "| folder, kind | runs | host-bound verdicts | REGRESSION | candidates "
        "| beyond in another |",
        "|---|---|---|---|---|---|",
    ]
    for folder in folders:
        for kind, paths in runs_of(folder).items():
            verdicts, regressions, candidates, seconded = tally([readings(p) for p in paths])
            alone = " (one run: no other)" if len(paths) < 2 else ""
            lines.append(
                f"| {folder.name}, {kind} | {len(paths)} | {verdicts} | {regressions} | "
                f"{candidates} | {seconded}{alone} |"
            )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path, help="judged runs' output folders")
    args = parser.parse_args(argv)
    missing = [str(f) for f in args.folders if not f.is_dir()]
    if missing:
        parser.error(f"not a folder: {', '.join(missing)}")
    print("\n".join(rows(args.folders)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
