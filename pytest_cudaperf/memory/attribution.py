"""Where leaked memory was allocated, three ways: allocator blocks from the CUDA memory history,
host tensors from their creation sites (a ``TorchDispatchMode``), and memory outside torch's
allocator by line tracing. Each names sites in user code (frames of torch, pytest and this
plugin are skipped) for what one run allocated and the next run did not free.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from pytest_cudaperf import _torch_compat
from pytest_cudaperf.units import format_size

#: frames from these paths are skipped when naming where a leaked block was allocated
_INTERNAL_PATHS = (
    f"{os.sep}torch{os.sep}",
    f"{os.sep}_pytest{os.sep}",
    f"{os.sep}pluggy{os.sep}",
    f"{os.sep}pytest_cudaperf{os.sep}",
    "<frozen ",
)


def tensor_storages(
    torch_mod: Any, keep: Callable[[Any], bool] | None = None
) -> dict[int, tuple[int, str]]:
    """Live CPU tensors found through the garbage collector: storage address -> (bytes, a
    ``float32[1024]`` description), optionally only those ``keep`` accepts."""
    tensor_type = torch_mod.Tensor
    found: dict[int, tuple[int, str]] = {}
    for obj in gc.get_objects():
        try:
            # type(), not isinstance(): no __class__ lookups on proxies and deprecated names
            if not issubclass(type(obj), tensor_type) or obj.device.type != "cpu":
                continue
            storage = obj.untyped_storage()
            ptr = storage.data_ptr()
            if ptr and ptr not in found and (keep is None or keep(obj)):
                found[ptr] = (
                    storage.nbytes(),
                    f"{str(obj.dtype).replace('torch.', '')}{list(obj.shape)}",
                )
        # odd objects (proxies, sparse or meta tensors) cannot be measured: skip them
        except Exception:  # noqa: BLE001, S112
            continue
    return found


def group_storages(
    new: list[tuple[int, str, str]], label: str, error: str | None = None
) -> list[str]:
    """``4.0 MiB in 1 tensor at tests/test_x.py:12 in test_leak (float32[1048576])`` lines
    from (bytes, description, site), grouped by site, largest first; without descriptions
    (allocator blocks) no parentheses."""
    groups: dict[str, list[tuple[int, str]]] = {}
    for size, desc, site in new:
        groups.setdefault(site, []).append((size, desc))
    ordered = sorted(groups.items(), key=lambda kv: -sum(size for size, _ in kv[1]))
    lines = []
    for site, found in ordered[:10]:
        found.sort(reverse=True)
        plural = "s" if len(found) != 1 else ""
        shapes = ", ".join(desc for _, desc in found[:3] if desc)
        if shapes and len(found) > 3:
            shapes += ", …"
        total = format_size(sum(size for size, _ in found))
        described = f" ({shapes})" if shapes else ""
        lines.append(f"{total} in {len(found)} {label}{plural} at {site}{described}")
    if error:
        lines.append(f"({label} creation sites not traced: {error})")
    return lines


def kept_by_run(
    before: Collection[int], middle: dict[int, tuple[int, str]], after: Collection[int]
) -> list[tuple[int, int, str]]:
    """(address, bytes, description) of what the first traced run created and the second did
    not free (replaced state, such as new gradients each run, is not kept)."""
    return [
        (ptr, size, desc)
        for ptr, (size, desc) in middle.items()
        if ptr not in before and ptr in after
    ]


def _blocks(snapshot: dict[str, Any]) -> dict[tuple[int, int], tuple[int, list[dict[str, Any]]]]:
    """Allocated blocks by (device, address) with their requested size and frames."""
    found = {}
    for seg in snapshot.get("segments", []):
        address = int(seg.get("address", 0))
        for block in seg.get("blocks", []):
            if block.get("state") == "active_allocated":
                size = int(block.get("requested_size") or block.get("size", 0))
                key = (int(seg.get("device", 0)), int(block.get("address", address)))
                found[key] = (size, list(block.get("frames") or []))
            address += int(block.get("size", 0))
    return found


UNKNOWN_SITE = "an unknown site (no Python frame outside torch)"


def _is_internal(filename: str) -> bool:
    return not filename or any(part in filename for part in _INTERNAL_PATHS)


def _site(filename: str, line: object, name: object) -> str:
    with contextlib.suppress(ValueError):  # another drive on Windows
        filename = os.path.relpath(filename)
    return f"{filename}:{line} in {name}"


def user_frame(frames: list[dict[str, Any]]) -> str:
    """The first frame (innermost first) outside torch, pytest and this plugin."""
    for frame in frames:
        filename = str(frame.get("filename", ""))
        if not _is_internal(filename):
            return _site(filename, frame.get("line"), frame.get("name"))
    return UNKNOWN_SITE


def calling_site(frame: FrameType | None) -> str:
    """The innermost live frame outside torch, pytest and this plugin, from ``frame`` out."""
    while frame is not None:
        if not _is_internal(frame.f_code.co_filename):
            return _site(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
        frame = frame.f_back
    return UNKNOWN_SITE


def _storage_ptrs(values: object, found: dict[int, Any] | None = None) -> dict[int, Any]:
    """Tensors in (nested tuples/lists/dicts of) ``values`` by storage address."""
    found = {} if found is None else found
    if isinstance(values, (tuple, list)):
        for value in values:
            _storage_ptrs(value, found)
    elif isinstance(values, dict):
        for value in values.values():
            _storage_ptrs(value, found)
    else:
        storage = getattr(values, "untyped_storage", None)
        if storage is not None:
            with contextlib.suppress(Exception):  # meta, sparse or odd tensors have no storage
                ptr = storage().data_ptr()
                if ptr:
                    found[ptr] = values
    return found


class CreationSites:
    """Where each host tensor storage was created, by address: a ``TorchDispatchMode`` sees
    every operator on this thread (factories, ``pin_memory()``, backward on the CPU) and notes
    the innermost frame outside torch for each output storage that is not one of its inputs'
    (views and in-place results keep the site of the storage they share)."""

    def __init__(self) -> None:
        self.sites: dict[int, str] = {}
        self.error: str | None = None

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        try:
            TorchDispatchMode = _torch_compat.torch_dispatch_mode()  # noqa: N806
        except ImportError as exc:  # private module: feature-detected
            self.error = f"TorchDispatchMode unavailable ({exc})"
            yield
            return
        sites = self.sites

        class _Mode(TorchDispatchMode):  # type: ignore[misc,valid-type]
            def __torch_dispatch__(  # type: ignore[no-untyped-def]
                self, func, types, args=(), kwargs=None
            ):
                out = func(*args, **(kwargs or {}))
                created = _storage_ptrs(out)
                if created:
                    inputs = _storage_ptrs((args, kwargs or {}))
                    site = None
                    for ptr, tensor in created.items():
                        if ptr in inputs or tensor.device.type != "cpu":
                            continue
                        site = site or calling_site(sys._getframe(1))
                        sites[ptr] = site
                return out

        with _Mode():
            yield

    def site(self, ptr: int) -> str:
        return self.sites.get(ptr, UNKNOWN_SITE)

    def run(self, body: Callable[[], object]) -> bool:
        """Run ``body`` recording; False (and :attr:`error` set) when it failed under the mode,
        which the caller answers by running it again without."""
        try:
            with self.recording():
                body()
        # a body that passed without the mode and fails under it: report, do not fail the test
        except Exception as exc:  # noqa: BLE001
            first = str(exc).splitlines()[0] if str(exc) else ""
            self.error = f"the body failed under TorchDispatchMode ({type(exc).__name__}: {first})"
            self.sites.clear()
            return False
        return True


class LineGrowth:
    """Attributes the growth of a byte count that has no per-block records (memory allocated
    outside torch's allocator) to source lines: ``sys.settrace`` on frames outside torch,
    pytest and this plugin reads the count at every line event, charges growth to the line
    that just ran (a library call counts as its caller's line) and matches each decrease with
    the latest growth of the same size, else the most recent growth (last allocated, first
    freed), so what is left at the end is what the run kept. One reading per traced line:
    only for attribution runs."""

    def __init__(self, read: Callable[[], int]) -> None:
        self._read = read
        self.kept: list[tuple[str, int]] = []
        self.error: str | None = None
        self._last = 0
        self._line: str | None = None

    def _observe(self) -> None:
        value = self._read()
        delta, self._last = value - self._last, value
        if delta > 0:
            self.kept.append((self._line or UNKNOWN_SITE, delta))
        elif delta < 0:
            # a free releases a whole allocation: the latest growth of exactly that size
            for index in range(len(self.kept) - 1, -1, -1):
                if self.kept[index][1] == -delta:
                    del self.kept[index]
                    return
        while delta < 0 and self.kept:
            site, size = self.kept.pop()
            if size > -delta:
                self.kept.append((site, size + delta))
            delta += size

    def _local(self, frame: FrameType, event: str, arg: object) -> Any:
        if event in ("line", "return"):
            self._observe()
            self._line = _site(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
        return self._local

    def _global(self, frame: FrameType, event: str, arg: object) -> Any:
        if event != "call" or _is_internal(frame.f_code.co_filename):
            return None
        self._observe()
        return self._local

    @contextlib.contextmanager
    def tracing(self) -> Iterator[None]:
        previous = sys.gettrace()
        if previous is not None:
            self.error = "another tracer (a debugger or coverage) is active"
            yield
            return
        self._last = self._read()
        sys.settrace(self._global)
        try:
            yield
        finally:
            sys.settrace(previous)
            self._observe()

    def sites(self) -> list[tuple[int, str]]:
        totals: dict[str, int] = {}
        for site, size in self.kept:
            totals[site] = totals.get(site, 0) + size
        return sorted(((size, site) for site, size in totals.items()), reverse=True)


# --- the CUDA backend's attribution: one tracer per leaked signal, two traced runs ------------

Storages = dict[int, tuple[int, str]]


def creation_reader(torch_mod: Any) -> Callable[[], Storages]:
    """Live pinned host tensors by storage address."""
    return lambda: tensor_storages(torch_mod, keep=lambda tensor: bool(tensor.is_pinned()))


class BlockTracer:
    """Allocator blocks, from the allocator's memory history (recorded only while tracing)."""

    def __init__(self) -> None:
        self.notes: list[str] = []

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        _torch_compat.record_memory_history(True)
        try:
            yield
        finally:
            _torch_compat.record_memory_history(False)

    def read(self) -> dict[Any, tuple[int, str]]:
        return {
            key: (size, user_frame(frames))
            for key, (size, frames) in _blocks(_torch_compat.memory_snapshot()).items()
        }

    def lines(self, before: Any, middle: Any, after: Any) -> list[str]:
        kept = [v for k, v in middle.items() if k not in before and k in after]
        return group_storages([(size, "", site) for size, site in kept], "block")


class PinnedTracer:
    """Pinned host tensors, named by the site that created them during the first run."""

    def __init__(self, read: Callable[[], Storages]) -> None:
        self._read = read
        self.creation = CreationSites()

    def read(self) -> Storages:
        return self._read()

    def lines(self, before: Any, middle: Any, after: Any) -> list[str]:
        kept = kept_by_run(before, middle, after)
        return group_storages(
            [(size, desc, self.creation.site(ptr)) for ptr, size, desc in kept],
            "pinned host tensor",
            self.creation.error,
        )


def outside_torch_lines(lines: LineGrowth) -> list[str]:
    found = [
        f"{format_size(size)} outside torch's allocator at {site} (by line tracing)"
        for size, site in lines.sites()[:5]
    ]
    if lines.error:
        found.append(f"(memory outside torch not traced: {lines.error})")
    return found


@dataclass
class Tracers:
    """What to trace for a leak on CUDA: blocks, pinned tensors, outside torch (each optional)."""

    blocks: BlockTracer | None = None
    pinned: PinnedTracer | None = None
    lines: LineGrowth | None = None
    notes: list[str] = field(default_factory=list)


def cuda_tracers(
    torch_mod: Any,
    leaked: Collection[str],
    read_outside: Callable[[], int],
    read_pinned: Callable[[], Storages],
) -> Tracers:
    tracers = Tracers()
    if any(key.startswith("cuda:") for key in leaked):
        if _torch_compat.memory_history_enabled():
            tracers.notes.append(
                "(allocation sites not traced: memory history is already being recorded)"
            )
        else:
            tracers.blocks = BlockTracer()
    if "pinned host" in leaked:
        tracers.pinned = PinnedTracer(read_pinned)
    if any(key.startswith("outside torch") for key in leaked):
        tracers.lines = LineGrowth(read_outside)
    return tracers


def _first_run(body: Callable[[], object], tracers: Tracers) -> None:
    """The traced run: line tracing around it, creation sites recorded in it; a body that fails
    under the dispatch mode runs again plain (its sites unknown)."""
    with tracers.lines.tracing() if tracers.lines else contextlib.nullcontext():
        ran = tracers.pinned.creation.run(body) if tracers.pinned else (body() or True)
    if not ran:
        body()


def trace_two_runs(
    body: Callable[[], object], settle: Callable[[], object], tracers: Tracers
) -> list[str]:
    """Settle and read, the traced run, settle and read, one more run, settle and read: what
    the first run allocated and the second did not free (replaced state such as gradients
    moves to new blocks each run and is not reported)."""
    readers: list[BlockTracer | PinnedTracer] = [
        t for t in (tracers.blocks, tracers.pinned) if t is not None
    ]
    readings: list[list[Any]] = []
    with tracers.blocks.active() if tracers.blocks else contextlib.nullcontext():
        settle()
        readings.append([t.read() for t in readers])
        _first_run(body, tracers)
        settle()
        readings.append([t.read() for t in readers])
        body()
        settle()
        readings.append([t.read() for t in readers])
    found = list(tracers.notes)
    for index, tracer in enumerate(readers):
        found += tracer.lines(*(reading[index] for reading in readings))
    if tracers.lines is not None:
        found += outside_torch_lines(tracers.lines)
    return found
