"""Controller side: every test's outcome, merged from the workers, and the end-of-run path:
the baseline update, obsolete and drifting series, then the run's :class:`Report` and its outputs
(JSON, HTML, GitHub). Rendering is :mod:`pytest_cudaperf.report`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_cudaperf.devices.probe import environment
from pytest_cudaperf.keys import SeriesKey
from pytest_cudaperf.report.document import Report, write_report
from pytest_cudaperf.report.fields import ReportError
from pytest_cudaperf.report.github import append_github_summary, github_annotations
from pytest_cudaperf.report.html import write_html
from pytest_cudaperf.report.model import JudgedRecord, TestOutcome
from pytest_cudaperf.run.context import RunContext
from pytest_cudaperf.series import Record, baseline_drift
from pytest_cudaperf.store.baselines import BaselineStore, Seen, UpdateSummary


@dataclass
class Results:
    """Controller side: every outcome of the run, and what the run saw."""

    outcomes: dict[str, TestOutcome] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)
    #: tests whose own body (or setup, teardown) failed, as opposed to the plugin's verdicts
    failed_bodies: set[str] = field(default_factory=set)
    deselected: int = 0
    crashed_workers: list[str] = field(default_factory=list)
    interrupted: bool = False
    #: tests collected that never started (``-x``, ``--maxfail``, an interruption that pytest
    #: did not see through, such as a second Ctrl-C inside its handling of the first)
    unrun: int = 0
    updates: list[UpdateSummary] = field(default_factory=list)
    obsolete: dict[str, list[SeriesKey]] = field(default_factory=dict)
    pruned_refused: bool = False
    #: series whose baseline recordings climbed step by step: ``key {series}: drifting …``
    drifting: list[str] = field(default_factory=list)
    #: one line per end-of-run output that failed (file, reason, what to do), and per test whose
    #: measurements could not be read back
    errors: list[str] = field(default_factory=list)
    #: one line per end-of-run output that was written where the user would not see it else
    #: (the run added to a history)
    notes: list[str] = field(default_factory=list)

    def add(
        self, nodeid: str, when: str, payload: Mapping[str, Any] | None, body_failed: bool = False
    ) -> None:
        """One phase's report of a test: ``payload`` its outcome's JSON (on the call report),
        ``body_failed`` whether the test itself failed there (not by a verdict of the plugin)."""
        if when == "setup":  # a new attempt (a plugin such as pytest-rerunfailures re-runs)
            self.seen.add(nodeid)
            self.outcomes.pop(nodeid, None)
            self.failed_bodies.discard(nodeid)
        if body_failed:
            self.failed_bodies.add(nodeid)
        if payload is not None:
            try:
                self.outcomes[nodeid] = TestOutcome.from_json(payload)
            except ReportError as exc:  # the test's own outcome stands; its figures are lost
                self.errors.append(f"{nodeid}: its measurements could not be read ({exc})")

    def worker_output(self) -> dict[str, int]:
        """What a worker sends the controller at its end (JSON builtins only)."""
        return {"deselected": self.deselected}

    def worker_down(self, worker: str, output: Mapping[str, Any] | None, error: object) -> None:
        """Read a worker's output defensively: a crashed worker has none."""
        data = (output or {}).get("cudaperf")
        if error is not None or not isinstance(data, dict):
            self.crashed_workers.append(worker)
            return
        self.deselected += int(data.get("deselected", 0))

    @property
    def complete(self) -> bool:
        """Did this run see every test of the files it ran? (no deselection, crash, abort or
        test left unrun)"""
        return not (self.deselected or self.crashed_workers or self.interrupted or self.unrun)

    @property
    def seen_files(self) -> set[str]:
        return {nodeid.split("::", 1)[0] for nodeid in self.seen}

    def records(self) -> list[JudgedRecord]:
        return [r for o in self.outcomes.values() for r in o.records]

    def judged(self) -> list[TestOutcome]:
        """Outcomes whose body passed (their failures are the plugin's), by test id."""
        return [self.outcomes[k] for k in sorted(self.outcomes) if self.outcomes[k].body_passed]

    def updatable(self) -> dict[str, list[Record]]:
        """Records of tests whose body passed, by device class; none measured under a tracer."""
        by_class: dict[str, list[Record]] = {}
        for outcome in self.outcomes.values():
            if outcome.body_passed:
                for judged in outcome.records:
                    if not judged.traced:
                        by_class.setdefault(judged.device_class, []).append(judged.record)
        return by_class

    def update_store(self, store: BaselineStore, prune: bool, root: Path, tolerance: float) -> None:
        """Add this run's recordings to the store (``tolerance``: the run's, for records whose
        test set none; it decides when a series starts afresh at a new level)."""
        by_class = self.updatable()
        for device_class in sorted(by_class):
            obsolete = self._obsolete(store, device_class, root)
            removable = obsolete if prune and self.complete else []
            self.pruned_refused = self.pruned_refused or (prune and not self.complete)
            records = by_class[device_class]
            self.updates.append(store.update(device_class, records, removable, tolerance))

    def _obsolete(self, store: BaselineStore, device_class: str, root: Path) -> list[SeriesKey]:
        produced = frozenset(r.key for r in self.updatable().get(device_class, []))
        seen = Seen(self.seen, self.seen_files, self.complete, produced)
        return store.obsolete(device_class, seen, root)

    def find_obsolete(self, store: BaselineStore, root: Path) -> None:
        classes = {r.device_class for r in self.records()}
        for device_class in sorted(classes):
            found = self._obsolete(store, device_class, root)
            if found:
                self.obsolete[device_class] = found

    def find_drift(self, store: BaselineStore, tolerance: float) -> None:
        """Series of this run whose baseline drifts (each step under the tolerance, the whole
        climb over it): shown, never failed. ``tolerance`` is for records that carry none of
        their own (``Record.tolerance``)."""
        for record in self.records():
            entry = store.lookup(record.device_class, record.key, record.series)
            own = record.record.tolerance
            allowed = own if own is not None else tolerance
            found = baseline_drift(entry, allowed) if entry is not None else None
            if found is not None:
                self.drifting.append(
                    f"{record.key} {{{record.series}}}: {found.text()} "
                    f"({found.recordings} recordings)"
                )

    def report(
        self,
        run_id: str = "",
        baseline_dir: str = "",
        env: Mapping[str, Any] | None = None,
        leak_sweep: str | None = None,
    ) -> Report:
        """The run's report document (``leak_sweep``: the sweep's mode, None when off)."""
        return Report(
            tests=tuple(self.outcomes[k] for k in sorted(self.outcomes)),
            run_id=run_id,
            baseline_dir=baseline_dir,
            environment=env or {},
            updates=tuple(self.updates),
            obsolete={c: tuple(str(k) for k in keys) for c, keys in self.obsolete.items()},
            drifting=tuple(self.drifting),
            complete_run=self.complete,
            pruned_refused=self.pruned_refused,
            failed_bodies=len(self.failed_bodies),
            interrupted=self.interrupted,
            leak_sweep=leak_sweep,
        )


#: what to do when an end-of-run output fails, by output
_HINTS = {
    "baseline update": "make it a writable folder, or choose another with --cudaperf-baseline-dir",
    "--cudaperf-json": "point --cudaperf-json at a writable file",
    "--cudaperf-html": "point --cudaperf-html at a writable file",
    "--cudaperf-history": (
        "point --cudaperf-history at a writable SQLite file or a reachable postgresql:// URL"
    ),
    "GITHUB_STEP_SUMMARY": "check that GITHUB_STEP_SUMMARY names a writable file",
}


def output_error(what: str, path: Path | str, exc: BaseException, hint: str) -> str:
    """One line for an end-of-run output that could not be written, and what to do."""
    reason = getattr(exc, "strerror", None) or (str(exc).splitlines() or [type(exc).__name__])[0]
    return f"cudaperf: {what}: {path}: {reason} ({type(exc).__name__}); {hint}"


def _attempt(results: Results, what: str, path: Path | str, action: Callable[[], object]) -> None:
    """Run one end-of-run output; an OS or data error becomes one line naming the file."""
    try:
        action()
    except (OSError, ValueError) as exc:
        results.errors.append(output_error(what, path, exc, _HINTS[what]))


def run_source(root: Path, environ: Mapping[str, str]) -> dict[str, Any]:
    """The report environment's ``source`` (commit, dirty, branch) and ``recorded_at`` (UTC, ISO
    seconds): where the run's code came from and when, for its history."""
    import dataclasses
    import datetime

    from pytest_cudaperf.history.source import describe

    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    return {"source": dataclasses.asdict(describe(root, environ)), "recorded_at": now}


def add_to_history(target: Path | str, report: Report) -> str:
    """Append the run to the history at ``target`` (a file, or a ``postgresql://`` URL; one
    transaction); the line that says so."""
    from pytest_cudaperf.history.backends import shown
    from pytest_cudaperf.history.store import HistoryError, open_store, report_source

    source, recorded_at = report_source(report)
    try:
        with open_store(target) as store:
            added = store.add_run(report, source, recorded_at)
    except HistoryError as exc:
        raise ValueError(str(exc).removeprefix(f"{shown(target)}: ")) from None
    if not added:
        return f"cudaperf: history {shown(target)}: this run is there already, nothing added"
    count = len({(r.key, r.series, r.device_class) for r in report.records()})
    commit = source.commit[:10] + (" (dirty)" if source.dirty else "") if source.commit else "none"
    return (
        f"cudaperf: history {shown(target)}: this run added, {count} series "
        f"{'measured' if count else '(none measured)'}, commit {commit}"
    )


def finish_run(
    run: RunContext, results: Results, environ: Mapping[str, str]
) -> tuple[Report, list[str]]:
    """Controller, end of session: baseline writes, obsolete entries, JSON, HTML, GitHub. Each
    output that fails is one line in ``results.errors``; the others are still written.
    Returns the run's report and the GitHub annotation lines to print."""
    settings, out = run.settings, run.output_dir
    if settings.update and not settings.disable:
        update = lambda: results.update_store(  # noqa: E731
            run.store, settings.prune, run.root, settings.tolerance
        )
        _attempt(results, "baseline update", run.baseline_dir, update)
    results.find_obsolete(run.store, run.root)
    results.find_drift(run.store, settings.tolerance)
    env = environment(run.probe, run=True) if settings.json or settings.html else {}
    if settings.json or settings.history:  # what `cudaperf history ingest` reads back
        env.update(run_source(run.root, environ))
    sweep = None if settings.leak_sweep == "off" or settings.disable else settings.leak_sweep
    report = results.report(run.run_id, str(run.baseline_dir), env, sweep)
    if settings.history:
        from pytest_cudaperf.history.backends import located, shown

        target = located(settings.history, out)
        add = lambda: results.notes.append(add_to_history(target, report))  # noqa: E731
        _attempt(results, "--cudaperf-history", shown(target), add)
    if settings.json:
        json_path = out / settings.json
        _attempt(results, "--cudaperf-json", json_path, lambda: write_report(json_path, report))
    if settings.html:
        html_path = out / settings.html
        _attempt(results, "--cudaperf-html", html_path, lambda: write_html(html_path, report))
    if environ.get("GITHUB_ACTIONS") != "true":
        return report, []
    if environ.get("GITHUB_STEP_SUMMARY"):
        summary = Path(environ["GITHUB_STEP_SUMMARY"])
        write = lambda: append_github_summary(summary, report)  # noqa: E731
        _attempt(results, "GITHUB_STEP_SUMMARY", summary, write)
    return report, github_annotations(report)
