"""SIGTERM handled as Ctrl-C is. A cancelled CI job, ``timeout`` and ``cudaperf``'s own stop send
SIGTERM, whose default action ends a process at once: a pytest session loses everything it had
not written yet (its ``--cudaperf-json`` report, an update's recordings of the tests that
finished, the run history, the HTML report, the job summary), and a ``cudaperf`` command leaves
the pytest processes it started running. Within :func:`sigterm_raises`, SIGTERM raises
:class:`Terminated` where the main thread is: a KeyboardInterrupt, so that whatever ends an
interrupted session or command in order does so on SIGTERM too (why: docs/decisions.md, "Why
does SIGTERM end a pytest session as Ctrl-C does?")."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType


class Terminated(KeyboardInterrupt):
    """SIGTERM reached this process (within :func:`sigterm_raises`)."""

    def __init__(self) -> None:
        super().__init__("SIGTERM: ended as on Ctrl-C, what had finished is written")


@contextlib.contextmanager
def sigterm_raises(*, leave_others: bool = False, once: bool = False) -> Iterator[None]:
    """Within it, SIGTERM raises :class:`Terminated` where the main thread is; the previous
    handler is put back after. ``leave_others``: only where SIGTERM has its default action (a
    handler the user's code or another plugin set is theirs to keep). ``once``: the first
    SIGTERM puts the default action back, so that a second one ends the process at once, as a
    second Ctrl-C would be expected to. Outside the main thread (where no handler can be set) it
    does nothing."""
    if threading.current_thread() is not threading.main_thread() or (
        leave_others and signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    ):
        yield
        return

    def raise_terminated(signum: int, frame: FrameType | None) -> None:
        if once:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        raise Terminated

    previous = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def session_sigterm(worker: bool = False) -> contextlib.ExitStack:
    """:func:`sigterm_raises` for a pytest session, from ``pytest_configure`` until the stack
    returned is closed (``pytest_unconfigure``): where SIGTERM has its default action, once.
    Not in an xdist ``worker``: there SIGTERM keeps its default action, so that a worker ends at
    once, as it did before, and its controller, which holds every finished test's report, ends
    the session."""
    stack = contextlib.ExitStack()
    if not worker:
        stack.enter_context(sigterm_raises(leave_others=True, once=True))
    return stack
