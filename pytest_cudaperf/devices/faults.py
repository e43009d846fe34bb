"""CUDA errors that poison a process's context, and the first one this process saw, so later
GPU tests fail fast with its name."""

from __future__ import annotations

from dataclasses import dataclass

_STICKY = (
    "illegal memory access",
    "device-side assert",
    "unspecified launch failure",
    "misaligned address",
    "illegal instruction",
    "an illegal",
    "cuda error: unknown error",
    "uncorrectable ecc",
)


def is_sticky_cuda_error(message: str) -> bool:
    """Errors after which the CUDA context of this process is unusable."""
    lowered = message.lower()
    return any(marker in lowered for marker in _STICKY)


@dataclass
class FaultState:
    """Per-process: the first sticky CUDA error, so later GPU tests fail fast."""

    nodeid: str | None = None
    error: str | None = None

    def record(self, nodeid: str, error: str) -> None:
        if self.nodeid is None:
            self.nodeid, self.error = nodeid, error

    def message(self) -> str | None:
        if self.nodeid is None:
            return None
        return f"CUDA context unusable since {self.nodeid}: {self.error}"
