"""torch.compile's compile counters, watched around a measurement (never imports torch._dynamo:
a callable that is compiled has imported it already)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any


class CompileWatch:
    """Reads ``torch._dynamo.utils.counters``: ``frames/total`` counts every frame dynamo
    compiled (the first compile and each recompile, one per graph-broken frame),
    ``frames/ok`` the successful ones and ``stats/unique_graphs`` the graphs made (checked on
    torch 2.13 with ``torch.compile(fn, backend="eager")``: a new input shape adds one to each)."""

    def __init__(self, counters: Mapping[str, Mapping[str, Any]]) -> None:
        self._counters = counters
        self._last = self._state()

    @classmethod
    def if_loaded(cls) -> CompileWatch | None:
        """A watch when torch._dynamo is imported, else None."""
        if "torch._dynamo" not in sys.modules:
            return None
        utils = sys.modules.get("torch._dynamo.utils")
        counters = getattr(utils, "counters", None)
        if not isinstance(counters, Mapping):
            return None
        return cls(counters)

    def _count(self, group: str, key: str) -> int:
        try:
            return int(self._counters.get(group, {}).get(key, 0))
        except (TypeError, ValueError):
            return 0

    def _state(self) -> tuple[int, int, int]:
        return (
            self._count("frames", "total"),
            self._count("frames", "ok"),
            self._count("stats", "unique_graphs"),
        )

    def compiles(self) -> int:
        """Frames compiled so far in this process."""
        return self._count("frames", "total")

    def changed(self) -> bool:
        """Whether dynamo compiled anything since the last call (or since the watch began)."""
        now = self._state()
        moved, self._last = now != self._last, now
        return moved
