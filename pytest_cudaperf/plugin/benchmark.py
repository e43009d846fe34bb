"""pytest-benchmark's ``benchmark`` fixture, marker and options served by this plugin: the
server's hooks and fixtures, registered in ``pytest_configure`` (:func:`serve`)."""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import pytest

from pytest_cudaperf.benchcompat import jsonfile as bench_json
from pytest_cudaperf.benchcompat import marker as bench_marker
from pytest_cudaperf.benchcompat import options as bench_options
from pytest_cudaperf.plugin.state import (
    BENCH,
    BENCH_MARK,
    CLEAN_EXITS,
    SERVING,
    CudaperfRun,
    context_of,
)
from pytest_cudaperf.run.child import FRESH_ENV
from pytest_cudaperf.settings import SettingError

if TYPE_CHECKING:
    from pytest_cudaperf.fixtures.benchmark import BenchmarkFixture
    from pytest_cudaperf.fixtures.timer import Timer


class BenchmarkServer:
    """pytest-benchmark's ``benchmark`` fixture, marker and options served by this plugin:
    registered in ``pytest_configure`` where pytest-benchmark is not loaded or was switched off
    (after it, so that this ``benchmark`` fixture is the one tests get)."""

    def __init__(self, run: CudaperfRun, options: bench_options.BenchmarkOptions) -> None:
        self.run = run
        self.options = options
        self.entries = bench_json.Entries()
        self.written: str | None = None

    def pytest_report_header(self) -> list[str]:
        lines = (
            bench_options.compare_line(self.options, self.run.ctx.settings),
            bench_options.ignored_line(self.options),
        )
        return [line for line in lines if line]

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            item.stash[BENCH_MARK] = bench_marker.of_item(item.get_closest_marker("benchmark"))
            uses = "benchmark" in getattr(item, "fixturenames", ())
            skip = bench_options.skip_reason(uses, self.options)
            if skip:
                item.add_marker(pytest.mark.skip(reason=skip))

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        if BENCH in item.stash:  # a re-run attempt measures afresh
            del item.stash[BENCH]
        mark = item.stash.get(BENCH_MARK, None)
        if isinstance(mark, str):
            pytest.fail(mark, pytrace=False)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        rep = yield
        fixture = item.stash.get(BENCH, None) if call.when == "call" else None
        if fixture is not None:
            fixture.skipped = rep.skipped
            entry = fixture.entry()
            if entry is not None:  # rides to the controller, as the cudaperf outcome does
                rep.cudaperf_benchmark = entry  # type: ignore[attr-defined]
                for prop in bench_json.extra_info_properties(entry):
                    rep.user_properties.append(prop)
                    item.user_properties.append(prop)
        return rep

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not self.run.ctx.is_worker:
            entry = getattr(report, "cudaperf_benchmark", None)
            self.entries.add(report.nodeid, report.when, entry)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        ctx = self.run.ctx
        if self.options.json is None or ctx.is_worker or os.environ.get(FRESH_ENV):
            return
        benchmarks = self.entries.benchmarks()
        if not benchmarks:
            return
        where = bench_json.target(self.options.json, ctx.output_dir)
        try:
            self.written = bench_json.write_run(where, benchmarks, ctx.root, os.environ)
        except OSError as exc:
            self.run.results.errors.append(f"--benchmark-json: {where} not written: {exc}")
            if session.exitstatus in CLEAN_EXITS:
                session.exitstatus = pytest.ExitCode.USAGE_ERROR

    @pytest.hookimpl(trylast=True)  # after the cudaperf section
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.written:
            terminalreporter.write_line(f"benchmark: wrote {self.written}")
        elif self.options.json is not None and not self.run.ctx.is_worker:
            terminalreporter.write_line(
                "benchmark: --benchmark-json: no benchmark was measured, nothing written"
            )

    @pytest.fixture
    def benchmark(
        self, request: pytest.FixtureRequest, cuda_timer: Timer
    ) -> Generator[BenchmarkFixture, None, None]:
        """pytest-benchmark's fixture, measured by pytest-cudaperf: benchmark(fn, *args,
        **kwargs) -> fn's result; benchmark.pedantic(target, args=, kwargs=, setup=, teardown=,
        rounds=, warmup_rounds=, iterations=); extra_info, group, stats (seconds)."""
        from pytest_cudaperf.fixtures import benchmark as served

        if self.options.skip:
            pytest.skip("Benchmarks are skipped (--benchmark-skip was used).")
        node = request.node
        mark = node.stash.get(BENCH_MARK, None)
        fixture = served.BenchmarkFixture(
            cuda_timer,
            context_of(node),
            served.Benchmarked.of(node),
            self.options,
            mark if isinstance(mark, bench_marker.BenchmarkMark) else None,
        )
        node.stash[BENCH] = fixture
        yield fixture
        fixture.cleanup()
        if fixture.unused:
            node.warn(
                served.BenchmarkWarning("Benchmark fixture was not used at all in this test!")
            )

    @pytest.fixture
    def benchmark_weave(self, benchmark: BenchmarkFixture) -> Any:
        """pytest-benchmark's benchmark_weave: benchmark.weave (needs aspectlib)."""
        import importlib.util

        if importlib.util.find_spec("aspectlib") is None:
            pytest.skip("benchmark_weave needs aspectlib (pip install aspectlib)")
        return benchmark.weave


def serve(config: pytest.Config, run: CudaperfRun) -> None:
    """Register the benchmark fixture's server, with pytest-benchmark's options (its own parse
    of them where it was switched off) and --benchmark-disable applied to the settings."""
    theirs = config.stash[SERVING].switched_off
    try:
        options = bench_options.read(lambda dest: config.getoption(dest, None), theirs)
    except SettingError as exc:
        raise pytest.UsageError(str(exc)) from None
    settings = bench_options.with_disable(run.ctx.settings, options)
    run.ctx.settings = bench_options.with_compare_fail(settings, options)
    if options.json is not None and not run.ctx.is_worker:
        line = bench_json.unwritable_line(bench_json.target(options.json, run.ctx.output_dir))
        if line:
            raise pytest.UsageError(line)
    config.pluginmanager.register(BenchmarkServer(run, options), "cudaperf-benchmark")
    config.addinivalue_line("markers", bench_marker.marker_help())
