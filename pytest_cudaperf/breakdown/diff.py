"""What changed between two breakdowns, and the lines a failure shows: kernels added, gone, slower
or faster, launched more or less often; host ops when the host time grew."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pytest_cudaperf.breakdown.model import Breakdown, Kernel, Other, sig
from pytest_cudaperf.breakdown.naming import short_name

#: host time per call must grow by this fraction before the diff names host ops
HOST_GROWTH = 0.10


def us(x: float) -> str:
    if abs(x) >= 1000.0:
        return f"{x / 1000:.3f} ms"
    return f"{x:.1f} µs"


def signed_us(x: float) -> str:
    return ("+" if x >= 0 else "-") + us(abs(x))


def launches_text(x: float) -> str:
    return f"{x:g}" if x == round(x, 2) else f"{x:.2f}"


_ROLES = (
    ("attention", re.compile(r"flash|fmha|attention|sdpa", re.I)),
    # nvjet: cuBLASLt's generated GEMM kernels on sm_90 (a bf16 matmul on the H100, torch 2.11)
    (
        "gemm",
        re.compile(r"gemm|xmma|cutlass|cublas|matmul|s16816|h16816|tensorop|wgmma|nvjet", re.I),
    ),
    ("conv", re.compile(r"conv|wgrad|dgrad|fprop", re.I)),
    ("softmax", re.compile(r"softmax", re.I)),
    ("norm", re.compile(r"norm", re.I)),
    ("reduce", re.compile(r"reduce", re.I)),
    ("copy", re.compile(r"^Memcpy|copy", re.I)),
    ("memset", re.compile(r"^Memset|fill", re.I)),
)


def role(name: str) -> str | None:
    """The kind of work a kernel does, read from its name (None when it says nothing)."""
    for label, pattern in _ROLES:
        if pattern.search(name):
            return label
    return None


@dataclass(frozen=True)
class Change:
    """One line of the diff. kind: "time", "launches", "appeared", "vanished", "replaced",
    "other"."""

    kind: str
    name: str
    base_launches: float
    current_launches: float
    base_us: float
    current_us: float
    new_name: str = ""  #: "replaced": the kernel that took this one's role
    role: str = ""

    @property
    def delta_us(self) -> float:
        return self.current_us - self.base_us

    def text(self) -> str:
        if self.kind == "replaced":
            return f"{self.role}: {self.name} -> {self.new_name}"
        if self.kind == "appeared":
            return f"new: {self.name} ({launches_text(self.current_launches)}x per call)"
        if self.kind == "vanished":
            return f"gone: {self.name} ({launches_text(self.base_launches)}x per call)"
        if self.kind == "other":
            return self.name
        if self.kind == "launches":
            return (
                f"{self.name}: {launches_text(self.base_launches)} -> "
                f"{launches_text(self.current_launches)} launches per call"
            )
        return f"{self.name}: {us(self.base_us)} -> {us(self.current_us)}"

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "new_name": self.new_name,
            "role": self.role,
            "base": {"launches": self.base_launches, "time_us": self.base_us},
            "current": {"launches": self.current_launches, "time_us": self.current_us},
            "delta_us": sig(self.delta_us),
        }


@dataclass(frozen=True)
class BreakdownDiff:
    base: Breakdown
    current: Breakdown
    changes: tuple[Change, ...]  #: ranked by |delta|
    host_ops: tuple[Change, ...]  #: host ops that grew (only when host time regressed)

    @property
    def host_regressed(self) -> bool:
        return bool(self.host_ops) or (self.current.host_us > self.base.host_us * (1 + HOST_GROWTH))

    def lines(self, max_lines: int = 8) -> list[str]:
        """The failure message's breakdown: a header, then the changes that explain it, the
        delta column aligned. At most ``max_lines`` lines."""
        b, c = self.base, self.current
        unit = b.unit
        head = (
            f"{unit}: {us(b.total_us)} -> {us(c.total_us)} per call "
            f"({signed_us(c.total_us - b.total_us)}{_pct(c.total_us, b.total_us)})"
        )
        out = [head]
        notes = list(dict.fromkeys((*b.notes, *c.notes)))
        out.extend(f"  note: {n}" for n in notes)
        host = []
        if self.host_regressed:
            grown = ", ".join(f"{h.name} {signed_us(h.delta_us)}" for h in self.host_ops[:3])
            host.append(
                f"  host: {us(b.host_us)} -> {us(c.host_us)} per call"
                f"{_pct(c.host_us, b.host_us, paren=True)}" + (f"; grew: {grown}" if grown else "")
            )
        room = max(0, max_lines - len(out) - len(host))
        shown = list(self.changes)
        if len(shown) > room:
            keep = max(0, room - 1)
            rest = shown[keep:]
            shown = shown[:keep]
            summary = f"({len(rest)} more changes, {signed_us(sum(ch.delta_us for ch in rest))})"
        else:
            summary = ""
        width = max((len(signed_us(ch.delta_us)) for ch in shown), default=0)
        out.extend(f"  {signed_us(ch.delta_us):>{width}}  {ch.text()}" for ch in shown)
        if summary:
            out.append(f"  {'':>{width}}  {summary}")
        if not shown and not summary and not host:
            out.append(f"  no {unit[:-1]} changed by more than the noise cut")
        out.extend(host)
        return out[:max_lines] if max_lines > 0 else []

    def to_json(self) -> dict[str, Any]:
        return {
            "backend": self.current.backend,
            "total_us": {"base": self.base.total_us, "current": self.current.total_us},
            "host_us": {"base": self.base.host_us, "current": self.current.host_us},
            "changes": [ch.to_json() for ch in self.changes],
            "host_ops": [ch.to_json() for ch in self.host_ops],
            "notes": sorted(set(self.base.notes) | set(self.current.notes)),
        }


def _pct(cur: float, base: float, paren: bool = False) -> str:
    if base <= 0:
        return ""
    text = f"{(cur / base - 1) * 100:+.1f}%"
    return f" ({text})" if paren else f", {text}"


def _cut(base: Breakdown, current: Breakdown, noise: float) -> float:
    return noise * max(base.total_us, current.total_us)


def _absent(key: str, entry: Kernel, other: Other) -> bool:
    """Whether ``key`` is surely not in ``other`` (its keys list is complete and lacks it, or
    the bucket is too small to hold the entry)."""
    if key in other.keys:
        return False
    return other.complete or entry.time_us > other.time_us


def _display(key: str) -> str:
    return key.split(" #", 1)[0] if " #" in key else short_name(key)


def diff(  # noqa: PLR0912, PLR0915 - one pass classifying each kind of change
    base: Breakdown, current: Breakdown, noise: float = 0.01
) -> BreakdownDiff:
    """What changed between two breakdowns, ranked by |time delta|.

    A launch-count change (by >= 0.5 per call) or an entry that appeared/vanished is always
    reported; a pure time change only above ``noise`` of the larger total. A vanished and an
    appeared kernel of the same role (gemm, attention, conv...) pair into "replaced". An entry
    missing on one side that may hide in that side's ``(other ...)`` bucket is not called
    vanished; the bucket's own change is reported instead."""
    if base.backend != current.backend:
        raise ValueError(f"cannot diff a {base.backend} breakdown with a {current.backend} one")
    cut = _cut(base, current, noise)
    b = {e.key: e for e in base.entries}
    c = {e.key: e for e in current.entries}
    changes: list[Change] = []
    appeared: list[Kernel] = []
    vanished: list[Kernel] = []
    for key in sorted(b.keys() | c.keys()):
        eb, ec = b.get(key), c.get(key)
        if eb and ec:
            if abs(ec.launches - eb.launches) >= 0.5:
                kind = "launches"
            elif abs(ec.time_us - eb.time_us) >= cut:
                kind = "time"
            else:
                continue
            changes.append(Change(kind, ec.name, eb.launches, ec.launches, eb.time_us, ec.time_us))
        elif ec:
            if not _absent(key, ec, base.other):
                continue  # in (or maybe in) base's (other ...) bucket: that line covers it
            appeared.append(ec)
        elif eb:
            if not _absent(key, eb, current.other):
                continue
            vanished.append(eb)
    gone_roles = {r for e in vanished if (r := role(e.name))}
    for r in sorted(gone_roles & {r for e in appeared if (r := role(e.name))}):
        gone = sorted((e for e in vanished if role(e.name) == r), key=lambda e: -e.time_us)
        new = sorted((e for e in appeared if role(e.name) == r), key=lambda e: -e.time_us)
        for eb, ec in zip(gone, new, strict=False):
            changes.append(
                Change(
                    "replaced",
                    eb.name,
                    eb.launches,
                    ec.launches,
                    eb.time_us,
                    ec.time_us,
                    new_name=ec.name,
                    role=r or "",
                )
            )
            vanished.remove(eb)
            appeared.remove(ec)
    changes.extend(Change("appeared", e.name, 0.0, e.launches, 0.0, e.time_us) for e in appeared)
    changes.extend(Change("vanished", e.name, e.launches, 0.0, e.time_us, 0.0) for e in vanished)
    ob, oc = base.other, current.other
    new_keys = sorted(set(oc.keys) - set(ob.keys) - b.keys()) if ob.complete else []
    gone_keys = sorted(set(ob.keys) - set(oc.keys) - c.keys()) if oc.complete else []
    if (abs(oc.time_us - ob.time_us) >= cut and (ob.count or oc.count)) or new_keys or gone_keys:
        named = "".join(
            f"; {label}: "
            + ", ".join(_display(x) for x in keys[:3])
            + (", ..." if keys[3:] else "")
            for label, keys in (("new", new_keys), ("gone", gone_keys))
            if keys
        )
        changes.append(
            Change(
                "other",
                f"(other {ob.count} -> {oc.count} {base.unit}{named})",
                ob.launches,
                oc.launches,
                ob.time_us,
                oc.time_us,
            )
        )
    changes.sort(key=lambda ch: (-abs(ch.delta_us), ch.kind, ch.name))
    host_ops: list[Change] = []
    if current.host_us > base.host_us * (1 + HOST_GROWTH):
        hb = {e.key: e for e in base.host_ops}
        hc = {e.key: e for e in current.host_ops}
        for key in hb.keys() | hc.keys():
            eb, ec = hb.get(key), hc.get(key)
            bt, ct = (eb.time_us if eb else 0.0), (ec.time_us if ec else 0.0)
            if ct > bt:
                e = ec or eb
                assert e is not None
                host_ops.append(
                    Change(
                        "appeared" if eb is None else "time",
                        e.name,
                        eb.launches if eb else 0.0,
                        ec.launches if ec else 0.0,
                        bt,
                        ct,
                    )
                )
        host_ops.sort(key=lambda ch: (-ch.delta_us, ch.name))
    return BreakdownDiff(base, current, tuple(changes), tuple(host_ops))


# ---------------------------------------------------------------------------------------------
# HTML


def top_lines(b: Breakdown, max_lines: int = 8) -> list[str]:
    """A breakdown on its own (no stored one to diff against): total, then the top entries."""
    out = [f"{b.unit}: {us(b.total_us)} per call, host {us(b.host_us)} per call"]
    out.extend(f"  note: {n}" for n in b.notes)
    room = max(0, max_lines - len(out))
    shown = b.entries[: max(0, room - 1)] if len(b.entries) > room else b.entries
    width = max((len(us(e.time_us)) for e in shown), default=0)
    out.extend(
        f"  {us(e.time_us):>{width}}  {e.name} ({launches_text(e.launches)}x per call)"
        for e in shown
    )
    hidden = len(b.entries) - len(shown) + b.other.count
    if hidden and len(out) < max_lines:
        out.append(f"  {'':>{width}}  (other {hidden} {b.unit})")
    return out[:max_lines]
