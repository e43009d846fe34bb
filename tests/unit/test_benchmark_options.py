"""pytest-benchmark's options, marker and who serves the fixture, without pytest runs."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

import pytest

from pytest_cudaperf.benchcompat import marker, serving
from pytest_cudaperf.benchcompat.options import (
    OPTIONS,
    BenchmarkOptions,
    add_options,
    budget_times,
    compare_fail_tolerance,
    compare_line,
    ignored_line,
    read,
    skip_reason,
    with_compare_fail,
    with_disable,
)
from pytest_cudaperf.markers import MarkerError, PerfOptions
from pytest_cudaperf.settings import SettingError, Settings


def _ours() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_options(parser.add_argument)
    return parser


def _theirs() -> argparse.ArgumentParser:
    """pytest-benchmark's own option parser (its pytest_addoption on a plain argparse parser)."""
    plugin = pytest.importorskip("pytest_benchmark.plugin")
    parser = argparse.ArgumentParser()

    class Group:
        def addoption(self, *names: str, **kwargs: Any) -> None:
            parser.add_argument(*names, **kwargs)

    class Parser:
        def getgroup(self, *args: Any, **kwargs: Any) -> Group:
            return Group()

    plugin.pytest_addoption(Parser())
    return parser


def _read(parser: argparse.ArgumentParser, args: list[str], theirs: bool) -> BenchmarkOptions:
    namespace = vars(parser.parse_args(args))
    return read(namespace.get, theirs)


def test_the_table_has_every_option_of_pytest_benchmark_with_its_defaults() -> None:
    defaults = vars(_theirs().parse_args([]))
    ours = {o.dest: o for o in OPTIONS}
    assert set(defaults) <= set(ours)
    assert set(ours) - set(defaults) <= {"benchmark_precision", "benchmark_confidence"}
    for dest, value in defaults.items():
        assert ours[dest].their_default == value, dest


SUITE_LINES = [
    [],
    ["--benchmark-skip"],
    ["--benchmark-only", "--benchmark-skip"],
    ["--benchmark-disable"],
    ["--benchmark-disable", "--benchmark-enable"],
    ["--benchmark-json", "out.json", "--benchmark-max-time=0.5", "--benchmark-min-rounds=20"],
    ["--benchmark-min-time=0.01", "--benchmark-disable-gc"],
    ["--benchmark-autosave", "--benchmark-compare", "--benchmark-compare-fail", "min:5%"],
    ["--benchmark-compare=0001", "--benchmark-sort=mean", "--benchmark-columns=min,max"],
    ["--benchmark-warmup=on", "--benchmark-warmup-iterations=10", "--benchmark-timer=time.time"],
    ["--benchmark-histogram", "--benchmark-cprofile=tottime", "--benchmark-group-by=name"],
    ["--benchmark-storage=file://x", "--benchmark-save=run", "--benchmark-save-data"],
    ["--benchmark-name=short", "--benchmark-time-unit=ms", "--benchmark-quiet"],
]


@pytest.mark.parametrize("args", SUITE_LINES, ids=lambda a: " ".join(a) or "none")
def test_a_suite_line_reads_the_same_from_either_parser(args: list[str]) -> None:
    def same(options: BenchmarkOptions) -> BenchmarkOptions:  # a str or a Path, the same file
        return dataclasses.replace(
            options, json=None if options.json is None else str(options.json)
        )

    assert same(_read(_ours(), args, theirs=False)) == same(_read(_theirs(), args, theirs=True))


def test_what_the_options_resolve_to() -> None:
    parser = _ours()
    assert _read(parser, [], False) == BenchmarkOptions()
    assert _read(parser, ["--benchmark-only", "--benchmark-skip"], False).skip is False
    assert _read(parser, ["--benchmark-disable", "--benchmark-enable"], False).disable is False
    honoured = _read(parser, ["--benchmark-max-time=500ms", "--benchmark-min-rounds=7"], False)
    assert (honoured.max_time, honoured.min_rounds) == (0.5, 7)
    ignored = _read(parser, ["--benchmark-sort=mean", "--benchmark-save=run"], False)
    assert ignored.ignored == ("--benchmark-save", "--benchmark-sort")
    assert ignored_line(ignored) == (
        "benchmark: no effect with pytest-cudaperf serving: --benchmark-save, "
        "--benchmark-sort (baselines and verdicts are pytest-cudaperf's: --cudaperf-update, "
        "--cudaperf-tolerance)"
    )
    assert ignored_line(BenchmarkOptions()) is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--benchmark-max-time=soon"], "--benchmark-max-time: expected seconds such as 0.5"),
        (["--benchmark-min-rounds=0"], "--benchmark-min-rounds: expected a whole number >= 1"),
        (
            ["--benchmark-only", "--benchmark-disable"],
            "--benchmark-only: cannot run with --benchmark-disable",
        ),
    ],
)
def test_bad_values_are_one_line_naming_the_option(args: list[str], message: str) -> None:
    with pytest.raises(SettingError) as info:
        _read(_ours(), args, False)
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


def test_skip_and_only() -> None:
    skip, only = BenchmarkOptions(skip=True), BenchmarkOptions(only=True)
    assert skip_reason(True, skip) == "Skipping benchmark (--benchmark-skip active)."
    assert skip_reason(False, skip) is None
    assert skip_reason(False, only) == "Skipping non-benchmark (--benchmark-only active)."
    assert skip_reason(True, only) is None


def test_benchmark_disable_is_cudaperf_disable() -> None:
    settings = Settings(sources={"disable": "default"})
    disabled = with_disable(settings, BenchmarkOptions(disable=True))
    assert disabled.disable is True
    assert disabled.sources["disable"] == "from --benchmark-disable"
    assert with_disable(settings, BenchmarkOptions()) is settings


def test_the_budget_precedence() -> None:
    run = BenchmarkOptions(max_time=0.3, min_time=0.02)
    default = Settings(sources={"max_time": "default"})
    given = Settings(max_time=2.0, sources={"max_time": "from the command line"})
    assert budget_times(None, None, None, run, default) == (0.02, 0.3)
    assert budget_times(0.1, 0.5, None, run, default) == (0.1, 0.5)  # the marker wins
    assert budget_times(None, None, None, run, given) == (0.02, None)  # --cudaperf-max-time
    perf = PerfOptions(min_time=0.2, max_time=4.0)
    assert budget_times(None, None, perf, run, default) == (None, None)  # @perf
    assert budget_times(None, 0.5, perf, run, default) == (None, 0.5)


# --- the marker ----------------------------------------------------------------------------

#: every argument pytest-benchmark's marker takes (its pytest_runtest_setup)
PYTEST_BENCHMARK_MARK_ARGS = {
    "max_time": 0.5,
    "min_rounds": 5,
    "min_time": 0.000005,
    "precision": 0.01,
    "confidence": 0.99,
    "timer": object(),
    "group": "g",
    "disable_gc": True,
    "warmup": True,
    "warmup_iterations": 10,
    "calibration_precision": 10,
    "cprofile": True,
}


def test_the_marker_takes_every_argument_of_pytest_benchmark() -> None:
    parsed = marker.parse((), PYTEST_BENCHMARK_MARK_ARGS)
    assert parsed == marker.BenchmarkMark(
        group="g", min_rounds=5, min_time=0.000005, max_time=0.5, disable_gc=True
    )
    assert marker.parse((), {}) == marker.BenchmarkMark()
    assert marker.parse((), {"max_time": "200ms"}).max_time == pytest.approx(0.2)


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (("g",), {}, "@pytest.mark.benchmark: takes keyword arguments only, got 1 positional"),
        (
            (),
            {"rounds": 3},
            "@pytest.mark.benchmark: unknown argument 'rounds' (did you mean 'min_rounds'?); it "
            "takes group, min_rounds, min_time, max_time, disable_gc, timer, ",
        ),
        ((), {"min_rounds": 0}, "@pytest.mark.benchmark: min_rounds: expected an integer >= 1"),
        ((), {"max_time": "soon"}, "@pytest.mark.benchmark: max_time: expected seconds"),
        ((), {"group": 3}, "@pytest.mark.benchmark: group: expected a string, got 3"),
        ((), {"disable_gc": "yes"}, "@pytest.mark.benchmark: disable_gc: expected True or False"),
    ],
)
def test_bad_marker_arguments_are_one_line(
    args: tuple[Any, ...], kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(MarkerError) as info:
        marker.parse(args, kwargs)
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


def test_the_marker_help_shows_the_signature() -> None:
    assert marker.marker_help().startswith(
        "benchmark(group=None, min_rounds=None, min_time=None, max_time=None, disable_gc=None, "
        "timer=None, warmup=None, warmup_iterations=None, calibration_precision=None, "
        "cprofile=None, precision=None, confidence=None): pytest-benchmark's marker, served by "
        "pytest-cudaperf"
    )


# --- who serves ----------------------------------------------------------------------------


class Manager:
    """A plugin manager with pytest-benchmark's plugin registered, or not."""

    def __init__(self, loaded: bool) -> None:
        self.plugins: dict[str, object] = {"cudaperf": object()}
        if loaded:
            self.plugins["benchmark"] = type("Module", (), {"__name__": serving.PLUGIN_MODULE})()
        self.blocked: list[str] = []

    def get_plugins(self) -> set[object]:
        return set(self.plugins.values())

    def get_name(self, plugin: object) -> str | None:
        return next((n for n, p in self.plugins.items() if p is plugin), None)

    def set_blocked(self, name: str) -> None:
        self.plugins.pop(name, None)
        self.blocked.append(name)


def test_without_pytest_benchmark_this_plugin_serves() -> None:
    manager = Manager(loaded=False)
    chosen = serving.choose(manager, opted_in=False)
    assert chosen == serving.Serving(ours=True)
    assert manager.blocked == []
    assert chosen.header() == "benchmark fixture: pytest-cudaperf (pytest-benchmark not loaded)"


def test_with_pytest_benchmark_it_serves_unless_the_run_opts_in() -> None:
    manager = Manager(loaded=True)
    kept = serving.choose(manager, opted_in=False)
    assert kept == serving.Serving(ours=False)
    assert manager.blocked == []
    assert kept.header().startswith("benchmark fixture: pytest-benchmark (--cudaperf-benchmark")

    switched = serving.choose(manager, opted_in=True, source="from tox.ini [cudaperf_benchmark]")
    assert switched == serving.Serving(True, True, "from tox.ini [cudaperf_benchmark]")
    assert manager.blocked == ["benchmark", serving.SESSION_NAME]
    assert serving.loaded_name(manager) is None
    assert switched.header() == (
        "benchmark fixture: pytest-cudaperf (pytest-benchmark switched off by "
        "--cudaperf-benchmark, from tox.ini [cudaperf_benchmark])"
    )


class Options:
    def __init__(self, cli: bool | None = None, ini: str = "") -> None:
        self.cli, self.ini = cli, ini

    def getoption(self, name: str) -> Any:
        return self.cli if name == "cudaperf_benchmark" else None

    def getini(self, name: str) -> Any:
        return self.ini if name == "cudaperf_benchmark" else None


@pytest.mark.parametrize(
    ("options", "environ", "source"),
    [
        (Options(cli=True), {}, "from the command line"),
        (Options(ini="true"), {}, "from tox.ini [cudaperf_benchmark]"),
        (Options(), {"PYTEST_CUDAPERF_BENCHMARK": "1"}, "from the environment variable *"),
    ],
)
def test_the_opt_in_has_an_ini_key_and_a_variable(
    options: Options, environ: dict[str, str], source: str
) -> None:
    chosen = serving.decide(Manager(loaded=True), options, environ, "tox.ini")
    assert chosen.switched_off
    assert chosen.source.startswith(source.rstrip("*"))
    assert not serving.decide(Manager(loaded=True), Options(), {}, "tox.ini").ours


def test_a_bad_opt_in_value_names_the_option() -> None:
    with pytest.raises(SettingError) as info:
        serving.decide(Manager(loaded=True), Options(ini="maybe"), {}, "tox.ini")
    assert str(info.value) == (
        "--cudaperf-benchmark: expected true or false, got 'maybe' "
        "(from tox.ini [cudaperf_benchmark])"
    )


@pytest.mark.parametrize("theirs", [False, True], ids=["ours", "theirs"])
def test_compare_fail_percentages_become_the_tolerance(theirs: bool) -> None:
    parser = _theirs() if theirs else _ours()
    args = ["--benchmark-compare", "--benchmark-compare-fail", "mean:10%", "min:7%"]
    options = _read(parser, args, theirs)
    assert options.compare_fail == ("mean:10%", "min:7%")
    assert options.compare_tolerance == pytest.approx(0.07)  # the tightest
    assert options.compare
    assert "--benchmark-compare-fail" not in options.ignored


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (
            ["min:0.001"],
            "--benchmark-compare-fail=min:0.001: a threshold in seconds has no equivalent in "
            "pytest-cudaperf's verdicts; give a percentage (min:10%), or a budget per test with "
            "@pytest.mark.perf(max_ms=...)",
        ),
        (
            ["mean:5%", "stddev:5%"],
            "--benchmark-compare-fail=stddev:5%: pytest-cudaperf judges a slowdown of the median, "
            "with its noise measured; give a percentage of min, max, mean, median (such as "
            "mean:10%) instead",
        ),
        (["fast"], "--benchmark-compare-fail: expected FIELD:PCT% such as mean:10%, got 'fast'"),
    ],
)
def test_a_compare_fail_without_an_equivalent_is_refused_saying_what_to_give(
    given: list[str], message: str
) -> None:
    with pytest.raises(SettingError) as info:
        compare_fail_tolerance(given)
    assert str(info.value) == message


def test_pytest_benchmarks_parsed_absolute_check_is_refused_too() -> None:
    with pytest.raises(SettingError, match=r"^--benchmark-compare-fail=mean:0\.002: a threshold"):
        _read(_theirs(), ["--benchmark-compare-fail", "mean:0.002"], True)


def test_compare_fail_sets_the_tolerance_and_strict_unless_a_tolerance_is_given() -> None:
    options = BenchmarkOptions(compare_fail=("mean:10%",), compare_tolerance=0.10)
    default = Settings(sources={"tolerance": "default", "strict": "default"})
    honoured = with_compare_fail(default, options)
    assert (honoured.tolerance, honoured.strict) == (0.10, True)
    assert (
        honoured.sources["tolerance"]
        == honoured.sources["strict"]
        == ("from --benchmark-compare-fail")
    )
    assert compare_line(options, honoured) == (
        "benchmark: --benchmark-compare-fail=mean:10% judged against the pytest-cudaperf "
        "baselines as --cudaperf-tolerance=10% and --cudaperf-strict (a benchmark with no "
        "baseline fails)"
    )
    given = Settings(tolerance=0.03, sources={"tolerance": "from the command line"})
    kept = with_compare_fail(given, options)
    assert (kept.tolerance, kept.strict) == (0.03, True)
    assert "--cudaperf-tolerance=3% (from the command line, which wins)" in str(
        compare_line(options, kept)
    )
    assert with_compare_fail(default, BenchmarkOptions()) is default
    assert compare_line(BenchmarkOptions(), default) is None
    assert "saved runs are not read" in str(compare_line(BenchmarkOptions(compare=True), default))


def test_the_help_of_every_option_formats() -> None:
    """argparse formats help with %: a literal one in an option's effect must not break it."""
    text = " ".join(_ours().format_help().split())
    assert "FIELD:PCT% (min, max, mean or median) fails a benchmark" in text
