"""Every private torch call the plugin makes, feature-detected, in one place.

torch's underscore names change between releases without notice. Each function here answers
what to do when the name is missing, so the rest of the package calls only public names or
these. torch is imported inside each function: importing this module never loads it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def has_primary_context(index: int) -> bool:
    """Does this process hold a CUDA context on device ``index``? (assumed so when torch cannot
    tell: the caller only asks for devices it may read)."""
    import torch

    has_context = getattr(torch._C, "_cuda_hasPrimaryContext", None)
    return True if has_context is None else bool(has_context(index))


def _call_if_present(name: str) -> bool:
    """Call ``torch._C.<name>()`` if this torch has it; whether it did."""
    import torch

    function = getattr(torch._C, name, None)
    if function is None:
        return False
    function()
    return True


def clear_cublas_workspaces() -> bool:
    """Free cuBLAS workspaces; False when this torch has no way to."""
    return _call_if_present("_cuda_clearCublasWorkspaces")


def empty_host_cache() -> bool:
    """Return cached pinned host blocks to the system; False when this torch cannot."""
    return _call_if_present("_host_emptyCache")


def memory_history_enabled() -> bool:
    """Is the allocator recording memory history (perhaps for the user)? Blocks keep the frames
    of a finished recording, so only the allocator's own flag tells; without it, assume not."""
    import torch

    enabled = getattr(torch._C, "_cuda_isHistoryEnabled", None)
    return bool(enabled()) if enabled is not None else False


def record_memory_history(enabled: bool) -> None:
    """Start (Python stacks, live blocks only) or stop the allocator's memory history."""
    from torch.cuda import memory as cmem

    if enabled:
        cmem._record_memory_history(enabled="state", context="state", stacks="python")
    else:
        cmem._record_memory_history(enabled=None)


def memory_snapshot() -> dict[str, Any]:
    """The allocator's snapshot, with the frames of the recorded history."""
    from torch.cuda import memory as cmem

    snapshot: dict[str, Any] = cmem._snapshot()
    return snapshot


def cuda_sleep(cycles: int) -> None:
    """Queue a kernel that spins for ``cycles`` GPU clock cycles on the current stream."""
    cuda_sleeper()(cycles)


def cuda_sleeper() -> Callable[[int], object]:
    """:func:`cuda_sleep`'s torch function itself (``torch.cuda._sleep``), for a caller that
    resolves it once and calls it in a loop without entering this module again (the CUDA
    backend, at its build)."""
    import torch

    sleep: Callable[[int], object] = torch.cuda._sleep
    return sleep


def torch_dispatch_mode() -> type[Any]:
    """``TorchDispatchMode`` (private module); raises ImportError where it is missing."""
    from torch.utils._python_dispatch import TorchDispatchMode

    mode: type[Any] = TorchDispatchMode
    return mode
