"""The baseline file format (schema 2): strict JSON of recordings and series, and the
deterministic text a pull request diffs. See ``docs/baselines.md``.

Reading is strict: every field's type and range is checked, and a bad value is a
:class:`BaselineError` naming the file, the entry and the field.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_cudaperf.keys import SeriesKey
from pytest_cudaperf.series import TIME_UNITS, Entry, Recording, metric_of

SCHEMA = 2
#: units a series may have
UNITS = frozenset({*TIME_UNITS, "bytes", "GB/s", "TFLOP/s", "J"})
DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")

#: a file's series by key and series name
Entries = dict[SeriesKey, dict[str, Entry]]


class BaselineError(ValueError):
    """A baseline file that cannot be used or written; the message names the file."""


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


def bad_field(where: str, fieldname: str, what: str, value: Any) -> BaselineError:
    return BaselineError(f"{where}: {fieldname!r} must be {what}, got {value!r}")


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_positive(where: str, name: str, value: Any, allow_zero: bool = False) -> float:
    ok = is_number(value) and math.isfinite(value) and (value >= 0 if allow_zero else value > 0)
    if not ok:
        what = "a finite number >= 0" if allow_zero else "a finite positive number"
        raise bad_field(where, name, what, value)
    return float(value)


def optional_positive(where: str, name: str, data: Mapping[str, Any]) -> float | None:
    """``data[name]`` checked by :func:`check_positive`, or None where it is absent or null."""
    value = data.get(name)
    return None if value is None else check_positive(where, name, value)


def check_noise(where: str, name: str, value: Any) -> float:
    return check_positive(where, name, value, allow_zero=True)


def check_count(where: str, name: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise bad_field(where, name, "an integer >= 1", value)
    return value


def check_unit(where: str, value: Any) -> str:
    if value not in UNITS:
        raise bad_field(where, "unit", f"one of {', '.join(sorted(UNITS))}", value)
    return str(value)


def check_date(where: str, name: str, value: Any) -> str:
    if not isinstance(value, str) or not DATE.match(value):
        raise bad_field(where, name, "a date YYYY-MM-DD", value)
    return value


def check_env(where: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise bad_field(where, "env", "an object", value)
    return dict(value)


def check_ci(where: str, value: Any, allow_zero: bool) -> tuple[float, float] | None:
    if value is None:
        return None
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not all(is_number(v) and math.isfinite(v) and v >= 0 for v in value)
        or value[0] > value[1]
        or (not allow_zero and value[0] <= 0)
    ):
        sign = "non-negative" if allow_zero else "positive"
        raise bad_field(
            where, "ci", f"a pair [low, high] of finite {sign} numbers, low <= high", value
        )
    low, high = (v if isinstance(v, int) else float(v) for v in value)  # byte counts stay ints
    return low, high


# --- recordings and series ----------------------------------------------------------------------


#: a recording's optional positive fields: written where present, absent from older files
OPTIONAL_POSITIVE = ("reference_ms", "launch_gap_us", "fixed_ms")


def recording_to_json(recording: Recording) -> dict[str, Any]:
    data: dict[str, Any] = {
        "date": recording.date,
        "median": recording.median,
        "noise": recording.noise,
        "n": recording.n,
        "rounds": list(recording.rounds),
        "sm_mhz": recording.sm_mhz,
        "unstable": list(recording.unstable),
    }
    if recording.ci is not None:
        data["ci"] = list(recording.ci)
    for name in OPTIONAL_POSITIVE:
        if (value := getattr(recording, name)) is not None:
            data[name] = value
    return data


def recording_from_json(data: Any, where: str = "recording", unit: str = "ms") -> Recording:
    """Strictly: a :class:`BaselineError` naming ``where`` and the field on bad input."""
    if not isinstance(data, dict):
        raise BaselineError(f"{where}: a recording must be an object, got {data!r}")
    exact = unit == "bytes"
    median = check_positive(where, "median", data.get("median"), allow_zero=exact)
    rounds = data.get("rounds", [])
    if not isinstance(rounds, list) or not all(
        is_number(r) and math.isfinite(r) and r > 0 for r in rounds
    ):
        raise bad_field(where, "rounds", "a list of finite positive numbers", rounds)
    unstable = data.get("unstable", [])
    if not isinstance(unstable, list) or not all(isinstance(u, str) for u in unstable):
        raise bad_field(where, "unstable", "a list of strings", unstable)
    return Recording(
        date=check_date(where, "date", data.get("date")),
        median=int(median) if exact else median,
        noise=check_noise(where, "noise", data.get("noise")),
        n=check_count(where, "n", data.get("n")),
        rounds=tuple(float(r) for r in rounds),
        sm_mhz=optional_positive(where, "sm_mhz", data),
        unstable=tuple(unstable),
        ci=check_ci(where, data.get("ci"), allow_zero=exact),
        **{name: optional_positive(where, name, data) for name in OPTIONAL_POSITIVE},
    )


def entry_to_json(entry: Entry) -> dict[str, Any]:
    data: dict[str, Any] = {
        "value": entry.value,
        "unit": entry.unit,
        "noise": entry.noise,
        "since": entry.since,
        "env": dict(entry.env),
        "recordings": [recording_to_json(r) for r in entry.recordings],
    }
    if entry.breakdown is not None:
        data["breakdown"] = dict(entry.breakdown)
    return data


def entry_from_json(data: Any, where: str, series: str) -> Entry:
    if not isinstance(data, dict):
        raise BaselineError(f"{where}: must be an object, got {data!r}")
    unit = check_unit(where, data.get("unit"))
    exact = unit == "bytes"
    recordings = data.get("recordings")
    if not isinstance(recordings, list) or not recordings:
        raise bad_field(where, "recordings", "a non-empty list of recordings", recordings)
    breakdown = data.get("breakdown")
    if breakdown is not None and not isinstance(breakdown, dict):
        raise bad_field(where, "breakdown", "an object", breakdown)
    value = check_positive(where, "value", data.get("value"), allow_zero=exact)
    return Entry(
        value=int(value) if exact else value,
        unit=unit,
        noise=check_noise(where, "noise", data.get("noise")),
        since=check_date(where, "since", data.get("since")),
        env=check_env(where, data.get("env")),
        recordings=tuple(
            recording_from_json(r, f"{where}: recordings[{i}]", unit)
            for i, r in enumerate(recordings)
        ),
        breakdown=breakdown,
        metric=metric_of(series, unit),
    )


# --- documents ---------------------------------------------------------------------------------


def to_document(device_class: str, entries: Entries) -> dict[str, Any]:
    nested: dict[str, dict[str, dict[str, Any]]] = {}
    for key, by_series in entries.items():
        for series, entry in by_series.items():
            nested.setdefault(key.nodeid, {}).setdefault(key.name, {})[series] = entry_to_json(
                entry
            )
    return {"schema": SCHEMA, "device_class": device_class, "entries": nested}


def parse_entries(path: Path, document: Mapping[str, Any]) -> tuple[str, Entries]:
    """A schema-2 document -> its device class and typed entries, strictly."""
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
                result.setdefault(SeriesKey(nodeid, name), {})[series] = entry_from_json(
                    data, where, series
                )
    return device_class, result
