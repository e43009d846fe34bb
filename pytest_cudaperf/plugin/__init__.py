"""pytest wiring: options, ini keys, markers, fixtures and hooks; the `benchmark` fixture's in
:mod:`pytest_cudaperf.plugin.benchmark`, what a run and a test keep in
:mod:`pytest_cudaperf.plugin.state`. Logic lives in the plain modules."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Generator, Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import pytest

from pytest_cudaperf import seeding, turns
from pytest_cudaperf.benchcompat import options as bench_options
from pytest_cudaperf.benchcompat import serving as bench_serving
from pytest_cudaperf.devices.probe import header_lines
from pytest_cudaperf.distributed import launcher, plan
from pytest_cudaperf.distributed.collectives import DistRank
from pytest_cudaperf.distributed.rank import collector_of
from pytest_cudaperf.markers import SPECS, Marks, marker_help, parse_marks
from pytest_cudaperf.plugin import benchmark as bench_server
from pytest_cudaperf.plugin.state import (
    MARKS,
    RUN,
    SERVING,
    TEST,
    TIMER,
    CudaperfRun,
    built_context,
    context_of,
    run_of,
    serves_benchmark,
)
from pytest_cudaperf.report.model import FailureKind
from pytest_cudaperf.run import child, deselect
from pytest_cudaperf.run.callreport import finish_call_report
from pytest_cudaperf.run.context import Deferred, RunContext, other_outputs
from pytest_cudaperf.run.held import HeldLoop, progress_writer
from pytest_cudaperf.settings import OPTIONS, SettingError, option_arguments
from pytest_cudaperf.signals import finishing
from pytest_cudaperf.store.format import BaselineError

if TYPE_CHECKING:  # imported where used: a run that uses no fixture or marker never loads them
    from pytest_cudaperf.fixtures.guard import MemoryGuard
    from pytest_cudaperf.fixtures.pinned import PinnedBatches
    from pytest_cudaperf.fixtures.timer import Timer


# --- options, configuration, header ----------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("cudaperf", "GPU performance and memory regression testing")
    for option in OPTIONS:
        group.addoption(option.cli, **option_arguments(option))
        parser.addini(option.ini, option.help.replace("%%", "%"), type="string", default=None)
    group.addoption(
        deselect.OPTION, action="append", default=[], metavar="NODEID", help=deselect.HELP
    )


class _KnownArgs:
    """The options as parsed before the full parse (``pytest_load_initial_conftests``)."""

    def __init__(self, config: pytest.Config) -> None:
        self._config = config

    def getoption(self, name: str) -> Any:
        return getattr(self._config.known_args_namespace, name, None)

    def getini(self, name: str) -> Any:
        return self._config.getini(name)


@pytest.hookimpl(wrapper=True)
def pytest_load_initial_conftests(
    early_config: pytest.Config, parser: pytest.Parser
) -> Generator[None, None, None]:
    """Who serves the benchmark fixture, decided after every plugin (and the initial conftests)
    loaded and before pytest-benchmark is configured; pytest-benchmark's options where it is not
    loaded (they would clash where it is)."""
    result = yield
    ini = early_config.inipath.name if early_config.inipath else "the ini file"
    manager = early_config.pluginmanager
    try:
        serving = bench_serving.decide(manager, _KnownArgs(early_config), os.environ, ini)
    except SettingError as exc:
        raise pytest.UsageError(str(exc)) from None
    early_config.stash[SERVING] = serving
    if serving.ours and not serving.switched_off:
        group = parser.getgroup(
            "benchmark", "pytest-benchmark's options, served by pytest-cudaperf"
        )
        bench_options.add_options(group.addoption)
    return result


def _open_run(config: pytest.Config) -> RunContext:
    ini = config.inipath.name if config.inipath else "the ini file"
    workerinput = getattr(config, "workerinput", None)
    output = config.invocation_params.dir
    try:
        return RunContext.create(
            config.rootpath,
            ini,
            config,
            os.environ,
            workerinput,
            output,
            inifile=config.inipath,
            invocation=config.invocation_params.args,
            positional=getattr(config.option, "file_or_dir", None) or (),
        )
    except (SettingError, BaselineError) as exc:
        raise pytest.UsageError(str(exc)) from None


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    for name in SPECS:
        config.addinivalue_line("markers", marker_help(name))
    run = CudaperfRun(_open_run(config))
    config.stash[RUN] = run
    config.pluginmanager.register(run, "cudaperf-run")
    others = other_outputs(config.getoption("xmlpath", None), os.environ)
    unwritable = [] if run.ctx.is_worker else run.ctx.unwritable_outputs(others)
    if unwritable:  # before any test runs, not after all of them
        raise pytest.UsageError("\n".join(unwritable))
    if run.ctx.settings.require_gpu and not run.ctx.is_worker:
        reason = run.ctx.probe.unavailable_reason()
        if reason:
            raise pytest.UsageError(f"--cudaperf-require-gpu: no usable GPU: {reason}")
    if serves_benchmark(config):
        bench_server.serve(config, run)
    if run.ctx.fresh is not None:
        run.ctx.deferred = Deferred()
        run.loop = HeldLoop(run.ctx.deferred, run.ctx.fresh, built_context, progress_writer(config))


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    ctx = run_of(node.config).ctx
    node.workerinput["cudaperf_run_id"] = ctx.run_id
    node.workerinput["cudaperf_lock_dir"] = str(ctx.locks.folder)


def pytest_report_header(config: pytest.Config) -> list[str]:
    run = run_of(config)
    settings = run.ctx.settings
    mode = "update" if settings.update else "disabled" if settings.disable else "compare"
    lines = [f"cudaperf: baselines {run.ctx.baseline_dir} ({mode})"]
    if SERVING in config.stash:
        lines.append(config.stash[SERVING].header())
    # Device lines need torch and initialise the CUDA driver (~0.2 s): print them now only where
    # collection is not seen here (the xdist controller) or a GPU is required anyway; otherwise
    # after collection, and only when a collected test uses the plugin.
    if settings.require_gpu or _is_xdist_controller(config):
        run.devices_reported = True
        lines[:0] = header_lines(run.ctx.probe, settings.device)
    return lines


def pytest_report_collectionfinish(config: pytest.Config, items: list[pytest.Item]) -> list[str]:
    run = run_of(config)
    if run.devices_reported or not any(uses_plugin(item) for item in items):
        return []
    run.devices_reported = True
    return header_lines(run.ctx.probe, run.ctx.settings.device)


def _is_xdist_controller(config: pytest.Config) -> bool:
    return not hasattr(config, "workerinput") and bool(config.getoption("dist", "no") != "no")


#: fixtures that need the device facts
_FIXTURES = frozenset({"cuda_device", "cuda_timer", "memory_guard", "pinned_batch"})


def uses_plugin(item: pytest.Item) -> bool:
    """Does the test use a cudaperf marker or fixture?"""
    return bool(item.stash.get(MARKS, Marks())) or not _FIXTURES.isdisjoint(
        getattr(item, "fixturenames", ())
    )


def _seeded(item: pytest.Item) -> bool:
    """Does the test start from ``--cudaperf-seed``: one that uses a cudaperf marker or fixture,
    or the ``benchmark`` fixture where this plugin serves it?"""
    uses_benchmark = "benchmark" in getattr(item, "fixturenames", ())
    return uses_plugin(item) or (uses_benchmark and serves_benchmark(item.config))


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> Generator[None, None, None]:
    """Around every plugin's session end (xdist stopping its workers, this plugin writing its
    outputs): a SIGTERM there is noted, not raised, and the session ends as interrupted
    (:func:`pytest_cudaperf.signals.finishing`)."""
    with finishing() as finish:
        result = yield
    if finish.stopped:
        session.exitstatus = pytest.ExitCode.INTERRUPTED
    return result


def pytest_unconfigure(config: pytest.Config) -> None:
    if RUN in config.stash:
        run = config.stash[RUN]
        run.ctx.locks.close()
        run.sigterm.close()
        config.pluginmanager.unregister(run)
        del config.stash[RUN]
    server = config.pluginmanager.get_plugin("cudaperf-benchmark")
    if server is not None:
        config.pluginmanager.unregister(server)


# --- collection and setup ------------------------------------------------------------------


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items[:], dropped = deselect.split(items, config.getoption("cudaperf_deselect"))
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    for item in items:
        item.stash[MARKS] = parse_marks(item.iter_markers())  # closest first
    tests = [(item.nodeid, item.stash[MARKS]) for item in items]
    error = plan.require_gpus_error(run_of(config).ctx, tests)
    if error:  # a @distributed test needs more GPUs than --cudaperf-require-gpu finds
        raise pytest.UsageError(error)


def pytest_deselected(items: list[pytest.Item]) -> None:
    if items:
        run_of(items[0].config).results.deselected += len(items)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # each attempt of a re-run test (pytest-rerunfailures) measures afresh, under the same keys
    if TEST in item.stash:
        del item.stash[TEST]
    if TIMER in item.stash:
        del item.stash[TIMER]
    marks = item.stash.get(MARKS, Marks())
    if marks.error:
        pytest.fail(marks.error, pytrace=False)
    ctx = run_of(item.config).ctx
    if marks.gpu is not None:
        skip, fault = ctx.gpu_gate(marks.gpu)
        if skip:  # pytest's skipping plugin runs next and reports the test's own location
            item.add_marker(pytest.mark.skip(reason=skip))
        elif fault:
            pytest.fail(fault, pytrace=False)
    skip = plan.launcher_skip(marks, ctx)
    if skip:  # said once by the launcher, not in every rank
        item.add_marker(pytest.mark.skip(reason=skip))
    settings = ctx.settings
    if settings.seed is not None and not settings.disable and _seeded(item):
        # before pytest's own setup draws the fixtures; a poisoned context's error is the
        # device fixture's to report (opening the test's device), with the test that raised it
        seeding.reseed(settings.seed, accelerator=ctx.faults.message() is None)


@pytest.hookimpl(tryfirst=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest) -> Any:
    """The launcher of a @distributed test sets up no function-scoped fixture (placeholders):
    they run in each rank."""
    if not plan.skips_fixture(fixturedef.scope, request.node.stash.get(MARKS, Marks())):
        return None
    fixturedef.cached_result = (True, fixturedef.cache_key(request), None)  # type: ignore[arg-type]
    return True


# --- fixtures ------------------------------------------------------------------------------


@pytest.fixture
def _cudaperf_device(request: pytest.FixtureRequest) -> Generator[None, None, None]:
    """The test's device opened (``cuda_device``'s, ``cuda_timer``'s), synchronized at teardown;
    a test on the CPU does not import torch for it."""
    from pytest_cudaperf.fixtures import device

    test = context_of(request.node)
    test.device = device.open_device(test.run)
    yield
    device.close_device(test.device, test.run, test.nodeid)


@pytest.fixture
def cuda_device(request: pytest.FixtureRequest, _cudaperf_device: None) -> Any:
    """The test's torch.device: CUDA when available (worker i of xdist gets GPU i mod n), else
    the CPU; see --cudaperf-device. Synchronizes at teardown to catch asynchronous errors."""
    opened = context_of(request.node).device
    assert opened is not None
    return opened.device


@pytest.fixture
def pinned_batch() -> Generator[PinnedBatches, None, None]:
    """pinned_batch(shape, dtype=torch.float32, *, fill='randn', seed=0): a deterministic
    page-locked host tensor (plain host tensor without CUDA), released at teardown."""
    from pytest_cudaperf.fixtures.pinned import PinnedBatches

    batches = PinnedBatches()
    yield batches
    batches.release()


@pytest.fixture
def cuda_timer(request: pytest.FixtureRequest, _cudaperf_device: None) -> Timer:
    """cuda_timer(fn, *args, name=None, cache=None, graph=None, warmup=None, min_time=None,
    max_time=None, **kwargs) -> Measurement; .region(name); .compare(candidate, reference)."""
    from pytest_cudaperf.fixtures.timer import Timer

    timer = Timer(context_of(request.node))
    request.node.stash[TIMER] = timer
    return timer


@pytest.fixture
def memory_guard(request: pytest.FixtureRequest) -> Iterator[MemoryGuard]:
    """with memory_guard(max_peak=None, leak_tolerance=0, pinned=True, outside_torch=False)
    as g: checks a block for leaks and peak memory (g.peak_bytes, g.leaked_bytes);
    memory_guard.check(fn, *args) repeats fn."""
    from pytest_cudaperf.fixtures.guard import MemoryGuard

    test = context_of(request.node)
    guard = MemoryGuard(test, test.memory_device_type)
    yield guard
    unused = guard.unused()
    if unused:
        pytest.fail(unused, pytrace=False)


@pytest.fixture
def dist_rank(request: pytest.FixtureRequest, cuda_device: Any) -> DistRank:
    """In a @distributed test: rank, world_size, local_rank, device, backend, is_main,
    barrier(), bench_collective(op, tensor) (all_reduce/all_gather/reduce_scatter bandwidth)."""
    env = run_of(request.config).ctx.rank
    if env is None:
        pytest.fail("dist_rank: only a @pytest.mark.distributed test has ranks", pytrace=False)
    collector = collector_of(request.config)
    record = collector.collectives.append if collector is not None else None
    return DistRank(env, cuda_device, lambda: request.getfixturevalue("cuda_timer"), record)


# --- running and reporting -----------------------------------------------------------------


@pytest.hookimpl(tryfirst=True, specname="pytest_pyfunc_call")
def pytest_pyfunc_call_distributed(pyfuncitem: pytest.Function) -> bool | None:
    """A @distributed test's launcher runs its ranks instead of the body."""
    marks = pyfuncitem.stash.get(MARKS, Marks())
    if not plan.is_launcher(marks):
        return None
    assert marks.distributed is not None  # is_launcher
    merged = launcher.run_test(pyfuncitem, marks.distributed, run_of(pyfuncitem.config).ctx)
    launcher.apply(pyfuncitem, merged, context_of(pyfuncitem).state)
    return True


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
    """Each test run, its reports held back where its call left a suspect (run/held.py)."""
    loop = run_of(item.config).loop
    return loop.protocol(item, nextitem) if loop is not None else None


def pytest_runtest_logfinish(nodeid: str) -> None:
    """In a fresh process, each finished test noted for its parent's progress line."""
    child.note_finished(nodeid)


@pytest.hookimpl(wrapper=True)
def pytest_runtestloop(session: pytest.Session) -> Generator[None, object, object]:
    """Before the loop, a run of ``cudaperf record`` waits for its turn (turns.py); after it, its
    suspects confirmed in one fresh process, the held reports logged."""
    run = run_of(session.config)
    if run.turn is not None:
        turns.take_turn(run.turn)
    loop = run.loop
    if loop is None:
        return (yield)
    try:
        result = yield
    except (KeyboardInterrupt, pytest.exit.Exception):
        loop.finish(confirm=False)
        raise
    except BaseException:
        loop.finish(confirm=True)
        raise
    loop.finish(confirm=True)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Generator[None, object, object]:
    marks = pyfuncitem.stash.get(MARKS, Marks())
    with _sweep_window(pyfuncitem, marks):  # --cudaperf-leak-sweep: readings around the body
        result = yield  # the body's own run decides pass or fail; the checks below re-run it
    checks = (marks.perf or marks.no_leak) and not plan.is_launcher(marks)
    if checks and not run_of(pyfuncitem.config).ctx.settings.disable:
        from pytest_cudaperf.fixtures import rerun

        body = rerun.body_of(pyfuncitem.obj, pyfuncitem.funcargs)
        rerun.after_body(context_of(pyfuncitem), body, "cuda_timer" in pyfuncitem.fixturenames)
    return result


def _sweep_window(item: pytest.Function, marks: Marks) -> AbstractContextManager[None]:
    run = run_of(item.config).ctx
    if run.settings.leak_sweep == "off":  # the sweep's modules are not even imported
        return contextlib.nullcontext()
    from pytest_cudaperf.fixtures import sweep

    return sweep.window(run, item, marks, lambda: context_of(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    rep = yield
    # a test that used nothing of the plugin and raised nothing has nothing to report
    if call.when != "call" or (TEST not in item.stash and call.excinfo is None):
        return rep
    if TIMER in item.stash:
        item.stash[TIMER].finish()  # regions: recorded before the call report is built
    finish_call_report(run_of(item.config).ctx, item.stash.get(TEST, None), item, rep, call)
    return rep


def pytest_report_teststatus(report: pytest.TestReport) -> tuple[str, str, Any] | None:
    kind = getattr(report, "cudaperf_failure", None)
    if report.when == "call" and report.failed and kind in FailureKind._value2member_map_:
        failure = FailureKind(kind)
        return "failed", failure.letter, (failure.word, {"red": True})
    return None
