"""Processes started together that measure one at a time: ``cudaperf record`` starts its pytest
runs at once, so that their start-ups (the interpreter, ``import torch``, collection) overlap, and
each run measures in its turn, with every other run either waiting idle or ended (why:
docs/decisions.md, "Why do the runs of `cudaperf record` start together and measure in turns?").

The starter holds a :class:`Gate` (an exclusive ``flock`` on the folder's ``turn`` file) until each
run has marked itself ready (:func:`take_turn`, once its tests are collected) or has ended; then
it lets go, and the runs take the turn one after another, each holding it until its process ends
(``flock`` locks vanish with their process). Where ``fcntl`` is missing (Windows) there is no
turn: :data:`AVAILABLE` is False and the starter runs the processes one after another instead.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, MutableMapping
from pathlib import Path

from pytest_cudaperf.locks import fcntl, hold

#: the environment variable that hands a run its turn folder (set by ``cudaperf record`` only;
#: read and removed at the run's start, so that no process the run starts inherits it)
ENV = "PYTEST_CUDAPERF_TURNS"
#: whether processes can take turns here (an inter-process ``flock``)
AVAILABLE = fcntl is not None

_TURN = "turn"
#: the turns held by this process, released when it ends (never by hand: what runs after the
#: session, the interpreter's exit with a GPU context, is part of the turn)
_held: list[int] = []


def from_env(environ: MutableMapping[str, str]) -> Path | None:
    """The turn folder ``environ`` hands this run, removed from it (see :data:`ENV`); None where
    it hands none, or where no turn can be taken here."""
    folder = environ.pop(ENV, None)
    return Path(folder) if folder and AVAILABLE else None


def ready_mark(folder: Path, pid: int) -> Path:
    """The file a run's process (``pid``) creates once it is ready to measure."""
    return folder / f"ready-{pid}"


def take_turn(folder: Path) -> None:
    """Mark this process ready (:func:`ready_mark`), then wait for the turn and hold it until the
    process ends."""
    assert AVAILABLE, "turns need fcntl"
    ready_mark(folder, os.getpid()).touch()
    _held.append(hold(folder / _TURN))


class Gate:
    """The starter's side: the turn held from construction until :meth:`open`, so that no run
    measures while another still starts up."""

    def __init__(self, folder: Path) -> None:
        assert AVAILABLE, "turns need fcntl"
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self._fd: int | None = hold(folder / _TURN)

    @property
    def is_open(self) -> bool:
        return self._fd is None

    def all_ready(self, pids: Iterable[int]) -> bool:
        """Whether every one of ``pids`` (the runs still running) has marked itself ready."""
        return all(ready_mark(self.folder, pid).exists() for pid in pids)

    def open(self) -> None:
        """Let the runs take their turns (idempotent)."""
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops its flock
            self._fd = None
