"""The test loop that holds back the reports of a test with suspects (:class:`HeldLoop`): each
test runs as pytest runs it (``runtestprotocol``), its reports logged at once unless its call left
a suspect (:class:`pytest_cudaperf.run.context.Suspect`); those are held, and logged after the
loop's suspects were confirmed in one fresh process (:func:`confirm.confirm_deferred`), their call
reports finished again from the tests' state. Confirmed sooner where ``--maxfail`` (``-x``, or
``--sw``'s stop) could be reached counting the held tests, so that the run stops where it would
have. A test that pytest-rerunfailures re-runs is run by it, its suspects confirmed inside its
call: each attempt needs its verdict at once. On Ctrl-C (or ``pytest.exit``) the held tests are
logged as they were, each suspect saying it was not re-measured; the fresh process is killed and
its folder removed (:class:`pytest_cudaperf.run.child.FreshProcess`).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pytest

from pytest_cudaperf.report.junit import junit_properties
from pytest_cudaperf.report.model import TestOutcome
from pytest_cudaperf.run.callreport import (
    apply_outcome,
    body_passed_of,
    drop_properties,
    location_of,
)
from pytest_cudaperf.run.confirm import confirm_deferred, unconfirmed
from pytest_cudaperf.run.context import Deferred, TestContext

if TYPE_CHECKING:
    from pytest_cudaperf.run.child import FreshProcess

#: why a held test's suspects were not re-measured where the run stopped first
INTERRUPTED = "the run was interrupted"


@dataclass
class HeldTest:
    """One test's reports, held back until its suspects are confirmed; ``before``: its outcome
    as the call report carries it."""

    item: pytest.Item
    reports: list[pytest.TestReport]
    test: TestContext
    before: TestOutcome | None = None


@dataclass
class HeldReports:
    """The held-back reports of this process's tests with suspects (:class:`HeldTest`), logged
    once the suspects are confirmed."""

    held: list[HeldTest] = field(default_factory=list)

    def hold(self, item: pytest.Item, reports: list[pytest.TestReport], test: TestContext) -> None:
        """Hold ``item``'s reports (its outcome as the call report has it noted)."""
        call = next((r for r in reports if r.when == "call"), None)
        payload = getattr(call, "cudaperf", None)
        before = TestOutcome.from_json(payload) if payload is not None else None
        self.held.append(HeldTest(item, reports, test, before))

    def __len__(self) -> int:
        return len(self.held)

    def release(self) -> list[HeldTest]:
        """The held tests, their call reports finished again from their tests' state (the
        fresh verdicts in it); none held after."""
        released, self.held = self.held, []
        for held in released:
            refresh(held)
        return released


def refresh(held: HeldTest) -> None:
    """The held call report (and the JUnit properties of every report and of the item) made
    anew from the test's state."""
    call = next((r for r in held.reports if r.when == "call"), None)
    if call is None or held.before is None:
        return
    body_passed = body_passed_of(call)
    outcome = held.test.state.outcome(body_passed, location_of(call))
    for report in held.reports:
        report.user_properties = drop_properties(report.user_properties, held.before)
    held.item.user_properties = drop_properties(held.item.user_properties, held.before)
    apply_outcome(call, outcome, body_passed, held.item.user_properties)
    for report in held.reports:
        if report.when == "teardown":  # it copied the item's
            report.user_properties.extend(junit_properties(outcome))


def reruns(item: pytest.Item) -> bool:
    """Whether pytest-rerunfailures re-runs ``item`` (its own protocol runs it)."""
    plugin = item.config.pluginmanager.get_plugin("rerunfailures")
    count = getattr(plugin, "get_reruns_count", None)
    if count is None:
        return False
    try:
        return bool(count(item))
    except Exception:  # noqa: BLE001 - its private parts moved: run it as it would
        return True


class HeldLoop:
    """This process's test loop with the reports of tests with suspects held back (see the
    module): :meth:`protocol` runs one test, :meth:`finish` ends the loop (the batch, then the
    held reports logged). ``test_of``: an item's context; ``progress``: writes one line."""

    def __init__(
        self,
        deferred: Deferred,
        fresh: FreshProcess,
        test_of: Callable[[pytest.Item], TestContext | None],
        progress: Callable[[str], None],
    ) -> None:
        self.deferred = deferred
        self.fresh = fresh
        self.test_of = test_of
        self.progress = progress
        self.held = HeldReports()

    def protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
        """Run ``item`` (``pytest_runtest_protocol``); None where pytest-rerunfailures runs it."""
        from _pytest.runner import runtestprotocol

        if reruns(item):
            return None
        ihook = item.ihook
        ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        self.deferred.running = item.nodeid
        try:
            reports = runtestprotocol(item, nextitem=nextitem, log=False)
        finally:
            self.deferred.running = None
        test = self.test_of(item)
        if test is not None and self.deferred.of(item.nodeid):
            self.held.hold(item, reports, test)
        else:
            _log(item, reports)
        if len(self.held) and _may_stop(item.session, len(self.held)):
            self.finish(confirm=True)
        return True

    def finish(self, confirm: bool) -> None:
        """Confirm the suspects (``confirm``; else each stands unconfirmed) and log the held
        tests. On Ctrl-C during the batch they are logged unconfirmed, and the
        interruption goes on."""
        try:
            if confirm and self.deferred.suspects:
                confirm_deferred(self.deferred, self.fresh, self.progress)
            else:
                unconfirmed(self.deferred.suspects, INTERRUPTED)
        finally:
            self.deferred.suspects = []
            for held in self.held.release():
                with _as_current(held.item):
                    _log(held.item, held.reports)


def _may_stop(session: pytest.Session, held: int) -> bool:
    """Whether ``held`` more failures could stop the run (``--maxfail``, ``-x``, ``--sw``)."""
    maxfail = int(session.config.getoption("maxfail", 0) or 0)
    if session.config.getoption("stepwise", False):
        maxfail = 1
    return bool(maxfail) and session.testsfailed + held >= maxfail


@contextlib.contextmanager
def _as_current(item: pytest.Item) -> Iterator[None]:
    """An xdist worker sends a report with the index of the test it runs (and asserts that the
    report is that test's): while a held test's reports are logged, that test is the one."""
    plugins = item.config.pluginmanager.get_plugins()
    worker = next((p for p in plugins if type(p).__name__ == "WorkerInteractor"), None)
    if worker is None or not hasattr(worker, "item_index"):
        yield
        return
    was = worker.item_index
    worker.item_index = item.session.items.index(item)
    try:
        yield
    finally:
        worker.item_index = was


def _log(item: pytest.Item, reports: list[pytest.TestReport]) -> None:
    ihook = item.ihook
    for report in reports:
        ihook.pytest_runtest_logreport(report=report)
    ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)


def progress_writer(config: pytest.Config) -> Callable[[str], None]:
    """One line of progress: on the terminal, or on stderr in an xdist worker (its terminal is
    not the user's)."""

    def write(line: str) -> None:
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        worker = getattr(config, "workerinput", None)
        if reporter is not None and worker is None:
            reporter.write_line(line)
            return
        name = (worker or {}).get("workerid", "")
        sys.stderr.write(f"[{name}] {line}\n" if name else f"{line}\n")
        sys.stderr.flush()

    return write
