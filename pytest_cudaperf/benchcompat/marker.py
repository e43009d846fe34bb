"""``@pytest.mark.benchmark(...)``: pytest-benchmark's marker arguments, bound to one spec.

Every argument pytest-benchmark's marker takes is accepted. ``group``, ``min_rounds``,
``min_time``, ``max_time`` and ``disable_gc`` have an effect here; the rest (``timer``,
``warmup``, ``warmup_iterations``, ``calibration_precision``, ``cprofile``, ``precision``,
``confidence``) are accepted and have none: the engine chooses its timer, warms up until stable
and stops on the precision the tolerance asks for. A positional or unknown argument, or a bad
value of an argument with an effect, is one line naming it (the test errors at setup).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pytest_cudaperf.markers import MarkerError, bind, checked
from pytest_cudaperf.units import parse_seconds

#: the arguments that have no effect where pytest-cudaperf serves the fixture
IGNORED = (
    "timer",
    "warmup",
    "warmup_iterations",
    "calibration_precision",
    "cprofile",
    "precision",
    "confidence",
)


@dataclass(frozen=True)
class BenchmarkMark:
    """A test's ``@pytest.mark.benchmark`` arguments that have an effect here."""

    group: str | None = None
    min_rounds: int | None = None
    min_time: float | None = None
    max_time: float | None = None
    disable_gc: bool | None = None


def _group(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r}")
    return value


def _rounds(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"expected an integer >= 1, got {value!r}")
    return value


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected True or False, got {value!r}")
    return value


def benchmark(  # noqa: PLR0913 - a marker spec: its parameters are the marker's arguments
    *,
    group: str | None = None,
    min_rounds: int | None = None,
    min_time: float | str | None = None,
    max_time: float | str | None = None,
    disable_gc: bool | None = None,
    timer: Any = None,
    warmup: Any = None,
    warmup_iterations: Any = None,
    calibration_precision: Any = None,
    cprofile: Any = None,
    precision: Any = None,
    confidence: Any = None,
) -> BenchmarkMark:
    """pytest-benchmark's marker, served by pytest-cudaperf: `group` names the benchmark's group
    (--benchmark-json), `min_rounds` is the least number of samples, `min_time`/`max_time`
    (seconds) bound the measurement, `disable_gc` turns the garbage collector off while
    measuring; `timer`, `warmup`, `warmup_iterations`, `calibration_precision`, `cprofile`,
    `precision` and `confidence` are accepted and have no effect."""
    return BenchmarkMark(
        group=checked("group", group, _group),
        min_rounds=checked("min_rounds", min_rounds, _rounds),
        min_time=checked("min_time", min_time, parse_seconds),
        max_time=checked("max_time", max_time, parse_seconds),
        disable_gc=checked("disable_gc", disable_gc, _flag),
    )


def marker_help() -> str:
    """The ``pytest --markers`` line."""
    params = ", ".join(
        f"{p.name}={p.default!r}" for p in inspect.signature(benchmark).parameters.values()
    )
    return f"benchmark({params}): {' '.join((benchmark.__doc__ or '').split())}"


def parse(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> BenchmarkMark:
    """Bind a ``@pytest.mark.benchmark`` mark's arguments and check them; raises
    :class:`MarkerError` with one line naming the marker and the argument."""
    if args:
        raise MarkerError(
            f"@pytest.mark.benchmark: takes keyword arguments only, got {len(args)} positional"
        )
    bound = bind("@pytest.mark.benchmark", benchmark, (), kwargs)
    try:
        return benchmark(**bound.kwargs)
    except MarkerError as exc:
        raise MarkerError(f"@pytest.mark.benchmark: {exc}") from None


def of_item(mark: Any) -> BenchmarkMark | str:
    """A test's closest ``@pytest.mark.benchmark`` mark (None: it has none) as its arguments,
    or the one line saying what is wrong with them (the test fails with it at setup)."""
    if mark is None:
        return BenchmarkMark()
    try:
        return parse(mark.args, mark.kwargs)
    except MarkerError as exc:
        return str(exc)
