"""pytest-benchmark's ``--benchmark-*`` options: one table of all of them, what each does where
pytest-cudaperf serves the ``benchmark`` fixture, and their values resolved into a frozen
:class:`BenchmarkOptions`.

The options are this plugin's own (registered with ``default=None``, so that "not given" shows)
where pytest-benchmark is not loaded, and pytest-benchmark's (parsed by it, with its defaults)
where it is loaded but switched off (``--cudaperf-benchmark``): :func:`read` takes both. Every
option a suite may pass is accepted; those without an effect here are named in one header line.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytest_cudaperf.settings import SettingError, parse_count
from pytest_cudaperf.units import parse_seconds

if TYPE_CHECKING:
    from pytest_cudaperf.markers import PerfOptions
    from pytest_cudaperf.settings import Settings


@dataclass(frozen=True)
class BenchOption:
    """One ``--benchmark-<name>`` option: how it parses, what it does here (``""``: nothing),
    and the value pytest-benchmark's own parser gives when it is absent."""

    name: str
    effect: str
    their_default: Any = None
    #: ``value``, ``flag``, ``optional`` (nargs ``?``), ``append`` (repeatable, nargs ``?``),
    #: ``many`` (nargs ``+``) or ``const`` (takes no value)
    kind: str = "value"
    metavar: str | None = None
    const: Any = None

    @property
    def cli(self) -> str:
        return f"--benchmark-{self.name}"

    @property
    def dest(self) -> str:
        return "benchmark_" + self.name.replace("-", "_")

    def arguments(self) -> dict[str, Any]:
        """``addoption`` keyword arguments (``default=None``: "not given" differs from false)."""
        kwargs: dict[str, Any] = {"dest": self.dest, "default": None, "help": self.help()}
        if self.kind == "flag":
            kwargs["action"] = "store_true"
        elif self.kind == "const":
            kwargs.update(action="store_const", const=True)
        else:
            kwargs["metavar"] = self.metavar
            if self.kind in ("optional", "append"):
                kwargs.update(nargs="?", const=self.const)
            if self.kind == "append":
                kwargs["action"] = "append"
            elif self.kind == "many":
                kwargs["nargs"] = "+"
        return kwargs

    def help(self) -> str:
        if self.effect:  # argparse formats help with %: a literal one is doubled
            effect = self.effect.replace("%", "%%")
            return f"pytest-benchmark's option, served by pytest-cudaperf: {effect}"
        return "pytest-benchmark's option: accepted, no effect where pytest-cudaperf serves"


_NO_EFFECT = ""

#: every option of pytest-benchmark's plugin (5.1 to 5.3), in the order of its ``--help``
OPTIONS: tuple[BenchOption, ...] = (
    BenchOption(
        "min-time",
        "sample for at least this long (a measurement's min_time)",
        "0.000005",
        metavar="SECONDS",
    ),
    BenchOption(
        "max-time",
        "the time budget of a measurement (--cudaperf-max-time, where given, wins)",
        "1.0",
        metavar="SECONDS",
    ),
    BenchOption("min-rounds", "at least this many samples", 5, metavar="NUM"),
    BenchOption("precision", _NO_EFFECT, None, metavar="FRACTION"),
    BenchOption("confidence", _NO_EFFECT, 0.99, metavar="FRACTION"),
    BenchOption("timer", _NO_EFFECT, "time.perf_counter", metavar="FUNC"),
    BenchOption("calibration-precision", _NO_EFFECT, 10, metavar="NUM"),
    BenchOption("warmup", _NO_EFFECT, False, kind="optional", metavar="KIND", const="on"),
    BenchOption("warmup-iterations", _NO_EFFECT, 100000, metavar="NUM"),
    BenchOption("disable-gc", "the garbage collector off while measuring", False, kind="flag"),
    BenchOption("skip", "skip the tests that use the benchmark fixture", False, kind="flag"),
    BenchOption(
        "disable",
        "run each test once without measuring, as --cudaperf-disable",
        False,
        kind="flag",
    ),
    BenchOption("enable", "cancel --benchmark-disable", False, kind="flag"),
    BenchOption("only", "skip the tests that do not use the benchmark fixture", False, kind="flag"),
    BenchOption("save", _NO_EFFECT, None, metavar="NAME"),
    BenchOption("autosave", _NO_EFFECT, None, kind="const"),
    BenchOption("save-data", _NO_EFFECT, False, kind="flag"),
    BenchOption(
        "json", "write the measurements to PATH in pytest-benchmark's JSON format", metavar="PATH"
    ),
    BenchOption(
        "compare",
        "each benchmark is compared with its pytest-cudaperf baseline, as every measured test "
        "is (pytest-benchmark's saved runs are not read)",
        [],
        kind="optional",
        metavar="NUM|_ID",
        const=True,
    ),
    BenchOption(
        "compare-fail",
        "FIELD:PCT% (min, max, mean or median) fails a benchmark slower than its baseline by "
        "more than PCT: the run's --cudaperf-tolerance, with --cudaperf-strict",
        None,
        kind="many",
        metavar="EXPR",
    ),
    BenchOption("cprofile", _NO_EFFECT, None, metavar="COLUMN"),
    BenchOption("cprofile-loops", _NO_EFFECT, 1, metavar="LOOPS"),
    BenchOption("cprofile-top", _NO_EFFECT, 25, metavar="COUNT"),
    BenchOption(
        "cprofile-dump", _NO_EFFECT, [], kind="append", metavar="FILENAME-PREFIX", const="benchmark"
    ),
    BenchOption("storage", _NO_EFFECT, "file://./.benchmarks", metavar="URI"),
    BenchOption("netrc", _NO_EFFECT, "", kind="optional", metavar="NETRC", const="~/.netrc"),
    BenchOption("verbose", _NO_EFFECT, False, kind="flag"),
    BenchOption("quiet", _NO_EFFECT, False, kind="flag"),
    BenchOption("sort", _NO_EFFECT, "min", metavar="COL"),
    BenchOption("group-by", _NO_EFFECT, "group", metavar="LABEL"),
    BenchOption("columns", _NO_EFFECT, None, metavar="LABELS"),
    BenchOption("name", _NO_EFFECT, "normal", metavar="FORMAT"),
    BenchOption("time-unit", _NO_EFFECT, None, metavar="COLUMN"),
    BenchOption(
        "histogram", _NO_EFFECT, [], kind="append", metavar="FILENAME-PREFIX", const="benchmark"
    ),
)


def add_options(addoption: Callable[..., object]) -> None:
    """Register every option (where pytest-benchmark is not loaded to register its own)."""
    for option in OPTIONS:
        addoption(option.cli, **option.arguments())


@dataclass(frozen=True)
class BenchmarkOptions:
    """The ``--benchmark-*`` options resolved: what they do here, and the given ones that do
    nothing here (named in the report header)."""

    skip: bool = False
    only: bool = False
    #: ``--benchmark-disable`` without ``--benchmark-enable``
    disable: bool = False
    disable_gc: bool = False
    #: a path (``str`` or ``Path``), or the open file of an older pytest-benchmark's parser
    json: Any = None
    max_time: float | None = None
    min_time: float | None = None
    min_rounds: int | None = None
    #: ``--benchmark-compare-fail``'s expressions as given, and the tolerance they ask for (the
    #: tightest of their percentages)
    compare_fail: tuple[str, ...] = ()
    compare_tolerance: float | None = None
    #: ``--benchmark-compare`` was given
    compare: bool = False
    ignored: tuple[str, ...] = ()


def _given(option: BenchOption, value: Any, theirs: bool) -> bool:
    if value is None or value is False or value == []:
        return False
    return not (theirs and value == option.their_default)


def _parsed(option: str, value: Any, parse: Callable[[str], Any]) -> Any:
    if value is None:
        return None
    try:
        return parse(str(value))
    except ValueError as exc:
        raise SettingError(f"--benchmark-{option}: {exc}") from None


#: pytest-benchmark's fields a ``--benchmark-compare-fail`` percentage may name: each is judged
#: as the median's verdict judges a slowdown
COMPARE_FIELDS = ("min", "max", "mean", "median")
_COMPARE_FAIL = re.compile(
    r"^(?P<field>[a-z]+):(?P<number>[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?)(?P<pct>%?)$"
)


def _check_text(value: Any) -> tuple[str, str, str, bool]:
    """One ``--benchmark-compare-fail`` expression as (its text, field, number, a percentage?):
    given as text (this plugin's parser) or as pytest-benchmark's parsed check."""
    field, threshold = getattr(value, "field", None), getattr(value, "threshold", None)
    if isinstance(field, str) and threshold is not None:
        pct = type(value).__name__.startswith("Percentage")
        return f"{field}:{threshold}{'%' if pct else ''}", field, str(threshold), pct
    text = str(value)
    found = _COMPARE_FAIL.match(text)
    if found is None:
        raise SettingError(
            f"--benchmark-compare-fail: expected FIELD:PCT% such as mean:10%, got {text!r}"
        )
    return text, found["field"], found["number"], bool(found["pct"])


def compare_fail_tolerance(values: Sequence[Any]) -> tuple[tuple[str, ...], float]:
    """``--benchmark-compare-fail``'s expressions and the tolerance they ask for: the tightest
    percentage. One that has no equivalent here (a threshold in seconds, on the spread, or an
    unknown field) is a :class:`SettingError` that says what to give instead."""
    given, tolerances = [], []
    for value in values:
        text, field, number, pct = _check_text(value)
        option = f"--benchmark-compare-fail={text}"
        if field not in COMPARE_FIELDS:
            raise SettingError(
                f"{option}: pytest-cudaperf judges a slowdown of the median, with its noise "
                f"measured; give a percentage of {', '.join(COMPARE_FIELDS)} (such as "
                "mean:10%) instead"
            )
        if not pct:
            raise SettingError(
                f"{option}: a threshold in seconds has no equivalent in pytest-cudaperf's "
                f"verdicts; give a percentage ({field}:10%), or a budget per test with "
                "@pytest.mark.perf(max_ms=...)"
            )
        given.append(text)
        tolerances.append(float(number) / 100)
    return tuple(given), min(tolerances)


def read(value_of: Callable[[str], Any], theirs: bool = False) -> BenchmarkOptions:
    """Resolve the options from ``value_of(dest)`` (``config.getoption``); ``theirs``: parsed by
    pytest-benchmark, whose defaults then mean "not given". Raises :class:`SettingError` (one
    line naming the option) for a bad value of an option that has an effect here."""
    given = {o.name: v for o in OPTIONS if _given(o, v := value_of(o.dest), theirs)}
    skip, only = bool(given.get("skip")), bool(given.get("only"))
    disable = bool(given.get("disable")) and not given.get("enable")
    if only and disable:
        raise SettingError(
            "--benchmark-only: cannot run with --benchmark-disable (nothing would be measured); "
            "drop one, or add --benchmark-enable"
        )
    checks = given.get("compare-fail")
    compare_fail, tolerance = compare_fail_tolerance(checks) if checks else ((), None)
    return BenchmarkOptions(
        skip=skip and not only,  # as pytest-benchmark: --benchmark-only overrides --benchmark-skip
        only=only,
        disable=disable,
        disable_gc=bool(given.get("disable-gc")),
        json=given.get("json"),
        max_time=_parsed("max-time", given.get("max-time"), parse_seconds),
        min_time=_parsed("min-time", given.get("min-time"), parse_seconds),
        min_rounds=_parsed("min-rounds", given.get("min-rounds"), parse_count),
        compare_fail=compare_fail,
        compare_tolerance=tolerance,
        compare="compare" in given,
        ignored=tuple(o.cli for o in OPTIONS if o.name in given and not o.effect),
    )


def ignored_line(options: BenchmarkOptions) -> str | None:
    """The header line naming the given options that have no effect here, or None."""
    if not options.ignored:
        return None
    return (
        f"benchmark: no effect with pytest-cudaperf serving: {', '.join(options.ignored)} "
        "(baselines and verdicts are pytest-cudaperf's: --cudaperf-update, --cudaperf-tolerance)"
    )


def budget_times(
    mark_min: float | None,
    mark_max: float | None,
    perf: PerfOptions | None,
    run: BenchmarkOptions,
    settings: Settings,
) -> tuple[float | None, float | None]:
    """The explicit ``(min_time, max_time)`` of a benchmark's measurement, None where the usual
    precedence decides (``@perf`` > ``--cudaperf-max-time`` > its default). A
    ``@pytest.mark.benchmark`` argument wins over everything, ``--benchmark-max-time`` only over
    the defaults (a ``@perf`` argument and a given ``--cudaperf-max-time`` beat it)."""
    perf_min = perf.min_time if perf is not None else None
    perf_max = perf.max_time if perf is not None else None
    min_time = (
        mark_min if mark_min is not None else (None if perf_min is not None else run.min_time)
    )
    if mark_max is not None:
        return min_time, mark_max
    ours = perf_max is not None or settings.sources.get("max_time", "default") != "default"
    return min_time, None if ours else run.max_time


def skip_reason(uses_fixture: bool, options: BenchmarkOptions) -> str | None:
    """Why ``--benchmark-skip`` or ``--benchmark-only`` skips a test (pytest-benchmark's words)."""
    if uses_fixture and options.skip:
        return "Skipping benchmark (--benchmark-skip active)."
    if not uses_fixture and options.only:
        return "Skipping non-benchmark (--benchmark-only active)."
    return None


def with_disable(settings: Settings, options: BenchmarkOptions) -> Settings:
    """``--benchmark-disable`` is ``--cudaperf-disable``: the run's settings with it applied."""
    if not options.disable or settings.disable:
        return settings
    sources = {**settings.sources, "disable": "from --benchmark-disable"}
    return dataclasses.replace(settings, disable=True, sources=sources)


def with_compare_fail(settings: Settings, options: BenchmarkOptions) -> Settings:
    """``--benchmark-compare-fail`` honoured against this plugin's baselines: the run's tolerance
    is its tightest percentage (unless ``--cudaperf-tolerance`` or its ini or environment twin is
    given: that wins), and ``--cudaperf-strict`` is on, so that a benchmark with no baseline
    fails instead of passing as NEW (pytest-benchmark refuses a compare-fail with nothing to
    compare)."""
    if options.compare_tolerance is None:
        return settings
    source = "from --benchmark-compare-fail"
    sources = dict(settings.sources)
    if not settings.strict:
        sources["strict"] = source
    tolerance = settings.tolerance
    if settings.sources.get("tolerance", "default") == "default":
        tolerance, sources["tolerance"] = options.compare_tolerance, source
    return dataclasses.replace(settings, tolerance=tolerance, strict=True, sources=sources)


def compare_line(options: BenchmarkOptions, settings: Settings) -> str | None:
    """The header line that says how ``--benchmark-compare-fail`` (or ``--benchmark-compare``)
    is judged here, or None where neither is given."""
    if options.compare_fail:
        given = " ".join(options.compare_fail)
        origin = settings.sources.get("tolerance", "default")
        tolerance = f"--cudaperf-tolerance={settings.tolerance * 100:g}%"
        if origin != "from --benchmark-compare-fail":
            tolerance += f" ({origin}, which wins)"
        return (
            f"benchmark: --benchmark-compare-fail={given} judged against the pytest-cudaperf "
            f"baselines as {tolerance} and --cudaperf-strict (a benchmark with no baseline "
            "fails)"
        )
    if options.compare:
        return (
            "benchmark: --benchmark-compare: each benchmark is compared with its "
            "pytest-cudaperf baseline (pytest-benchmark's saved runs are not read)"
        )
    return None
