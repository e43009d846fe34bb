"""The typed outcome of one test: its judged records, failures, details, leak and comparisons.

A test's outcome travels from the process that ran it to the controller on the ``TestReport``
as plain builtins (:meth:`TestOutcome.to_payload`, :meth:`TestOutcome.from_payload`), the same
path with and without xdist.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from pytest_cudaperf.baselines import Record
from pytest_cudaperf.keys import SeriesKey
from pytest_cudaperf.verdict import Kind, Verdict

#: JSON-compatible data (what execnet and the JSON artefact carry)
Json = Any


class FailureKind(str, Enum):
    """Why the plugin failed a test whose body passed; each has a status letter and word."""

    REGRESSION = "regression"
    LEAK = "leak"
    BUDGET = "budget"
    MEMORY = "memory"
    SPEEDUP = "speedup"
    MISSING = "missing"

    @property
    def letter(self) -> str:
        return _LETTERS[self][0]

    @property
    def word(self) -> str:
        return _LETTERS[self][1]

    @property
    def is_budget(self) -> bool:
        """A limit the test set (max_ms, max_peak, min_speedup), not a baseline comparison."""
        return self in (FailureKind.BUDGET, FailureKind.SPEEDUP, FailureKind.MEMORY)


_LETTERS = {
    FailureKind.REGRESSION: ("R", "REGRESSED"),
    FailureKind.LEAK: ("L", "LEAKED"),
    FailureKind.BUDGET: ("B", "OVER BUDGET"),
    FailureKind.MEMORY: ("M", "MEMORY"),
    FailureKind.SPEEDUP: ("S", "TOO SLOW"),
    FailureKind.MISSING: ("N", "NO BASELINE"),
}


@dataclass(frozen=True)
class Failure:
    kind: FailureKind
    message: str


@dataclass(frozen=True)
class Other:
    """The same series measured on another device class: shown, never enforced."""

    device_class: str
    value: float


def _key_to_json(key: SeriesKey) -> dict[str, str]:
    return {"nodeid": key.nodeid, "name": key.name}


def _key_from_json(data: Mapping[str, Json]) -> SeriesKey:
    if "nodeid" not in data:  # a JSON report of an earlier version: "nodeid#name" only
        nodeid, _, name = str(data["key"]).partition("#")
        return SeriesKey(nodeid, name)
    return SeriesKey(str(data["nodeid"]), str(data.get("name", "")))


def verdict_from_dict(data: Mapping[str, Json]) -> Verdict:
    ci = data.get("ci")
    return Verdict(
        kind=Kind(data["kind"]),
        ratio=data.get("ratio"),
        ci=(float(ci[0]), float(ci[1])) if ci else None,
        threshold=data.get("threshold"),
        message=str(data.get("message") or ""),
        tolerance=data.get("tolerance"),
        fingerprint=tuple(str(d) for d in data.get("fingerprint") or ()),
        cycles_ratio=data.get("cycles_ratio"),
    )


@dataclass(frozen=True)
class JudgedRecord:
    """One measured series of one test (a time or a peak): the :class:`Record` that goes into
    the baseline store, its verdict, and what the report shows beside it."""

    record: Record
    verdict: Verdict
    #: the measurement's own fields (samples, clocks, warnings), for the JSON and HTML reports
    measurement: Mapping[str, Json] = field(default_factory=dict)
    others: tuple[Other, ...] = ()
    #: what the kernel (or op) breakdown says changed, one line each (non-pass verdicts)
    explanation: tuple[str, ...] = ()
    #: the breakdown diff for the JSON and HTML reports (plain JSON), when there is one
    explanation_data: Mapping[str, Json] | None = None

    @property
    def key(self) -> SeriesKey:
        return self.record.key

    @property
    def series(self) -> str:
        return self.record.series

    @property
    def value(self) -> float:
        return self.record.value

    @property
    def unit(self) -> str:
        return self.record.unit

    @property
    def device_class(self) -> str:
        return self.record.device_class

    @property
    def env(self) -> Mapping[str, Json]:
        return self.record.env

    @property
    def noise(self) -> float:
        return self.record.recording.noise

    @property
    def n(self) -> int:
        return self.record.recording.n

    @property
    def is_time(self) -> bool:
        return self.unit == "ms"

    @property
    def is_peak(self) -> bool:
        return self.series.startswith("memory:")

    @property
    def samples_ms(self) -> list[float]:
        return [float(v) for v in self.measurement.get("samples_ms", [])]

    @property
    def measured_ci_ms(self) -> tuple[float, float] | None:
        ci = self.measurement.get("ci_ms")
        return (float(ci[0]), float(ci[1])) if ci else None

    @property
    def warnings(self) -> list[str]:
        return [str(w) for w in self.measurement.get("warnings", [])]

    @property
    def baseline_value(self) -> float | None:
        """The baseline's value, from the ratio (None without a baseline)."""
        ratio = self.verdict.ratio
        return self.value / ratio if ratio else None

    def to_payload(self) -> dict[str, Json]:
        return {
            **plain(self.record.to_json()),
            "key": str(self.key),
            "verdict": self.verdict.to_dict(),
            "measurement": plain(self.measurement),
            "others": [{"device_class": o.device_class, "value": o.value} for o in self.others],
            "explanation": list(self.explanation),
            "explanation_data": plain(self.explanation_data),
        }

    @classmethod
    def from_payload(cls, data: Mapping[str, Json]) -> JudgedRecord:
        return cls(
            record=Record.from_json(dict(data)),
            verdict=verdict_from_dict(data["verdict"]),
            measurement=dict(data.get("measurement", {})),
            others=tuple(
                Other(str(o["device_class"]), float(o["value"])) for o in data.get("others", [])
            ),
            explanation=tuple(str(line) for line in data.get("explanation", [])),
            explanation_data=data.get("explanation_data"),
        )


@dataclass(frozen=True)
class LeakOutcome:
    """A leak check's settled readings per signal and what grew."""

    key: SeriesKey
    series: Mapping[str, Sequence[int]]
    leaks: Mapping[str, int]
    tolerance: int
    settle: tuple[str, ...] = ()
    sites: tuple[str, ...] = ()

    def to_payload(self) -> dict[str, Json]:
        return {
            **_key_to_json(self.key),
            "key": str(self.key),
            "series": {k: list(v) for k, v in self.series.items()},
            "leaks": dict(self.leaks),
            "tolerance": self.tolerance,
            "settle": list(self.settle),
            "sites": list(self.sites),
        }

    @classmethod
    def from_payload(cls, data: Mapping[str, Json]) -> LeakOutcome:
        return cls(
            key=_key_from_json(data),
            series={str(k): [int(x) for x in v] for k, v in data["series"].items()},
            leaks={str(k): int(v) for k, v in data["leaks"].items()},
            tolerance=int(data["tolerance"]),
            settle=tuple(data.get("settle", ())),
            sites=tuple(data.get("sites", ())),
        )


@dataclass(frozen=True)
class ComparisonOutcome:
    """``cuda_timer.compare``: the speedup, its CI, and both measurements' fields."""

    key: SeriesKey
    speedup: float
    ci: tuple[float, float]
    detail: Mapping[str, Json] = field(default_factory=dict)

    def to_payload(self) -> dict[str, Json]:
        return {
            **plain(self.detail),
            **_key_to_json(self.key),
            "key": str(self.key),
            "speedup": self.speedup,
            "ci": list(self.ci),
        }

    @classmethod
    def from_payload(cls, data: Mapping[str, Json]) -> ComparisonOutcome:
        own = {"nodeid", "name", "key", "speedup", "ci"}
        return cls(
            key=_key_from_json(data),
            speedup=float(data["speedup"]),
            ci=(float(data["ci"][0]), float(data["ci"][1])),
            detail={k: v for k, v in data.items() if k not in own},
        )


@dataclass(frozen=True)
class TestOutcome:
    """Everything the plugin concluded about one test."""

    __test__ = False  # not a pytest test class

    nodeid: str
    records: tuple[JudgedRecord, ...] = ()
    failures: tuple[Failure, ...] = ()
    details: tuple[str, ...] = ()
    leak: LeakOutcome | None = None
    comparisons: tuple[ComparisonOutcome, ...] = ()
    body_passed: bool = True
    #: file and 1-based line of the test (for GitHub annotations)
    location: tuple[str, int] | None = None

    def to_payload(self) -> dict[str, Json]:
        """Plain builtins only: xdist sends reports through execnet."""
        return {
            "nodeid": self.nodeid,
            "records": [r.to_payload() for r in self.records],
            "leak": self.leak.to_payload() if self.leak else None,
            "comparisons": [c.to_payload() for c in self.comparisons],
            "failures": [[f.kind.value, f.message] for f in self.failures],
            "details": list(self.details),
            "body_passed": self.body_passed,
            "location": list(self.location) if self.location else None,
        }

    @classmethod
    def from_payload(cls, data: Mapping[str, Json]) -> TestOutcome:
        location = data.get("location")
        leak = data.get("leak")
        return cls(
            nodeid=str(data["nodeid"]),
            records=tuple(JudgedRecord.from_payload(r) for r in data.get("records", [])),
            failures=tuple(
                Failure(FailureKind(kind), str(message))
                for kind, message in data.get("failures", [])
            ),
            details=tuple(str(d) for d in data.get("details", [])),
            leak=LeakOutcome.from_payload(leak) if leak else None,
            comparisons=tuple(
                ComparisonOutcome.from_payload(c) for c in data.get("comparisons", [])
            ),
            body_passed=bool(data.get("body_passed", True)),
            location=(str(location[0]), int(location[1])) if location else None,
        )

    def has(self, *kinds: FailureKind) -> bool:
        return any(f.kind in kinds for f in self.failures)


@dataclass
class ItemState:
    """What one test has measured so far, and the failures to apply once its body has passed."""

    nodeid: str
    records: list[JudgedRecord] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    details: list[str] = field(default_factory=list)
    leak: LeakOutcome | None = None
    comparisons: list[ComparisonOutcome] = field(default_factory=list)
    names: Counter[tuple[str, str]] = field(default_factory=Counter)
    #: the body is being re-run by ``@no_leak``'s protocol or a whole-test ``@perf``: the
    #: measurements and guards inside it ran on the first call and are not taken again
    replaying: bool = False

    def key(self, name: str | None = None, *, unnamed: str = "") -> SeriesKey:
        """The one key-naming scheme: the first unnamed measurement is the test's own (name
        ``""``), later ones ``unnamed`` + count (``"2"``, ``"3"``; ``"guard2"`` for guards,
        counted apart); a name, then ``name-2``…"""
        label = name or ""
        self.names[(unnamed, label)] += 1
        count = self.names[(unnamed, label)]
        if not label:
            return SeriesKey(self.nodeid, "" if count == 1 else f"{unnamed}{count}")
        return SeriesKey(self.nodeid, label if count == 1 else f"{label}-{count}")

    def fail(self, kind: FailureKind, message: str) -> None:
        self.failures.append(Failure(kind, message))

    @property
    def empty(self) -> bool:
        return not (self.records or self.leak or self.comparisons or self.failures)

    def outcome(self, body_passed: bool, location: tuple[str, int] | None) -> TestOutcome:
        return TestOutcome(
            nodeid=self.nodeid,
            records=tuple(self.records),
            failures=tuple(self.failures),
            details=tuple(self.details),
            leak=self.leak,
            comparisons=tuple(self.comparisons),
            body_passed=body_passed,
            location=location,
        )


def plain(value: object) -> Json:
    """``value`` as JSON builtins: tuples become lists, anything unknown its ``str``."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return str(value)
