"""Kernel-level (CUDA) or op-level (CPU) breakdown of a callable, and the diff that says *what*
changed when a measurement regressed.

``profile(fn, device)`` runs ``fn`` under ``torch.profiler``: a few warm-up calls (timed on the host
clock), then ``calls`` calls profiled, averaged per call.

* **CUDA**: every device activity the profiler reports for that device counts as a kernel:
  kernels, memory copies (``Memcpy HtoD ...``) and memsets. Per kernel: a readable short name,
  launches per call and device time per call. Host side: the top-level aten ops by host
  (CPU-inclusive) time, so that a host-time regression can name the ops that grew.
* **CPU**: the *top-level* ops: an op (a name with ``::``, e.g. ``aten::linear``,
  ``autograd::engine::evaluate_function: MmBackward0``) none of whose ancestors is an op.
  Its time is its CPU-inclusive time (children included, and the children are not listed), so
  no time is counted twice; user annotations (``record_function``) are transparent.

The entries that cover >= 95% of the total time are kept (at most ``MAX_ENTRIES``), the rest are
summed as ``(other N kernels)``. Every float is rounded to 6 significant digits when the breakdown
is built, so ``from_json(to_json(b)) == b`` and the stored JSON is deterministic.

CUDA graphs: a replayed graph's kernels are listed when the profiler (CUPTI) sees inside the
graph; when graph launches were seen but no kernel, the breakdown says
``graph replay: kernels not visible``.

torch is imported inside ``profile`` only.
"""

from __future__ import annotations

import functools
import hashlib
import html
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: the kept entries cover at least this fraction of the total time
COVERAGE = 0.95
#: and are at most this many (the rest go to ``other``)
MAX_ENTRIES = 40
#: keys of the entries summed as ``other`` that are stored (so a diff can name them)
MAX_OTHER_KEYS = 64
#: host ops kept (CUDA breakdowns)
MAX_HOST_OPS = 10
#: a full kernel name longer than this is stored as short name + hash only
MAX_KEY_CHARS = 160
#: a short name longer than this is compacted (head tokens ... layout)
MAX_NAME_CHARS = 56
#: no short name is longer than this
MAX_SHORT_CHARS = 100
#: host time per call must grow by this fraction before the diff names host ops
HOST_GROWTH = 0.10
SCHEMA = 1
GRAPH_NOT_VISIBLE = "graph replay: kernels not visible"
GRAPH_VISIBLE = "graph replay: kernels inside the graph listed"


class BreakdownUnavailable(RuntimeError):  # noqa: N818
    """The profiler could not run (another profiler active, kineto missing...); the message
    says why in one line."""


# ---------------------------------------------------------------------------------------------
# the typed record


def _sig(x: float) -> float:
    """``x`` rounded to 6 significant digits (the stored precision)."""
    if not math.isfinite(x):
        raise ValueError(f"not a finite number: {x!r}")
    return float(f"{x:.6g}")


@dataclass(frozen=True)
class Entry:
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
    entries: tuple[Entry, ...]
    other: Other = field(default_factory=Other)
    host_ops: tuple[Entry, ...] = ()  #: CUDA only: top-level aten ops by host time
    graph_launches: float = 0.0  #: CUDA graph launches per call
    notes: tuple[str, ...] = ()

    @property
    def unit(self) -> str:
        return "kernels" if self.backend == "cuda" else "ops"

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


def _entry_json(e: Entry) -> dict[str, Any]:
    return {"key": e.key, "name": e.name, "launches": e.launches, "time_us": e.time_us}


def _mapping(data: object, where: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise ValueError(f"{where}: expected an object, got {type(data).__name__}")
    return data


def _num(d: Mapping[str, Any], key: str, where: str) -> float:
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise ValueError(f"{where}.{key}: expected a finite number >= 0, got {v!r}")
    return _sig(float(v))


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


def _entry_from(data: object, where: str) -> Entry:
    d = _mapping(data, where)
    return Entry(
        key=_str(d, "key", where),
        name=_str(d, "name", where),
        launches=_num(d, "launches", where),
        time_us=_num(d, "time_us", where),
    )


# ---------------------------------------------------------------------------------------------
# names

_TEMPLATE_HINT = re.compile(r"\b(\w*(?:Functor|functor)\w*)")
_LAMBDA_HOST = re.compile(r"(\w+)\([^()]*\)(?: const)?::\{lambda")
_WRAPPERS = {"Kernel", "Kernel2", "device_kernel", "kernel"}
_LAYOUT = re.compile(r"^(nn|nt|tn|tt)$")
_TILE = re.compile(r"(\d+x\d+(?:x\d+)?)")
_BOILERPLATE = re.compile(
    r"(_execute_segment_k_(?:on|off)_kernel|_execute_kernel|__\d+x_cublas|_cublas|_kernel__\d+x)+$"
)


def _split_top(text: str, start: int, opening: str, closing: str) -> tuple[str, int]:
    """The text between ``text[start] == opening`` and its matching ``closing``."""
    depth = 0
    for i in range(start, len(text)):
        ch = text[i]
        if ch == opening:
            depth += 1
        elif ch == closing:
            depth -= 1
            if depth == 0:
                return text[start + 1 : i], i + 1
    return text[start + 1 :], len(text)


def _base(identifier: str) -> str:
    """The last ``::`` component, outside templates and parentheses."""
    depth = 0
    cut = 0
    i = 0
    while i < len(identifier):
        ch = identifier[i]
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif depth == 0 and identifier.startswith("::", i):
            cut = i + 2
            i += 1
        i += 1
    return identifier[cut:]


def _compact(name: str) -> str:
    """A long cuBLAS/CUTLASS-style name kept recognisable: its head, its tile and layout."""
    name = _BOILERPLATE.sub("", name.removeprefix("cudnn_generated_fort_native_"))
    if len(name) <= MAX_NAME_CHARS:
        return name
    tokens = name.split("_")
    head = "_".join(tokens[:4])
    tail = []
    tile = next((m.group(1) for t in tokens[4:] if (m := _TILE.search(t))), None)
    if tile:
        tail.append(tile)
    layout = next((t for t in tokens[4:] if _LAYOUT.match(t)), None)
    if layout:
        tail.append(layout)
    return "_".join([head, "..", *tail]) if tail else head + "_.."


@functools.lru_cache(maxsize=4096)
def short_name(full: str) -> str:
    """A kernel name a person reads (see ``_short_name``), clipped to ``MAX_SHORT_CHARS``."""
    name = _short_name(full)
    return name if len(name) <= MAX_SHORT_CHARS else name[: MAX_SHORT_CHARS - 2] + ".."


def _short_name(full: str) -> str:  # noqa: PLR0912 - one rule per kind of name noise
    """A kernel name a person reads: no ``void``, namespaces, argument list or template noise;
    the functor or lambda host of a generic elementwise/reduce kernel kept in brackets
    (``vectorized_elementwise_kernel<CUDAFunctor_add>``); a CUTLASS ``Kernel2<name>`` unwrapped;
    long cuBLAS/CUTLASS names compacted to head, tile and layout. Memcpy/Memset/CPU op names are
    kept as they are. At most ``MAX_SHORT_CHARS`` characters."""
    text = full.strip()
    if not text:
        return "(unnamed)"
    if text.startswith(("Memcpy", "Memset")) or ("::" not in text and "<" not in text):
        return _compact(text) if " " not in text else text
    if text.startswith(("aten::", "prim::", "autograd::", "c10d::", "profiler::")):
        return text
    if text.startswith("void "):
        text = text[5:]
    # "(anonymous namespace)::" is a namespace like any other, but its parentheses would end the
    # identifier early (seen on the H100: softmax_warp_forward and cunn_SoftMaxForward read "")
    text = text.replace("(anonymous namespace)::", "")
    # the identifier: up to the first top-level "<" or "("
    i = 0
    depth_name_end = len(text)
    while i < len(text):
        if text[i] in "<(":
            depth_name_end = i
            break
        i += 1
    ident = _base(text[:depth_name_end]) or text[:depth_name_end]
    templ = ""
    if depth_name_end < len(text) and text[depth_name_end] == "<":
        templ, _ = _split_top(text, depth_name_end, "<", ">")
    if ident in _WRAPPERS and templ:
        inner = _base(templ.split("<", 1)[0].split(",", 1)[0].strip())
        if inner:
            return f"{ident}<{_compact(inner)}>"
    hint = None
    if templ:
        m = _TEMPLATE_HINT.search(templ)
        if m:
            hint = _base(m.group(1))
        else:
            lam = _LAMBDA_HOST.search(templ)
            if lam:
                hint = lam.group(1)
    ident = _compact(ident)
    return f"{ident}<{hint}>" if hint else ident


def entry_key(full: str, short: str) -> str:
    if len(full) <= MAX_KEY_CHARS:
        return full
    digest = hashlib.sha1(full.encode(), usedforsecurity=False).hexdigest()[:8]
    return f"{short} #{digest}"


# ---------------------------------------------------------------------------------------------
# aggregation (pure: unit-tested with synthetic events)


@dataclass(frozen=True)
class RawEvent:
    """What ``profile`` reads from one profiler event."""

    name: str
    duration_us: float
    kind: str  #: "kernel" (device activity), "op" (top-level op), "graph_launch"


def _ranked(
    totals: Mapping[str, tuple[str, int, float]], calls: int, coverage: float, limit: int
) -> tuple[tuple[Entry, ...], Other, float]:
    """Per-call entries sorted by time (then key), cut at ``coverage`` of the total."""
    entries = sorted(
        (
            Entry(key, short, _sig(n / calls), _sig(t / calls))
            for key, (short, n, t) in totals.items()
        ),
        key=lambda e: (-e.time_us, e.key),
    )
    total = sum(t for _, _, t in totals.values()) / calls
    kept: list[Entry] = []
    covered = 0.0
    for e in entries:
        if len(kept) >= limit or (kept and covered >= coverage * total):
            break
        kept.append(e)
        covered += e.time_us
    rest = entries[len(kept) :]
    other = Other(
        count=len(rest),
        launches=_sig(sum(e.launches for e in rest)),
        time_us=_sig(sum(e.time_us for e in rest)),
        keys=tuple(sorted(e.key for e in rest[:MAX_OTHER_KEYS])),  # the largest ones
    )
    return tuple(kept), other, _sig(total)


def _totals(events: Iterable[RawEvent], kind: str) -> dict[str, tuple[str, int, float]]:
    totals: dict[str, tuple[str, int, float]] = {}
    for ev in events:
        if ev.kind != kind:
            continue
        short = short_name(ev.name)
        key = entry_key(ev.name, short)
        _, n, t = totals.get(key, (short, 0, 0.0))
        totals[key] = (short, n + 1, t + max(0.0, ev.duration_us))
    return totals


def aggregate(  # noqa: PLR0913 - the profile's events and how to cut them
    events: Sequence[RawEvent],
    backend: str,
    calls: int,
    host_us: float,
    notes: Sequence[str] = (),
    coverage: float = COVERAGE,
) -> Breakdown:
    """A Breakdown from the events of ``calls`` profiled calls."""
    if calls < 1:
        raise ValueError(f"calls: expected >= 1, got {calls}")
    main_kind = "kernel" if backend == "cuda" else "op"
    entries, other, total = _ranked(_totals(events, main_kind), calls, coverage, MAX_ENTRIES)
    host_ops: tuple[Entry, ...] = ()
    if backend == "cuda":
        ops = _totals(events, "op")
        host_ops = tuple(
            sorted(
                (Entry(k, s, _sig(n / calls), _sig(t / calls)) for k, (s, n, t) in ops.items()),
                key=lambda e: (-e.time_us, e.key),
            )[:MAX_HOST_OPS]
        )
    graph = sum(1 for ev in events if ev.kind == "graph_launch") / calls
    all_notes = list(notes)
    if graph:
        all_notes.append(GRAPH_VISIBLE if entries else GRAPH_NOT_VISIBLE)
    elif backend == "cuda" and not entries:
        all_notes.append("no kernels seen (CUPTI unavailable, or fn launches none)")
    return Breakdown(
        backend=backend,
        calls=calls,
        total_us=total,
        host_us=_sig(host_us),
        entries=entries,
        other=other,
        host_ops=host_ops,
        graph_launches=_sig(graph),
        notes=tuple(all_notes),
    )


# ---------------------------------------------------------------------------------------------
# profiling


def _is_op(ev: Any) -> bool:
    name = str(ev.name)
    return "::" in name and not getattr(ev, "is_user_annotation", False)


def _top_level(ev: Any) -> bool:
    parent = ev.cpu_parent
    while parent is not None:
        if _is_op(parent):
            return False
        parent = parent.cpu_parent
    return True


#: device activities that count as kernels (kineto's activity types)
DEVICE_KINDS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
#: device activities that are not work, recognised by name when torch gives no activity type
_NOT_WORK = re.compile(r"\b(Sync|Wait)\b")


def raw_events(function_events: Iterable[Any], device_index: int | None) -> list[RawEvent]:
    """RawEvents from torch's FunctionEvents: kernels, memcpys and memsets on ``device_index``
    are kernels (not synchronisations, nor the GPU-side mirrors of ``record_function``
    ranges); top-level CPU ops are ops; ``cudaGraphLaunch`` calls are graph launches."""
    events = list(function_events)
    annotations = {str(ev.name) for ev in events if getattr(ev, "is_user_annotation", False)}
    out: list[RawEvent] = []
    for ev in events:
        dtype = str(getattr(ev, "device_type", "DeviceType.CPU")).rsplit(".", 1)[-1]
        name = str(ev.name)
        span = float(ev.time_range.end - ev.time_range.start)
        if dtype != "CPU":
            kind = getattr(ev, "activity_type", None)
            if isinstance(kind, str) and kind:
                if kind not in DEVICE_KINDS:
                    continue
            elif name in annotations or _NOT_WORK.search(name):
                continue
            index = getattr(ev, "device_index", None)
            if device_index is None or index is None or index == device_index:
                out.append(RawEvent(name, span, "kernel"))
        elif name.startswith(("cudaGraphLaunch", "hipGraphLaunch")):
            out.append(RawEvent(name, span, "graph_launch"))
        elif _is_op(ev) and _top_level(ev):
            out.append(RawEvent(name, float(ev.cpu_time_total), "op"))
    return out


def _profiler(torch: Any, is_cuda: bool) -> Any:
    """The kineto-backed autograd profiler (what ``torch.profiler.profile`` wraps): it skips
    ``torch.profiler``'s ``prepare_trace``, whose ``hasattr(torch, "_inductor")`` imports
    Inductor (seconds, once per process). ``use_device`` is feature-detected (older torch:
    ``use_cuda``)."""
    import inspect

    profile_cls = torch.autograd.profiler.profile
    params = inspect.signature(profile_cls.__init__).parameters
    kwargs: dict[str, Any] = {"use_kineto": True}
    if is_cuda:
        kwargs.update({"use_device": "cuda"} if "use_device" in params else {"use_cuda": True})
    return profile_cls(**kwargs)


def _profiler_active(torch: Any) -> bool:
    """Whether a torch profiler session is running (feature-detected across versions)."""
    enabled = getattr(getattr(torch._C, "_autograd", None), "_profiler_enabled", None)
    if callable(enabled):
        return bool(enabled())
    return bool(getattr(torch.autograd.profiler, "_is_profiler_enabled", False))


def profile(
    fn: Callable[[], object],
    device: str,
    calls: int = 5,
    warmup: int = 2,
    budget_s: float = 0.2,
) -> Breakdown:
    """Break ``fn`` down on ``device`` ("cuda", "cuda:1", "cpu"): ``warmup`` (at least one)
    timed calls, then up to ``calls`` profiled calls, per-call averages. The profiled calls are
    fewer (down to one) when the warm calls show that ``calls`` of them would take longer than
    ``budget_s``, so a slow callable's breakdown costs about ``warmup + 1`` calls. Raises
    BreakdownUnavailable when the profiler cannot run here (e.g. the test runs its own)."""
    import torch

    if calls < 1 or warmup < 0:
        raise ValueError(f"calls >= 1 and warmup >= 0 expected, got {calls}, {warmup}")
    dev = torch.device(device)
    is_cuda = dev.type == "cuda"
    if _profiler_active(torch):
        # a nested profiler "works" but silently ends the outer (the user's) session
        raise BreakdownUnavailable("torch.profiler could not run: another profiler is active")
    index = None
    if is_cuda:
        index = dev.index if dev.index is not None else torch.cuda.current_device()
    host: list[float] = []
    wall: list[float] = []
    for _ in range(max(1, warmup)):
        began = time.perf_counter()
        fn()
        host.append((time.perf_counter() - began) * 1e6)
        if is_cuda:
            torch.cuda.synchronize(index)
        wall.append(time.perf_counter() - began)
    host.sort()
    host_us = host[len(host) // 2]
    calls = max(1, min(calls, int(budget_s / max(min(wall), 1e-9))))
    try:
        with _profiler(torch, is_cuda) as prof:
            for _ in range(calls):
                fn()
            if is_cuda:
                torch.cuda.synchronize(index)
        events = prof.function_events
    except (RuntimeError, AssertionError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BreakdownUnavailable(f"torch.profiler could not run: {first}") from exc
    return aggregate(raw_events(events or [], index), "cuda" if is_cuda else "cpu", calls, host_us)


# ---------------------------------------------------------------------------------------------
# diff


def _us(x: float) -> str:
    if abs(x) >= 1000.0:
        return f"{x / 1000:.3f} ms"
    return f"{x:.1f} µs"


def _signed_us(x: float) -> str:
    return ("+" if x >= 0 else "-") + _us(abs(x))


def _launches(x: float) -> str:
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
            return f"new: {self.name} ({_launches(self.current_launches)}x per call)"
        if self.kind == "vanished":
            return f"gone: {self.name} ({_launches(self.base_launches)}x per call)"
        if self.kind == "other":
            return self.name
        if self.kind == "launches":
            return (
                f"{self.name}: {_launches(self.base_launches)} -> "
                f"{_launches(self.current_launches)} launches per call"
            )
        return f"{self.name}: {_us(self.base_us)} -> {_us(self.current_us)}"

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "new_name": self.new_name,
            "role": self.role,
            "base": {"launches": self.base_launches, "time_us": self.base_us},
            "current": {"launches": self.current_launches, "time_us": self.current_us},
            "delta_us": _sig(self.delta_us),
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
            f"{unit}: {_us(b.total_us)} -> {_us(c.total_us)} per call "
            f"({_signed_us(c.total_us - b.total_us)}{_pct(c.total_us, b.total_us)})"
        )
        out = [head]
        notes = list(dict.fromkeys((*b.notes, *c.notes)))
        out.extend(f"  note: {n}" for n in notes)
        host = []
        if self.host_regressed:
            grown = ", ".join(f"{h.name} {_signed_us(h.delta_us)}" for h in self.host_ops[:3])
            host.append(
                f"  host: {_us(b.host_us)} -> {_us(c.host_us)} per call"
                f"{_pct(c.host_us, b.host_us, paren=True)}" + (f"; grew: {grown}" if grown else "")
            )
        room = max(0, max_lines - len(out) - len(host))
        shown = list(self.changes)
        if len(shown) > room:
            keep = max(0, room - 1)
            rest = shown[keep:]
            shown = shown[:keep]
            summary = f"({len(rest)} more changes, {_signed_us(sum(ch.delta_us for ch in rest))})"
        else:
            summary = ""
        width = max((len(_signed_us(ch.delta_us)) for ch in shown), default=0)
        out.extend(f"  {_signed_us(ch.delta_us):>{width}}  {ch.text()}" for ch in shown)
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


def _absent(key: str, entry: Entry, other: Other) -> bool:
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
    appeared: list[Entry] = []
    vanished: list[Entry] = []
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


def side_by_side_html(base: Breakdown, current: Breakdown) -> str:
    """An escaped ``<table>`` fragment: one row per kernel/op on either side, ranked by
    |time delta|, then the other bucket and the totals."""
    b = {e.key: e for e in base.entries}
    c = {e.key: e for e in current.entries}
    rows: list[tuple[str, str, Entry | None, Entry | None]] = []
    for key in b.keys() | c.keys():
        eb, ec = b.get(key), c.get(key)
        either = ec or eb
        rows.append((either.name if either else key, key, eb, ec))
    rows.sort(
        key=lambda r: (
            -abs((r[3].time_us if r[3] else 0.0) - (r[2].time_us if r[2] else 0.0)),
            r[0],
            r[1],
        )
    )

    def cells(e: Entry | None) -> str:
        if e is None:
            return "<td>–</td><td>–</td>"
        return f"<td>{_launches(e.launches)}</td><td>{html.escape(_us(e.time_us))}</td>"

    def delta(eb: float, ec: float) -> str:
        return f"<td>{html.escape(_signed_us(ec - eb))}</td>"

    unit = html.escape(base.unit)
    out = [
        '<table class="cudaperf-breakdown">',
        f"<thead><tr><th>{unit[:-1]}</th><th>base launches/call</th><th>base time/call</th>"
        "<th>current launches/call</th><th>current time/call</th><th>Δ time</th></tr></thead>",
        "<tbody>",
    ]
    for name, full, eb, ec in rows:
        out.append(
            f'<tr><td title="{html.escape(full, quote=True)}">{html.escape(name)}</td>'
            f"{cells(eb)}{cells(ec)}"
            f"{delta(eb.time_us if eb else 0.0, ec.time_us if ec else 0.0)}</tr>"
        )
    ob, oc = base.other, current.other
    if ob.count or oc.count:
        out.append(
            f"<tr><td>(other {ob.count} / {oc.count} {unit})</td>"
            f"<td>{_launches(ob.launches)}</td><td>{html.escape(_us(ob.time_us))}</td>"
            f"<td>{_launches(oc.launches)}</td><td>{html.escape(_us(oc.time_us))}</td>"
            f"{delta(ob.time_us, oc.time_us)}</tr>"
        )
    out.append(
        f"<tr><th>total</th><td></td><td>{html.escape(_us(base.total_us))}</td>"
        f"<td></td><td>{html.escape(_us(current.total_us))}</td>"
        f"{delta(base.total_us, current.total_us)}</tr>"
    )
    out.append(
        f"<tr><th>host/call</th><td></td><td>{html.escape(_us(base.host_us))}</td>"
        f"<td></td><td>{html.escape(_us(current.host_us))}</td>"
        f"{delta(base.host_us, current.host_us)}</tr>"
    )
    out.append("</tbody></table>")
    notes = sorted(set(base.notes) | set(current.notes))
    if notes:
        out.append(
            '<p class="cudaperf-breakdown-notes">'
            + "; ".join(html.escape(n) for n in notes)
            + "</p>"
        )
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------
# what the plugin calls


def top_lines(b: Breakdown, max_lines: int = 8) -> list[str]:
    """A breakdown on its own (no stored one to diff against): total, then the top entries."""
    out = [f"{b.unit}: {_us(b.total_us)} per call, host {_us(b.host_us)} per call"]
    out.extend(f"  note: {n}" for n in b.notes)
    room = max(0, max_lines - len(out))
    shown = b.entries[: max(0, room - 1)] if len(b.entries) > room else b.entries
    width = max((len(_us(e.time_us)) for e in shown), default=0)
    out.extend(
        f"  {_us(e.time_us):>{width}}  {e.name} ({_launches(e.launches)}x per call)" for e in shown
    )
    hidden = len(b.entries) - len(shown) + b.other.count
    if hidden and len(out) < max_lines:
        out.append(f"  {'':>{width}}  (other {hidden} {b.unit})")
    return out[:max_lines]


@dataclass(frozen=True)
class Explanation:
    """What a failure shows: ``lines`` under the verdict line, ``data`` for the JSON report
    (None when there was nothing to diff), ``html`` for the HTML report ("" likewise)."""

    lines: tuple[str, ...]
    data: dict[str, Any] | None = None
    html: str = ""
    current: Breakdown | None = None
    base: Breakdown | None = None

    @property
    def compared(self) -> tuple[Breakdown, Breakdown] | None:
        """(base, current) where both were diffed."""
        if self.base is None or self.current is None:
            return None
        return self.base, self.current


def record(fn: Callable[[], object], device: str) -> tuple[dict[str, Any] | None, str]:
    """For ``--cudaperf-update``: the breakdown's JSON to store under the entry's "breakdown"
    key, or (None, one-line reason) when the profiler cannot run."""
    try:
        return profile(fn, device).to_json(), ""
    except BreakdownUnavailable as exc:
        return None, str(exc)


def explain(
    stored: object, fn: Callable[[], object], device: str, max_lines: int = 8
) -> Explanation:
    """For a non-pass verdict: profile ``fn`` now and diff it against the breakdown stored with
    the baseline (``stored``: the entry's "breakdown" value, or None when it has none)."""
    try:
        current = profile(fn, device)
    except BreakdownUnavailable as exc:
        return Explanation((f"breakdown: {exc}",))
    if stored is None:
        lines = ["breakdown: none stored with the baseline (--cudaperf-update records one)"]
        return Explanation(tuple(lines + top_lines(current, max_lines - 1)), current=current)
    try:
        base = Breakdown.from_json(stored)
    except ValueError as exc:
        return Explanation((f"breakdown: stored one unreadable: {exc}",), current=current)
    if base.backend != current.backend:
        line = f"breakdown: stored on {base.backend}, measured on {current.backend}: not compared"
        return Explanation((line,), current=current)
    d = diff(base, current)
    return Explanation(
        tuple(d.lines(max_lines)), d.to_json(), side_by_side_html(base, current), current, base
    )


def explain_pair(
    candidate: Callable[[], object],
    reference: Callable[[], object],
    device: str,
    max_lines: int = 8,
) -> Explanation:
    """For ``cuda_timer.compare`` (e.g. a ``min_speedup`` miss): both sides profiled now, the
    candidate diffed against the reference (positive deltas: the candidate spends more)."""
    try:
        ref = profile(reference, device)
        cand = profile(candidate, device)
    except BreakdownUnavailable as exc:
        return Explanation((f"breakdown: {exc}",))
    d = diff(ref, cand)
    lines = d.lines(max_lines)
    lines[0] = "reference -> candidate " + lines[0]
    return Explanation(tuple(lines), d.to_json(), side_by_side_html(ref, cand), cand, ref)


def explain_stored(base: object, current: object, max_lines: int = 8) -> Explanation:
    """For ``cudaperf compare BASE CURRENT``: the diff of two stored breakdowns (the entries'
    "breakdown" values), or one line saying why there is none."""
    if base is None or current is None:
        side = "BASE" if base is None else "CURRENT"
        return Explanation((f"breakdown: none stored in {side}",))
    try:
        b = Breakdown.from_json(base)
        c = Breakdown.from_json(current)
    except ValueError as exc:
        return Explanation((f"breakdown: stored one unreadable: {exc}",))
    if b.backend != c.backend:
        return Explanation(
            (f"breakdown: {b.backend} in BASE, {c.backend} in CURRENT: not compared",)
        )
    d = diff(b, c)
    return Explanation(tuple(d.lines(max_lines)), d.to_json(), side_by_side_html(b, c), c)
