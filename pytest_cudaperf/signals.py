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
import time
from collections.abc import Iterator
from types import FrameType

#: seconds after a session's first SIGTERM within which another is the same stop sent again,
#: not a second one: ``timeout`` and some CI runners signal the process, then its process group
REPEAT_S = 1.0


class _Finishing:
    """Whether a session is writing what it finished (:func:`finishing`), and whether a
    SIGTERM came meanwhile."""

    on = False
    stopped = False


_FINISHING = _Finishing()


class Terminated(KeyboardInterrupt):
    """SIGTERM reached this process (within :func:`sigterm_raises`)."""

    def __init__(self) -> None:
        super().__init__("SIGTERM: ended as on Ctrl-C, what had finished is written")


@contextlib.contextmanager
def sigterm_raises(*, leave_others: bool = False, once: bool = False) -> Iterator[None]:
    """Within it, SIGTERM raises :class:`Terminated` where the main thread is; the previous
    handler is put back after. ``leave_others``: only where SIGTERM has its default action (a
    handler the user's code or another plugin set is theirs to keep). ``once``: a session's
    stop. Another SIGTERM within :data:`REPEAT_S` of the first is the same stop sent again and
    is let pass; one after that ends the process at once, as a second Ctrl-C would be expected
    to. While the session writes what it finished (:func:`finishing`), a SIGTERM raises nothing:
    the session is ending already, and it ends as interrupted. Outside the main thread (where no
    handler can be set) it does nothing."""
    if threading.current_thread() is not threading.main_thread() or (
        leave_others and signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    ):
        yield
        return
    first: list[float] = []  # when a session's stop came

    def raise_terminated(signum: int, frame: FrameType | None) -> None:
        if once and first:
            if time.monotonic() - first[0] < REPEAT_S:
                return  # the same stop, sent again
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second stop: at once
            signal.raise_signal(signal.SIGTERM)
            return
        if once:
            first.append(time.monotonic())
            if _FINISHING.on:
                _FINISHING.stopped = True
                return
        raise Terminated

    previous = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def finishing() -> Iterator[_Finishing]:
    """While a session writes what it finished (``pytest_sessionfinish``: xdist stops its
    workers, the plugin writes its report, baselines and history), a session's SIGTERM is noted
    (``stopped``), not raised: raised there it would cut that writing short, for a session that
    is ending anyway."""
    _FINISHING.on, _FINISHING.stopped = True, False
    try:
        yield _FINISHING
    finally:
        _FINISHING.on = False


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
