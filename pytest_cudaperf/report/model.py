"""The report document: what a run concluded about each test, typed and versioned.

It is the one reader and writer of the report's JSON: the per-test outcome that rides on a
``TestReport`` (the same path with and without xdist: :meth:`TestOutcome.to_json`,
:meth:`TestOutcome.from_json`), the ``--cudaperf-json`` file (:meth:`Report.to_json`,
:func:`read_report`), the fresh process's private report, and ``cudaperf`` reading and merging
reports. Every renderer (terminal, JUnit, GitHub, HTML) reads a :class:`Report` or a
:class:`TestOutcome`. The layout is documented in ``docs/reports.md``.

Reading is strict: a missing or mistyped field is a :class:`ReportError` naming where it is.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

from pytest_cudaperf.breakdown import Breakdown
from pytest_cudaperf.keys import SeriesKey
from pytest_cudaperf.measure.timing import Comparison, Measurement
from pytest_cudaperf.memory.protocol import PeakResult
from pytest_cudaperf.series import Record
from pytest_cudaperf.store.baselines import UpdateSummary
from pytest_cudaperf.store.format import (
    BaselineError,
    check_env,
    check_noise,
    check_unit,
    recording_from_json,
    recording_to_json,
)
from pytest_cudaperf.verdict import Kind, Verdict

#: the report document's version; version 2 (no ``peak``, ``rank``, ``bandwidth`` of their own,
#: a side-by-side ``html`` in ``explanation_data``) is read as well
SCHEMA = 3
READABLE = (2, 3)

#: JSON-compatible data (what execnet and the JSON file carry)
Json = Any
T = TypeVar("T")


class ReportError(ValueError):
    """A report document that cannot be read; the message says where and what."""


# --- strict reading ------------------------------------------------------------------------------


def _object(data: Json, where: str) -> Mapping[str, Json]:
    if not isinstance(data, dict):
        raise ReportError(f"{where}: expected an object, got {type(data).__name__}")
    return data


def _get(data: Mapping[str, Json], name: str, kind: type[T] | tuple[type, ...], where: str) -> T:
    value = data.get(name)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind in (int, float)):
        raise ReportError(f"{where}.{name}: expected {_kind(kind)}, got {value!r}")
    return value  # type: ignore[return-value]


def _kind(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {
        str: "a string",
        int: "an integer",
        float: "a number",
        list: "a list",
        dict: "an object",
        bool: "true or false",
    }
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def _number(data: Mapping[str, Json], name: str, where: str) -> float:
    return float(_get(data, name, (int, float), where))


def _optional_number(data: Mapping[str, Json], name: str, where: str) -> float | None:
    return None if data.get(name) is None else _number(data, name, where)


def _strings(data: Mapping[str, Json], name: str, where: str) -> tuple[str, ...]:
    values = data.get(name, [])
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise ReportError(f"{where}.{name}: expected a list of strings, got {values!r}")
    return tuple(values)


def _pair(data: Mapping[str, Json], name: str, where: str) -> tuple[float, float]:
    value = data.get(name)
    if not (
        isinstance(value, list)
        and len(value) == 2
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
    ):
        raise ReportError(f"{where}.{name}: expected two numbers, got {value!r}")
    return float(value[0]), float(value[1])


def _items(
    data: Mapping[str, Json], name: str, where: str, read: Callable[[Json, str], T]
) -> tuple[T, ...]:
    values = data.get(name, [])
    if not isinstance(values, list):
        raise ReportError(f"{where}.{name}: expected a list, got {values!r}")
    return tuple(read(v, f"{where}.{name}[{i}]") for i, v in enumerate(values))


def _leaf(read: Callable[[Mapping[str, Json]], T], data: Json, where: str) -> T:
    """A leaf type's own reader (Measurement, PeakResult, Comparison): any error names ``where``."""
    try:
        return read(_object(data, where))
    except (KeyError, TypeError, ValueError) as exc:
        raise ReportError(f"{where}: unreadable ({type(exc).__name__}: {exc})") from None


def plain(value: object) -> Json:
    """``value`` as JSON builtins: tuples become lists, anything unknown its ``str``."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return str(value)


# --- failures ------------------------------------------------------------------------------------


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


# --- the parts of a record -----------------------------------------------------------------------


@dataclass(frozen=True)
class Other:
    """The same series measured on another device class: shown, never enforced."""

    device_class: str
    value: float


@dataclass(frozen=True)
class Bandwidth:
    """A collective's algorithm and bus bandwidth at the record's (slowest rank's) time."""

    op: str
    bytes: int
    algbw_gbps: float
    busbw_gbps: float


def _verdict_to_json(verdict: Verdict) -> dict[str, Json]:
    return {
        "kind": verdict.kind.value,
        "ratio": verdict.ratio,
        "ci": list(verdict.ci) if verdict.ci else None,
        "threshold": verdict.threshold,
        "tolerance": verdict.tolerance,
        "message": verdict.message,
        "fingerprint": list(verdict.fingerprint),
        "cycles_ratio": verdict.cycles_ratio,
    }


def _verdict_from_json(data: Json, where: str) -> Verdict:
    d = _object(data, where)
    kind = _get(d, "kind", str, where)
    if kind not in Kind._value2member_map_:
        raise ReportError(f"{where}.kind: expected one of {', '.join(Kind)}, got {kind!r}")
    return Verdict(
        kind=Kind(kind),
        ratio=_optional_number(d, "ratio", where),
        ci=_pair(d, "ci", where) if d.get("ci") is not None else None,
        threshold=_optional_number(d, "threshold", where),
        message=str(d.get("message") or ""),
        tolerance=_optional_number(d, "tolerance", where),
        fingerprint=_strings(d, "fingerprint", where),
        cycles_ratio=_optional_number(d, "cycles_ratio", where),
    )


def record_to_json(record: Record) -> dict[str, Json]:
    """A :class:`~pytest_cudaperf.series.Record`'s JSON (the start of a judged record's)."""
    data: dict[str, Json] = {
        "nodeid": record.key.nodeid,
        "name": record.key.name,
        "series": record.series,
        "device_class": record.device_class,
        "unit": record.unit,
        "recording": recording_to_json(record.recording),
        "env": plain(record.env),
    }
    if record.breakdown is not None:
        data["breakdown"] = dict(record.breakdown)
    if record.tolerance is not None:
        data["tolerance"] = record.tolerance
    return data


def record_from_json(data: Json, where: str = "record") -> Record:
    """A :class:`~pytest_cudaperf.series.Record` from its JSON, strictly (extra fields, such as a
    verdict, are not its)."""
    d = _object(data, where)
    try:
        for name in ("nodeid", "name", "series", "device_class"):
            _get(d, name, str, where)
        unit = check_unit(where, d.get("unit"))
        breakdown = d.get("breakdown")
        if breakdown is not None and not isinstance(breakdown, dict):
            raise ReportError(f"{where}.breakdown: expected an object, got {breakdown!r}")
        return Record(
            key=SeriesKey(d["nodeid"], d["name"]),
            series=d["series"],
            device_class=d["device_class"],
            unit=unit,
            recording=recording_from_json(d.get("recording"), f"{where}: recording", unit),
            env=check_env(where, d.get("env")),
            breakdown=breakdown,
            tolerance=(
                None
                if d.get("tolerance") is None
                else check_noise(where, "tolerance", d["tolerance"])
            ),
        )
    except BaselineError as exc:
        raise ReportError(str(exc)) from None


@dataclass(frozen=True)
class JudgedRecord:
    """One measured series of one test (a time or a peak): the :class:`Record` that goes into
    the baseline store, its verdict, and what the report shows beside it."""

    record: Record
    verdict: Verdict
    #: the time measurement (samples, clocks, warnings) of a time series
    measurement: Measurement | None = None
    #: the peak reading of a peak-memory series
    peak: PeakResult | None = None
    others: tuple[Other, ...] = ()
    #: what the kernel (or op) breakdown says changed, one line each (non-pass verdicts)
    explanation: tuple[str, ...] = ()
    #: the stored (or reference) and the current breakdown the explanation diffs, when both exist
    compared: tuple[Breakdown, Breakdown] | None = None
    #: in a distributed test: the rank whose (slowest) record this is, and every rank's value
    rank: int | None = None
    ranks: Mapping[str, float] = field(default_factory=dict)
    #: a collective's bandwidth (``dist_rank.bench_collective``)
    bandwidth: Bandwidth | None = None

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
    def warnings(self) -> tuple[str, ...]:
        return self.measurement.warnings if self.measurement is not None else ()

    @property
    def baseline_value(self) -> float | None:
        """The baseline's value, from the ratio (None without a baseline)."""
        ratio = self.verdict.ratio
        return self.value / ratio if ratio else None

    def to_json(self) -> dict[str, Json]:
        data = record_to_json(self.record)
        data.update(
            key=str(self.key),  # for people reading the file
            verdict=_verdict_to_json(self.verdict),
            measurement=plain(self.measurement.to_dict()) if self.measurement else None,
            peak=self.peak.to_dict() if self.peak else None,
            others=[{"device_class": o.device_class, "value": o.value} for o in self.others],
            explanation=list(self.explanation),
            compared=(
                {"base": self.compared[0].to_json(), "current": self.compared[1].to_json()}
                if self.compared
                else None
            ),
            rank=self.rank,
            ranks=dict(self.ranks),
            bandwidth=(
                {
                    "op": self.bandwidth.op,
                    "bytes": self.bandwidth.bytes,
                    "algbw_gbps": self.bandwidth.algbw_gbps,
                    "busbw_gbps": self.bandwidth.busbw_gbps,
                }
                if self.bandwidth
                else None
            ),
        )
        return data

    @classmethod
    def from_json(cls, data: Json, where: str = "record") -> JudgedRecord:
        d = _object(data, where)
        record = record_from_json(d, where)
        measured = d.get("measurement")
        peak = d.get("peak")
        if record.unit == "bytes" and peak is None and measured:  # version 2: the peak there
            peak, measured = measured, None
        compared = d.get("compared")
        bandwidth = d.get("bandwidth")
        if bandwidth is None and isinstance(measured, dict):  # version 2: in the measurement
            bandwidth = measured.get("bandwidth")
        ranks = d.get("ranks", measured.get("ranks", {}) if isinstance(measured, dict) else {})
        rank = d.get("rank", measured.get("rank") if isinstance(measured, dict) else None)
        return cls(
            record=record,
            verdict=_verdict_from_json(d.get("verdict"), f"{where}.verdict"),
            measurement=(
                _leaf(Measurement.from_dict, measured, f"{where}.measurement") if measured else None
            ),
            peak=_leaf(_peak_from_json, peak, f"{where}.peak") if peak else None,
            others=_items(d, "others", where, _other_from_json),
            explanation=_strings(d, "explanation", where),
            compared=_compared_from_json(compared, f"{where}.compared") if compared else None,
            rank=int(rank) if isinstance(rank, int) and not isinstance(rank, bool) else None,
            ranks={str(k): float(v) for k, v in _object(ranks, f"{where}.ranks").items()},
            bandwidth=_bandwidth_from_json(bandwidth, f"{where}.bandwidth") if bandwidth else None,
        )


def _peak_from_json(d: Mapping[str, Json]) -> PeakResult:
    return PeakResult(
        peak_bytes=int(d["peak_bytes"]),
        alloc_retries=int(d.get("alloc_retries", 0)),
        ooms=int(d.get("ooms", 0)),
        device=str(d.get("device", "cpu")),
    )


def _other_from_json(data: Json, where: str) -> Other:
    d = _object(data, where)
    return Other(_get(d, "device_class", str, where), _number(d, "value", where))


def _compared_from_json(data: Json, where: str) -> tuple[Breakdown, Breakdown]:
    d = _object(data, where)
    try:
        return Breakdown.from_json(d.get("base")), Breakdown.from_json(d.get("current"))
    except ValueError as exc:
        raise ReportError(f"{where}: {exc}") from None


def _bandwidth_from_json(data: Json, where: str) -> Bandwidth:
    d = _object(data, where)
    return Bandwidth(
        op=_get(d, "op", str, where),
        bytes=int(_number(d, "bytes", where)),
        algbw_gbps=_number(d, "algbw_gbps", where),
        busbw_gbps=_number(d, "busbw_gbps", where),
    )


# --- a test's outcome ----------------------------------------------------------------------------


@dataclass(frozen=True)
class LeakOutcome:
    """A leak check's settled readings per signal and what grew."""

    key: SeriesKey
    series: Mapping[str, Sequence[int]]
    leaks: Mapping[str, int]
    tolerance: int
    settle: tuple[str, ...] = ()
    sites: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Json]:
        return {
            "nodeid": self.key.nodeid,
            "name": self.key.name,
            "key": str(self.key),
            "series": {k: list(v) for k, v in self.series.items()},
            "leaks": dict(self.leaks),
            "tolerance": self.tolerance,
            "settle": list(self.settle),
            "sites": list(self.sites),
        }

    @classmethod
    def from_json(cls, data: Json, where: str = "leak") -> LeakOutcome:
        d = _object(data, where)
        series = _object(d.get("series"), f"{where}.series")
        leaks = _object(d.get("leaks"), f"{where}.leaks")
        try:
            return cls(
                key=_key_from_json(d, where),
                series={str(k): [int(x) for x in v] for k, v in series.items()},
                leaks={str(k): int(v) for k, v in leaks.items()},
                tolerance=int(_number(d, "tolerance", where)),
                settle=_strings(d, "settle", where),
                sites=_strings(d, "sites", where),
            )
        except (TypeError, ValueError) as exc:
            raise ReportError(f"{where}: unreadable ({exc})") from None


@dataclass(frozen=True)
class ComparisonOutcome:
    """``cuda_timer.compare``: the speedup of a candidate over a reference, both measurements."""

    key: SeriesKey
    comparison: Comparison

    @property
    def speedup(self) -> float:
        return self.comparison.speedup

    @property
    def ci(self) -> tuple[float, float]:
        return self.comparison.ci

    def to_json(self) -> dict[str, Json]:
        return {
            **plain(self.comparison.to_dict()),
            "nodeid": self.key.nodeid,
            "name": self.key.name,
            "key": str(self.key),
        }

    @classmethod
    def from_json(cls, data: Json, where: str = "comparison") -> ComparisonOutcome:
        d = _object(data, where)
        return cls(_key_from_json(d, where), _leaf(Comparison.from_dict, d, where))


def _key_from_json(d: Mapping[str, Json], where: str) -> SeriesKey:
    return SeriesKey(_get(d, "nodeid", str, where), str(d.get("name", "")))


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

    def has(self, *kinds: FailureKind) -> bool:
        return any(f.kind in kinds for f in self.failures)

    def to_json(self) -> dict[str, Json]:
        """Plain builtins only: xdist sends reports through execnet."""
        return {
            "nodeid": self.nodeid,
            "records": [r.to_json() for r in self.records],
            "leak": self.leak.to_json() if self.leak else None,
            "comparisons": [c.to_json() for c in self.comparisons],
            "failures": [[f.kind.value, f.message] for f in self.failures],
            "details": list(self.details),
            "body_passed": self.body_passed,
            "location": list(self.location) if self.location else None,
        }

    @classmethod
    def from_json(cls, data: Json, where: str = "test") -> TestOutcome:
        d = _object(data, where)
        nodeid = _get(d, "nodeid", str, where)
        where = f"{where} {nodeid}"
        location = d.get("location")
        leak = d.get("leak")
        return cls(
            nodeid=nodeid,
            records=_items(d, "records", where, JudgedRecord.from_json),
            failures=_items(d, "failures", where, _failure_from_json),
            details=_strings(d, "details", where),
            leak=LeakOutcome.from_json(leak, f"{where}.leak") if leak else None,
            comparisons=_items(d, "comparisons", where, ComparisonOutcome.from_json),
            body_passed=bool(d.get("body_passed", True)),
            location=(str(location[0]), int(location[1])) if location else None,
        )


def _failure_from_json(data: Json, where: str) -> Failure:
    if not (isinstance(data, list) and len(data) == 2 and all(isinstance(x, str) for x in data)):
        raise ReportError(f"{where}: expected [kind, message], got {data!r}")
    if data[0] not in FailureKind._value2member_map_:
        raise ReportError(f"{where}: unknown failure kind {data[0]!r}")
    return Failure(FailureKind(data[0]), data[1])


# --- the run's report ----------------------------------------------------------------------------


def _update_to_json(update: UpdateSummary) -> dict[str, Json]:
    return {
        "path": str(update.path),
        "added": list(update.added),
        "changed": list(update.changed),
        "afresh": list(update.afresh),
        "unchanged": update.unchanged,
        "pruned": list(update.pruned),
    }


def _update_from_json(data: Json, where: str) -> UpdateSummary:
    d = _object(data, where)
    return UpdateSummary(
        path=Path(_get(d, "path", str, where)),
        added=list(_strings(d, "added", where)),
        changed=list(_strings(d, "changed", where)),
        afresh=list(_strings(d, "afresh", where)),
        unchanged=int(d.get("unchanged", 0)),
        pruned=list(_strings(d, "pruned", where)),
    )


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
    schema: int = SCHEMA

    def records(self) -> list[JudgedRecord]:
        return [r for t in self.tests for r in t.records]

    def judged(self) -> list[TestOutcome]:
        """Outcomes whose body passed (their failures are the plugin's), by test id."""
        return [t for t in self.tests if t.body_passed]

    def counts(self) -> dict[str, int]:
        records = self.records()
        kinds = Counter(r.verdict.kind for r in records)
        peaks = sum(1 for r in records if r.is_peak)
        return {
            "measured": len(records),
            "times": len(records) - peaks,
            "peaks": peaks,
            "regression": kinds[Kind.REGRESSION],
            "improved": kinds[Kind.IMPROVED],
            "new": kinds[Kind.NEW],
            "inconclusive": kinds[Kind.INCONCLUSIVE],
            "leak": sum(1 for t in self.tests if t.has(FailureKind.LEAK)),
            "over budget": sum(1 for t in self.tests if any(f.kind.is_budget for f in t.failures)),
        }

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
        }

    @classmethod
    def from_json(cls, data: Json, where: str = "report") -> Report:
        d = _object(data, where)
        schema = d.get("schema")
        if isinstance(schema, int) and schema > SCHEMA:
            raise ReportError(
                f"{where}: report schema {schema} was written by a newer pytest-cudaperf (this "
                f"one reads {', '.join(map(str, READABLE))}); upgrade pytest-cudaperf"
            )
        if schema not in READABLE:
            raise ReportError(f"{where}: not a --cudaperf-json report (schema {schema!r})")
        obsolete = _object(d.get("obsolete", {}), f"{where}.obsolete")
        return cls(
            tests=tuple(
                sorted(_items(d, "tests", where, TestOutcome.from_json), key=lambda t: t.nodeid)
            ),
            run_id=str(d.get("run_id", "")),
            baseline_dir=str(d.get("baseline_dir") or ""),
            environment=_object(d.get("environment", {}), f"{where}.environment"),
            updates=_items(d, "updates", where, _update_from_json),
            obsolete={str(c): _strings(obsolete, c, f"{where}.obsolete") for c in obsolete},
            drifting=_strings(d, "drifting", where),
            complete_run=bool(d.get("complete_run", True)),
            pruned_refused=bool(d.get("pruned_refused", False)),
            failed_bodies=int(_number(d, "failed_bodies", where)) if "failed_bodies" in d else 0,
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
    )


def dumps(report: Report) -> str:
    """The report's JSON text: sorted keys, two-space indent, final newline."""
    return json.dumps(report.to_json(), indent=2, sort_keys=True) + "\n"


def write_report(path: Path, report: Report) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps(report), encoding="utf-8")


def read_report(path: Path) -> Report:
    """A ``--cudaperf-json`` file; :class:`ReportError` naming the file on anything bad."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ReportError(f"{path}: cannot read ({exc.strerror})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ReportError(f"{path}: not valid JSON ({exc})") from None
    return Report.from_json(data, str(path))
