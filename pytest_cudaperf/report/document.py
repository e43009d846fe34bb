"""The run's report document, typed and versioned: every test's outcome, what the run did to the
baselines, and the series it found obsolete or drifting. It is the one reader and writer of the
``--cudaperf-json`` file (:meth:`Report.to_json`, :func:`read_report`), the fresh process's private
report and what ``cudaperf`` reads and merges; every renderer (terminal, GitHub, HTML) reads a
:class:`Report`. The layout is documented in ``docs/reports.md``.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pytest_cudaperf import atomic
from pytest_cudaperf.memory.sweep import SweepStatus
from pytest_cudaperf.report.fields import (
    Json,
    ReportError,
    get,
    items,
    number,
    plain,
    strings,
    to_object,
)
from pytest_cudaperf.report.model import LIMITS, FailureKind, JudgedRecord, TestOutcome
from pytest_cudaperf.store.baselines import UpdateSummary
from pytest_cudaperf.verdict import Kind

#: the report document's version; version 4 added the leak sweep (``leak_sweep``, each test's
#: ``sweep``), a time's ``roofline``, ``energy:call`` records and their ``energy``; versions 2
#: (no ``peak``, ``rank``, ``bandwidth`` of their own, a side-by-side
#: ``html`` in ``explanation_data``) and 3 are read as well
SCHEMA = 4
READABLE = (2, 3, 4)


# --- the run's report ----------------------------------------------------------------------------


def _update_to_json(update: UpdateSummary) -> dict[str, Json]:
    return {
        "path": str(update.path),
        "added": list(update.added),
        "changed": list(update.changed),
        "afresh": list(update.afresh),
        "unchanged": update.unchanged,
        "pruned": list(update.pruned),
        "blind": list(update.blind),
    }


def _update_from_json(data: Json, where: str) -> UpdateSummary:
    d = to_object(data, where)
    return UpdateSummary(
        path=Path(get(d, "path", str, where)),
        added=list(strings(d, "added", where)),
        changed=list(strings(d, "changed", where)),
        afresh=list(strings(d, "afresh", where)),
        unchanged=int(d.get("unchanged", 0)),
        pruned=list(strings(d, "pruned", where)),
        blind=list(strings(d, "blind", where)),
    )


@dataclass(frozen=True)
class SweepSummary:
    """The leak sweep over a run: tests checked (clean or leaking), those leaking and those left
    unchecked with why, those that allocated nothing, and the seconds the sweep added."""

    mode: str
    clean: int = 0
    leaking: tuple[TestOutcome, ...] = ()
    unchecked: tuple[tuple[str, str], ...] = ()
    untouched: int = 0
    #: tests that grew in their first pass and were re-run under the full protocol
    rechecked: int = 0
    seconds: float = 0.0

    @property
    def checked(self) -> int:
        return self.clean + len(self.leaking)

    @classmethod
    def of(cls, mode: str, tests: Sequence[TestOutcome]) -> SweepSummary:
        swept = [t for t in tests if t.sweep is not None]
        status = Counter(t.sweep.status for t in swept if t.sweep)
        return cls(
            mode=mode,
            clean=status[SweepStatus.CLEAN],
            leaking=tuple(t for t in swept if t.sweep and t.sweep.status is SweepStatus.LEAK),
            unchecked=tuple(
                (t.nodeid, t.sweep.reason)
                for t in swept
                if t.sweep and t.sweep.status is SweepStatus.UNCHECKED
            ),
            untouched=status[SweepStatus.UNTOUCHED],
            rechecked=sum(1 for t in swept if t.sweep and t.sweep.rechecked),
            seconds=sum(t.sweep.seconds for t in swept if t.sweep),
        )

    def to_json(self) -> dict[str, Json]:
        """For people and tools reading the file; a reader derives it from the tests."""
        return {
            "mode": self.mode,
            "checked": self.checked,
            "clean": self.clean,
            "leaking": [t.nodeid for t in self.leaking],
            "unchecked": dict(self.unchecked),
            "untouched": self.untouched,
            "rechecked": self.rechecked,
            "seconds": round(self.seconds, 3),
        }


def _sweep_mode(data: Json, where: str) -> str | None:
    if data is None:
        return None
    mode = get(to_object(data, where), "mode", str, where)
    if mode not in ("fail", "report"):
        raise ReportError(f"{where}.mode: expected 'fail' or 'report', got {mode!r}")
    return mode


@dataclass(frozen=True)
class Report:
    """One run's report: every test's outcome, what the run did to the baselines, and the series
    it found obsolete or drifting."""

    tests: tuple[TestOutcome, ...] = ()
    run_id: str = ""
    baseline_dir: str = ""
    #: where the run ran: torch, CUDA, driver, GPUs, CPU, Python
    environment: Mapping[str, Json] = field(default_factory=dict)
    updates: tuple[UpdateSummary, ...] = ()
    #: by device class: series whose tests no longer exist
    obsolete: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: series whose baseline recordings climbed step by step: ``key {series}: drifting …``
    drifting: tuple[str, ...] = ()
    #: did the run see every test of the files it ran (no deselection, crash or abort)?
    complete_run: bool = True
    #: a prune was asked for but the run was partial
    pruned_refused: bool = False
    #: tests whose body failed (measured or not): not the plugin's verdicts, the tests' own
    failed_bodies: int = 0
    #: the run was interrupted (Ctrl-C): an update kept what the finished tests recorded
    interrupted: bool = False
    #: the leak sweep's mode (``fail`` or ``report``; None: the run did not sweep)
    leak_sweep: str | None = None
    schema: int = SCHEMA

    def sweep_summary(self) -> SweepSummary | None:
        """The leak sweep's summary (None: the run did not sweep)."""
        return SweepSummary.of(self.leak_sweep, self.tests) if self.leak_sweep else None

    def records(self) -> list[JudgedRecord]:
        return [r for t in self.tests for r in t.records]

    def judged(self) -> list[TestOutcome]:
        """Outcomes whose body passed (their failures are the plugin's), by test id."""
        return [t for t in self.tests if t.body_passed]

    def counts(self) -> dict[str, int]:
        records = self.records()
        kinds = Counter(r.verdict.kind for r in records)
        peaks = sum(1 for r in records if r.is_peak)
        energies = sum(1 for r in records if r.is_energy)
        return {
            "measured": len(records),
            "times": len(records) - peaks - energies,
            "peaks": peaks,
            "energies": energies,
            "regression": kinds[Kind.REGRESSION],
            "improved": kinds[Kind.IMPROVED],
            "new": kinds[Kind.NEW],
            "inconclusive": kinds[Kind.INCONCLUSIVE],
            "leak": sum(1 for t in self.tests if t.has(FailureKind.LEAK)),
        } | {name: sum(1 for t in self.tests if t.has(kind)) for kind, name in LIMITS.items()}

    def to_json(self) -> dict[str, Json]:
        return {
            "schema": SCHEMA,
            "run_id": self.run_id,
            "baseline_dir": self.baseline_dir,
            "environment": plain(self.environment),
            "summary": self.counts(),
            "tests": [t.to_json() for t in self.tests],
            "updates": [_update_to_json(u) for u in self.updates],
            "obsolete": {c: list(keys) for c, keys in self.obsolete.items()},
            "drifting": list(self.drifting),
            "complete_run": self.complete_run,
            "pruned_refused": self.pruned_refused,
            "failed_bodies": self.failed_bodies,
            "interrupted": self.interrupted,
            "leak_sweep": summary.to_json() if (summary := self.sweep_summary()) else None,
        }

    @classmethod
    def from_json(cls, data: Json, where: str = "report") -> Report:
        d = to_object(data, where)
        if "entries" in d and "tests" not in d:  # a baseline's schema may be a report's too
            raise ReportError(f"{where}: a baseline file, not a --cudaperf-json report")
        schema = d.get("schema")
        if isinstance(schema, int) and schema > SCHEMA:
            raise ReportError(
                f"{where}: report schema {schema} was written by a newer pytest-cudaperf (this "
                f"one reads {', '.join(map(str, READABLE))}); upgrade pytest-cudaperf"
            )
        if schema not in READABLE:
            raise ReportError(f"{where}: not a --cudaperf-json report (schema {schema!r})")
        obsolete = to_object(d.get("obsolete", {}), f"{where}.obsolete")
        return cls(
            tests=tuple(
                sorted(items(d, "tests", where, TestOutcome.from_json), key=lambda t: t.nodeid)
            ),
            run_id=str(d.get("run_id", "")),
            baseline_dir=str(d.get("baseline_dir") or ""),
            environment=to_object(d.get("environment", {}), f"{where}.environment"),
            updates=items(d, "updates", where, _update_from_json),
            obsolete={str(c): strings(obsolete, c, f"{where}.obsolete") for c in obsolete},
            drifting=strings(d, "drifting", where),
            complete_run=bool(d.get("complete_run", True)),
            pruned_refused=bool(d.get("pruned_refused", False)),
            failed_bodies=int(number(d, "failed_bodies", where)) if "failed_bodies" in d else 0,
            interrupted=bool(d.get("interrupted", False)),
            leak_sweep=_sweep_mode(d.get("leak_sweep"), f"{where}.leak_sweep"),
        )


def merge_reports(reports: Sequence[Report]) -> Report:
    """One report of several shards' (disjoint tests; a test in two keeps the last one's)."""
    tests = {t.nodeid: t for report in reports for t in report.tests}
    obsolete: dict[str, tuple[str, ...]] = {}
    for report in reports:
        for device_class, keys in report.obsolete.items():
            obsolete[device_class] = tuple(sorted({*obsolete.get(device_class, ()), *keys}))
    first = reports[0]
    return Report(
        tests=tuple(tests[k] for k in sorted(tests)),
        run_id=first.run_id,
        baseline_dir=first.baseline_dir,
        environment=first.environment,
        updates=tuple(u for r in reports for u in r.updates),
        obsolete=obsolete,
        drifting=tuple(dict.fromkeys(line for r in reports for line in r.drifting)),
        complete_run=all(r.complete_run for r in reports),
        pruned_refused=any(r.pruned_refused for r in reports),
        failed_bodies=sum(r.failed_bodies for r in reports),
        interrupted=any(r.interrupted for r in reports),
        leak_sweep=next((r.leak_sweep for r in reports if r.leak_sweep), None),
    )


def dumps(report: Report) -> str:
    """The report's JSON text: sorted keys, two-space indent, final newline."""
    return json.dumps(report.to_json(), indent=2, sort_keys=True) + "\n"


def write_report(path: Path, report: Report) -> None:
    atomic.write_text(path, dumps(report))


def read_report(path: Path) -> Report:
    """A ``--cudaperf-json`` file; :class:`ReportError` naming the file on anything bad."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ReportError(f"{path}: cannot read ({exc.strerror})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ReportError(f"{path}: not valid JSON ({exc})") from None
    return Report.from_json(data, str(path))
