"""The leak sweep's policy (``--cudaperf-leak-sweep``): the leak protocol over every test that
allocated memory, without markers, in two passes.

1. **First pass**, every test: a reading before the body and one after it (:func:`first_pass`).
   A test whose run made no allocation is *untouched*; one whose readings did not grow is
   *clean*. The readings before and after are taken with the devices settled but without a full
   garbage collection (allocator readings; the census of CPU tensors settles fully); one that
   grew is read again after the protocol's full settle, and only growth that this leaves is
   growth (why: docs/decisions.md, "What does the leak sweep read for every test, and what may
   it re-run?").
2. **Full check**, only for a test that grew: the protocol of ``@no_leak``
   (:func:`pytest_cudaperf.memory.check_leaks`: warm-up, repeated settled readings, the
   allocation-site trace on a leak), which re-runs the body. A test that cannot be re-run
   (:func:`rerun_blocker`) is *unchecked*, with the reason; so is a test whose body failed, or
   whose re-run raised.

Nothing here imports torch: the readings are given.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum

from pytest_cudaperf.markers import Marks
from pytest_cudaperf.units import format_size


class SweepStatus(str, Enum):
    """What the sweep concluded about one test."""

    #: the test's run allocated nothing the sweep can see
    UNTOUCHED = "untouched"
    #: it allocated, and its memory did not grow (in the first pass, or under the full check)
    CLEAN = "clean"
    #: the full check found a leak
    LEAK = "leak"
    #: it could not be judged (the reason says why)
    UNCHECKED = "unchecked"


@dataclass(frozen=True)
class Snapshot:
    """One reading of a first pass: bytes per signal, and the allocations made so far (None: the
    backend cannot count them, as the census of CPU tensors cannot)."""

    readings: Mapping[str, int] = field(default_factory=dict)
    allocations: int | None = 0
    #: was torch loaded when it was read? (before a body that imports it: not; it reads nothing)
    torch_loaded: bool = True


def growth(before: Snapshot, after: Snapshot, tolerance: int = 0) -> dict[str, int]:
    """Signals that grew by more than ``tolerance`` bytes from ``before`` to ``after`` (a signal
    missing from a reading, such as a device initialised in between, reads 0 there)."""
    grown = {}
    for key in sorted(after.readings):
        delta = after.readings[key] - before.readings.get(key, 0)
        if delta > tolerance:
            grown[key] = delta
    return grown


def touched(before: Snapshot, after: Snapshot) -> bool:
    """Did the run between the two readings allocate memory the sweep watches? Where the backend
    counts allocations, their count moved (or a reading changed); where it cannot (the census),
    any run with torch loaded counts."""
    if not after.torch_loaded:
        return False
    if after.allocations is None or before.allocations is None:
        return True
    return after.allocations != before.allocations or dict(after.readings) != dict(before.readings)


def first_pass(
    before: Snapshot, after: Snapshot, tolerance: int = 0
) -> tuple[SweepStatus | None, dict[str, int]]:
    """The first pass's verdict and growth: UNTOUCHED, CLEAN, or None with the growth (the test
    goes on to the full check)."""
    grown = growth(before, after, tolerance)
    if grown:
        return None, grown
    return (SweepStatus.CLEAN if touched(before, after) else SweepStatus.UNTOUCHED), {}


def describe_growth(grown: Mapping[str, int]) -> str:
    """``+1.0 MiB on cuda:0, +4.0 KiB on pinned host``."""
    return ", ".join(f"+{format_size(size)} on {key}" for key, size in grown.items())


def not_swept(marks: Marks) -> str | None:
    """Why the sweep leaves a test alone before it runs, or None to sweep it: ``@no_leak`` checks
    its test itself (``""``: left alone, not reported); a ``@distributed`` test runs its body in
    ranks, which the sweep does not enter (reported unchecked with this reason)."""
    if marks.no_leak is not None:
        return ""
    if marks.distributed is not None:
        return "a @distributed test: its ranks are not swept (@no_leak checks every rank)"
    return None


def rerun_blocker(
    marks: Marks, fixtures: Iterable[str], unsafe: Collection[str] = ()
) -> str | None:
    """Why the sweep may not re-run a test's body, or None: the test is marked
    ``@pytest.mark.leak_sweep(repeatable=False)``, or it uses a fixture named in
    ``--cudaperf-leak-sweep-unsafe-fixtures`` (directly or through another fixture)."""
    mark = marks.leak_sweep
    if mark is not None and not mark.repeatable:
        why = f": {mark.reason}" if mark.reason else ""
        return f"marked leak_sweep(repeatable=False){why}"
    used = [name for name in fixtures if name in unsafe]
    if used:
        return (
            f"uses the fixture {used[0]!r}, which --cudaperf-leak-sweep-unsafe-fixtures "
            "names: a re-run would corrupt its state"
        )
    return None


def unchecked_after_growth(grown: Mapping[str, int], why: str) -> str:
    """The reason of a test that grew and cannot be re-run."""
    return f"grew {describe_growth(grown)} in its run, not re-run: {why}"


def rerun_failed(exc: BaseException) -> str:
    """The reason of a test whose re-run raised: it is not repeatable as it stands."""
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    if len(text) > 120:
        text = text[:119] + "…"
    return (
        f"its body raised {text} when re-run (not repeatable: mark it "
        "@pytest.mark.leak_sweep(repeatable=False))"
    )


#: the reason of a test whose body failed
BODY_FAILED = "the body failed"
