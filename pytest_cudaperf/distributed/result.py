"""What one rank of a ``@distributed`` test hands its launcher: one :class:`RankResult`, written
once by the rank (atomically) and read by the launcher.

Reading is strict: a missing or mistyped field is a ``ValueError`` (a
:class:`~pytest_cudaperf.report.fields.ReportError`) naming it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_cudaperf import atomic
from pytest_cudaperf.report.fields import get, number, optional_string, to_object
from pytest_cudaperf.report.model import TestOutcome

#: the phases of a test, in order
PHASES = ("setup", "call", "teardown")


@dataclass(frozen=True)
class Collective:
    """A collective timed with ``dist_rank.bench_collective``: its series name, what it moved and
    how fast (the slowest rank's median time; bandwidth as nccl-tests defines it)."""

    name: str
    op: str
    size_bytes: int
    world_size: int
    time_ms: float
    algbw_gbps: float
    busbw_gbps: float

    def describe(self) -> str:
        return (
            f"{self.op} of {self.size_bytes / 2**20:.1f} MiB on {self.world_size} ranks: "
            f"{self.time_ms:.3f} ms, algbw {self.algbw_gbps:.2f} GB/s, "
            f"busbw {self.busbw_gbps:.2f} GB/s"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "op": self.op,
            "size_bytes": self.size_bytes,
            "world_size": self.world_size,
            "time_ms": self.time_ms,
            "algbw_gbps": self.algbw_gbps,
            "busbw_gbps": self.busbw_gbps,
        }

    @classmethod
    def from_json(cls, data: Any, where: str = "collective") -> Collective:
        d = to_object(data, where)
        return cls(
            name=get(d, "name", str, where),
            op=get(d, "op", str, where),
            size_bytes=get(d, "size_bytes", int, where),
            world_size=get(d, "world_size", int, where),
            time_ms=number(d, "time_ms", where),
            algbw_gbps=number(d, "algbw_gbps", where),
            busbw_gbps=number(d, "busbw_gbps", where),
        )


@dataclass(frozen=True)
class PhaseReport:
    """One phase's report of the test in a rank: its outcome, its failure or skip text, its
    captured output, and the plugin's outcome of the test (on the call phase)."""

    outcome: str
    longrepr: str = ""
    sections: tuple[tuple[str, str], ...] = ()
    #: what the plugin concluded about the test in this rank (call phase, when it measured)
    cudaperf: TestOutcome | None = None
    #: set where the plugin itself failed the test (a leak, a regression, a budget)
    cudaperf_failure: str | None = None

    @property
    def failed(self) -> bool:
        return self.outcome == "failed"

    def to_json(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "longrepr": self.longrepr,
            "sections": [list(s) for s in self.sections],
            "cudaperf": self.cudaperf.to_json() if self.cudaperf else None,
            "cudaperf_failure": self.cudaperf_failure,
        }

    @classmethod
    def from_json(cls, data: Any, where: str = "phase") -> PhaseReport:
        d = to_object(data, where)
        outcome = get(d, "outcome", str, where)
        if outcome not in ("passed", "failed", "skipped"):
            raise ValueError(
                f"{where}.outcome: expected passed, failed or skipped, got {outcome!r}"
            )
        sections = d.get("sections", [])
        if not isinstance(sections, list) or not all(
            isinstance(s, list) and len(s) == 2 and all(isinstance(x, str) for x in s)
            for s in sections
        ):
            raise ValueError(f"{where}.sections: expected [name, text] pairs, got {sections!r}")
        cudaperf = d.get("cudaperf")
        test = TestOutcome.from_json(cudaperf, f"{where}.cudaperf") if cudaperf else None
        return cls(
            outcome=outcome,
            longrepr=str(d.get("longrepr") or ""),
            sections=tuple((s[0], s[1]) for s in sections),
            cudaperf=test,
            cudaperf_failure=optional_string(d, "cudaperf_failure", where),
        )


@dataclass(frozen=True)
class RankResult:
    """Everything one rank leaves its launcher: its test's reports by phase, an error outside the
    test (process group, collection), and the collectives it timed."""

    rank: int
    phases: Mapping[str, PhaseReport] = field(default_factory=dict)
    error: str | None = None
    collectives: tuple[Collective, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "phases": {when: phase.to_json() for when, phase in self.phases.items()},
            "error": self.error,
            "collectives": [c.to_json() for c in self.collectives],
        }

    @classmethod
    def from_json(cls, data: Any, where: str = "rank result") -> RankResult:
        d = to_object(data, where)
        phases = to_object(d.get("phases", {}), f"{where}.phases")
        unknown = set(phases) - set(PHASES)
        if unknown:
            raise ValueError(f"{where}.phases: unknown phase {sorted(unknown)[0]!r}")
        collectives = d.get("collectives", [])
        if not isinstance(collectives, list):
            raise ValueError(f"{where}.collectives: expected a list, got {collectives!r}")
        return cls(
            rank=get(d, "rank", int, where),
            phases={
                when: PhaseReport.from_json(phases[when], f"{where}.phases.{when}")
                for when in PHASES
                if when in phases
            },
            error=optional_string(d, "error", where),
            collectives=tuple(
                Collective.from_json(c, f"{where}.collectives[{i}]")
                for i, c in enumerate(collectives)
            ),
        )

    def write(self, path: Path) -> None:
        """Write atomically: the launcher takes the rank as done once ``path`` exists."""
        atomic.write_text(path, json.dumps(self.to_json(), default=str))

    @classmethod
    def read(cls, path: Path) -> RankResult:
        return cls.from_json(json.loads(path.read_text()), str(path))
