"""What the plugin keeps for a run and for each test: the stash keys, the run object that
``config.stash`` holds (its hooks registered as pytest's junitxml registers ``LogXML``), and a
test's context built on first use."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import pytest

from pytest_cudaperf import turns
from pytest_cudaperf.benchcompat import marker as bench_marker
from pytest_cudaperf.benchcompat import serving as bench_serving
from pytest_cudaperf.markers import Marks
from pytest_cudaperf.report.document import Report
from pytest_cudaperf.report.terminal import terminal_summary
from pytest_cudaperf.run.context import ItemState, RunContext, TestContext
from pytest_cudaperf.run.held import HeldLoop
from pytest_cudaperf.run.results import Results, finish_run
from pytest_cudaperf.signals import session_sigterm

if TYPE_CHECKING:  # the fixtures are imported where used: a run that uses none never loads them
    from pytest_cudaperf.fixtures.benchmark import BenchmarkFixture
    from pytest_cudaperf.fixtures.timer import Timer

RUN: pytest.StashKey[CudaperfRun] = pytest.StashKey()
TEST = pytest.StashKey[TestContext]()
MARKS = pytest.StashKey[Marks]()
TIMER: pytest.StashKey[Timer] = pytest.StashKey()
SERVING = pytest.StashKey[bench_serving.Serving]()
BENCH: pytest.StashKey[BenchmarkFixture] = pytest.StashKey()
#: a test's @pytest.mark.benchmark arguments, or the one line saying what is wrong with them
BENCH_MARK: pytest.StashKey[bench_marker.BenchmarkMark | str] = pytest.StashKey()


#: the exit statuses a failed output turns into a usage error (it is never silent)
CLEAN_EXITS = (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED)


class CudaperfRun:
    """Everything this process holds for the run (one object in ``config.stash``)."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.results = Results()
        self.report = Report()
        self.annotations: list[str] = []
        self.devices_reported = False
        #: the test loop that holds back the reports of tests with suspects (None: each suspect
        #: is confirmed inside its test's call)
        self.loop: HeldLoop | None = None
        #: the turn folder of a run of ``cudaperf record`` (turns.py; None: no turn to take)
        self.turn = None if ctx.is_worker else turns.from_env(os.environ)
        self.sigterm = session_sigterm(ctx.is_worker)  # SIGTERM ends the session as Ctrl-C does

    # Hooks of the registered run object (as pytest's junitxml registers LogXML).

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not self.ctx.is_worker:
            body_failed = report.failed and not getattr(report, "cudaperf_failure", None)
            self.results.add(
                report.nodeid, report.when, getattr(report, "cudaperf", None), body_failed
            )

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object) -> None:
        self.results.worker_down(str(node.gateway.id), getattr(node, "workeroutput", None), error)

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.ctx.is_worker:
            if hasattr(session.config, "workeroutput"):  # a rank of a @distributed test has none
                session.config.workeroutput["cudaperf"] = self.results.worker_output()  # type: ignore[attr-defined]
            return
        self.results.interrupted |= exitstatus == pytest.ExitCode.INTERRUPTED
        self.results.unrun = max(0, session.testscollected - len(self.results.seen))
        self.report, self.annotations = finish_run(self.ctx, self.results, os.environ)
        if self.results.errors and exitstatus in CLEAN_EXITS:  # a failed output is never silent
            session.exitstatus = pytest.ExitCode.USAGE_ERROR

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.ctx.is_worker:
            update = self.ctx.settings.update
            results = self.results
            terminal_summary(terminalreporter, self.report, update, results.errors, results.notes)
            for line in self.annotations:
                terminalreporter.write_line(line)


def serves_benchmark(config: pytest.Config) -> bool:
    """Does this plugin serve the ``benchmark`` fixture in this run?"""
    return config.stash.get(SERVING, bench_serving.Serving(ours=False)).ours


def run_of(config: pytest.Config) -> CudaperfRun:
    return config.stash[RUN]


def context_of(item: pytest.Item) -> TestContext:
    """The test's context, built on first use."""
    if TEST not in item.stash:
        run = run_of(item.config).ctx
        item.stash[TEST] = TestContext(run, ItemState(item.nodeid), item.stash.get(MARKS, Marks()))
    return item.stash[TEST]


def built_context(item: pytest.Item) -> TestContext | None:
    """The test's context where one was built, else None."""
    return item.stash.get(TEST, None)
