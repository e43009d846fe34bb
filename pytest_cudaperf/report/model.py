"""What the plugin concluded about one test, typed: its judged records (a time or a peak, the
verdict, the measurement, the breakdowns a verdict was explained with), failures, leak and
comparisons, with their JSON. A test's :class:`TestOutcome` rides on its ``TestReport`` as that
JSON (:meth:`TestOutcome.to_json`, :meth:`TestOutcome.from_json`): the same path with and
without xdist. The run's document that holds them is :mod:`pytest_cudaperf.report.document`.

Reading is strict: a missing or mistyped field is a :class:`ReportError` naming where it is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

from pytest_cudaperf.breakdown.model import Breakdown
from pytest_cudaperf.keys import SeriesKey
from pytest_cudaperf.measure.comparison import Comparison
from pytest_cudaperf.measure.energy import Energy
from pytest_cudaperf.measure.measurement import Measurement
from pytest_cudaperf.measure.roofline import Roofline
from pytest_cudaperf.memory.protocol import PeakResult
from pytest_cudaperf.memory.sweep import SweepStatus
from pytest_cudaperf.report.fields import (
    Json,
    ReportError,
    get,
    items,
    leaf,
    number,
    optional_number,
    pair,
    plain,
    strings,
    to_object,
)
from pytest_cudaperf.series import TIME_UNITS, Record
from pytest_cudaperf.store.format import (
    BaselineError,
    check_env,
    check_noise,
    check_unit,
    recording_from_json,
    recording_to_json,
)
from pytest_cudaperf.verdict import Kind, Verdict

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


#: the limits a test sets (max_ms and the other budgets, min_speedup, max_peak), not baseline
#: comparisons: each counted apart in the run's summary (``Report.counts``), by this name
LIMITS = {
    FailureKind.BUDGET: "over budget",
    FailureKind.SPEEDUP: "too slow",
    FailureKind.MEMORY: "over max_peak",
}


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
class OtherDevice:
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
    d = to_object(data, where)
    kind = get(d, "kind", str, where)
    if kind not in Kind._value2member_map_:
        raise ReportError(f"{where}.kind: expected one of {', '.join(Kind)}, got {kind!r}")
    return Verdict(
        kind=Kind(kind),
        ratio=optional_number(d, "ratio", where),
        ci=pair(d, "ci", where) if d.get("ci") is not None else None,
        threshold=optional_number(d, "threshold", where),
        message=str(d.get("message") or ""),
        tolerance=optional_number(d, "tolerance", where),
        fingerprint=strings(d, "fingerprint", where),
        cycles_ratio=optional_number(d, "cycles_ratio", where),
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
    d = to_object(data, where)
    try:
        for name in ("nodeid", "name", "series", "device_class"):
            get(d, name, str, where)
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
    others: tuple[OtherDevice, ...] = ()
    #: what the kernel (or op) breakdown says changed, one line each (non-pass verdicts)
    explanation: tuple[str, ...] = ()
    #: the stored (or reference) and the current breakdown the explanation diffs, when both exist
    compared: tuple[Breakdown, Breakdown] | None = None
    #: in a distributed test: the rank whose (slowest) record this is, and every rank's value
    rank: int | None = None
    ranks: Mapping[str, float] = field(default_factory=dict)
    #: a collective's bandwidth (``dist_rank.bench_collective``)
    bandwidth: Bandwidth | None = None
    #: a time's speed of light: the call's work, rates and ceilings (``--cudaperf-roofline``)
    roofline: Roofline | None = None
    #: an ``energy:call`` series' window: joules per call, mean power, the counter's resolution
    energy: Energy | None = None

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
        return self.unit in TIME_UNITS

    @property
    def is_peak(self) -> bool:
        return self.series.startswith("memory:")

    @property
    def is_energy(self) -> bool:
        return self.series.startswith("energy:")

    @property
    def traced(self) -> str | None:
        """The tracer or profiler this time was measured under (not judged, not recorded)."""
        return self.measurement.traced if self.measurement is not None else None

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
        if self.roofline is not None:
            data["roofline"] = plain(self.roofline.to_dict())
        if self.energy is not None:
            data["energy"] = plain(self.energy.to_dict())
        return data

    @classmethod
    def from_json(cls, data: Json, where: str = "record") -> JudgedRecord:
        d = to_object(data, where)
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
                leaf(Measurement.from_dict, measured, f"{where}.measurement") if measured else None
            ),
            peak=leaf(_peak_from_json, peak, f"{where}.peak") if peak else None,
            others=items(d, "others", where, _other_from_json),
            explanation=strings(d, "explanation", where),
            compared=_compared_from_json(compared, f"{where}.compared") if compared else None,
            rank=int(rank) if isinstance(rank, int) and not isinstance(rank, bool) else None,
            ranks={str(k): float(v) for k, v in to_object(ranks, f"{where}.ranks").items()},
            bandwidth=_bandwidth_from_json(bandwidth, f"{where}.bandwidth") if bandwidth else None,
            roofline=(
                leaf(Roofline.from_dict, d["roofline"], f"{where}.roofline")
                if d.get("roofline")
                else None
            ),
            energy=leaf(Energy.from_dict, d["energy"], f"{where}.energy")
            if d.get("energy")
            else None,
        )


def _peak_from_json(d: Mapping[str, Json]) -> PeakResult:
    return PeakResult(
        peak_bytes=int(d["peak_bytes"]),
        alloc_retries=int(d.get("alloc_retries", 0)),
        ooms=int(d.get("ooms", 0)),
        device=str(d.get("device", "cpu")),
    )


def _other_from_json(data: Json, where: str) -> OtherDevice:
    d = to_object(data, where)
    return OtherDevice(get(d, "device_class", str, where), number(d, "value", where))


def _compared_from_json(data: Json, where: str) -> tuple[Breakdown, Breakdown]:
    d = to_object(data, where)
    try:
        return Breakdown.from_json(d.get("base")), Breakdown.from_json(d.get("current"))
    except ValueError as exc:
        raise ReportError(f"{where}: {exc}") from None


def _bandwidth_from_json(data: Json, where: str) -> Bandwidth:
    d = to_object(data, where)
    return Bandwidth(
        op=get(d, "op", str, where),
        bytes=int(number(d, "bytes", where)),
        algbw_gbps=number(d, "algbw_gbps", where),
        busbw_gbps=number(d, "busbw_gbps", where),
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
        d = to_object(data, where)
        series = to_object(d.get("series"), f"{where}.series")
        leaks = to_object(d.get("leaks"), f"{where}.leaks")
        try:
            return cls(
                key=_key_from_json(d, where),
                series={str(k): [int(x) for x in v] for k, v in series.items()},
                leaks={str(k): int(v) for k, v in leaks.items()},
                tolerance=int(number(d, "tolerance", where)),
                settle=strings(d, "settle", where),
                sites=strings(d, "sites", where),
            )
        except (TypeError, ValueError) as exc:
            raise ReportError(f"{where}: unreadable ({exc})") from None


@dataclass(frozen=True)
class SweepOutcome:
    """What the leak sweep concluded about one test: its status, why (an unchecked test's
    reason, a leak's message), what its first pass saw grow, whether the full check re-ran it,
    and the seconds the sweep spent on it. A leak's readings and sites are the test's
    :class:`LeakOutcome`."""

    status: SweepStatus
    reason: str = ""
    growth: Mapping[str, int] = field(default_factory=dict)
    rechecked: bool = False
    seconds: float = 0.0

    def to_json(self) -> dict[str, Json]:
        return {
            "status": self.status.value,
            "reason": self.reason,
            "growth": dict(self.growth),
            "rechecked": self.rechecked,
            "seconds": self.seconds,
        }

    @classmethod
    def from_json(cls, data: Json, where: str = "sweep") -> SweepOutcome:
        d = to_object(data, where)
        status = get(d, "status", str, where)
        if status not in SweepStatus._value2member_map_:
            raise ReportError(
                f"{where}.status: expected one of {', '.join(SweepStatus)}, got {status!r}"
            )
        grown = to_object(d.get("growth", {}), f"{where}.growth")
        seconds = number(d, "seconds", where)
        try:
            growth = {str(k): int(v) for k, v in grown.items()}
        except (TypeError, ValueError) as exc:
            raise ReportError(f"{where}.growth: unreadable ({exc})") from None
        return cls(
            status=SweepStatus(status),
            reason=str(d.get("reason", "")),
            growth=growth,
            rechecked=bool(d.get("rechecked", False)),
            seconds=seconds,
        )


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
        d = to_object(data, where)
        return cls(_key_from_json(d, where), leaf(Comparison.from_dict, d, where))


def _key_from_json(d: Mapping[str, Json], where: str) -> SeriesKey:
    return SeriesKey(get(d, "nodeid", str, where), str(d.get("name", "")))


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
    #: the leak sweep's conclusion (None: not swept)
    sweep: SweepOutcome | None = None

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
            "sweep": self.sweep.to_json() if self.sweep else None,
        }

    @classmethod
    def from_json(cls, data: Json, where: str = "test") -> TestOutcome:
        d = to_object(data, where)
        nodeid = get(d, "nodeid", str, where)
        where = f"{where} {nodeid}"
        location = d.get("location")
        leak = d.get("leak")
        sweep = d.get("sweep")
        return cls(
            nodeid=nodeid,
            records=items(d, "records", where, JudgedRecord.from_json),
            failures=items(d, "failures", where, _failure_from_json),
            details=strings(d, "details", where),
            leak=LeakOutcome.from_json(leak, f"{where}.leak") if leak else None,
            comparisons=items(d, "comparisons", where, ComparisonOutcome.from_json),
            body_passed=bool(d.get("body_passed", True)),
            location=(str(location[0]), int(location[1])) if location else None,
            sweep=SweepOutcome.from_json(sweep, f"{where}.sweep") if sweep else None,
        )


def _failure_from_json(data: Json, where: str) -> Failure:
    if not (isinstance(data, list) and len(data) == 2 and all(isinstance(x, str) for x in data)):
        raise ReportError(f"{where}: expected [kind, message], got {data!r}")
    if data[0] not in FailureKind._value2member_map_:
        raise ReportError(f"{where}: unknown failure kind {data[0]!r}")
    return Failure(FailureKind(data[0]), data[1])
