"""SIGTERM as Ctrl-C (:mod:`pytest_cudaperf.signals`), in this process: a handler set only where
asked, put back after; the session's handler stops it once, lets the same stop sent again pass,
ends it at a second, waits while it writes what it finished, and leaves another's alone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_cudaperf.signals import Terminated, finishing, session_sigterm, sigterm_raises


@pytest.fixture
def default_action() -> Iterator[None]:
    """SIGTERM at its default action for the test (this run's own session set a handler)."""
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _terminate_self() -> None:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5)  # the handler raises at the next bytecode: never slept through


def test_terminated_is_an_interruption_as_ctrl_c_is() -> None:
    """pytest, and every ``except KeyboardInterrupt``, end an interrupted run in order."""
    assert issubclass(Terminated, KeyboardInterrupt)
    assert str(Terminated()) == "SIGTERM: ended as on Ctrl-C, what had finished is written"


def test_a_sessions_stop_sent_again_at_once_is_the_same_stop(default_action: None) -> None:
    """``timeout`` signals the process, then its process group: the second SIGTERM, a moment
    after the first, must not end the session before it has written what it finished."""
    stack = session_sigterm()
    with pytest.raises(Terminated):
        _terminate_self()
    os.kill(os.getpid(), signal.SIGTERM)  # within REPEAT_S: let pass
    time.sleep(0.01)
    stack.close()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_a_second_stop_later_ends_the_session_at_once(tmp_path: Path) -> None:
    """As a second Ctrl-C would: past REPEAT_S, the default action (exit by SIGTERM)."""
    script = tmp_path / "twice.py"
    script.write_text(
        textwrap.dedent("""
            import os, signal, time
            from pytest_cudaperf import signals

            signals.REPEAT_S = 0.05
            stack = signals.session_sigterm()
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
            except signals.Terminated:
                print("stopped once", flush=True)
            time.sleep(0.1)
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
            print("still running")
        """)
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.stdout == "stopped once\n"
    assert done.returncode == -signal.SIGTERM


def test_a_stop_while_the_session_writes_what_it_finished_is_noted_not_raised(
    default_action: None,
) -> None:
    stack = session_sigterm()
    with finishing() as finish:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.01)  # a raise would land here
    assert finish.stopped
    stack.close()


def test_a_sessions_handler_is_put_back_at_its_end(default_action: None) -> None:
    stack = session_sigterm()
    assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    stack.close()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_a_session_leaves_a_handler_someone_else_set(default_action: None) -> None:
    seen: list[int] = []

    def theirs(signum: int, frame: object) -> None:
        seen.append(signum)

    signal.signal(signal.SIGTERM, theirs)
    stack = session_sigterm()
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.01)
    stack.close()
    assert seen == [signal.SIGTERM]
    assert signal.getsignal(signal.SIGTERM) is theirs


def test_the_commands_handler_raises_each_time(default_action: None) -> None:
    """``cudaperf``: every SIGTERM within raises (the command decides what a stop stops)."""
    with sigterm_raises():
        for _ in range(2):
            with pytest.raises(Terminated):
                _terminate_self()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_an_xdist_worker_keeps_the_default_action(default_action: None) -> None:
    """Its controller holds the finished tests' reports: the worker may end at once."""
    stack = session_sigterm(worker=True)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    stack.close()
