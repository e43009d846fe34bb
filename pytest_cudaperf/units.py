"""Parsing and formatting of user-facing quantities: fractions, durations, sizes, capabilities.

Every parser raises ``ValueError`` with a message that says what was expected and what was given;
callers prefix it with the option or marker argument it came from.
"""

from __future__ import annotations

import math
import re

_SIZE_UNITS = {
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "k": 2**10,
    "m": 2**20,
    "g": 2**30,
}
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*$")
_TIME_UNITS = {"": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "min": 60.0}
_TIME_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(s|ms|us|µs|min)?\s*$")


def _finite(value: float, text: object) -> float:
    if not math.isfinite(value):
        raise ValueError(f"expected a finite number, got {text!r}")
    return value


#: the unit of a host-bound time: the time per call in reference loops
LOOPS = "loops"

#: percentages above this are refused as typos (a tolerance of 1000% judges nothing)
MAX_PERCENT = 1000.0

#: rounds of one measurement above this are refused as typos: each round takes a few calls at
#: least, whatever its share of the time budget, so a million rounds would run for hours
MAX_ROUNDS = 100


def _suggest_percent(value: float) -> str:
    return f"{value:g}%"


def parse_fraction(text: str | float) -> float:
    """``0.05``, ``"0.05"`` or ``"5%"`` -> 0.05. A bare number is a fraction below 1; ``5`` or
    ``"5"`` is refused with the suggestion ``5%``; a percentage needs its ``%``."""
    if isinstance(text, bool):
        raise ValueError(f"expected a fraction such as 0.05 or 5%, got {text!r}")
    percent = isinstance(text, str) and text.strip().endswith("%")
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        raw = text.strip().removesuffix("%").strip() if percent else text.strip()
        try:
            value = float(raw)
        except ValueError:
            raise ValueError(f"expected a fraction such as 0.05 or 5%, got {text!r}") from None
    _finite(value, text)
    if value < 0:
        raise ValueError(f"expected a fraction >= 0 such as 0.05 or 5%, got {text!r}")
    if percent:
        if value >= MAX_PERCENT:
            raise ValueError(f"expected a percentage below {MAX_PERCENT:g}%, got {text!r}")
        return value / 100
    if value >= 1:
        raise ValueError(
            f"a bare number is a fraction below 1 (0.05 = 5%), got {text!r}; "
            f"did you mean {_suggest_percent(value)!r}?"
        )
    return value


def parse_seconds(text: str | float) -> float:
    """``0.5``, ``"500ms"``, ``"2s"`` -> seconds (positive)."""
    if isinstance(text, bool):
        raise ValueError(f"expected seconds such as 0.5 or 500ms, got {text!r}")
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        match = _TIME_RE.match(text)
        if not match:
            raise ValueError(f"expected seconds such as 0.5 or 500ms, got {text!r}")
        value = float(match.group(1)) * _TIME_UNITS[match.group(2) or ""]
    _finite(value, text)
    if value <= 0:
        raise ValueError(f"expected a positive duration, got {text!r}")
    return value


def parse_size(text: str | int | float) -> int:
    """``"8GB"``, ``"512 MiB"``, ``1024`` -> bytes (non-negative int)."""
    if isinstance(text, bool):
        raise ValueError(f"expected a size such as '512 MiB', '8GB' or bytes, got {text!r}")
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        match = _SIZE_RE.match(text)
        unit = match.group(2).lower() if match else ""
        if not match or (unit not in _SIZE_UNITS and unit != ""):
            raise ValueError(f"expected a size such as '512 MiB', '8GB' or bytes, got {text!r}")
        value = float(match.group(1)) * _SIZE_UNITS.get(unit, 1)
    _finite(value, text)
    if value < 0:
        raise ValueError(f"expected a non-negative size, got {text!r}")
    return int(value)


def parse_capability(value: object) -> tuple[int, int]:
    """``(8, 0)``, ``"8.0"``, ``"sm_90"`` or ``8.0`` -> ``(major, minor)``."""
    if (
        isinstance(value, tuple)
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)
    ):
        return (value[0], value[1])
    text = str(value).strip().lower() if isinstance(value, (str, float)) else None
    if text is not None:
        match = re.fullmatch(r"(?:sm_?)?(\d+)\.(\d)|sm_?(\d+)(\d)", text)
        if match:
            major = match.group(1) or match.group(3)
            minor = match.group(2) or match.group(4)
            return (int(major), int(minor))
    raise ValueError(
        f"expected a compute capability such as (8, 0), '8.0' or 'sm_90', got {value!r}"
    )


def format_size(nbytes: float) -> str:
    """Binary units, three significant digits: ``1.0 MiB``, ``512 B``, ``-2.5 GiB``."""
    sign = "-" if nbytes < 0 else ""
    size = abs(float(nbytes))
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            if unit == "B":
                return f"{sign}{int(size)} B"
            return f"{sign}{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def format_ms(ms: float) -> str:
    """A duration given in milliseconds, in the unit that reads best: ``3.21 µs``, ``1.234 ms``."""
    if ms < 1e-3:
        return f"{ms * 1e6:.1f} ns"
    if ms < 1.0:
        return f"{ms * 1e3:.2f} µs"
    if ms < 1000.0:
        return f"{ms:.3f} ms"
    return f"{ms / 1000:.3f} s"


def format_duration(seconds: float) -> str:
    """A wall-clock span to the second, in the units a person reads: ``25 s``, ``3 min 10 s``,
    ``30 min``, ``1 h 5 min``."""
    total = max(0, round(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    if minutes:
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    return f"{secs} s"


def format_pct(fraction: float) -> str:
    return f"{fraction * 100:+.1f}%"


def format_value(value: float, unit: str) -> str:
    """A series' value in its unit: ``1.500 ms``, ``2.0 KiB``, ``3.1 loops``, ``12.5 GB/s``."""
    if unit == "bytes":
        return format_size(value)
    if unit == "ms":
        return format_ms(value)
    if unit == LOOPS:  # a host-bound time: per call, in reference loops timed beside it
        return f"{value:.3g} loops"
    return f"{value:.4g} {unit}"
