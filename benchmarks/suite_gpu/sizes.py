"""Problem sizes: the real ones on a GPU, small ones when the suite runs on the CPU (smoke test)."""

from __future__ import annotations

from typing import Any, TypeVar

T = TypeVar("T")


def pick(device: Any, gpu: T, cpu: T) -> T:
    return gpu if getattr(device, "type", "") == "cuda" else cpu
