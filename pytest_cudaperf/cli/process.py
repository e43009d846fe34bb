"""The pytest processes the ``cudaperf`` command starts: each in a session of its own, stopped
with every process it started when the command is interrupted (Ctrl-C) or terminated (SIGTERM:
a cancelled CI job, ``timeout``), so that none is left running on the GPU after it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pytest_cudaperf import turns

#: seconds a stopped process group has to end after SIGTERM before it is killed
STOP_GRACE_S = 10.0
#: the command's exit code when SIGTERM ended it (128 + the signal's number, as a shell says)
TERMINATED_EXIT = 128 + signal.SIGTERM


def run_in_session(cmd: Sequence[str], **popen: Any) -> int:
    """``cmd``'s exit code, run in a session of its own (a Ctrl-C at the terminal reaches the
    ``cudaperf`` command alone, which decides). Whatever ends the wait (Ctrl-C, SIGTERM:
    :class:`~pytest_cudaperf.signals.Terminated`) stops the process and every process it
    started (:func:`stop_group`) before it goes on up. ``popen``: :class:`subprocess.Popen`'s
    other arguments."""
    with subprocess.Popen(list(cmd), start_new_session=True, **popen) as run:
        try:
            return run.wait()
        except BaseException:
            stop_group(run)
            raise


def stop_group(run: subprocess.Popen[Any], grace_s: float = STOP_GRACE_S) -> None:
    """Stops ``run``'s process group (it leads one: :func:`run_in_session`): SIGTERM, then
    SIGKILL to whatever is left of it once ``run`` has ended or after ``grace_s``."""
    _signal_group(run.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        run.wait(grace_s)
    _signal_group(run.pid, signal.SIGKILL)  # members that outlived their leader, or ignored it
    run.wait()


def _signal_group(group: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):  # the group has ended
        os.killpg(group, sig)


def run_log(folder: Path, index: int) -> Path:
    """Where :func:`run_in_turns` puts the output of its ``index``-th command (from 0)."""
    return folder / f"run-{index + 1}.log"


#: seconds between two looks at the processes started together (:func:`run_in_turns`)
POLL_S = 0.05


def run_in_turns(
    cmds: Sequence[Sequence[str]],
    folder: Path,
    ended: Callable[[int, int, float, Path], None] = lambda index, rc, wall, log: None,
) -> list[int]:
    """The exit codes of ``cmds``, started together, each in a session of its own with its
    output in ``folder`` (:func:`run_log`), and measuring in turns
    (:mod:`pytest_cudaperf.turns`): the turn is held until each process has marked itself ready
    or has ended, then taken by one process after another. ``ended(index, rc, seconds, log)``
    is called as each one ends. Whatever ends the wait (Ctrl-C, SIGTERM:
    :class:`~pytest_cudaperf.signals.Terminated`) stops every process still running
    (:func:`stop_group`) before it goes on up."""
    gate = turns.Gate(folder / "turns")
    env = {**os.environ, turns.ENV: str(gate.folder)}
    began = time.monotonic()
    running: dict[int, subprocess.Popen[bytes]] = {}
    codes: list[int | None] = [None] * len(cmds)
    logs = [run_log(folder, index) for index in range(len(cmds))]
    try:
        for index, cmd in enumerate(cmds):
            with logs[index].open("wb") as log:
                running[index] = subprocess.Popen(
                    list(cmd), start_new_session=True, env=env, stdout=log, stderr=subprocess.STDOUT
                )
        while running:
            for index, run in list(running.items()):
                rc = run.poll()
                if rc is not None:
                    del running[index]
                    codes[index] = rc
                    ended(index, rc, time.monotonic() - began, logs[index])
            if not gate.is_open and gate.all_ready(run.pid for run in running.values()):
                gate.open()
            time.sleep(POLL_S)
    except BaseException:
        for run in running.values():  # all told at once: their grace runs side by side
            _signal_group(run.pid, signal.SIGTERM)
        for run in running.values():
            stop_group(run)
        raise
    finally:
        gate.open()
    return [rc if rc is not None else 2 for rc in codes]
