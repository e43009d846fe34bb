"""pytest wiring: options, ini keys, markers, fixtures and hooks. Logic lives in the modules."""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_cudaperf import report
from pytest_cudaperf.baselines import BaselineError, BaselineStore
from pytest_cudaperf.devices import gpu_skip_reason, header_lines, worker_index
from pytest_cudaperf.locks import LockRegistry
from pytest_cudaperf.markers import SPECS, MarkerError, marker_help, parse
from pytest_cudaperf.session import (
    FAILURE_LETTERS,
    ItemState,
    Judge,
    Results,
)
from pytest_cudaperf.settings import OPTIONS, SettingError, resolve

if TYPE_CHECKING:  # imported where used: a run that uses no fixture or marker never loads them
    from pytest_cudaperf import fixtures

RUN = pytest.StashKey["CudaperfRun"]()
STATE = pytest.StashKey[ItemState]()
MARKS = pytest.StashKey[dict[str, Any]]()
DEVICE = pytest.StashKey["fixtures.DeviceContext"]()
TIMER = pytest.StashKey["fixtures.Timer"]()


class CudaperfRun:
    """Everything this process holds for the run (one object in ``config.stash``)."""

    def __init__(self, config: pytest.Config) -> None:
        workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
        self.is_worker = workerinput is not None
        try:
            ini = config.inipath.name if config.inipath else "the ini file"
            self.settings = resolve(config, os.environ, ini)
            root = config.rootpath
            self.baseline_dir = (root / self.settings.baseline_dir).resolve()
            store = BaselineStore.load(self.baseline_dir)
        except (SettingError, BaselineError) as exc:
            raise pytest.UsageError(str(exc)) from None
        self.side = Judge(self.settings, store)
        self.store = store
        self.root = root
        self.worker = worker_index(workerinput.get("workerid") if workerinput else None)
        self.run_id = (workerinput or {}).get("cudaperf_run_id") or uuid.uuid4().hex[:12]
        lock_dir = (workerinput or {}).get("cudaperf_lock_dir") or os.path.join(
            tempfile.gettempdir(), f"pytest-cudaperf-{os.getuid() if hasattr(os, 'getuid') else 0}"
        )
        self.locks = LockRegistry(Path(lock_dir))
        self.results = Results()
        self.output_dir = config.invocation_params.dir
        self.annotations: list[str] = []
        self.devices_reported = False

    # Hooks of the registered run object (as pytest's junitxml registers LogXML).

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not self.is_worker:
            self.results.add(report.nodeid, report.when, getattr(report, "cudaperf", None))

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object) -> None:
        self.results.worker_down(str(node.gateway.id), getattr(node, "workeroutput", None), error)

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.is_worker:
            session.config.workeroutput["cudaperf"] = self.results.worker_output()  # type: ignore[attr-defined]
            return
        self.results.interrupted |= exitstatus == pytest.ExitCode.INTERRUPTED
        self.annotations = report.finish_run(self, os.environ)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.is_worker:
            report.terminal_summary(terminalreporter, self.results, self.settings)
            for line in self.annotations:
                terminalreporter.write_line(line)


def _run(config: pytest.Config) -> CudaperfRun:
    return config.stash[RUN]


def _state(item: pytest.Item) -> ItemState:
    if STATE not in item.stash:
        item.stash[STATE] = ItemState()
    return item.stash[STATE]


# --- options, configuration, header ----------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("cudaperf", "GPU performance and memory regression testing")
    for option in OPTIONS:
        kwargs: dict[str, Any] = {
            "dest": "cudaperf_" + option.field,
            "default": None,
            "help": f"{option.help} [ini: {option.ini}, env: {option.env}]",
        }
        if option.flag:
            kwargs["action"] = "store_true"
        else:
            kwargs["metavar"] = option.metavar
        group.addoption(option.cli, **kwargs)
        parser.addini(option.ini, option.help.replace("%%", "%"), type="string", default=None)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    for name in SPECS:
        config.addinivalue_line("markers", marker_help(name))
    run = CudaperfRun(config)
    config.stash[RUN] = run
    config.pluginmanager.register(run, "cudaperf-run")
    if run.settings.require_gpu and not run.is_worker:
        reason = run.side.probe.unavailable_reason()
        if reason:
            raise pytest.UsageError(f"--cudaperf-require-gpu: no usable GPU: {reason}")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    run = _run(node.config)
    node.workerinput["cudaperf_run_id"] = run.run_id
    node.workerinput["cudaperf_lock_dir"] = str(run.locks.folder)


def pytest_report_header(config: pytest.Config) -> list[str]:
    run = _run(config)
    mode = "update" if run.settings.update else "disabled" if run.settings.disable else "compare"
    lines = [f"cudaperf: baselines {run.baseline_dir} ({mode})"]
    # Device lines need torch and initialise the CUDA driver (~0.2 s): print them now only where
    # collection is not seen here (the xdist controller) or a GPU is required anyway; otherwise
    # after collection, and only when a collected test uses the plugin.
    if run.settings.require_gpu or _is_xdist_controller(config):
        run.devices_reported = True
        lines[:0] = header_lines(run.side.probe, run.settings.device)
    return lines


def pytest_report_collectionfinish(config: pytest.Config, items: list[pytest.Item]) -> list[str]:
    run = _run(config)
    if run.devices_reported or not any(uses_plugin(item) for item in items):
        return []
    run.devices_reported = True
    return header_lines(run.side.probe, run.settings.device)


def _is_xdist_controller(config: pytest.Config) -> bool:
    return not hasattr(config, "workerinput") and bool(config.getoption("dist", "no") != "no")


#: fixtures that need the device facts
_FIXTURES = frozenset({"cuda_device", "cuda_timer", "memory_guard", "pinned_batch"})


def uses_plugin(item: pytest.Item) -> bool:
    """Does the test use a cudaperf marker or fixture?"""
    return bool(item.stash.get(MARKS, {})) or not _FIXTURES.isdisjoint(
        getattr(item, "fixturenames", ())
    )


def pytest_unconfigure(config: pytest.Config) -> None:
    if RUN in config.stash:
        run = config.stash[RUN]
        run.locks.close()
        config.pluginmanager.unregister(run)
        del config.stash[RUN]


# --- collection and setup ------------------------------------------------------------------


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parsed: dict[str, Any] = {}
        closest: dict[str, pytest.Mark] = {}
        for mark in item.iter_markers():  # closest first: one pass instead of one per marker
            if mark.name in SPECS:
                closest.setdefault(mark.name, mark)
        for name in SPECS:
            if name not in closest:
                continue
            mark = closest[name]
            try:
                parsed[name] = parse(name, mark.args, dict(mark.kwargs))
            except MarkerError as exc:
                parsed["error"] = str(exc)
        item.stash[MARKS] = parsed


def pytest_deselected(items: list[pytest.Item]) -> None:
    if items:
        _run(items[0].config).results.deselected += len(items)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    marks = item.stash.get(MARKS, {})
    if "error" in marks:
        pytest.fail(marks["error"], pytrace=False)
    run = _run(item.config)
    if "gpu" in marks:
        reason = gpu_skip_reason(marks["gpu"], run.side.probe, run.worker)
        if reason:  # pytest's skipping plugin runs next and reports the test's own location
            item.add_marker(pytest.mark.skip(reason=reason))
            return
        fault = run.side.faults.message()
        if fault:
            pytest.fail(fault, pytrace=False)


# --- fixtures ------------------------------------------------------------------------------


@pytest.fixture
def cuda_device(request: pytest.FixtureRequest) -> Generator[Any, None, None]:
    """The test's torch.device: CUDA when available (worker i of xdist gets GPU i mod n), else
    the CPU; see --cudaperf-device. Synchronizes at teardown to catch asynchronous errors."""
    from pytest_cudaperf import fixtures

    run = _run(request.config)
    ctx = fixtures.open_device(run.side, run.locks, run.worker, request.node.nodeid)
    request.node.stash[DEVICE] = ctx
    yield ctx.device
    fixtures.close_device(ctx, run.side, request.node.nodeid)


@pytest.fixture
def pinned_batch() -> Generator[fixtures.PinnedBatches, None, None]:
    """pinned_batch(shape, dtype=torch.float32, *, fill='randn', seed=0): a deterministic
    page-locked host tensor (plain host tensor without CUDA), released at teardown."""
    from pytest_cudaperf import fixtures

    batches = fixtures.PinnedBatches()
    yield batches
    batches.release()


@pytest.fixture
def cuda_timer(request: pytest.FixtureRequest, cuda_device: Any) -> fixtures.Timer:
    """cuda_timer(fn, *args, name=None, cache=None, graph=None, warmup=None, min_time=None,
    max_time=None, **kwargs) -> Measurement; .region(name); .compare(candidate, reference)."""
    from pytest_cudaperf import fixtures

    run = _run(request.config)
    item = request.node
    timer = fixtures.Timer(
        run.side,
        _state(item),
        item.nodeid,
        item.stash[DEVICE],
        item.stash.get(MARKS, {}).get("perf"),
    )
    item.stash[TIMER] = timer
    return timer


@pytest.fixture
def memory_guard(request: pytest.FixtureRequest) -> fixtures.MemoryGuard:
    """with memory_guard(max_peak=None, leak_tolerance=0) as g: checks a block for leaks and
    peak memory (g.peak_bytes, g.leaked_bytes); memory_guard.check(fn, *args) repeats fn."""
    from pytest_cudaperf import fixtures, memory

    run = _run(request.config)
    return fixtures.MemoryGuard(
        run.side, _state(request.node), request.node.nodeid, memory.device_type()
    )


# --- running and reporting -----------------------------------------------------------------


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Generator[None, object, object]:
    result = yield  # the body's own run decides pass or fail; the checks below re-run it
    marks = pyfuncitem.stash.get(MARKS, {})
    if not marks:
        return result
    run = _run(pyfuncitem.config)
    if not run.settings.disable and {"perf", "no_leak"} & marks.keys():
        from pytest_cudaperf import fixtures

        fixtures.after_body(
            run.side,
            _state(pyfuncitem),
            pyfuncitem.nodeid,
            marks,
            fixtures.body_of(pyfuncitem.obj, pyfuncitem.funcargs),
            pyfuncitem.stash.get(DEVICE, None),
            "cuda_timer" in pyfuncitem.fixturenames,
        )
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    rep = yield
    # a test that used nothing of the plugin and raised nothing has nothing to report
    if call.when != "call" or (STATE not in item.stash and call.excinfo is None):
        return rep
    if TIMER in item.stash:
        item.stash[TIMER].finish()  # regions: recorded before the call report is built
    report.finish_call_report(item, rep, call, _run(item.config).side, _state(item), item.nodeid)
    return rep


def pytest_report_teststatus(report: pytest.TestReport) -> tuple[str, str, Any] | None:
    kind = getattr(report, "cudaperf_failure", None)
    if report.when == "call" and report.failed and kind in FAILURE_LETTERS:
        letter, word = FAILURE_LETTERS[kind]
        return "failed", letter, (word, {"red": True})
    return None
