"""Speed of light: a measurement's achieved rate against the device's ceilings.

A call's arithmetic intensity (FLOP per byte of :class:`~pytest_cudaperf.measure.work.Work`)
against the ridge point (FLOP/s ceiling over bandwidth ceiling, for the compute class that did
most of its FLOPs) says whether it is memory- or compute-bound; its achieved rate in that
resource (bytes/s or FLOP/s) over the ceiling is its fraction of peak, given against the
measured ceiling and the datasheet's where each is known.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pytest_cudaperf.measure.ceilings import Peaks
from pytest_cudaperf.measure.work import Work

MEMORY, COMPUTE = "memory", "compute"


def format_rate(value: float, unit: str) -> str:
    """``1.21 TB/s``, ``782 TFLOP/s``, ``35.2 GFLOP/s``: three significant digits."""
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def format_count(value: float, unit: str) -> str:
    """``137 GFLOP``, ``256 MB``: decimal prefixes, three significant digits."""
    return format_rate(value, unit)


@dataclass(frozen=True)
class Roofline:
    """One measurement's speed of light: its work, its time, the rates it achieved, which
    resource bounds it and how close it ran to that resource's ceilings."""

    work: Work
    median_ms: float
    measured: Peaks | None
    datasheet: Peaks | None

    @property
    def seconds(self) -> float:
        return self.median_ms / 1e3

    @property
    def flop_rate(self) -> float:
        return self.work.flops / self.seconds if self.seconds > 0 else 0.0

    @property
    def byte_rate(self) -> float:
        return self.work.bytes / self.seconds if self.seconds > 0 else 0.0

    def _ridge(self) -> float | None:
        klass = self.work.compute_class
        for peaks in (self.measured, self.datasheet):
            ridge = peaks.ridge(klass) if peaks is not None else None
            if ridge is not None:
                return ridge
        return None

    @property
    def bound(self) -> str | None:
        """``memory`` or ``compute`` (None without a ridge point where the call does FLOPs, or
        without bytes)."""
        intensity = self.work.intensity
        if intensity is None:
            return COMPUTE if self.work.flops else None
        if not self.work.flops:
            return MEMORY
        ridge = self._ridge()
        if ridge is None:
            return None
        return MEMORY if intensity < ridge else COMPUTE

    def _peak(self, peaks: Peaks | None) -> float | None:
        if peaks is None:
            return None
        if self.bound == MEMORY:
            return peaks.bandwidth
        if self.bound == COMPUTE:
            return peaks.flops.get(self.work.compute_class or "")
        return None

    def _rate(self) -> float:
        return self.byte_rate if self.bound == MEMORY else self.flop_rate

    def fraction(self, of: str = "measured") -> float | None:
        """The achieved rate over the ``measured`` or ``datasheet`` ceiling of the bound."""
        peak = self._peak(self.measured if of == "measured" else self.datasheet)
        return self._rate() / peak if peak else None

    @property
    def unit(self) -> str:
        return "B/s" if self.bound == MEMORY else "FLOP/s"

    def describe(self) -> str:
        """``1.21 TB/s: 41% of measured 2.95 TB/s, 36% of datasheet 3.35 TB/s (memory-bound,
        0.25 FLOP/B, counted)``; the rates alone where no ceiling is known."""
        work = self.work
        intensity = work.intensity
        sources = sorted({work.source("flops"), work.source("bytes")})
        shape = f"{intensity:.3g} FLOP/B" if intensity is not None else "no bytes"
        tail = f"{shape}, {'/'.join(sources)}"
        bound = self.bound
        if bound is None:
            rates = f"{format_rate(self.flop_rate, 'FLOP/s')}, {format_rate(self.byte_rate, 'B/s')}"
            return f"{rates} ({tail}; no ceiling known)"
        parts = []
        for of, peaks in (("measured", self.measured), ("datasheet", self.datasheet)):
            peak, share = self._peak(peaks), self.fraction(of)
            if peak and share is not None:
                parts.append(f"{share:.0%} of {of} {format_rate(peak, self.unit)}")
        ceilings = ": " + ", ".join(parts) if parts else ""
        return f"{format_rate(self._rate(), self.unit)}{ceilings} ({bound}-bound, {tail})"

    def cell(self) -> str:
        """The table's cell: ``2.56 TB/s 87% mem`` (the share of the measured ceiling, else of
        the datasheet's, marked ``ds``); both rates where no bound is known."""
        bound = self.bound
        if bound is None:
            return f"{format_rate(self.flop_rate, 'FLOP/s')} {format_rate(self.byte_rate, 'B/s')}"
        text = format_rate(self._rate(), self.unit)
        measured, sheet = self.fraction("measured"), self.fraction("datasheet")
        if measured is not None:
            text += f" {measured:.0%}"
        elif sheet is not None:
            text += f" {sheet:.0%} ds"
        return f"{text} {'mem' if bound == MEMORY else 'compute'}"

    def gate(self, min_peak: float) -> str | None:
        """The ``min_peak`` failure, or None when the call reaches it (or no measured ceiling
        says): ``speed of light: 1.21 TB/s is 41% of the measured 2.95 TB/s (memory-bound,
        0.25 FLOP/B) < min_peak 50%``."""
        share = self.fraction("measured")
        peak = self._peak(self.measured)
        if share is None or peak is None or share >= min_peak:
            return None
        intensity = self.work.intensity
        shape = f"{intensity:.3g} FLOP/B" if intensity is not None else "no bytes"
        return (
            f"speed of light: {format_rate(self._rate(), self.unit)} is {share:.0%} of the "
            f"measured {format_rate(peak, self.unit)} ({self.bound}-bound, {shape}) "
            f"< min_peak {min_peak:.0%}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "work": self.work.to_dict(),
            "median_ms": self.median_ms,
            "measured": self.measured.to_dict() if self.measured else None,
            "datasheet": self.datasheet.to_dict() if self.datasheet else None,
            # derived, for people and tools reading the file (recomputed on reading)
            "flop_rate": self.flop_rate,
            "byte_rate": self.byte_rate,
            "bound": self.bound,
            "fraction_measured": self.fraction("measured"),
            "fraction_datasheet": self.fraction("datasheet"),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Roofline:
        measured, sheet = d.get("measured"), d.get("datasheet")
        return cls(
            work=Work.from_dict(d["work"]),
            median_ms=float(d["median_ms"]),
            measured=Peaks.from_dict(measured) if measured else None,
            datasheet=Peaks.from_dict(sheet) if sheet else None,
        )
