"""The on-disk baseline store: one deterministic JSON file per device class.

File format (schema 1)::

    {
      "device_class": "NVIDIA H100 80GB HBM3",
      "entries": {
        "tests/test_ops.py::test_add": {
          "time:device/cold": {"ci": [..], "env": {..}, "n": 80, "noise": 0.0012,
                               "unit": "ms", "value": 0.00731}
        }
      },
      "schema": 1
    }

Keys are sorted and floats kept to 6 significant digits, so a pull request shows a readable diff.
Reading is strict: a corrupted file or a malformed entry is a :class:`BaselineError` naming the
file. Writes are atomic (temporary file, fsync, rename) under a lock file.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_cudaperf.locks import fcntl

SCHEMA = 1
#: migrations from older schemas: version -> function returning the next version's document
MIGRATIONS: dict[int, Any] = {}


class BaselineError(ValueError):
    """A baseline file that cannot be used; the message names the file."""


def slug(device_class: str) -> str:
    """``NVIDIA H100 80GB HBM3`` -> ``nvidia-h100-80gb-hbm3``."""
    return re.sub(r"[^a-z0-9]+", "-", device_class.lower()).strip("-") or "unknown"


def _round(value: Any) -> Any:
    if isinstance(value, float):
        return float(f"{value:.6g}") if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _round(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_round(v) for v in value]
    return value


def dumps(document: Mapping[str, Any]) -> str:
    """Deterministic JSON: sorted keys, two-space indent, 6 significant digits, final newline."""
    return json.dumps(_round(dict(document)), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


_ENTRY_FIELDS: dict[str, tuple[type, ...]] = {
    "value": (int, float),
    "unit": (str,),
    "noise": (int, float),
    "n": (int,),
}


def _validate(path: Path, document: Any) -> dict[str, Any]:
    if not isinstance(document, dict):
        kind = type(document).__name__
        raise BaselineError(f"{path}: expected a JSON object at the top, got {kind}")
    schema = document.get("schema")
    if schema != SCHEMA:
        if isinstance(schema, int) and schema in MIGRATIONS:
            return _validate(path, MIGRATIONS[schema](document))
        if isinstance(schema, int) and schema > SCHEMA:
            raise BaselineError(
                f"{path}: schema {schema} was written by a newer pytest-cudaperf (this one reads "
                f"schema {SCHEMA}); upgrade pytest-cudaperf"
            )
        raise BaselineError(f"{path}: unknown schema {schema!r} (expected {SCHEMA})")
    entries = document.get("entries")
    if not isinstance(entries, dict) or not isinstance(document.get("device_class"), str):
        raise BaselineError(f"{path}: expected 'device_class' (string) and 'entries' (object)")
    for key, series in entries.items():
        if not isinstance(series, dict):
            raise BaselineError(f"{path}: entry {key!r} must be an object of series")
        for name, entry in series.items():
            if not isinstance(entry, dict):
                raise BaselineError(f"{path}: entry {key!r} / {name!r} must be an object")
            for fieldname, types in _ENTRY_FIELDS.items():
                value = entry.get(fieldname)
                if isinstance(value, bool) or not isinstance(value, types):
                    raise BaselineError(
                        f"{path}: entry {key!r} / {name!r} has a bad or missing {fieldname!r} "
                        f"({value!r})"
                    )
    return document


def read_file(path: Path) -> dict[str, Any]:
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
    return _validate(path, document)


@contextlib.contextmanager
def locked(folder: Path) -> Iterator[None]:
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT, 0o666)
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def write_atomic(path: Path, text: str) -> None:
    """Write through a temporary file in the same folder, fsync, then rename over ``path``."""
    handle = tempfile.NamedTemporaryFile(  # noqa: SIM115 (closed below, renamed after)
        "w",
        encoding="utf-8",
        dir=path.parent,
        prefix=f".{path.name}.",
        suffix=".tmp",
        delete=False,
    )
    try:
        with handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(handle.name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(handle.name)
        raise


@dataclass
class UpdateSummary:
    path: Path
    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    unchanged: int = 0
    pruned: list[str] = field(default_factory=list)

    def line(self) -> str:
        parts = [
            f"{len(self.added)} added",
            f"{len(self.changed)} updated",
            f"{self.unchanged} kept",
        ]
        if self.pruned:
            parts.append(f"{len(self.pruned)} pruned")
        return f"cudaperf: baselines {self.path}: " + ", ".join(parts)


@dataclass(frozen=True)
class Record:
    """One measured series of one test, as it travels on the report and into the store."""

    key: str
    series: str
    value: float
    unit: str
    noise: float
    n: int
    ci: tuple[float, float]
    device_class: str
    env: Mapping[str, Any]

    def entry(self) -> dict[str, Any]:
        exact = self.unit == "bytes"  # byte counts stay integers, never rounded
        return {
            "value": int(self.value) if exact else self.value,
            "unit": self.unit,
            "noise": self.noise,
            "n": self.n,
            "ci": [int(c) for c in self.ci] if exact else list(self.ci),
            "env": dict(self.env),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "series": self.series,
            "value": self.value,
            "unit": self.unit,
            "noise": self.noise,
            "n": self.n,
            "ci": list(self.ci),
            "device_class": self.device_class,
            "env": dict(self.env),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Record:
        return cls(
            key=data["key"],
            series=data["series"],
            value=float(data["value"]),
            unit=data["unit"],
            noise=float(data["noise"]),
            n=int(data["n"]),
            ci=(float(data["ci"][0]), float(data["ci"][1])),
            device_class=data["device_class"],
            env=dict(data["env"]),
        )


def test_file_of(key: str) -> str:
    return key.split("#", 1)[0].split("::", 1)[0]


class BaselineStore:
    """Every baseline file of a folder, read strictly at start-up."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.documents: dict[str, dict[str, Any]] = {}
        self.paths: dict[str, Path] = {}

    @classmethod
    def load(cls, folder: Path) -> BaselineStore:
        store = cls(folder)
        if folder.is_dir():
            for path in sorted(folder.glob("*.json")):
                document = read_file(path)
                store.documents[document["device_class"]] = document
                store.paths[document["device_class"]] = path
        return store

    def path_for(self, device_class: str) -> Path:
        return self.paths.get(device_class, self.folder / f"{slug(device_class)}.json")

    def lookup(self, device_class: str, key: str, series: str) -> dict[str, Any] | None:
        document = self.documents.get(device_class)
        if document is None:
            return None
        found = document["entries"].get(key, {}).get(series)
        return dict(found) if found is not None else None

    def others(self, device_class: str, key: str, series: str) -> list[tuple[str, dict[str, Any]]]:
        """Entries of the same test in other device classes: shown, never enforced."""
        found = []
        for other, document in sorted(self.documents.items()):
            entry = document["entries"].get(key, {}).get(series)
            if other != device_class and entry is not None:
                found.append((other, dict(entry)))
        return found

    def keys(self, device_class: str) -> list[str]:
        document = self.documents.get(device_class)
        return sorted(document["entries"]) if document else []

    def obsolete(
        self, device_class: str, seen: set[str], seen_files: set[str], complete: bool, root: Path
    ) -> list[str]:
        """Entries whose tests no longer exist: their file is gone, or a complete run of their
        file did not see them. A partial run never calls an entry of an unseen test obsolete."""
        result = []
        for key in self.keys(device_class):
            nodeid = key.split("#", 1)[0]
            filename = test_file_of(key)
            if not (root / filename).exists() or (
                complete and filename in seen_files and nodeid not in seen
            ):
                result.append(key)
        return result

    def update(
        self, device_class: str, records: Iterable[Record], prune: Iterable[str] = ()
    ) -> UpdateSummary:
        """Merge ``records`` into the class's file under the lock, re-reading it first, so
        entries written meanwhile (another shard) are kept. Entries not in ``records`` stay."""
        path = self.path_for(device_class)
        summary = UpdateSummary(path)
        with locked(self.folder):
            document: dict[str, Any] = (
                read_file(path)
                if path.exists()
                else {"schema": SCHEMA, "device_class": device_class, "entries": {}}
            )
            entries: dict[str, dict[str, Any]] = dict(document["entries"])
            document["entries"] = entries
            for record in records:
                series = entries.setdefault(record.key, {})
                old = series.get(record.series)
                new = record.entry()
                label = f"{record.key} [{record.series}]"
                if old is None:
                    summary.added.append(label)
                elif _round(old) != _round(new):
                    summary.changed.append(label)
                series[record.series] = new
            for key in prune:
                if entries.pop(key, None) is not None:
                    summary.pruned.append(key)
            summary.unchanged = (
                sum(len(s) for s in entries.values()) - len(summary.added) - len(summary.changed)
            )
            write_atomic(path, dumps(document))
        self.documents[device_class] = _round(document)
        self.paths[device_class] = path
        return summary
