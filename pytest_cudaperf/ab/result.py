"""What ``cudaperf ab`` found, typed: per series both sides' per-process recordings, the pairs, the
paired verdict and what the kernels say; the tests one side lacks; the sides that failed. Its JSON
(:meth:`AbResult.to_json`), the terminal table (slowest first) and the GitHub step summary."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_cudaperf import atomic
from pytest_cudaperf.ab.paired import CONFIRM_PAIRS, Call, Paired
from pytest_cudaperf.ab.prior import Prior
from pytest_cudaperf.keys import SeriesKey
from pytest_cudaperf.report.terminal import render_table
from pytest_cudaperf.series import Recording
from pytest_cudaperf.store.format import recording_to_json
from pytest_cudaperf.units import format_pct, format_value
from pytest_cudaperf.verdict import ci_text

SCHEMA = 1

#: the words of a call, by unit: a peak that grew is more memory, not slower
_WORDS = {
    "ms": {Call.SLOWER: "SLOWER", Call.FASTER: "FASTER"},
    "bytes": {Call.SLOWER: "MORE MEMORY", Call.FASTER: "LESS MEMORY"},
}


@dataclass(frozen=True)
class SideInfo:
    name: str
    label: str
    commit: str | None
    python: str
    imports: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "label": self.label,
            "commit": self.commit,
            "python": self.python,
            "imports": self.imports,
        }


@dataclass(frozen=True)
class Process:
    """One pytest process of the comparison, in the order it ran."""

    side: str
    pair: int
    rc: int
    wall_s: float
    #: the end of its output, when it failed
    output: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "side": self.side,
            "pair": self.pair,
            "rc": self.rc,
            "wall_s": round(self.wall_s, 2),
            "output": self.output,
        }


@dataclass(frozen=True)
class Compared:
    """One series measured on both sides."""

    key: SeriesKey
    series: str
    unit: str
    #: each side's recording per pair (None: that process did not measure it)
    base: tuple[Recording | None, ...]
    head: tuple[Recording | None, ...]
    paired: Paired
    #: ``same kernels`` / ``kernels differ`` / "" (no breakdown on a side)
    kernels: str = ""
    #: the kernel (or op) breakdown diff, base -> head, for a SLOWER series
    diff: tuple[str, ...] = ()

    @property
    def word(self) -> str:
        if self.paired.call is Call.UNMEASURED:
            return "NOT MEASURED"
        return _WORDS.get(self.unit, _WORDS["ms"]).get(self.paired.call, self.paired.call.name)

    def median(self, side: str) -> float | None:
        values = [r.median for r in (self.base if side == "base" else self.head) if r]
        return sorted(values)[len(values) // 2] if values else None

    def to_json(self) -> dict[str, Any]:
        def recordings(side: Sequence[Recording | None]) -> list[Any]:
            return [recording_to_json(r) if r else None for r in side]

        paired = self.paired
        return {
            "nodeid": self.key.nodeid,
            "name": self.key.name,
            "series": self.series,
            "unit": self.unit,
            "base": recordings(self.base),
            "head": recordings(self.head),
            "ratios": [r if math.isfinite(r) else None for r in paired.ratios],
            "ratio": paired.ratio if math.isfinite(paired.ratio) else None,
            "ci": [c if math.isfinite(c) else None for c in paired.ci],
            "call": paired.call.value,
            "cycles": paired.cycles,
            "kernels": self.kernels,
            "diff": list(self.diff),
        }


@dataclass
class AbResult:
    base: SideInfo
    head: SideInfo
    min_effect: float
    same_revision: bool = False
    processes: list[Process] = field(default_factory=list)
    compared: list[Compared] = field(default_factory=list)
    #: series (``test [name] {series}``) measured by one side only
    only_base: list[str] = field(default_factory=list)
    only_head: list[str] = field(default_factory=list)
    #: tests whose body failed on a side: not judged
    failed_tests: dict[str, list[str]] = field(default_factory=dict)
    #: a side whose run failed or crashed (exit code other than 0 and 1): its name
    failed_side: str | None = None
    stopped: str = ""
    #: series called SLOWER or FASTER that the confirming pairs withdrew (now UNDECIDED), each
    #: with the call it had
    unconfirmed: list[str] = field(default_factory=list)
    #: the pair noise the time series share, weighed into each one's interval (None: too few
    #: series to fit it, each series' interval its own)
    prior: Prior | None = None

    def calls(self, call: Call) -> list[Compared]:
        return [c for c in self.compared if c.paired.call is call]

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "kind": "cudaperf-ab",
            "base": self.base.to_json(),
            "head": self.head.to_json(),
            "min_effect": self.min_effect,
            "same_revision": self.same_revision,
            "order": [f"{p.side}" for p in self.processes],
            "processes": [p.to_json() for p in self.processes],
            "series": [c.to_json() for c in self.compared],
            "only_base": self.only_base,
            "only_head": self.only_head,
            "failed_tests": self.failed_tests,
            "failed_side": self.failed_side,
            "stopped": self.stopped,
            "unconfirmed": self.unconfirmed,
            "prior": None if self.prior is None else _prior_json(self.prior),
            "summary": {call.value: len(self.calls(call)) for call in Call},
        }

    def write_json(self, path: Path) -> None:
        atomic.write_text(path, json.dumps(self.to_json(), indent=2, sort_keys=True) + "\n")


def _prior_json(prior: Prior) -> dict[str, Any]:
    return {
        "sd": prior.sd,
        "df": prior.df if math.isfinite(prior.df) else None,
        "series": prior.series,
    }


def prior_line(prior: Prior) -> str:
    """What the series' shared pair noise is, as the terminal says it."""
    held = (
        "infinite degrees of freedom (their variances differ no more than their pairs explain)"
        if math.isinf(prior.df)
        else f"{prior.df:.1f} degrees of freedom"
    )
    noise = math.expm1(prior.sd)
    return f"pair noise shared by {prior.series} time series: ±{noise:.2%} a pair, held with {held}"


HEADER = ["test", "base", "head", "change", "95% CI", "pairs", "verdict", "kernels"]


def _sorted(result: AbResult) -> list[Compared]:
    """Slowest change first; undecidable ratios last."""
    return sorted(
        result.compared,
        key=lambda c: -c.paired.ratio if math.isfinite(c.paired.ratio) else math.inf,
    )


def table_rows(result: AbResult) -> list[list[str]]:
    rows = []
    for c in _sorted(result):
        name = f"{c.key}" + (" {peak}" if c.unit == "bytes" else "")
        base, head = c.median("base"), c.median("head")
        ratio = c.paired.ratio
        rows.append(
            [
                name,
                format_value(base, c.unit) if base is not None else "—",
                format_value(head, c.unit) if head is not None else "—",
                format_pct(ratio - 1) if math.isfinite(ratio) else "",
                ci_text(c.paired.ci) if all(map(math.isfinite, c.paired.ci)) else "",
                str(c.paired.pairs),
                c.word + (" (cycles)" if c.paired.cycles else ""),
                c.kernels,
            ]
        )
    return rows


def summary_line(result: AbResult) -> str:
    counts = {call: len(result.calls(call)) for call in Call}
    parts = [
        f"{len(result.compared)} compared",
        f"{counts[Call.SLOWER]} slower",
        f"{counts[Call.FASTER]} faster",
        f"{counts[Call.SAME]} same",
        f"{counts[Call.UNDECIDED]} undecided",
    ]
    if counts[Call.UNMEASURED]:
        parts.append(f"{counts[Call.UNMEASURED]} not measured")
    head = f"cudaperf ab: {', '.join(parts)} (min effect {result.min_effect:.1%})"
    if result.same_revision:
        head += "; an A/A: both sides are the same code, so any SLOWER or FASTER is noise"
    return head


def lines(result: AbResult) -> list[str]:
    """The terminal output: the table, what each SLOWER's kernels say, the tests one side lacks,
    the tests that failed, and the summary."""
    out = render_table(table_rows(result), HEADER) if result.compared else []
    for c in _sorted(result):
        if c.paired.call is Call.SLOWER and c.diff:
            out.append(f"{c.key} {{{c.series}}}, base -> head:")
            out.extend(f"    {line}" for line in c.diff)
    if result.only_base:
        out.append(f"only on base (not judged): {', '.join(result.only_base)}")
    if result.only_head:
        out.append(f"only on head (not judged): {', '.join(result.only_head)}")
    for side, tests in result.failed_tests.items():
        out.append(f"failed on {side} (not judged): {', '.join(tests)}")
    if result.prior is not None:
        out.append(f"cudaperf ab: {prior_line(result.prior)}")
    if result.stopped:
        out.append(f"cudaperf ab: {result.stopped}")
    if result.unconfirmed:
        out.append(
            f"not confirmed by {CONFIRM_PAIRS} fresh pairs (now UNDECIDED): "
            + ", ".join(result.unconfirmed)
        )
    out.append(summary_line(result))
    return out


def github_summary(result: AbResult) -> str:
    """The Markdown step summary: the table, slowest change first."""
    rows = table_rows(result)
    text = [
        f"### cudaperf ab: {result.head.label} against {result.base.label}",
        "",
        "| " + " | ".join(HEADER) + " |",
        "|" + "---|" * len(HEADER),
    ]
    text += [
        "| " + " | ".join(cell.replace("|", "\\|") or " " for cell in row) + " |" for row in rows
    ]
    text += ["", summary_line(result), ""]
    return "\n".join(text)
