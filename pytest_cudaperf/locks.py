"""Inter-process reader/writer lock per device, so ``pytest -n auto`` never times a kernel while
another worker loads the same GPU.

Every test that uses a device holds its lock *shared*; a measurement holds it *exclusive*. Both go
through a turnstile (an exclusive lock held only while acquiring), so a waiting measurement blocks
new shared holders and cannot starve. ``flock`` locks vanish with their process: a worker that dies
never deadlocks the others. A hold can be bounded (``exclusive(within_s)``): a probe of the host's
state takes the device only within the time left to its wait.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no inter-process isolation
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "DeviceLock",
    "Hold",
    "LockRegistry",
    "fcntl",
    "file_lock",
    "free",
    "hold",
    "lock_key",
]

#: seconds between two tries of a bounded hold (:meth:`DeviceLock.exclusive` with ``within_s``)
TRY_S = 0.005


class Hold(Protocol):
    """The device to oneself while inside: waiting as long as it takes, or at most ``within_s``
    seconds, the context's value then saying whether it was had (:meth:`DeviceLock.exclusive`,
    :func:`free`)."""

    def __call__(self, within_s: float | None = None, /) -> AbstractContextManager[bool]: ...


@contextlib.contextmanager
def free(within_s: float | None = None, /) -> Iterator[bool]:
    """A :class:`Hold` of a device no other process measures on (the CPU's): had at once."""
    yield True


def lock_key(device: str, uuid: str) -> str:
    """The lock name of a device: its GPU's UUID where known (the same GPU under any index), else
    the device string (``cuda0``, ``cpu``)."""
    return f"gpu-{uuid}" if uuid else device.replace(":", "")


def _flock(fd: int, op: int) -> None:
    if fcntl is not None:
        fcntl.flock(fd, op)


def _open(path: Path) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT, 0o666)


def _take(fd: int, op: int, until: float | None) -> bool:
    """``flock(fd, op)``, waiting as long as it takes (``until`` None), or trying until the
    monotonic time ``until``: whether it was had."""
    if fcntl is None or until is None:
        _flock(fd, op)
        return True
    while True:
        try:
            fcntl.flock(fd, op | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            left = until - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(TRY_S, left))


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
    file-lock wrapper of the package (the baseline folder's, ``store.files.locked``, is built on
    it)."""
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

    def _through_gate(self, op: int, until: float | None = None, back: int | None = None) -> bool:
        """Take the main lock (``op``) through the turnstile: whether it was had. Bounded by
        ``until`` (monotonic), a lock not had by then is not waited for, and ``back`` is taken
        instead (the shared hold the caller dropped), within the turnstile where it was had."""
        gate = _open(self._gate_path)
        try:
            if self._main is None:
                self._main = _open(self._main_path)
            if _take(gate, fcntl.LOCK_EX if fcntl else 0, until):
                if _take(self._main, op, until):
                    return True
                if back is not None:  # within the turnstile: no process takes it alone now
                    _flock(self._main, back)
                return False
        finally:
            os.close(gate)
        if back is not None:  # after the process in the turnstile lets go of the device
            _flock(self._main, back)
        return False

    def acquire_shared(self) -> None:
        if self._shared_depth == 0:
            self._through_gate(fcntl.LOCK_SH if fcntl else 0)
        self._shared_depth += 1

    def release_shared(self) -> None:
        self._shared_depth -= 1
        if self._shared_depth == 0 and self._main is not None:
            _flock(self._main, fcntl.LOCK_UN if fcntl else 0)

    @contextlib.contextmanager
    def exclusive(self, within_s: float | None = None, /) -> Iterator[bool]:
        """Hold the device alone (the value: True). A shared hold of this process is dropped,
        then restored. With ``within_s``, the device is not waited for longer (the value:
        whether it was had; not had, nothing is held inside, and the shared hold is taken back
        once the process that holds the device lets go of it, so a bounded hold overruns its
        bound by at most another process's measurement)."""
        held = self._shared_depth > 0
        if held and self._main is not None:
            _flock(self._main, fcntl.LOCK_UN if fcntl else 0)
        until = None if within_s is None else time.monotonic() + max(within_s, 0.0)
        back = (fcntl.LOCK_SH if fcntl else 0) if held else None
        had = self._through_gate(fcntl.LOCK_EX if fcntl else 0, until, back)
        try:
            yield had
        finally:
            if had:
                assert self._main is not None
                # Downgrade in place, never through the gate: another measurement may hold the
                # gate while it waits for our exclusive lock.
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
