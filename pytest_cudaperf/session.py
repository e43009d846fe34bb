"""The per-run state: what each test measured and how it was judged (test side), and the merge of
every test's results into the end-of-run summary and baseline writes (controller side).

Per-test data travels on the ``TestReport`` as the attribute ``cudaperf`` (plain builtins), so the
controller reads it the same way with and without xdist.
"""

from __future__ import annotations

import datetime
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_cudaperf.baselines import BaselineStore, Record, UpdateSummary, test_file_of
from pytest_cudaperf.devices import FaultState, Probe, is_sticky_cuda_error
from pytest_cudaperf.settings import Settings
from pytest_cudaperf.verdict import Kind, Verdict, budget_failure, judge

if TYPE_CHECKING:  # measurement and memory modules load with the first test that uses them
    from pytest_cudaperf.markers import PerfOptions
    from pytest_cudaperf.measure.timing import Comparison, Measurement
    from pytest_cudaperf.memory import LeakResult, PeakResult

#: default tolerance for peak memory: the requested-bytes peak is bit-identical across runs
MEMORY_TOLERANCE = 0.01
#: how often an inconclusive measurement is re-measured (with twice the time budget each time)
REMEASURE = 2

FAILURE_LETTERS = {
    "regression": ("R", "REGRESSED"),
    "leak": ("L", "LEAKED"),
    "budget": ("B", "OVER BUDGET"),
    "memory": ("M", "MEMORY"),
    "speedup": ("S", "TOO SLOW"),
    "missing": ("N", "NO BASELINE"),
}


@dataclass
class ItemState:
    """What one test measured, and the failures to apply once its body has passed."""

    records: list[dict[str, Any]] = field(default_factory=list)
    failures: list[tuple[str, str]] = field(default_factory=list)
    details: list[str] = field(default_factory=list)
    leak: dict[str, Any] | None = None
    comparisons: list[dict[str, Any]] = field(default_factory=list)
    names: Counter[str] = field(default_factory=Counter)
    #: the body is being re-run by ``@no_leak``'s protocol or a whole-test ``@perf``: the
    #: measurements and guards inside it ran on the first call and are not taken again
    replaying: bool = False


def record_key(nodeid: str, name: str | None, state: ItemState) -> str:
    """First unnamed measurement under the test id, others ``nodeid#name`` (``#2``, ``#3``…)."""
    label = name or ""
    state.names[label] += 1
    count = state.names[label]
    if not label:
        return nodeid if count == 1 else f"{nodeid}#{count}"
    return f"{nodeid}#{label}" if count == 1 else f"{nodeid}#{label}-{count}"


def label(key: str) -> str:
    """``[inner] `` for a named measurement's messages; nothing for the test's own."""
    return f"[{key.split('#', 1)[1]}] " if "#" in key else ""


def environment(probe: Probe | None, measurement: Measurement | None = None) -> dict[str, Any]:
    env: dict[str, Any] = {"date": datetime.date.today().isoformat()}
    if probe is not None:
        env.update(torch=probe.torch_version, cuda=probe.cuda_version, driver=probe.driver)
    if measurement is not None and measurement.clocks.get("recorded"):
        env["sm_mhz"] = measurement.clocks.get("sm_mhz_max")
    return env


class Judge:
    """Judges measurements inside the process that runs the test."""

    def __init__(self, settings: Settings, store: BaselineStore) -> None:
        self.settings = settings
        self.store = store
        self.faults = FaultState()
        self._probe: Probe | None = None

    @property
    def probe(self) -> Probe:
        if self._probe is None:
            from pytest_cudaperf.devices import probe

            self._probe = probe()
        return self._probe

    def tolerance(self, perf: PerfOptions | None) -> float:
        if perf is not None and perf.tolerance is not None:
            return perf.tolerance
        return self.settings.tolerance

    def note_error(self, nodeid: str, exc: BaseException) -> None:
        """A sticky CUDA error raised in a test body poisons this process's context."""
        if isinstance(exc, RuntimeError) and is_sticky_cuda_error(str(exc)):
            self.faults.record(nodeid, str(exc).strip().splitlines()[0])

    def judge_time(
        self, key: str, m: Measurement, perf: PerfOptions | None, device_class: str
    ) -> tuple[Record, Verdict]:
        record = Record(
            key=key,
            series=f"time:{m.mode}",
            value=m.median_ms,
            unit="ms",
            noise=m.rel_halfwidth,
            n=m.n,
            ci=m.ci_ms,
            device_class=device_class,
            env=environment(self.probe, m),
        )
        baseline = self.store.lookup(device_class, key, record.series)
        verdict = judge(
            m.median_ms,
            m.rel_halfwidth,
            "ms",
            baseline,
            self.tolerance(perf),
            device_class,
            record.env,
        )
        return record, verdict

    def add_time(
        self,
        state: ItemState,
        record: Record,
        verdict: Verdict,
        m: Measurement,
        perf: PerfOptions | None,
    ) -> None:
        state.records.append(self._payload(record, verdict, m.to_dict()))
        if verdict.kind is Kind.REGRESSION and not self.settings.update:
            state.failures.append(("regression", f"{label(record.key)}{verdict.message}"))
        if verdict.kind is Kind.NEW and self.settings.strict and not self.settings.update:
            state.failures.append(
                (
                    "missing",
                    f"{label(record.key)}no baseline for {record.series} on "
                    f"{record.device_class} (--cudaperf-strict); record one with "
                    "pytest --cudaperf-update",
                )
            )
        over = budget_failure(
            m.median_ms,
            perf.max_ms if perf else None,
            "ms",
            "max_ms",
            m.how(),
            subject=record.key.rsplit("::", 1)[-1],
        )
        if over:
            state.failures.append(("budget", over))
        state.details.extend(f"{label(record.key)}{w}" for w in m.warnings)

    def add_peak(
        self, state: ItemState, key: str, peak: PeakResult, device_class: str, max_peak: int | None
    ) -> None:
        record = Record(
            key=key,
            series="memory:peak",
            value=float(peak.peak_bytes),
            unit="bytes",
            noise=0.0,
            n=1,
            ci=(peak.peak_bytes, peak.peak_bytes),
            device_class=device_class,
            env=environment(self.probe),
        )
        baseline = self.store.lookup(device_class, key, record.series)
        verdict = judge(
            record.value, 0.0, "bytes", baseline, MEMORY_TOLERANCE, device_class, record.env
        )
        state.records.append(self._payload(record, verdict, peak.to_dict()))
        if verdict.kind is Kind.REGRESSION and not self.settings.update:
            state.failures.append(("regression", f"{label(key)}{verdict.message}"))
        self.check_peak(state, key, peak, max_peak)
        if peak.alloc_retries or peak.ooms:
            state.details.append(
                f"{label(key)}allocator retried {peak.alloc_retries} times, "
                f"{peak.ooms} OOMs (near the memory limit)"
            )

    def check_peak(
        self, state: ItemState, key: str, peak: PeakResult | None, limit: int | None
    ) -> None:
        """The ``max_peak`` budget of a marker or ``memory_guard`` (no peak: nothing to check)."""
        if peak is None:
            return
        where = f"requested bytes on {peak.device}"
        over = budget_failure(peak.peak_bytes, limit, "bytes", "max_peak", where)
        if over:
            state.failures.append(("memory", f"{label(key)}{over}"))

    def add_comparison(
        self, state: ItemState, key: str, comparison: Comparison, min_speedup: float | None
    ) -> None:
        state.comparisons.append({"key": key, **comparison.to_dict()})
        if min_speedup is not None and comparison.ci[1] < min_speedup:
            state.failures.append(
                ("speedup", f"{label(key)}{comparison.describe()} < min_speedup {min_speedup:g}")
            )
        elif min_speedup is not None and comparison.ci[0] < min_speedup:
            state.details.append(
                f"{label(key)}inconclusive against min_speedup {min_speedup:g}: "
                f"{comparison.describe()}"
            )

    def add_leak(self, state: ItemState, key: str, result: LeakResult) -> None:
        state.leak = {"key": key, **result.to_dict()}
        message = result.message()
        if message:
            state.failures.append(("leak", message))
            state.details.extend(result.sites)

    def _payload(
        self, record: Record, verdict: Verdict, measurement: dict[str, Any]
    ) -> dict[str, Any]:
        others = self.store.others(record.device_class, record.key, record.series)
        return {
            **record.to_dict(),
            "verdict": verdict.to_dict(),
            "measurement": measurement,
            "others": [{"device_class": c, "value": e["value"]} for c, e in others],
        }

    def report_payload(
        self, state: ItemState, nodeid: str, body_passed: bool
    ) -> dict[str, Any] | None:
        if not (state.records or state.leak or state.comparisons or state.failures):
            return None
        return {
            "nodeid": nodeid,
            "records": state.records,
            "leak": state.leak,
            "comparisons": state.comparisons,
            "failures": [list(f) for f in state.failures],
            "details": state.details,
            "body_passed": body_passed,
        }


def failure_text(state: ItemState) -> str:
    """The report's longrepr: one line per failure, then details (sites, warnings)."""
    lines = [line for _, line in state.failures]
    lines.extend(f"    {detail}" for detail in state.details)
    return "\n".join(lines)


@dataclass
class Results:
    """Controller side: every payload of the run, and what the run saw."""

    payloads: dict[str, dict[str, Any]] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)
    deselected: int = 0
    crashed_workers: list[str] = field(default_factory=list)
    interrupted: bool = False
    updates: list[UpdateSummary] = field(default_factory=list)
    obsolete: dict[str, list[str]] = field(default_factory=dict)
    pruned_refused: bool = False

    def add(self, nodeid: str, when: str, payload: Mapping[str, Any] | None) -> None:
        if when == "setup":
            self.seen.add(nodeid)
        if payload is not None:
            self.payloads[nodeid] = dict(payload)

    def worker_output(self) -> dict[str, Any]:
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
        """Did this run see every test of the files it ran? (no deselection, crash or abort)"""
        return not (self.deselected or self.crashed_workers or self.interrupted)

    @property
    def seen_files(self) -> set[str]:
        return {test_file_of(nodeid) for nodeid in self.seen}

    def records(self) -> list[dict[str, Any]]:
        return [r for p in self.payloads.values() for r in p.get("records", [])]

    def updatable(self) -> dict[str, list[Record]]:
        """Records of tests whose body passed, by device class."""
        by_class: dict[str, list[Record]] = {}
        for payload in self.payloads.values():
            if not payload.get("body_passed"):
                continue
            for data in payload.get("records", []):
                record = Record.from_dict(data)
                by_class.setdefault(record.device_class, []).append(record)
        return by_class

    def update_store(self, store: BaselineStore, prune: bool, root: Path) -> None:
        by_class = self.updatable()
        for device_class in sorted(by_class):
            obsolete = store.obsolete(device_class, self.seen, self.seen_files, self.complete, root)
            removable = obsolete if prune and self.complete else []
            self.pruned_refused = self.pruned_refused or (prune and not self.complete)
            self.updates.append(store.update(device_class, by_class[device_class], removable))

    def find_obsolete(self, store: BaselineStore, root: Path) -> None:
        classes = {r["device_class"] for r in self.records()}
        for device_class in sorted(classes):
            found = store.obsolete(device_class, self.seen, self.seen_files, self.complete, root)
            if found:
                self.obsolete[device_class] = found

    def counts(self) -> dict[str, int]:
        records = self.records()
        counts = Counter(r["verdict"]["kind"] for r in records)
        peaks = sum(1 for r in records if r["series"].startswith("memory:"))
        leaks = sum(
            1
            for p in self.payloads.values()
            if any(kind == "leak" for kind, _ in p.get("failures", []))
        )
        budgets = sum(
            1
            for p in self.payloads.values()
            if any(kind in ("budget", "speedup", "memory") for kind, _ in p.get("failures", []))
        )
        return {
            "measured": sum(counts.values()),
            "times": sum(counts.values()) - peaks,
            "peaks": peaks,
            "regression": counts["regression"],
            "improved": counts["improved"],
            "new": counts["new"],
            "inconclusive": counts["inconclusive"],
            "leak": leaks,
            "over budget": budgets,
        }

    def summary_line(self) -> str:
        counts = self.counts()
        measured = f"{counts['measured']} measured"
        if counts["peaks"]:  # a time and a peak are judged alike: say how many of each
            times, peaks = counts["times"], counts["peaks"]
            measured += f" ({times} time{'s' if times != 1 else ''}, {peaks} peak memory)"
        parts = [
            measured,
            f"{counts['regression']} regression{'s' if counts['regression'] != 1 else ''}",
            f"{counts['improved']} improved",
            f"{counts['new']} new",
            f"{counts['inconclusive']} inconclusive",
        ]
        if counts["leak"]:
            parts.append(f"{counts['leak']} leak{'s' if counts['leak'] != 1 else ''}")
        if counts["over budget"]:
            parts.append(f"{counts['over budget']} over budget")
        return "cudaperf: " + ", ".join(parts)
