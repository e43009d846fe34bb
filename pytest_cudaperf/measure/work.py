"""The work one call does, counted from what it dispatched: FLOPs by torch's own per-op rules
(:mod:`torch.utils.flop_counter`: mm, addmm, bmm, baddbmm, convolution, scaled-dot-product
attention …) and bytes as the distinct storages each op read and wrote.

The call runs once more under a :class:`~torch.utils._python_dispatch.TorchDispatchMode`, after
its measurement (counting never runs while samples are taken). The bytes are each op's
compulsory traffic: per op, every distinct storage it reads once and every one it writes once
(views of one storage count once per op, as the span of elements they reach). That is a lower
bound of what one unfused op moves (tiled re-reads can only add); across ops, the L2 cache and
fusion can only lower the real DRAM figure. A view op (``t``, ``view``, ``expand``…) moves
nothing; an op that overwrites its output (``copy_``, ``fill_``, ``zero_``, an ``out=``
argument) does not read it.

Counting needs torch; importing this module does not import it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

#: in-place ops that overwrite their first argument without reading it
OVERWRITING = frozenset(
    {
        "copy_",
        "fill_",
        "zero_",
        "normal_",
        "uniform_",
        "random_",
        "bernoulli_",
        "exponential_",
        "set_",
        "resize_",
    }
)
#: the compute class of a dtype (what a datasheet states a peak for); float32 is "tf32" when
#: torch lets matmuls use TF32 at counting time
DTYPE_CLASS = {
    "torch.bfloat16": "bf16",
    "torch.float16": "fp16",
    "torch.float32": "fp32",
    "torch.float64": "fp64",
    "torch.float8_e4m3fn": "fp8",
    "torch.float8_e5m2": "fp8",
    "torch.float8_e4m3fnuz": "fp8",
    "torch.float8_e5m2fnuz": "fp8",
}


@dataclass(frozen=True)
class Work:
    """What one call does: FLOPs (by compute class), bytes read and written, and which of the
    figures the test declared instead of counting (``declared``: ``"flops"``, ``"bytes"``)."""

    flops: int = 0
    read_bytes: int = 0
    written_bytes: int = 0
    flops_by_class: Mapping[str, int] = field(default_factory=dict)
    ops: int = 0
    declared: tuple[str, ...] = ()

    @property
    def bytes(self) -> int:
        return self.read_bytes + self.written_bytes

    @property
    def compute_class(self) -> str | None:
        """The compute class that did most of the FLOPs (None without FLOPs)."""
        if not self.flops_by_class:
            return None
        return max(sorted(self.flops_by_class), key=lambda k: self.flops_by_class[k])

    @property
    def intensity(self) -> float | None:
        """Arithmetic intensity, FLOP per byte (None without bytes)."""
        return self.flops / self.bytes if self.bytes else None

    def source(self, what: str) -> str:
        """``declared`` or ``counted``, for ``"flops"`` or ``"bytes"``."""
        return "declared" if what in self.declared else "counted"

    def with_declared(
        self, flops: float | None, nbytes: float | None, compute_class: str | None = None
    ) -> Work:
        """The test's own figures win over the counted ones, and are labelled declared."""
        found = self
        if flops is not None:
            by_class = {compute_class or self.compute_class or "fp32": int(flops)}
            found = replace(found, flops=int(flops), flops_by_class=by_class)
        if nbytes is not None:
            found = replace(found, read_bytes=int(nbytes), written_bytes=0)
        declared = tuple(
            name for name, value in (("flops", flops), ("bytes", nbytes)) if value is not None
        )
        return replace(found, declared=declared)

    def to_dict(self) -> dict[str, Any]:
        return {
            "flops": self.flops,
            "read_bytes": self.read_bytes,
            "written_bytes": self.written_bytes,
            "flops_by_class": dict(self.flops_by_class),
            "ops": self.ops,
            "declared": list(self.declared),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Work:
        return cls(
            flops=int(d["flops"]),
            read_bytes=int(d["read_bytes"]),
            written_bytes=int(d["written_bytes"]),
            flops_by_class={str(k): int(v) for k, v in dict(d.get("flops_by_class", {})).items()},
            ops=int(d.get("ops", 0)),
            declared=tuple(str(x) for x in d.get("declared", ())),
        )


def _tensors(value: Any) -> Iterator[Any]:
    """The tensors in an op's arguments or results (lists and tuples opened)."""
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)


def _span(tensor: Any) -> tuple[int, int, int]:
    """The storage a tensor's view lies in and the bytes it reaches there, as ``[start, end)``:
    from its first element to its last (a transposed or strided view of a whole tensor reaches
    all of it)."""
    if tensor.numel() == 0:
        return 0, 0, 0
    extent = 1 + sum((n - 1) * abs(s) for n, s in zip(tensor.shape, tensor.stride(), strict=True))
    storage = tensor.untyped_storage()
    start = tensor.storage_offset() * tensor.element_size()
    end = min(start + extent * tensor.element_size(), storage.nbytes())
    return storage.data_ptr(), start, end


Spans = dict[int, list[tuple[int, int]]]


def _add(spans: Spans, tensor: Any) -> None:
    ptr, start, end = _span(tensor)
    if end > start:
        spans.setdefault(ptr, []).append((start, end))


def _bytes(spans: Spans) -> int:
    """The bytes the spans reach, each storage's overlapping spans counted once."""
    total = 0
    for ranges in spans.values():
        reached = 0
        for start, end in sorted(ranges):
            if end > reached:
                total += end - max(start, reached)
                reached = end
    return total


def _compute_class(tensor: Any) -> str:
    """A tensor's compute class; float32 matmuls that may use TF32 count as tf32."""
    import torch

    name = DTYPE_CLASS.get(str(tensor.dtype), "other")
    if name == "fp32" and tensor.is_cuda and torch.backends.cuda.matmul.allow_tf32:
        return "tf32"
    return name


def _flop_registry() -> dict[Any, Callable[..., int]]:
    """torch's per-op FLOP rules, with the CPU's flash attention counted as attention."""
    import torch
    from torch.utils import flop_counter

    registry: dict[Any, Callable[..., int]] = dict(flop_counter.flop_registry)
    cpu_sdpa = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    if cpu_sdpa is not None:
        registry[cpu_sdpa] = flop_counter.sdpa_flop  # already shape-wrapped
    return registry


def _counter() -> Any:
    """A dispatch mode that adds each op's FLOPs and bytes into its own tallies."""
    from pytest_cudaperf import _torch_compat

    registry = _flop_registry()

    class _Counting(_torch_compat.torch_dispatch_mode()):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.read = 0
            self.written = 0
            self.ops = 0
            self.flops: dict[str, int] = defaultdict(int)

        def __torch_dispatch__(
            self,
            func: Any,
            types: Any,
            args: tuple[Any, ...] = (),
            kwargs: dict[str, Any] | None = None,
        ) -> Any:
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            if getattr(func, "is_view", False):
                return out  # a view moves no data
            self.ops += 1
            self._count_bytes(func, args, kwargs, out)
            rule = registry.get(func._overloadpacket)
            if rule is not None:
                first = next(_tensors(args), None)
                klass = _compute_class(first) if first is not None else "other"
                self.flops[klass] += int(rule(*args, **kwargs, out_val=out))
            return out

        def _count_bytes(
            self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any
        ) -> None:
            schema = func._schema
            name = schema.name.split("::")[-1]
            reads: Spans = {}
            writes: Spans = {}
            given = list(args) + [kwargs[a.name] for a in schema.arguments if a.name in kwargs]
            names = [a.name for a in schema.arguments[: len(args)]] + [
                a.name for a in schema.arguments if a.name in kwargs
            ]
            written = {
                a.name
                for a in schema.arguments
                if a.alias_info is not None and a.alias_info.is_write
            }
            for arg_name, value in zip(names, given, strict=True):
                overwritten = arg_name in written and (
                    name in OVERWRITING or arg_name != schema.arguments[0].name
                )
                for tensor in _tensors(value):
                    if not overwritten:
                        _add(reads, tensor)
                    if arg_name in written:
                        _add(writes, tensor)
            for tensor in _tensors(out):  # an in-place op's result is its argument: once
                _add(writes, tensor)
            self.read += _bytes(reads)
            self.written += _bytes(writes)

    return _Counting()


def count_work(call: Callable[[], object]) -> Work:
    """Run ``call`` once under the counting mode and return what it dispatched. Gradients are
    left as the call sets them; a compiled function runs eagerly where torch allows it
    (``torch.compiler.set_stance("force_eager")``), so that counting compiles nothing; where
    nothing imported ``torch._dynamo`` nothing was compiled, and it is not imported (seconds)."""
    import contextlib
    import sys

    import torch

    stance: Any = contextlib.nullcontext()
    set_stance = getattr(torch.compiler, "set_stance", None)
    if set_stance is not None and "torch._dynamo" in sys.modules:
        stance = set_stance("force_eager")
    mode = _counter()
    with stance, mode:
        call()
    by_class = {k: v for k, v in mode.flops.items() if v}
    return Work(
        flops=sum(by_class.values()),
        read_bytes=mode.read,
        written_bytes=mode.written,
        flops_by_class=by_class,
        ops=mode.ops,
    )
