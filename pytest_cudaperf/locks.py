"""Inter-process reader/writer lock per device, so ``pytest -n auto`` never times a kernel while
another worker loads the same GPU.

Every test that uses a device holds its lock *shared*; a measurement holds it *exclusive*. Both go
through a turnstile (an exclusive lock held only while acquiring), so a waiting measurement blocks
new shared holders and cannot starve. ``flock`` locks vanish with their process: a worker that dies
never deadlocks the others.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no inter-process isolation
    fcntl = None  # type: ignore[assignment]

__all__ = ["DeviceLock", "LockRegistry", "fcntl", "file_lock", "hold", "lock_key"]


def lock_key(device: str, uuid: str) -> str:
    """The lock name of a device: its GPU's UUID where known (the same GPU under any index), else
    the device string (``cuda0``, ``cpu``)."""
    return f"gpu-{uuid}" if uuid else device.replace(":", "")


def _flock(fd: int, op: int) -> None:
    if fcntl is not None:
        fcntl.flock(fd, op)


def _open(path: Path) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT, 0o666)


def hold(path: Path) -> int:
    """Take ``path`` (created if missing) exclusively across processes, waiting for it; the
    descriptor that holds it (closing it lets go, as the process's end does)."""
    fd = _open(path)
    try:
        _flock(fd, fcntl.LOCK_EX if fcntl else 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold ``path`` (created if missing) exclusively across processes while inside. The one
    file-lock wrapper of the package (baselines.py still has its own ``locked``: to move here)."""
    fd = hold(path)
    try:
        yield
    finally:
        os.close(fd)


class DeviceLock:
    """One device's lock; re-entrant per process as shared holder, upgradable for measurement."""

    def __init__(self, folder: Path, key: str) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", key)
        self._main_path = folder / f"{safe}.lock"
        self._gate_path = folder / f"{safe}.gate"
        self._main: int | None = None
        self._shared_depth = 0

    def _through_gate(self, op: int) -> None:
        with file_lock(self._gate_path):
            if self._main is None:
                self._main = _open(self._main_path)
            _flock(self._main, op)

    def acquire_shared(self) -> None:
        if self._shared_depth == 0:
            self._through_gate(fcntl.LOCK_SH if fcntl else 0)
        self._shared_depth += 1

    def release_shared(self) -> None:
        self._shared_depth -= 1
        if self._shared_depth == 0 and self._main is not None:
            _flock(self._main, fcntl.LOCK_UN if fcntl else 0)

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the device alone. A shared hold of this process is dropped, then restored."""
        held = self._shared_depth > 0
        if held and self._main is not None:
            _flock(self._main, fcntl.LOCK_UN if fcntl else 0)
        self._through_gate(fcntl.LOCK_EX if fcntl else 0)
        try:
            yield
        finally:
            assert self._main is not None
            # Downgrade in place, never through the gate: another measurement may hold the gate
            # while it waits for our exclusive lock.
            _flock(self._main, (fcntl.LOCK_SH if held else fcntl.LOCK_UN) if fcntl else 0)

    def close(self) -> None:
        if self._main is not None:
            os.close(self._main)
            self._main = None
            self._shared_depth = 0


class LockRegistry:
    """The locks of one process, one per device key, in a folder the controller chose."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._locks: dict[str, DeviceLock] = {}

    def get(self, key: str) -> DeviceLock:
        if key not in self._locks:
            self._locks[key] = DeviceLock(self.folder, key)
        return self._locks[key]

    def close(self) -> None:
        for lock in self._locks.values():
            lock.close()
        self._locks.clear()
