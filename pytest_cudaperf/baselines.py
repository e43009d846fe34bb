"""The on-disk baseline store: one deterministic JSON file per device class (schema 2).

A series (test id, measurement name, series such as ``time:device/cold``) keeps the recordings it
was made from, one per process, oldest first, at most :data:`MAX_RECORDINGS`; its ``value`` and
``noise`` are what :mod:`pytest_cudaperf.evidence` makes of them. See ``docs/baselines.md``.

Reading is strict: every field's type and range is checked, and a bad file or entry is a
:class:`BaselineError` naming the file, the entry and the field. Writes are atomic (temporary file,
fsync, rename, the file's mode kept) under a lock; the folder carries its own ``.gitignore`` so the
lock and temporary files never show in ``git status``.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import math
import os
import re
import secrets
import statistics
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_cudaperf import evidence
from pytest_cudaperf.keys import SeriesKey
from pytest_cudaperf.locks import fcntl

SCHEMA = 2
#: recordings kept per series (oldest dropped first)
MAX_RECORDINGS = 10
#: units a series may have
UNITS = frozenset({"ms", "bytes", "GB/s", "TFLOP/s"})
#: temporary files of a killed writer older than this are removed at the next update
STALE_TMP_SECONDS = 300.0
GITIGNORE = (
    "# written by pytest-cudaperf: only the *.json files here are meant to be committed\n"
    ".gitignore\n.lock\n*.tmp\n"
)
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


class BaselineError(ValueError):
    """A baseline file that cannot be used or written; the message names the file."""


def slug(device_class: str) -> str:
    """``NVIDIA H100 80GB HBM3`` -> ``nvidia-h100-80gb-hbm3``."""
    return re.sub(r"[^a-z0-9]+", "-", device_class.lower()).strip("-") or "unknown"


def today() -> str:
    return datetime.date.today().isoformat()


def test_file_of(nodeid: str) -> str:
    """The test file part of a test id."""
    return nodeid.split("::", 1)[0]


# --- deterministic JSON ------------------------------------------------------------------------


def _round(value: Any) -> Any:
    if isinstance(value, float):
        return float(f"{value:.6g}") if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _round(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_round(v) for v in value]
    return value


def _compact(value: Any) -> str:
    return json.dumps(_round(value), sort_keys=True, ensure_ascii=False, separators=(", ", ": "))


def dumps(document: Mapping[str, Any]) -> str:
    """Deterministic JSON: sorted keys, two-space indent, 6 significant digits, final newline."""
    return json.dumps(_round(dict(document)), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


#: order of an entry's fields on disk: recordings first, then the fields an update changes, so
#: appending a recording is one diff hunk (the new line next to the new value/noise/env lines)
_ENTRY_ORDER = ("recordings", "env", "noise", "since", "unit", "value", "breakdown")


def _entry_text(entry: Mapping[str, Any], pad: str) -> str:
    inner = pad + "  "
    lines = []
    keys = [k for k in _ENTRY_ORDER if k in entry] + sorted(
        k for k in entry if k not in _ENTRY_ORDER
    )
    for key in keys:
        value = entry[key]
        if key == "recordings":
            items = ",\n".join(f"{inner}  {_compact(r)}" for r in value)
            text = f"[\n{items}\n{inner}]" if value else "[]"
        else:
            text = _compact(value)
        lines.append(f"{inner}{json.dumps(key)}: {text}")
    return "{\n" + ",\n".join(lines) + f"\n{pad}}}"


def dumps_baseline(document: Mapping[str, Any]) -> str:
    """A schema-2 document: sorted keys, each recording and each env on one line."""
    out = ["{", f'  "device_class": {json.dumps(document["device_class"], ensure_ascii=False)},']
    nodeids = sorted(document["entries"])
    if not nodeids:
        out.append('  "entries": {},')
    else:
        out.append('  "entries": {')
        for i, nodeid in enumerate(nodeids):
            names = document["entries"][nodeid]
            out.append(f"    {json.dumps(nodeid, ensure_ascii=False)}: {{")
            for j, name in enumerate(sorted(names)):
                by_series = names[name]
                out.append(f"      {json.dumps(name, ensure_ascii=False)}: {{")
                for k, series in enumerate(sorted(by_series)):
                    text = _entry_text(by_series[series], "        ")
                    comma = "," if k < len(by_series) - 1 else ""
                    out.append(f"        {json.dumps(series, ensure_ascii=False)}: {text}{comma}")
                out.append("      }" + ("," if j < len(names) - 1 else ""))
            out.append("    }" + ("," if i < len(nodeids) - 1 else ""))
        out.append("  },")
    out.append(f'  "schema": {SCHEMA}')
    out.append("}")
    return "\n".join(out) + "\n"


# --- strict field checks -----------------------------------------------------------------------


def _bad(where: str, fieldname: str, what: str, value: Any) -> BaselineError:
    return BaselineError(f"{where}: {fieldname!r} must be {what}, got {value!r}")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _positive(where: str, name: str, value: Any, allow_zero: bool = False) -> float:
    ok = _number(value) and math.isfinite(value) and (value >= 0 if allow_zero else value > 0)
    if not ok:
        what = "a finite number >= 0" if allow_zero else "a finite positive number"
        raise _bad(where, name, what, value)
    return float(value)


def _noise(where: str, name: str, value: Any) -> float:
    return _positive(where, name, value, allow_zero=True)


def _count(where: str, name: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise _bad(where, name, "an integer >= 1", value)
    return value


def _unit(where: str, value: Any) -> str:
    if value not in UNITS:
        raise _bad(where, "unit", f"one of {', '.join(sorted(UNITS))}", value)
    return str(value)


def _date(where: str, name: str, value: Any) -> str:
    if not isinstance(value, str) or not _DATE.match(value):
        raise _bad(where, name, "a date YYYY-MM-DD", value)
    return value


def _env(where: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _bad(where, "env", "an object", value)
    return dict(value)


def _ci(where: str, value: Any, allow_zero: bool) -> tuple[float, float] | None:
    if value is None:
        return None
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not all(_number(v) and math.isfinite(v) and v >= 0 for v in value)
        or value[0] > value[1]
        or (not allow_zero and value[0] <= 0)
    ):
        raise _bad(where, "ci", "a pair [low, high] of finite numbers, low <= high", value)
    low, high = (v if isinstance(v, int) else float(v) for v in value)  # byte counts stay ints
    return low, high


# --- typed entries -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Recording:
    """One process's measurement of a series."""

    date: str
    median: float
    noise: float
    n: int
    rounds: tuple[float, ...] = ()
    sm_mhz: float | None = None
    unstable: tuple[str, ...] = ()
    ci: tuple[float, float] | None = None
    #: the reference loop's time while this process measured (CPU backend on the CPU; see
    #: ``Measurement.reference_ms``)
    reference_ms: float | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "date": self.date,
            "median": self.median,
            "noise": self.noise,
            "n": self.n,
            "rounds": list(self.rounds),
            "sm_mhz": self.sm_mhz,
            "unstable": list(self.unstable),
        }
        if self.ci is not None:
            data["ci"] = list(self.ci)
        if self.reference_ms is not None:
            data["reference_ms"] = self.reference_ms
        return data

    @classmethod
    def from_json(cls, data: Any, where: str = "recording", unit: str = "ms") -> Recording:
        """Strictly: a :class:`BaselineError` naming ``where`` and the field on bad input."""
        if not isinstance(data, dict):
            raise BaselineError(f"{where}: a recording must be an object, got {data!r}")
        exact = unit == "bytes"
        median = _positive(where, "median", data.get("median"), allow_zero=exact)
        rounds = data.get("rounds", [])
        if not isinstance(rounds, list) or not all(
            _number(r) and math.isfinite(r) and r > 0 for r in rounds
        ):
            raise _bad(where, "rounds", "a list of finite positive numbers", rounds)
        sm_mhz = data.get("sm_mhz")
        if sm_mhz is not None:
            sm_mhz = _positive(where, "sm_mhz", sm_mhz)
        reference_ms = data.get("reference_ms")
        if reference_ms is not None:
            reference_ms = _positive(where, "reference_ms", reference_ms)
        unstable = data.get("unstable", [])
        if not isinstance(unstable, list) or not all(isinstance(u, str) for u in unstable):
            raise _bad(where, "unstable", "a list of strings", unstable)
        return cls(
            date=_date(where, "date", data.get("date")),
            median=int(median) if exact else median,
            noise=_noise(where, "noise", data.get("noise")),
            n=_count(where, "n", data.get("n")),
            rounds=tuple(float(r) for r in rounds),
            sm_mhz=sm_mhz,
            unstable=tuple(unstable),
            ci=_ci(where, data.get("ci"), allow_zero=exact),
            reference_ms=reference_ms,
        )


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


@dataclass(frozen=True)
class Entry:
    """A baseline series: what verdicts use (``value``, ``noise``) and the evidence behind it."""

    value: float
    unit: str
    noise: float
    since: str
    env: Mapping[str, Any]
    recordings: tuple[Recording, ...]
    #: opaque JSON object kept verbatim (per-kernel breakdown)
    breakdown: Mapping[str, Any] | None = None
    #: ``device``, ``wall`` or ``bytes`` (from the series name; not stored)
    metric: str = "device"

    @property
    def processes(self) -> int:
        """How many recordings (each from its own process) stand behind the series."""
        return len(self.recordings)

    @property
    def sm_mhz(self) -> float | None:
        """The median SM clock of the recordings that have one."""
        return _median([r.sm_mhz for r in self.recordings if r.sm_mhz is not None])

    @property
    def reference_ms(self) -> float | None:
        """The median reference-loop time of the recordings that have one: how fast the host
        ran when the series was recorded."""
        return _median([r.reference_ms for r in self.recordings if r.reference_ms is not None])

    @classmethod
    def of(  # noqa: PLR0913 - an entry's parts, each optional but the recordings
        cls,
        recordings: Sequence[Recording],
        unit: str,
        env: Mapping[str, Any],
        metric: str,
        since: str | None = None,
        breakdown: Mapping[str, Any] | None = None,
    ) -> Entry:
        """The entry ``recordings`` (oldest first) make; only the last ``MAX_RECORDINGS`` kept."""
        kept = tuple(recordings[-(1 if unit == "bytes" else MAX_RECORDINGS) :])
        value, noise = evidence.summarize_recordings(kept, metric)
        exact = int(value) if unit == "bytes" else value
        return cls(exact, unit, noise, since or kept[0].date, dict(env), kept, breakdown, metric)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "value": self.value,
            "unit": self.unit,
            "noise": self.noise,
            "since": self.since,
            "env": dict(self.env),
            "recordings": [r.to_json() for r in self.recordings],
        }
        if self.breakdown is not None:
            data["breakdown"] = dict(self.breakdown)
        return data

    @classmethod
    def from_json(cls, data: Any, where: str, series: str) -> Entry:
        if not isinstance(data, dict):
            raise BaselineError(f"{where}: must be an object, got {data!r}")
        unit = _unit(where, data.get("unit"))
        exact = unit == "bytes"
        recordings = data.get("recordings")
        if not isinstance(recordings, list) or not recordings:
            raise _bad(where, "recordings", "a non-empty list of recordings", recordings)
        breakdown = data.get("breakdown")
        if breakdown is not None and not isinstance(breakdown, dict):
            raise _bad(where, "breakdown", "an object", breakdown)
        value = _positive(where, "value", data.get("value"), allow_zero=exact)
        return cls(
            value=int(value) if exact else value,
            unit=unit,
            noise=_noise(where, "noise", data.get("noise")),
            since=_date(where, "since", data.get("since")),
            env=_env(where, data.get("env")),
            recordings=tuple(
                Recording.from_json(r, f"{where}: recordings[{i}]", unit)
                for i, r in enumerate(recordings)
            ),
            breakdown=breakdown,
            metric=evidence.metric_of(series, unit),
        )


@dataclass(frozen=True)
class Record:
    """What one test produced for one series: travels on the TestReport, in the JSON report, and
    into the store. JSON form (``to_json``)::

        {"nodeid": ..., "name": ..., "series": ..., "device_class": ..., "unit": ...,
         "recording": {...Recording...}, "env": {...}, "breakdown": {...} (optional)}
    """

    key: SeriesKey
    series: str
    device_class: str
    unit: str
    recording: Recording
    env: Mapping[str, Any]
    breakdown: Mapping[str, Any] | None = None
    #: the test's tolerance, for the change-point test at update (None: the run's)
    tolerance: float | None = None

    @property
    def value(self) -> float:
        return self.recording.median

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "nodeid": self.key.nodeid,
            "name": self.key.name,
            "series": self.series,
            "device_class": self.device_class,
            "unit": self.unit,
            "recording": self.recording.to_json(),
            "env": dict(self.env),
        }
        if self.breakdown is not None:
            data["breakdown"] = dict(self.breakdown)
        if self.tolerance is not None:
            data["tolerance"] = self.tolerance
        return data

    @classmethod
    def from_json(cls, data: Any, where: str = "record") -> Record:
        """Strictly; extra fields (a verdict, the measurement) are ignored."""
        if not isinstance(data, dict):
            raise BaselineError(f"{where}: a record must be an object, got {data!r}")
        for name in ("nodeid", "name", "series", "device_class"):
            if not isinstance(data.get(name), str):
                raise _bad(where, name, "a string", data.get(name))
        unit = _unit(where, data.get("unit"))
        breakdown = data.get("breakdown")
        if breakdown is not None and not isinstance(breakdown, dict):
            raise _bad(where, "breakdown", "an object", breakdown)
        return cls(
            key=SeriesKey(data["nodeid"], data["name"]),
            series=data["series"],
            device_class=data["device_class"],
            unit=unit,
            recording=Recording.from_json(data.get("recording"), f"{where}: recording", unit),
            env=_env(where, data.get("env")),
            breakdown=breakdown,
            tolerance=(
                None
                if data.get("tolerance") is None
                else _noise(where, "tolerance", data["tolerance"])
            ),
        )


# --- reading and migration ---------------------------------------------------------------------

_NAME_SUFFIX = re.compile(r"^[^\[\]]+$")


def split_v1_key(key: str) -> SeriesKey:
    """Schema 1 joined ``nodeid#name``. Split at the last ``#`` whose suffix looks like a name
    (non-empty, no ``[`` or ``]``) and whose prefix is a test id (has ``::``); otherwise the whole
    key is the test id. So ``t.py::test_ids[c#d]`` stays whole and ``t.py::test_a[c#d]#fused``
    splits into ``t.py::test_a[c#d]`` and ``fused``. Ambiguous, and read as a name: a parametrize
    id ending in ``#x`` outside brackets, which pytest does not produce."""
    cut = key.rfind("#")
    if cut > 0 and "::" in key[:cut] and _NAME_SUFFIX.match(key[cut + 1 :]):
        return SeriesKey(key[:cut], key[cut + 1 :])
    return SeriesKey(key)


def _migrate_v1(document: dict[str, Any], path: Path) -> dict[str, Any]:
    """Schema 1 -> 2: each old entry becomes one recording (checked strictly on the way)."""
    entries = document.get("entries")
    if not isinstance(entries, dict):
        raise BaselineError(f"{path}: expected 'entries' (object)")
    new: dict[str, dict[str, dict[str, Any]]] = {}
    for key, by_series in entries.items():
        if not isinstance(by_series, dict):
            raise BaselineError(f"{path}: entry {key!r} must be an object of series")
        skey = split_v1_key(key)
        for series, old in by_series.items():
            where = f"{path}: entry {key!r} / {series!r}"
            if not isinstance(old, dict):
                raise BaselineError(f"{where}: must be an object, got {old!r}")
            unit = _unit(where, old.get("unit"))
            exact = unit == "bytes"
            value = _positive(where, "value", old.get("value"), allow_zero=exact)
            env = _env(where, old.get("env", {}))
            date = env.get("date") if isinstance(env.get("date"), str) else None
            date = date if date and _DATE.match(date) else today()
            sm: Any = env.get("sm_mhz")
            recording = Recording(
                date=date,
                median=int(value) if exact else value,
                noise=_noise(where, "noise", old.get("noise")),
                n=_count(where, "n", old.get("n")),
                sm_mhz=float(sm) if _number(sm) and math.isfinite(sm) and sm > 0 else None,
                ci=_ci(where, old.get("ci"), allow_zero=exact),
            )
            entry = Entry.of([recording], unit, env, evidence.metric_of(series, unit), date)
            new.setdefault(skey.nodeid, {}).setdefault(skey.name, {})[series] = entry.to_json()
    return {"schema": 2, "device_class": document.get("device_class"), "entries": new}


#: migrations from older schemas: version -> function returning the next version's document
MIGRATIONS: dict[int, Any] = {1: _migrate_v1}

Entries = dict[SeriesKey, dict[str, Entry]]


def parse_document(path: Path, document: Any) -> tuple[str, Entries]:
    """A document (any known schema) -> its device class and typed entries, strictly."""
    if not isinstance(document, dict):
        kind = type(document).__name__
        raise BaselineError(f"{path}: expected a JSON object at the top, got {kind}")
    schema = document.get("schema")
    while schema != SCHEMA:
        if isinstance(schema, int) and not isinstance(schema, bool) and schema in MIGRATIONS:
            document = MIGRATIONS[schema](document, path)
            schema = document.get("schema")
            continue
        if isinstance(schema, int) and schema > SCHEMA:
            raise BaselineError(
                f"{path}: schema {schema} was written by a newer pytest-cudaperf (this one reads "
                f"schema {SCHEMA}); upgrade pytest-cudaperf"
            )
        raise BaselineError(f"{path}: unknown schema {schema!r} (expected {SCHEMA})")
    device_class, entries = document.get("device_class"), document.get("entries")
    if not isinstance(entries, dict) or not isinstance(device_class, str):
        raise BaselineError(f"{path}: expected 'device_class' (string) and 'entries' (object)")
    result: Entries = {}
    for nodeid, names in entries.items():
        if not isinstance(names, dict):
            raise BaselineError(f"{path}: entry {nodeid!r} must be an object of measurement names")
        for name, by_series in names.items():
            if not isinstance(by_series, dict):
                raise BaselineError(
                    f"{path}: entry {nodeid!r} [{name}] must be an object of series"
                )
            for series, data in by_series.items():
                where = f"{path}: entry {nodeid!r}{f' [{name}]' if name else ''} / {series!r}"
                result.setdefault(SeriesKey(nodeid, name), {})[series] = Entry.from_json(
                    data, where, series
                )
    return device_class, result


def read_file(path: Path) -> tuple[str, Entries]:
    """A baseline file -> (device class, entries); a :class:`BaselineError` on anything bad."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BaselineError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BaselineError(
            f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); fix it, "
            "or delete it and run pytest --cudaperf-update"
        ) from None
    return parse_document(path, document)


def to_document(device_class: str, entries: Entries) -> dict[str, Any]:
    nested: dict[str, dict[str, dict[str, Any]]] = {}
    for key, by_series in entries.items():
        for series, entry in by_series.items():
            nested.setdefault(key.nodeid, {}).setdefault(key.name, {})[series] = entry.to_json()
    return {"schema": SCHEMA, "device_class": device_class, "entries": nested}


# --- writing -----------------------------------------------------------------------------------


def _write_error(path: Path, exc: OSError) -> BaselineError:
    return BaselineError(
        f"{path}: cannot write the baseline ({exc.strerror or exc}); make the folder writable, "
        "or choose another one with --cudaperf-baseline-dir"
    )


def prepare_folder(folder: Path) -> None:
    """Create ``folder`` with its ``.gitignore`` (lock and temporary files stay out of git)."""
    if folder.exists() and not folder.is_dir():
        raise BaselineError(
            f"{folder}: exists but is not a folder; move it away, or choose another baseline "
            "folder with --cudaperf-baseline-dir"
        )
    try:
        folder.mkdir(parents=True, exist_ok=True)
        ignore = folder / ".gitignore"
        if not ignore.exists():
            write_atomic(ignore, GITIGNORE)
    except OSError as exc:
        raise _write_error(folder, exc) from None


def remove_stale_tmp(folder: Path, older_than: float = STALE_TMP_SECONDS) -> list[Path]:
    """Remove ``*.tmp`` files a killed writer left behind (older than ``older_than`` seconds)."""
    removed = []
    now = time.time()
    for tmp in folder.glob("*.tmp"):
        with contextlib.suppress(OSError):
            if now - tmp.stat().st_mtime > older_than:
                tmp.unlink()
                removed.append(tmp)
    return removed


@contextlib.contextmanager
def locked(folder: Path) -> Iterator[None]:
    prepare_folder(folder)
    try:
        fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as exc:
        raise _write_error(folder / ".lock", exc) from None
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def write_atomic(path: Path, text: str) -> None:
    """Write a hidden ``.NAME.XXXX.tmp`` in the same folder, fsync, then rename over ``path``.
    An existing file keeps its mode; a new one gets the umask's (``0o666 & ~umask``)."""
    tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with contextlib.suppress(OSError):
            os.fchmod(fd, path.stat().st_mode & 0o7777)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


# --- the store ---------------------------------------------------------------------------------


@dataclass
class UpdateSummary:
    path: Path
    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    #: series whose new recordings were at a new level (change point) or that were re-recorded
    afresh: list[str] = field(default_factory=list)
    unchanged: int = 0
    pruned: list[str] = field(default_factory=list)

    def line(self) -> str:
        updated = f"{len(self.changed)} updated"
        if self.afresh:
            updated += f" ({len(self.afresh)} started afresh)"
        parts = [f"{len(self.added)} added", updated, f"{self.unchanged} kept"]
        if self.pruned:
            parts.append(f"{len(self.pruned)} pruned")
        return f"cudaperf: baselines {self.path}: " + ", ".join(parts)


def _tolerance(group: Sequence[Record], default: float) -> float:
    given = [r.tolerance for r in group if r.tolerance is not None]
    return min(given) if given else default


def _label(key: SeriesKey, series: str) -> str:
    return f"{key} {{{series}}}"


class BaselineStore:
    """Every baseline file of a folder, read strictly at start-up."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.entries: dict[str, Entries] = {}
        self.paths: dict[str, Path] = {}

    @classmethod
    def load(cls, folder: Path) -> BaselineStore:
        store = cls(folder)
        if folder.exists() and not folder.is_dir():
            raise BaselineError(
                f"{folder}: exists but is not a folder; move it away, or choose another baseline "
                "folder with --cudaperf-baseline-dir"
            )
        if folder.is_dir():
            for path in sorted(folder.glob("*.json")):
                device_class, entries = read_file(path)
                store.entries[device_class] = entries
                store.paths[device_class] = path
        return store

    def path_for(self, device_class: str) -> Path:
        return self.paths.get(device_class, self.folder / f"{slug(device_class)}.json")

    def lookup(self, device_class: str, key: SeriesKey, series: str) -> Entry | None:
        return self.entries.get(device_class, {}).get(key, {}).get(series)

    def others(self, device_class: str, key: SeriesKey, series: str) -> list[tuple[str, Entry]]:
        """Entries of the same series in other device classes: shown, never enforced."""
        found = []
        for other, entries in sorted(self.entries.items()):
            entry = entries.get(key, {}).get(series)
            if other != device_class and entry is not None:
                found.append((other, entry))
        return found

    def keys(self, device_class: str) -> list[SeriesKey]:
        return sorted(self.entries.get(device_class, {}))

    def obsolete(
        self, device_class: str, seen: set[str], seen_files: set[str], complete: bool, root: Path
    ) -> list[SeriesKey]:
        """Keys whose tests no longer exist: their file is gone, or a complete run of their file
        did not see their test id (``seen``: test ids). A partial run never calls an entry of an
        unseen test obsolete."""
        return [
            key
            for key in self.keys(device_class)
            if not (root / key.file).exists()
            or (complete and key.file in seen_files and key.nodeid not in seen)
        ]

    def update(
        self,
        device_class: str,
        records: Iterable[Record],
        prune: Iterable[SeriesKey] = (),
        tolerance: float = 0.05,
    ) -> UpdateSummary:
        """``--cudaperf-update``: add each record's recording to its series (the last
        ``MAX_RECORDINGS`` kept), or start the series afresh where it is clearly at a new level.
        Under the lock, re-reading the file first, so entries written meanwhile are kept.
        ``tolerance`` is for records that carry none of their own (``Record.tolerance``)."""
        return self._write(device_class, records, prune, tolerance, fresh=False)

    def replace(self, device_class: str, records: Iterable[Record]) -> UpdateSummary:
        """``cudaperf record``: the records of each series (one per run) become the series,
        replacing its recordings (``since`` = the earliest of them)."""
        return self._write(device_class, records, (), 0.0, fresh=True)

    def _write(
        self,
        device_class: str,
        records: Iterable[Record],
        prune: Iterable[SeriesKey],
        tolerance: float,
        fresh: bool,
    ) -> UpdateSummary:
        path = self.path_for(device_class)
        summary = UpdateSummary(path)
        grouped: dict[tuple[SeriesKey, str], list[Record]] = {}
        for record in records:
            grouped.setdefault((record.key, record.series), []).append(record)
        with locked(self.folder):
            remove_stale_tmp(self.folder)
            entries: Entries = read_file(path)[1] if path.exists() and not path.is_dir() else {}
            for (key, series), group in sorted(grouped.items()):
                last = group[-1]
                new = [r.recording for r in group]
                metric = evidence.metric_of(series, last.unit)
                old = entries.get(key, {}).get(series)
                label = _label(key, series)
                if old is None or old.unit != last.unit:
                    entry = Entry.of(new, last.unit, last.env, metric, None, last.breakdown)
                    (summary.added if old is None else summary.afresh).append(label)
                elif fresh or evidence.is_change_point(old, new, _tolerance(group, tolerance)):
                    entry = Entry.of(new, last.unit, last.env, metric, None, last.breakdown)
                    summary.afresh.append(label)
                else:
                    recs = [*old.recordings, *new]
                    kept = last.breakdown if last.breakdown is not None else old.breakdown
                    entry = Entry.of(recs, last.unit, last.env, metric, old.since, kept)
                if old is not None and label not in summary.added:
                    summary.changed.append(label)
                entries.setdefault(key, {})[series] = entry
            for key in prune:
                if entries.pop(key, None) is not None:
                    summary.pruned.append(str(key))
            total = sum(len(s) for s in entries.values())
            summary.unchanged = total - len(summary.added) - len(summary.changed)
            try:
                write_atomic(path, dumps_baseline(to_document(device_class, entries)))
            except OSError as exc:
                raise _write_error(path, exc) from None
        self.entries[device_class] = parse_document(path, json.loads(path.read_text("utf-8")))[1]
        self.paths[device_class] = path
        return summary
