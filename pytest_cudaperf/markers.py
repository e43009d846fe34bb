"""One spec per marker: its signature drives ``pytest --markers`` and validation at collection.

Each spec is a plain function whose parameters are the marker's arguments. :func:`parse` binds a
mark's arguments to that signature, validates every value and returns a frozen options object, or
raises :class:`MarkerError` with one line naming the marker and the offending argument.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from pytest_cudaperf.units import (
    MAX_ROUNDS,
    parse_capability,
    parse_fraction,
    parse_seconds,
    parse_size,
)


class MarkerError(ValueError):
    """A marker argument that cannot be used; the message names the marker and argument."""


@dataclass(frozen=True)
class GpuRequirement:
    count: int = 1
    min_memory: int | None = None
    capability: tuple[int, int] | None = None


@dataclass(frozen=True)
class PerfOptions:
    max_ms: float | None = None
    tolerance: float | None = None
    cache: str | None = None
    graph: bool = False
    warmup: float | None = None
    min_time: float | None = None
    max_time: float | None = None
    min_speedup: float | None = None
    max_peak: int | None = None
    rounds: int | None = None
    #: frames torch.compile may compile while samples are taken (None: any, reported only)
    max_recompiles: int | None = None
    #: the call's work, declared (wins over the counted figures): FLOPs and bytes per call
    flops: float | None = None
    nbytes: int | None = None
    #: the least fraction of the measured ceiling of the call's bound (speed of light)
    min_peak: float | None = None
    #: the most joules per call (CUDA, NVML's energy counter)
    max_joules: float | None = None

    @property
    def wants_roofline(self) -> bool:
        """Does the marker ask for the call's work and speed of light?"""
        return self.min_peak is not None or self.flops is not None or self.nbytes is not None


@dataclass(frozen=True)
class LeakOptions:
    tolerance: int = 0
    warmup: int = 2
    iterations: int = 3
    pinned: bool = True
    outside_torch: bool = False
    max_peak: int | None = None


def checked(name: str, value: Any, parse: Callable[[Any], Any]) -> Any:
    """``parse(value)``, None for None; a ValueError becomes a :class:`MarkerError` naming the
    argument."""
    if value is None:
        return None
    try:
        return parse(value)
    except ValueError as exc:
        raise MarkerError(f"{name}: {exc}") from None


def _positive_number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"expected a positive number, got {value!r}")
    return float(value)


def _int_at_least(minimum: int) -> Callable[[Any], int]:
    def parse(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"expected an integer >= {minimum}, got {value!r}")
        return value

    return parse


def _rounds(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_ROUNDS:
        raise ValueError(f"expected an integer from 1 to {MAX_ROUNDS}, got {value!r}")
    return value


def ordered_times(min_time: float | None, max_time: float | None) -> None:
    """A ValueError (the words after ``min_time``) where a measurement's least time lies beyond
    its budget: the budget would win, and the least time be silently dropped."""
    if min_time is not None and max_time is not None and min_time > max_time:
        raise ValueError(
            f"{min_time:g} s is more than max_time ({max_time:g} s), the budget that ends the "
            "measurement"
        )


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected True or False, got {value!r}")
    return value


def _cache(value: Any) -> str:
    if value not in ("cold", "hot"):
        raise ValueError(f"expected 'cold' or 'hot', got {value!r}")
    return str(value)


def gpu(
    count: int = 1, min_memory: int | str | None = None, capability: Any = None
) -> GpuRequirement:
    """needs `count` CUDA GPUs with at least `min_memory` ('40GB', '512 MiB' or bytes) and compute
    capability `capability` ((8, 0), '8.0' or 'sm_80') each; skipped with the reason otherwise."""
    return GpuRequirement(
        count=checked("count", count, _int_at_least(1)),
        min_memory=checked("min_memory", min_memory, parse_size),
        capability=checked("capability", capability, parse_capability),
    )


def _peak_fraction(value: Any) -> float:
    found = parse_fraction(value)
    if not 0 < found <= 1:
        raise ValueError(f"expected a fraction in (0, 1] such as 0.5 or '50%', got {value!r}")
    return found


def perf(  # noqa: PLR0913 - a marker spec: its parameters are the marker's arguments
    max_ms: float | None = None,
    tolerance: float | str | None = None,
    cache: str | None = None,
    graph: bool = False,
    warmup: float | str | None = None,
    min_time: float | str | None = None,
    max_time: float | str | None = None,
    min_speedup: float | None = None,
    max_peak: int | str | None = None,
    rounds: int | None = None,
    max_recompiles: int | None = None,
    flops: float | None = None,
    bytes: int | str | None = None,
    min_peak: float | str | None = None,
    max_joules: float | None = None,
) -> PerfOptions:
    """performance test: fails when the median exceeds `max_ms`, regresses beyond `tolerance`
    (0.05 or '5%') against its baseline, or a cuda_timer.compare speedup is below `min_speedup`.
    `cache` 'cold'|'hot', `graph` (CUDA-graph throughput), `warmup`/`min_time`/`max_time`
    (seconds) and `rounds` (independent rounds, pooled) tune cuda_timer; `max_peak` limits peak
    GPU memory; `max_recompiles` limits torch.compile recompilations while sampling (0 forbids
    them). `flops`/`bytes` declare the work per call (else counted), `min_peak` (0.5 or '50%')
    is the least fraction of the measured ceiling of the call's bound (speed of light),
    `max_joules` the most energy per call (CUDA, NVML). Without cuda_timer the whole test
    function is re-run and timed."""
    options = PerfOptions(
        max_ms=checked("max_ms", max_ms, _positive_number),
        tolerance=checked("tolerance", tolerance, parse_fraction),
        cache=checked("cache", cache, _cache),
        graph=bool(checked("graph", graph, _boolean)),
        warmup=checked("warmup", warmup, parse_seconds),
        min_time=checked("min_time", min_time, parse_seconds),
        max_time=checked("max_time", max_time, parse_seconds),
        min_speedup=checked("min_speedup", min_speedup, _positive_number),
        max_peak=checked("max_peak", max_peak, parse_size),
        rounds=checked("rounds", rounds, _rounds),
        max_recompiles=checked("max_recompiles", max_recompiles, _int_at_least(0)),
        flops=checked("flops", flops, _positive_number),
        nbytes=checked("bytes", bytes, parse_size),
        min_peak=checked("min_peak", min_peak, _peak_fraction),
        max_joules=checked("max_joules", max_joules, _positive_number),
    )
    checked("min_time", options.min_time, lambda least: ordered_times(least, options.max_time))
    return options


def no_leak(  # noqa: PLR0913 - a marker spec: its parameters are the marker's arguments
    tolerance: int | str = 0,
    warmup: int = 2,
    iterations: int = 3,
    pinned: bool = True,
    outside_torch: bool = False,
    max_peak: int | str | None = None,
) -> LeakOptions:
    """fails when the test body leaks memory: the body runs `warmup` times, then `iterations`
    times with settled readings; growth beyond `tolerance` ('1 MiB' or bytes) on any device is a
    leak. `pinned` also checks pinned host memory, `outside_torch` memory allocated outside torch
    (opt-in), `max_peak` limits peak GPU memory of one run of the body."""
    return LeakOptions(
        tolerance=checked("tolerance", tolerance, parse_size),
        warmup=checked("warmup", warmup, _int_at_least(0)),
        iterations=checked("iterations", iterations, _int_at_least(2)),
        pinned=checked("pinned", pinned, _boolean),
        outside_torch=checked("outside_torch", outside_torch, _boolean),
        max_peak=checked("max_peak", max_peak, parse_size),
    )


@dataclass(frozen=True)
class SweepOptions:
    """A test's ``@pytest.mark.leak_sweep``: may the leak sweep re-run its body, and why not."""

    repeatable: bool = True
    reason: str = ""


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r}")
    return value


def leak_sweep(repeatable: bool = True, reason: str = "") -> SweepOptions:
    """for --cudaperf-leak-sweep: `repeatable=False` says that the test body must not be re-run
    (its one run is still read; if memory grew, the test is reported unchecked with `reason`)."""
    return SweepOptions(
        repeatable=checked("repeatable", repeatable, _boolean),
        reason=checked("reason", reason, _text),
    )


# --- distributed ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class DistributedOptions:
    world_size: int = 2
    backend: str | None = None
    timeout: float = 300.0


def _backend(value: Any) -> str:
    if value not in ("nccl", "gloo"):
        raise ValueError(f"expected 'nccl', 'gloo' or None, got {value!r}")
    return str(value)


def distributed(
    world_size: int = 2, backend: str | None = None, timeout: float | str = 300.0
) -> DistributedOptions:
    """runs the test body in `world_size` processes with torch.distributed initialised (backend
    None: nccl on CUDA, gloo on CPU), one GPU per rank; any rank's failure fails the test, and a
    test still running after `timeout` (seconds, or '90s') has every rank's stack dumped and is
    killed. Use the dist_rank fixture for rank and world size."""
    return DistributedOptions(
        world_size=checked("world_size", world_size, _int_at_least(1)),
        backend=checked("backend", backend, _backend),
        timeout=checked("timeout", timeout, parse_seconds),
    )


SPECS: dict[str, Callable[..., Any]] = {
    "gpu": gpu,
    "perf": perf,
    "no_leak": no_leak,
    "distributed": distributed,
    "leak_sweep": leak_sweep,
}


def marker_help(name: str) -> str:
    """The ``pytest --markers`` line: the full signature and the spec's docstring."""
    spec = SPECS[name]
    params = ", ".join(
        f"{p.name}={p.default!r}" for p in inspect.signature(spec).parameters.values()
    )
    doc = " ".join((spec.__doc__ or "").split())
    return f"{name}({params}): {doc}"


def bind(
    label: str, spec: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> inspect.BoundArguments:
    """A mark's arguments bound to its spec's signature; an unknown or surplus argument is a
    :class:`MarkerError` that names it, the closest known name (``did you mean``) and every
    argument the marker takes."""
    signature = inspect.signature(spec)
    known = list(signature.parameters)
    takes = f"it takes {', '.join(known)}"
    unknown = [k for k in kwargs if k not in known]
    if unknown:
        close = difflib.get_close_matches(unknown[0], known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise MarkerError(f"{label}: unknown argument {unknown[0]!r}{hint}; {takes}")
    try:
        return signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise MarkerError(f"{label}: {exc}; {takes}") from None


def parse(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Bind a mark's arguments to its spec and validate them."""
    spec = SPECS[name]
    bound = bind(f"@pytest.mark.{name}", spec, args, kwargs)
    try:
        return spec(*bound.args, **bound.kwargs)
    except MarkerError as exc:
        raise MarkerError(f"@pytest.mark.{name}: {exc}") from None


class MarkLike(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def args(self) -> tuple[Any, ...]: ...

    @property
    def kwargs(self) -> Mapping[str, Any]: ...


@dataclass(frozen=True)
class Marks:
    """A test's cudaperf marks, parsed: each marker's options, None where the test has no such
    mark; ``error``: a bad argument's one line (the test fails with it at setup)."""

    gpu: GpuRequirement | None = None
    perf: PerfOptions | None = None
    no_leak: LeakOptions | None = None
    distributed: DistributedOptions | None = None
    leak_sweep: SweepOptions | None = None
    error: str | None = None

    def __bool__(self) -> bool:
        """Does the test have any cudaperf mark?"""
        return self != Marks()


def parse_marks(marks: Iterable[MarkLike]) -> Marks:
    """A test's marks, closest first, as options per marker (the closest mark of each name
    wins); a bad argument is kept as ``error``, to fail that test at setup."""
    closest: dict[str, MarkLike] = {}
    for mark in marks:
        if mark.name in SPECS:
            closest.setdefault(mark.name, mark)
    parsed: dict[str, Any] = {}
    for name in SPECS:
        if name not in closest:
            continue
        try:
            parsed[name] = parse(name, closest[name].args, dict(closest[name].kwargs))
        except MarkerError as exc:
            parsed["error"] = str(exc)
    return Marks(**parsed)
