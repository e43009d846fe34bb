"""Reading a baseline file of any known schema: older schemas are migrated on the way in
(schema 1 joined ``nodeid#name`` and kept one measurement per series)."""

from __future__ import annotations

import datetime
import json
import math
import re
from pathlib import Path
from typing import Any

from pytest_cudaperf.keys import SeriesKey
from pytest_cudaperf.series import Recording, entry_of, metric_of
from pytest_cudaperf.store.format import (
    DATE,
    SCHEMA,
    BaselineError,
    Entries,
    check_ci,
    check_count,
    check_env,
    check_noise,
    check_positive,
    check_unit,
    entry_to_json,
    is_number,
    parse_entries,
)


def today() -> str:
    return datetime.date.today().isoformat()


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
            unit = check_unit(where, old.get("unit"))
            exact = unit == "bytes"
            value = check_positive(where, "value", old.get("value"), allow_zero=exact)
            env = check_env(where, old.get("env", {}))
            date = env.get("date") if isinstance(env.get("date"), str) else None
            date = date if date and DATE.match(date) else today()
            sm: Any = env.get("sm_mhz")
            recording = Recording(
                date=date,
                median=int(value) if exact else value,
                noise=check_noise(where, "noise", old.get("noise")),
                n=check_count(where, "n", old.get("n")),
                sm_mhz=float(sm) if is_number(sm) and math.isfinite(sm) and sm > 0 else None,
                ci=check_ci(where, old.get("ci"), allow_zero=exact),
            )
            entry = entry_of([recording], unit, env, metric_of(series, unit), date)
            new.setdefault(skey.nodeid, {}).setdefault(skey.name, {})[series] = entry_to_json(entry)
    return {"schema": 2, "device_class": document.get("device_class"), "entries": new}


#: migrations from older schemas: version -> function returning the next version's document
MIGRATIONS: dict[int, Any] = {1: _migrate_v1}


def parse_document(path: Path, document: Any) -> tuple[str, Entries]:
    """A document (any known schema) -> its device class and typed entries, strictly."""
    if not isinstance(document, dict):
        kind = type(document).__name__
        raise BaselineError(f"{path}: expected a JSON object at the top, got {kind}")
    if "entries" not in document and isinstance(document.get("tests"), list):
        raise BaselineError(
            f"{path}: a --cudaperf-json report, not a baseline file; move it out of the "
            "baseline folder"
        )
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
    return parse_entries(path, document)


def read_file(path: Path) -> tuple[str, Entries]:
    """A baseline file -> (device class, entries); a :class:`BaselineError` on anything bad."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BaselineError(f"{path}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError as exc:  # saved as UTF-16 by an editor or a shell's redirection
        raise BaselineError(
            f"{path}: not valid JSON (not UTF-8: {exc.reason} at byte {exc.start}); save it as "
            "UTF-8, or delete it and run pytest --cudaperf-update on a machine of its device "
            "class"
        ) from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BaselineError(
            f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); fix it, "
            "or delete it and run pytest --cudaperf-update on a machine of its device class"
        ) from None
    return parse_document(path, document)
