"""Strict reading of report JSON: each reader names where a missing or mistyped field is."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

#: JSON-compatible data (what execnet and the JSON file carry)
Json = Any
T = TypeVar("T")


class ReportError(ValueError):
    """A report document that cannot be read; the message says where and what."""


# --- strict reading ------------------------------------------------------------------------------


def to_object(data: Json, where: str) -> Mapping[str, Json]:
    if not isinstance(data, dict):
        raise ReportError(f"{where}: expected an object, got {type(data).__name__}")
    return data


def get(data: Mapping[str, Json], name: str, kind: type[T] | tuple[type, ...], where: str) -> T:
    value = data.get(name)
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise ReportError(f"{where}.{name}: expected {_kind(kind)}, got {value!r}")
    return value  # type: ignore[return-value]


def optional_string(data: Mapping[str, Json], name: str, where: str) -> str | None:
    return None if data.get(name) is None else get(data, name, str, where)


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


def number(data: Mapping[str, Json], name: str, where: str) -> float:
    return float(get(data, name, (int, float), where))


def optional_number(data: Mapping[str, Json], name: str, where: str) -> float | None:
    return None if data.get(name) is None else number(data, name, where)


def strings(data: Mapping[str, Json], name: str, where: str) -> tuple[str, ...]:
    values = data.get(name, [])
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise ReportError(f"{where}.{name}: expected a list of strings, got {values!r}")
    return tuple(values)


def pair(data: Mapping[str, Json], name: str, where: str) -> tuple[float, float]:
    value = data.get(name)
    if not (
        isinstance(value, list)
        and len(value) == 2
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
    ):
        raise ReportError(f"{where}.{name}: expected two numbers, got {value!r}")
    return float(value[0]), float(value[1])


def items(
    data: Mapping[str, Json], name: str, where: str, read: Callable[[Json, str], T]
) -> tuple[T, ...]:
    values = data.get(name, [])
    if not isinstance(values, list):
        raise ReportError(f"{where}.{name}: expected a list, got {values!r}")
    return tuple(read(v, f"{where}.{name}[{i}]") for i, v in enumerate(values))


def leaf(read: Callable[[Mapping[str, Json]], T], data: Json, where: str) -> T:
    """A leaf type's own reader (Measurement, PeakResult, Comparison): any error names ``where``."""
    try:
        return read(to_object(data, where))
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
