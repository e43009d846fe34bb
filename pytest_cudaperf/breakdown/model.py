"""A breakdown, typed: per kernel (CUDA) or top-level op (CPU) its launches and time per call,
the rest summed as ``other``, and its strict JSON form (what a baseline entry keeps). Every float is
rounded to 6 significant digits when the breakdown is built, so ``from_json(to_json(b)) == b``."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

SCHEMA = 1
GRAPH_NOT_VISIBLE = "graph replay: kernels not visible"
GRAPH_VISIBLE = "graph replay: kernels inside the graph listed"


class BreakdownUnavailable(RuntimeError):  # noqa: N818
    """The profiler could not run (another profiler active, kineto missing...); the message
    says why in one line."""


# ---------------------------------------------------------------------------------------------
# the typed record


def sig(x: float) -> float:
    """``x`` rounded to 6 significant digits (the stored precision)."""
    if not math.isfinite(x):
        raise ValueError(f"not a finite number: {x!r}")
    return float(f"{x:.6g}")


@dataclass(frozen=True)
class Kernel:
    """One kernel (CUDA) or top-level op (CPU), per call."""

    key: str  #: identity across breakdowns: the full name, or short name + hash when long
    name: str  #: what a person reads
    launches: float  #: launches per call
    time_us: float  #: device (CUDA) or CPU-inclusive (CPU) time per call


@dataclass(frozen=True)
class Other:
    """The entries below the coverage cut, summed; ``keys`` names them (sorted, at most
    ``MAX_OTHER_KEYS``: complete when ``len(keys) == count``)."""

    count: int = 0
    launches: float = 0.0
    time_us: float = 0.0
    keys: tuple[str, ...] = ()

    @property
    def complete(self) -> bool:
        return len(self.keys) == self.count


@dataclass(frozen=True)
class Breakdown:
    backend: str  #: "cuda" or "cpu"
    calls: int  #: calls profiled
    total_us: float  #: sum of all entries' time per call (device time on CUDA)
    host_us: float  #: host wall time per call until fn returns (warm calls, not profiled)
    entries: tuple[Kernel, ...]
    other: Other = field(default_factory=Other)
    host_ops: tuple[Kernel, ...] = ()  #: CUDA only: top-level aten ops by host time
    graph_launches: float = 0.0  #: CUDA graph launches per call
    notes: tuple[str, ...] = ()

    @property
    def unit(self) -> str:
        return "kernels" if self.backend == "cuda" else "ops"

    @property
    def launches(self) -> float:
        """Kernels (and copies) launched per call, the entries' and the rest's (CUDA); ops per
        call on the CPU."""
        return sum(e.launches for e in self.entries) + self.other.launches

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict, keys in sorted order at every level; entries (a list) in their
        ranked order."""
        return _sorted_keys(
            {
                "schema": SCHEMA,
                "backend": self.backend,
                "calls": self.calls,
                "total_us": self.total_us,
                "host_us": self.host_us,
                "entries": [_entry_json(e) for e in self.entries],
                "other": {
                    "count": self.other.count,
                    "launches": self.other.launches,
                    "time_us": self.other.time_us,
                    "keys": list(self.other.keys),
                },
                "host_ops": [_entry_json(e) for e in self.host_ops],
                "graph_launches": self.graph_launches,
                "notes": list(self.notes),
            }
        )

    @classmethod
    def from_json(cls, data: object) -> Breakdown:
        """Strict: any missing or mistyped field raises ValueError naming it."""
        d = _mapping(data, "breakdown")
        schema = _int(d, "schema", "breakdown")
        if schema != SCHEMA:
            raise ValueError(f"breakdown.schema: expected {SCHEMA}, got {schema}")
        backend = _str(d, "backend", "breakdown")
        if backend not in ("cuda", "cpu"):
            raise ValueError(f"breakdown.backend: expected 'cuda' or 'cpu', got {backend!r}")
        other = _mapping(d.get("other"), "breakdown.other")
        notes = _strings(d, "notes", "breakdown")
        other_keys = _strings(other, "keys", "breakdown.other")
        return cls(
            backend=backend,
            calls=_int(d, "calls", "breakdown"),
            total_us=_num(d, "total_us", "breakdown"),
            host_us=_num(d, "host_us", "breakdown"),
            entries=tuple(
                _entry_from(e, f"breakdown.entries[{i}]")
                for i, e in enumerate(_list(d, "entries", "breakdown"))
            ),
            other=Other(
                count=_int(other, "count", "breakdown.other"),
                launches=_num(other, "launches", "breakdown.other"),
                time_us=_num(other, "time_us", "breakdown.other"),
                keys=tuple(other_keys),
            ),
            host_ops=tuple(
                _entry_from(e, f"breakdown.host_ops[{i}]")
                for i, e in enumerate(_list(d, "host_ops", "breakdown"))
            ),
            graph_launches=_num(d, "graph_launches", "breakdown"),
            notes=tuple(notes),
        )


def _sorted_keys(value: dict[str, Any]) -> dict[str, Any]:
    def walk(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: walk(v[k]) for k in sorted(v)}
        if isinstance(v, list):
            return [walk(x) for x in v]
        return v

    return {k: walk(value[k]) for k in sorted(value)}


def _entry_json(e: Kernel) -> dict[str, Any]:
    return {"key": e.key, "name": e.name, "launches": e.launches, "time_us": e.time_us}


def _mapping(data: object, where: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise ValueError(f"{where}: expected an object, got {type(data).__name__}")
    return data


def _num(d: Mapping[str, Any], key: str, where: str) -> float:
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise ValueError(f"{where}.{key}: expected a finite number >= 0, got {v!r}")
    return sig(float(v))


def _int(d: Mapping[str, Any], key: str, where: str) -> int:
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"{where}.{key}: expected an integer >= 0, got {v!r}")
    return v


def _str(d: Mapping[str, Any], key: str, where: str) -> str:
    v = d.get(key)
    if not isinstance(v, str) or not v:
        raise ValueError(f"{where}.{key}: expected a non-empty string, got {v!r}")
    return v


def _list(d: Mapping[str, Any], key: str, where: str) -> list[Any]:
    v = d.get(key)
    if not isinstance(v, list):
        raise ValueError(f"{where}.{key}: expected a list, got {type(v).__name__}")
    return v


def _strings(d: Mapping[str, Any], key: str, where: str) -> list[str]:
    items = _list(d, key, where)
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise ValueError(f"{where}.{key}[{i}]: expected a string, got {item!r}")
    return items


def _entry_from(data: object, where: str) -> Kernel:
    d = _mapping(data, where)
    return Kernel(
        key=_str(d, "key", where),
        name=_str(d, "name", where),
        launches=_num(d, "launches", where),
        time_us=_num(d, "time_us", where),
    )
