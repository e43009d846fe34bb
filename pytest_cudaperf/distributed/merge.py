"""The launcher's side, after the ranks: the test's one outcome from every rank's result
(:func:`merge`): failed when any rank failed (naming it, with its traceback or its stack),
skipped when every rank skipped; per series the slowest rank's record; the collectives'
bandwidth at that time."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pytest_cudaperf.distributed.bandwidth import bus_bandwidth
from pytest_cudaperf.distributed.result import Collective, PhaseReport, RankResult
from pytest_cudaperf.keys import SeriesKey
from pytest_cudaperf.report.model import (
    Bandwidth,
    Failure,
    FailureKind,
    JudgedRecord,
    LeakOutcome,
    TestOutcome,
)


@dataclass
class RankOutcome:
    """What one rank left behind: its reports by phase, or why it has none."""

    rank: int
    phases: dict[str, PhaseReport] = field(default_factory=dict)
    error: str | None = None  # an exception outside the test (process group setup, collection)
    exitcode: int | None = None
    stack: str | None = None  # dumped at the timeout
    killed: str | None = None  # why the launcher stopped it
    log_tail: str = ""
    collectives: tuple[Collective, ...] = ()

    @classmethod
    def of(cls, result: RankResult) -> RankOutcome:
        """What the rank's own result says (the launcher adds how it ended)."""
        return cls(result.rank, dict(result.phases), result.error, collectives=result.collectives)

    @property
    def failed(self) -> bool:
        if self.error or self.killed or not self.phases:
            return True
        return any(p.failed for p in self.phases.values())

    @property
    def body_failed(self) -> bool:
        """Failed for a reason other than a cudaperf check (leak, regression, budget)."""
        if self.error or self.killed or not self.phases:
            return True
        return any(p.failed and not p.cudaperf_failure for p in self.phases.values())


@dataclass
class Merged:
    """The test's one outcome."""

    outcome: str  # passed, failed, skipped
    message: str = ""
    payload: TestOutcome | None = None
    sections: list[tuple[str, str]] = field(default_factory=list)


def format_stack(text: str, limit: int = 40) -> str:
    """The dumping thread's stack from faulthandler output, trimmed to the test's own frames:
    faulthandler writes the most recent call first, and the frames below the test function
    (pytest, pluggy, this launcher) say nothing the user needs."""
    blocks: list[list[str]] = []
    for line in text.splitlines():
        if line.startswith(("Thread 0x", "Current thread 0x", "Stack (most recent")):
            blocks.append([line])
        elif blocks and line.strip():
            blocks[-1].append(line)
    if not blocks:
        return text.strip()
    current = next((b for b in blocks if b[0].startswith("Current thread")), blocks[-1])
    kept = [current[0]]
    for line in current[1:]:
        if "_pytest" in line or "pluggy" in line or "pytest_cudaperf" in line:
            break
        kept.append(line)
    if len(kept) > limit + 1:
        kept = [*kept[: limit + 1], f"  ... {len(kept) - limit - 1} more frames"]
    return "\n".join(kept)


def _indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line if line else line for line in text.splitlines())


def _rank_failure_text(outcome: RankOutcome) -> str:
    if outcome.killed:
        text = outcome.killed
        if outcome.stack:
            text += f"\nits Python stack when stopped:\n{_indent(outcome.stack)}"
        elif outcome.log_tail:
            text += f"\nits output ends:\n{_indent(outcome.log_tail)}"
        return text
    if outcome.error:
        return f"failed outside the test:\n{_indent(outcome.error.rstrip())}"
    if not outcome.phases:
        text = f"left no result (exit code {outcome.exitcode})"
        if outcome.log_tail:
            text += f"; its output ends:\n{_indent(outcome.log_tail)}"
        return text
    parts = []
    for when in ("setup", "call", "teardown"):
        phase = outcome.phases.get(when)
        if phase and phase.failed:
            parts.append(f"failed in {when}:\n{_indent(phase.longrepr.rstrip())}")
    return "\n".join(parts)


def _ranks_text(ranks: Sequence[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))


def merge_payloads(payloads: Mapping[int, TestOutcome | None]) -> TestOutcome | None:
    """One outcome from the ranks': per series (key, series) the slowest rank's record (the
    largest recording median), its measurement naming that ``rank`` and every rank's value in
    ``ranks``; failures and details prefixed with the ranks they came from (identical lines of
    several ranks said once); the leak of a rank that leaked (its rank in the failure line)."""
    present = {r: p for r, p in sorted(payloads.items()) if p}
    if not present:
        return None
    slowest: dict[tuple[SeriesKey, str], tuple[int, JudgedRecord]] = {}
    values: dict[tuple[SeriesKey, str], dict[str, float]] = {}
    for rank, outcome in present.items():
        for judged in outcome.records:
            ident = (judged.key, judged.series)
            values.setdefault(ident, {})[str(rank)] = judged.value
            if ident not in slowest or judged.value > slowest[ident][1].value:
                slowest[ident] = (rank, judged)
    records = tuple(
        dataclasses.replace(judged, rank=rank, ranks=values[ident])
        for ident, (rank, judged) in slowest.items()
    )
    failures: dict[tuple[FailureKind, str], list[int]] = {}
    details: dict[str, list[int]] = {}
    leak: LeakOutcome | None = None
    for rank, outcome in present.items():
        for failure in outcome.failures:
            failures.setdefault((failure.kind, failure.message), []).append(rank)
        for line in outcome.details:
            details.setdefault(line, []).append(rank)
        if outcome.leak is not None and (leak is None or (outcome.leak.leaks and not leak.leaks)):
            leak = outcome.leak
    first = next(iter(present.values()))
    return TestOutcome(
        nodeid=first.nodeid,
        records=records,
        failures=tuple(
            Failure(kind, f"{_ranks_text(r)}: {line}") for (kind, line), r in failures.items()
        ),
        details=tuple(f"{_ranks_text(r)}: {line}" for line, r in details.items()),
        leak=leak,
        comparisons=first.comparisons,
        body_passed=all(p.body_passed for p in present.values()),
        location=first.location,
    )


def merge(outcomes: Sequence[RankOutcome], timeout: float) -> Merged:
    """The test's one outcome from every rank's: failed when any rank failed (naming it, with
    its traceback) or did not finish (with its stack); skipped when every rank skipped."""
    world = len(outcomes)
    sections = [  # a phase's report holds the output of the phases before it: the last one
        (f"{name} (rank {o.rank})", text)
        for o in outcomes
        for phase in list(o.phases.values())[-1:]
        for name, text in phase.sections
    ]
    calls = {o.rank: o.phases.get("call") for o in outcomes}
    payload = merge_payloads({r: p.cudaperf if p else None for r, p in calls.items()})
    body_failed = [o for o in outcomes if o.body_failed]
    if body_failed:
        hung = [o.rank for o in outcomes if o.stack is not None and o.killed]
        head = f"distributed test failed on {_ranks_text([o.rank for o in body_failed])} of {world}"
        if hung and any("timeout" in (o.killed or "") for o in outcomes):
            head = (
                f"distributed test timed out after {timeout:g} s on {_ranks_text(hung)} of {world}"
            )
        lines = [head]
        for o in body_failed:
            lines.append(f"--- rank {o.rank}: {_rank_failure_text(o)}")
        return Merged("failed", "\n".join(lines), payload, sections)
    skipped = [o for o in outcomes if any(p.outcome == "skipped" for p in o.phases.values())]
    if skipped and len(skipped) == world:
        reasons = {
            p.longrepr.removeprefix("Skipped: ")
            for o in skipped
            for p in o.phases.values()
            if p.outcome == "skipped"
        }
        return Merged("skipped", "; ".join(sorted(reasons)), None, sections)
    return Merged("passed", "", payload, sections)


def attach_bandwidth(outcome: TestOutcome, collectives: Sequence[Collective]) -> TestOutcome:
    """Algorithm and bus bandwidth, at the merged (slowest-rank) time, on the record of each
    collective's time series."""
    by_name = {c.name: c for c in collectives}
    records = []
    for judged in outcome.records:
        found = by_name.get(judged.key.name)
        if found is None or not judged.is_time:
            records.append(judged)
            continue
        size, world = found.size_bytes, found.world_size
        algbw, busbw = bus_bandwidth(found.op, size, judged.value, world)
        records.append(
            dataclasses.replace(judged, bandwidth=Bandwidth(found.op, size, algbw, busbw))
        )
    return dataclasses.replace(outcome, records=tuple(records))
