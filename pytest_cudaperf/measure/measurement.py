"""The result of one measurement: per-call time statistics in milliseconds and how they were
taken (rounds, instability, references, clocks). A plain value, round-tripped through the report
JSON; :mod:`pytest_cudaperf.measure.timing` produces it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_cudaperf.measure import stats
from pytest_cudaperf.units import format_ms

#: samples kept in a Measurement (and so in reports and JSON); all are used for statistics
MAX_KEPT_SAMPLES = 2000


@dataclass(frozen=True)
class Measurement:
    """One measured quantity: per-call time statistics in milliseconds and how they were taken.
    Its derived figures (:attr:`rel_halfwidth`, :attr:`rel_iqr`, :attr:`noise`) are computed
    once, when it is built (``dataclasses.replace`` builds it again), and are not part of its
    JSON."""

    median_ms: float
    mean_ms: float
    min_ms: float
    max_ms: float
    iqr_ms: float
    ci_ms: tuple[float, float]
    samples_ms: tuple[float, ...]
    n: int
    metric: str = "wall"
    cache: str = "n/a"
    graph: bool = False
    host_ms_per_call: float | None = None
    device: str = "cpu"
    blocking: str = "none"
    #: how L2 was flushed before each sample: ``read+discard``, ``read``, ``torch.sum``, ``none``
    flush: str = "none"
    clocks: Mapping[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    cost_s: float = 0.0
    name: str | None = None
    #: the median of each independent round (see :attr:`Budget.rounds`)
    round_medians_ms: tuple[float, ...] = ()
    #: why this measurement's median may sit elsewhere in another process, one short reason
    #: each (:mod:`pytest_cudaperf.measure.instability`)
    instability: tuple[str, ...] = ()
    #: the relative spread those reasons imply; a verdict takes the larger of it and
    #: :attr:`rel_halfwidth` (:attr:`noise`)
    instability_noise: float = 0.0
    #: the SM clock (MHz) the CUDA stream blocker measured, median over the measurement's
    #: batches; None without the clocked Triton blocker (and on the CPU)
    sm_mhz: float | None = None
    #: frames torch.compile compiled while samples were taken (not during warm-up)
    recompiles: int = 0
    #: the time of a fixed reference beside the samples: how fast the host ran while measuring.
    #: The CPU backend's loop on the CPU (median of one timing per round and one at the end;
    #: :class:`pytest_cudaperf.measure.cpu.ReferenceProbe`); for GPU code that synchronizes
    #: inside (``metric == "host"``) the median launch reference timed before each call
    #: (:func:`pytest_cudaperf.measure.hostbound.launch_reference`); None elsewhere
    reference_ms: float | None = None
    #: a tracer or profiler that ran while the samples were taken (``coverage's trace
    #: function``): the measurement is not the code's speed, and is neither judged nor recorded
    traced: str | None = None
    #: torch's intra-op threads while a CPU callable was measured (None: not set, not known)
    threads: int | None = None
    #: ``metric == "host"`` (GPU code that synchronizes inside): the per-call time in reference
    #: loops timed right beside each call (median, and its CI widened to every round's median),
    #: the quantity its verdict compares; None for any other metric
    in_loops: float | None = None
    in_loops_ci: tuple[float, float] | None = None
    #: ``metric == "host"``: the launch reference (ms) timed right before each sample kept in
    #: :attr:`samples_ms`, in the same order (which state of the host each call met); empty
    #: elsewhere
    references_ms: tuple[float, ...] = ()
    #: ``metric == "host"``: the part of each call (ms) that does not follow the host's speed,
    #: its kernels' device time timed apart (the call waits for them inside); None for any other
    #: metric and where the kernels could not be timed
    fixed_ms: float | None = None
    #: ``metric == "device"`` (CUDA): the GPU's time per launch of tiny kernels queued back to
    #: back in this process (:func:`pytest_cudaperf.measure.hostbound.launch_gap_us`); None
    #: elsewhere
    launch_gap_us: float | None = None
    #: ``metric == "kernels"``: passes over the same seeded calls (2 where the calls differ from
    #: each other: the CI is how the passes agree, :func:`stats.repeated_median`)
    seeded_passes: int = 1
    #: half the CI's width relative to the median (the CI covers every round's median):
    #: the precision of the median (infinite for a non-positive median)
    rel_halfwidth: float = field(init=False, repr=False, compare=False)
    #: the IQR relative to the median (infinite for a non-positive median)
    rel_iqr: float = field(init=False, repr=False, compare=False)
    #: what a verdict should take as this measurement's relative half-width: the larger of
    #: :attr:`rel_halfwidth` and :attr:`instability_noise`. Not their sum: the CI already
    #: covers every round's median, so rounds that disagree would count twice (why:
    #: docs/decisions.md, "Why is a measurement's noise the larger of its CI half-width and its
    #: instability, not the sum?")
    noise: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # the arithmetic of stats.relative_halfwidth and stats.relative_iqr: a value derives its
        # own figures
        median, (low, high) = self.median_ms, self.ci_ms
        halfwidth = (high - low) / 2 / median if median > 0 else math.inf
        rel_iqr = self.iqr_ms / median if median > 0 else math.inf
        object.__setattr__(self, "rel_halfwidth", halfwidth)
        object.__setattr__(self, "rel_iqr", rel_iqr)
        object.__setattr__(self, "noise", max(halfwidth, self.instability_noise))

    @classmethod
    def from_samples(cls, samples_ms: list[float], **kwargs: Any) -> Measurement:
        """Statistics of ``samples_ms``; with ``round_medians_ms`` the CI of the median is
        widened to cover every round's median."""
        summary = stats.summarize(samples_ms)
        kept = samples_ms if len(samples_ms) <= MAX_KEPT_SAMPLES else samples_ms[-MAX_KEPT_SAMPLES:]
        low, high = summary.ci
        rounds = tuple(kwargs.get("round_medians_ms", ()))
        if rounds:
            low, high = min(low, *rounds), max(high, *rounds)
        return cls(
            median_ms=summary.median,
            mean_ms=summary.mean,
            min_ms=summary.min,
            max_ms=summary.max,
            iqr_ms=summary.iqr,
            ci_ms=(low, high),
            samples_ms=tuple(kept),
            n=summary.n,
            **kwargs,
        )

    @property
    def mode(self) -> str:
        """The comparison key part that says how it was measured: ``device/cold``, ``wall``."""
        if self.cache not in ("cold", "hot"):
            return self.metric
        return f"{self.metric}/{self.cache}"

    @property
    def host_dominated(self) -> bool:
        """Whether the host's state can move this measurement between processes: a CPU
        measurement, a synchronized wall (or region) time, the time of GPU code that synchronizes
        inside (``host``) or device time whose launch latency could not be hidden. Device time
        behind the stream blocker, graph replays and the kernels' time time the GPU alone."""
        if self.device == "cpu" or self.metric in ("wall", "region", "host"):
            return True
        return self.metric == "device" and self.blocking == "none"

    @property
    def process_dependent(self) -> bool:
        """Whether a state of its process can move this measurement, so that a regression must
        hold in a fresh process: a host-dominated one, or a host-bound call's kernels
        (``kernels``): small kernels between the host's work ran 8–17% slower for a whole
        process, and a draw at random that is not seeded differs by process (why:
        docs/decisions.md, "Why must a host-bound call's kernels regress in a fresh process
        too?"). Device time of several launches a call is so too, by its series' recorded
        breakdown (:func:`pytest_cudaperf.run.judging.process_dependent`)."""
        return self.host_dominated or self.metric == "kernels"

    def how(self) -> str:
        """``device time, 40 samples, cold L2``."""
        what = {
            "device": "device time",
            "graph": "graph throughput",
            "wall": "wall time",
            "region": "region time",
            "host": "host-bound time in reference loops",
            "kernels": "kernels' device time",
        }.get(self.metric, self.metric)
        cache = f", {self.cache} L2" if self.cache in ("cold", "hot") else ""
        return f"{what}, {self.n} samples{cache}"

    def describe(self) -> str:
        """``1.234 ms median (device time, 40 samples, cold L2)``."""
        return f"{format_ms(self.median_ms)} median ({self.how()})"

    def to_dict(self) -> dict[str, Any]:
        data = {k: v for k, v in dataclasses.asdict(self).items() if k not in _DERIVED}
        data["ci_ms"] = list(self.ci_ms)
        data["samples_ms"] = list(self.samples_ms)
        data["warnings"] = list(self.warnings)
        data["clocks"] = dict(self.clocks)
        data["round_medians_ms"] = list(self.round_medians_ms)
        data["instability"] = list(self.instability)
        data["references_ms"] = list(self.references_ms)
        if self.in_loops_ci is not None:
            data["in_loops_ci"] = list(self.in_loops_ci)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Measurement:
        known = {f.name for f in dataclasses.fields(cls) if f.init}
        values = {k: v for k, v in data.items() if k in known}
        values["ci_ms"] = tuple(values["ci_ms"])
        values["samples_ms"] = tuple(values["samples_ms"])
        values["warnings"] = tuple(values.get("warnings", ()))
        values["round_medians_ms"] = tuple(values.get("round_medians_ms", ()))
        values["instability"] = tuple(values.get("instability", ()))
        values["references_ms"] = tuple(values.get("references_ms", ()))
        if values.get("in_loops_ci") is not None:
            low, high = values["in_loops_ci"]
            values["in_loops_ci"] = (float(low), float(high))
        return cls(**values)


#: the figures a Measurement derives from its fields when it is built (not in its JSON)
_DERIVED = frozenset(f.name for f in dataclasses.fields(Measurement) if not f.init)


def kernels_measured(times: list[float], device: str) -> Measurement | None:
    """The kernels' measurement of one pass of profiled calls (``times``, ms); None without
    calls."""
    return Measurement.from_samples(times, metric="kernels", device=device) if times else None


def kernels_of_passes(first: list[float], second: list[float], device: str) -> Measurement:
    """The kernels' measurement of two passes over the same seeded calls, whose CI is how the
    passes agree (:func:`stats.repeated_median`): calls that draw their work at random differ
    from each other by far more than they differ from themselves."""
    median, ci = stats.repeated_median(first, second)
    pooled = Measurement.from_samples([*first, *second], metric="kernels", device=device)
    return dataclasses.replace(pooled, median_ms=median, ci_ms=ci, seeded_passes=2)
