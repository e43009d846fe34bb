"""Run-wide settings: one table of options, resolved once into a frozen :class:`Settings`.

Precedence for every option is CLI > environment (``PYTEST_CUDAPERF_X``) > ini (``cudaperf_x``) >
default; markers override some of these per test (see :mod:`pytest_cudaperf.markers`). Values are
parsed by small pure functions that raise :class:`SettingError` naming the option and the source.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from pytest_cudaperf.seeding import written
from pytest_cudaperf.units import MAX_ROUNDS, parse_fraction, parse_seconds


class SettingError(ValueError):
    """A bad option value; the message names the option and where the value came from."""


def parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off", ""}:
        return False
    raise ValueError(f"expected true or false, got {text!r}")


def _choice(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = text.strip().lower()
        if value not in choices:
            listed = ", ".join(choices[:-1]) + f" or {choices[-1]}"
            raise ValueError(f"expected {listed}, got {text!r}")
        return value

    return parse


def parse_count(text: str) -> int:
    """A whole number >= 1."""
    try:
        value = int(text.strip())
    except ValueError:
        raise ValueError(f"expected a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise ValueError(f"expected a whole number >= 1, got {text!r}")
    return value


def parse_round_of(text: str) -> int:
    """``off`` or ``0`` (0: as a child's environment writes it), or a round count >= 2 of which
    one is measured."""
    if text.strip().lower() in ("off", "0"):
        return 0
    try:
        value = parse_count(text)
    except ValueError:
        value = 0
    if value < 2:
        raise ValueError(f"expected off or a whole number >= 2, got {text!r}")
    return value


#: the most intra-op threads ``--cudaperf-cpu-threads`` takes (more are a typo: torch would
#: start them all, or overflow a C int)
MAX_THREADS = 4096

#: the largest seed NumPy's global generator takes
MAX_SEED = 2**32 - 1


def _count_within(text: str, most: int, also: str = "") -> int:
    """A whole number from 1 to ``most``; ``also``: what else the option takes, for its error."""
    try:
        value = int(text.strip())
    except ValueError:
        value = 0
    if not 1 <= value <= most:
        raise ValueError(f"expected a whole number from 1 to {most}{also}, got {text!r}")
    return value


def parse_threads(text: str) -> int:
    """A thread count from 1 to :data:`MAX_THREADS`, or ``auto`` (0, as a child's environment
    writes it: leave torch's own setting)."""
    if text.strip().lower() in ("auto", "0"):
        return 0
    return _count_within(text, MAX_THREADS, ", or auto")


def parse_rounds(text: str) -> int:
    """A round count from 1 to :data:`pytest_cudaperf.units.MAX_ROUNDS`."""
    return _count_within(text, MAX_ROUNDS)


def parse_wait(text: str) -> float:
    """Seconds to wait (``30``, ``30s``, ``500ms``), or ``0``/``off``: no wait."""
    if text.strip().lower() in ("0", "off"):
        return 0.0
    try:
        return parse_seconds(text)
    except ValueError:
        raise ValueError(f"expected seconds such as 30 or 30s, or off, got {text!r}") from None


def parse_seed(text: str) -> int | None:
    """A seed: a whole number from 0 to :data:`MAX_SEED`, or ``off`` (None: the generators left
    alone)."""
    if text.strip().lower() == "off":
        return None
    try:
        value = int(text.strip())
    except ValueError:
        value = -1
    if not 0 <= value <= MAX_SEED:
        raise ValueError(f"expected a whole number from 0 to {MAX_SEED}, or off, got {text!r}")
    return value


def parse_sweep(text: str) -> str:
    """The leak sweep's mode: ``fail`` or ``report``, ``off``; a boolean reads as ``fail`` or
    ``off`` (``PYTEST_CUDAPERF_LEAK_SWEEP=1``)."""
    value = text.strip().lower()
    if value in ("fail", "report", "off"):
        return value
    try:
        return "fail" if parse_bool(value) else "off"
    except ValueError:
        raise ValueError(
            f"expected fail, report or off, got {text!r} (a path after the flag? give the "
            "mode with '=', as --cudaperf-leak-sweep=report, or put the flag after the paths)"
        ) from None


def parse_names(text: str) -> tuple[str, ...]:
    """Comma- or space-separated names (fixture names), in order, without repeats."""
    names = [name for name in text.replace(",", " ").split() if name]
    bad = [name for name in names if not name.isidentifier()]
    if bad:
        raise ValueError(f"expected fixture names, got {bad[0]!r}")
    return tuple(dict.fromkeys(names))


def _path(text: str) -> str:
    if not text.strip():
        raise ValueError("expected a path, got an empty string")
    return text.strip()


@dataclass(frozen=True)
class Option:
    """One ``--cudaperf-<name>`` option with its ini key and environment variable."""

    name: str
    help: str
    parse: Callable[[str], Any]
    default: Any = None
    flag: bool = False
    metavar: str | None = None
    #: the value of the flag given without one (``--cudaperf-leak-sweep``): its value is optional
    bare: str | None = None
    #: the value written back as the option reads it (a child process's environment), for an
    #: option whose None is a value of its own (``--cudaperf-seed=off``); else ``str``, and None
    #: not written
    write: Callable[[Any], str] | None = None

    @property
    def cli(self) -> str:
        return f"--cudaperf-{self.name}"

    @property
    def ini(self) -> str:
        return "cudaperf_" + self.name.replace("-", "_")

    @property
    def env(self) -> str:
        return "PYTEST_CUDAPERF_" + self.name.replace("-", "_").upper()

    @property
    def field(self) -> str:
        return self.name.replace("-", "_")


OPTIONS: tuple[Option, ...] = (
    Option(
        "device",
        "where cuda_device puts tests: auto (CUDA when available, else CPU), cuda or cpu "
        "(default: auto)",
        _choice("auto", "cuda", "cpu"),
        "auto",
        metavar="{auto,cuda,cpu}",
    ),
    Option(
        "require-gpu",
        "make a machine without a usable CUDA GPU a usage error instead of a run of skips",
        parse_bool,
        False,
        flag=True,
    ),
    Option(
        "disable",
        "run every test once without timing, leak or peak checks (fast functional runs)",
        parse_bool,
        False,
        flag=True,
    ),
    Option(
        "update",
        "add this run's recordings to the baselines of measured tests that passed their own "
        "assertions (a series clearly at a new level starts afresh)",
        parse_bool,
        False,
        flag=True,
    ),
    Option(
        "strict",
        "fail a measured test that has no baseline for this device class",
        parse_bool,
        False,
        flag=True,
    ),
    Option(
        "prune",
        "with --cudaperf-update: remove baseline entries whose tests no longer exist",
        parse_bool,
        False,
        flag=True,
    ),
    Option(
        "tolerance",
        "slowdown tolerated before a regression, as 0.05 or 5%% (default: 5%%)",
        parse_fraction,
        0.05,
        metavar="FRACTION",
    ),
    Option(
        "host-tolerance",
        "slowdown tolerated before a regression of GPU code that synchronizes inside (its "
        "host-bound time, in launch references), as 0.10 or 10%% (default: 10%%)",
        parse_fraction,
        0.10,
        metavar="FRACTION",
    ),
    Option(
        "breakdown",
        "kernel (CPU: op) breakdowns: auto records one on --cudaperf-update and diffs it on a "
        "non-pass verdict; always also records one for every measured series of a run that "
        "does not update (the JSON report carries it); off profiles nothing (default: auto)",
        _choice("auto", "always", "off"),
        "auto",
        metavar="{auto,always,off}",
    ),
    Option(
        "confirm-process",
        "re-measure a regression that a process's state can make in a fresh pytest process "
        "before it fails the test: auto (CPU measurements, synchronized wall times, GPU code "
        "that synchronizes inside and its kernels, device time of several launches a call; a "
        "speed-up, or a regression of a test that fails anyway, only alongside another "
        "regression), all (those too) or off (default: auto)",
        _choice("auto", "all", "off"),
        "auto",
        metavar="{auto,all,off}",
    ),
    Option(
        "remeasure",
        "auto measures an INCONCLUSIVE time again (twice the budget, at most twice) and a "
        "REGRESSION or IMPROVED again before it stands; off measures each callable once and "
        "takes its verdict as it reads (default: auto)",
        _choice("auto", "off"),
        "auto",
        metavar="{auto,off}",
    ),
    Option(
        "state-wait",
        "how long a host-bound slowdown left undecided while the host ran slower or faster "
        "than at recording may wait for the host to come back before it is measured again, and "
        "pedantic's rounds left undecided while other processes shared the CPU for it to be "
        "free, per measured callable (once a wait ran out, later ones look once): SECONDS, or "
        "off (default: 15s)",
        parse_wait,
        15.0,
        metavar="SECONDS",
    ),
    Option(
        "seed",
        "the seed torch, Python's random and NumPy's global generator are reset to before each "
        "measured test's fixtures, so its random inputs do not depend on which tests ran "
        "before it in its process; off leaves them alone (default: 0)",
        parse_seed,
        0,
        metavar="N",
        write=written,
    ),
    Option(
        "baseline-dir",
        "folder of the committed baseline files, one per device class (default: .cudaperf)",
        _path,
        ".cudaperf",
        metavar="DIR",
    ),
    Option(
        "json", "write full results (samples, environment) to this JSON file", _path, metavar="PATH"
    ),
    Option("html", "write a self-contained HTML report to this file", _path, metavar="PATH"),
    Option(
        "history",
        "append this run (commit, branch, every judged series) to this run history: an SQLite "
        "file or a postgresql:// URL",
        _path,
        metavar="PATH|URL",
    ),
    Option(
        "cache",
        "L2 cache state for CUDA timings: cold (flushed before each sample) or hot (default: cold)",
        _choice("cold", "hot"),
        "cold",
        metavar="{cold,hot}",
    ),
    Option(
        "max-time",
        "time budget of one measurement, as 0.5 or 500ms (default: 1s)",
        parse_seconds,
        1.0,
        metavar="SECONDS",
    ),
    Option(
        "cpu-threads",
        "torch's intra-op threads while a CPU callable is measured: N, or auto to leave torch's "
        "own setting (default: 1, which a busy machine cannot oversubscribe)",
        parse_threads,
        1,
        metavar="N",
    ),
    Option(
        "rounds",
        "independent rounds per measurement, pooled; the median's CI covers every round's "
        "median (default: 3; at most 100)",
        parse_rounds,
        3,
        metavar="N",
    ),
    Option(
        "round-of",
        "measure one round of an N-round measurement: its share of the time budget and its "
        "precision, as each of N rounds takes them; cudaperf record's runs take one of 3 when "
        "it records 3 processes or more, the processes being the series' rounds (default: off)",
        parse_round_of,
        0,
        metavar="N",
    ),
    Option(
        "leak-sweep",
        "check every test that allocated memory for leaks, without markers: fail (the flag "
        "alone) fails a leaking test, report only lists it at the end (default: off)",
        parse_sweep,
        "off",
        metavar="{fail,report}",
        bare="fail",
    ),
    Option(
        "leak-sweep-unsafe-fixtures",
        "fixtures whose state a re-run of the test body would corrupt, comma-separated: the "
        "leak sweep never re-runs a test that uses one (reported unchecked)",
        parse_names,
        (),
        metavar="NAMES",
    ),
    Option(
        "roofline",
        "count each measured call's FLOPs and bytes (one more call, after its samples) and "
        "report its speed of light: achieved rate, bound and %% of the measured and datasheet "
        "ceilings (tests with min_peak, flops or bytes always)",
        parse_bool,
        False,
        flag=True,
    ),
    Option(
        "energy",
        "measure each CUDA measurement's joules per call and mean power with NVML's energy "
        "counter (a window of 0.1-3 s of back-to-back calls; tests with max_joules always)",
        parse_bool,
        False,
        flag=True,
    ),
    Option(
        "benchmark",
        "serve the benchmark fixture, its marker and the --benchmark-* options even where "
        "pytest-benchmark is installed (it is switched off for the run)",
        parse_bool,
        False,
        flag=True,
    ),
)


@dataclass(frozen=True)
class Settings:
    device: str = "auto"
    require_gpu: bool = False
    disable: bool = False
    update: bool = False
    strict: bool = False
    prune: bool = False
    tolerance: float = 0.05
    #: the tolerance of host-bound time (``time:host``: GPU code that synchronizes inside),
    #: which moves between processes by more than device time does (why: docs/decisions.md,
    #: "Why does host-bound time have its own tolerance?")
    host_tolerance: float = 0.10
    baseline_dir: str = ".cudaperf"
    json: str | None = None
    html: str | None = None
    history: str | None = None
    cache: str = "cold"
    max_time: float = 1.0
    rounds: int = 3
    #: one round of a measurement of this many rounds is measured (0: off; ``cudaperf record``)
    round_of: int = 0
    #: torch intra-op threads while a CPU callable is measured (0: torch's own setting)
    cpu_threads: int = 1
    breakdown: str = "auto"
    confirm_process: str = "auto"
    remeasure: str = "auto"
    #: seconds a host-bound change read in the host's other state may wait for the recordings'
    #: state, per measured callable (0: re-measured at once)
    state_wait: float = 15.0
    #: what torch's, Python's and NumPy's generators are seeded with before each measured test's
    #: fixtures (None: left alone)
    seed: int | None = 0
    #: the benchmark fixture is served here even where pytest-benchmark is installed
    benchmark: bool = False
    #: the leak sweep over every test that allocated device memory: off, fail or report
    leak_sweep: str = "off"
    #: fixtures whose state a re-run would corrupt: the sweep never re-runs their tests
    leak_sweep_unsafe_fixtures: tuple[str, ...] = ()
    #: every measurement's work counted and its speed of light reported
    roofline: bool = False
    #: every CUDA measurement's energy per call measured
    energy: bool = False
    #: where each value came from: "default", "from the command line", "from pytest.ini [...]"
    sources: Mapping[str, str] = dataclasses.field(default_factory=dict, compare=False)


class ConfigLike(Protocol):
    """The part of ``pytest.Config`` that resolution reads (a protocol, so tests need no pytest)."""

    def getoption(self, name: str) -> Any: ...

    def getini(self, name: str) -> Any: ...


def option_arguments(option: Option) -> dict[str, Any]:
    """``addoption`` keyword arguments: ``default=None``, so "not given" differs from false."""
    kwargs: dict[str, Any] = {
        "dest": "cudaperf_" + option.field,
        "default": None,
        "help": f"{option.help} [ini: {option.ini}, env: {option.env}]",
    }
    if option.flag:
        kwargs["action"] = "store_true"
    else:
        kwargs["metavar"] = option.metavar
    if option.bare is not None:
        kwargs.update(nargs="?", const=option.bare)
    return kwargs


def resolve_one(
    option: Option, config: ConfigLike, environ: Mapping[str, str], ini_name: str
) -> tuple[Any, str]:
    """One option's value and where it came from: CLI > env > ini > default. Raises
    :class:`SettingError`."""
    raw: Any = config.getoption("cudaperf_" + option.field)
    source = "from the command line"
    if raw is None and environ.get(option.env) is not None:
        raw, source = environ[option.env], f"from the environment variable {option.env}"
    if raw is None:
        ini_value = config.getini(option.ini)
        if ini_value not in (None, "", []):
            raw, source = ini_value, f"from {ini_name} [{option.ini}]"
    if raw is None:
        return option.default, "default"
    if isinstance(raw, bool):
        return raw, source
    try:
        return option.parse(str(raw)), source
    except ValueError as exc:
        raise SettingError(f"{option.cli}: {exc} ({source})") from None


def resolve(config: ConfigLike, environ: Mapping[str, str], ini_name: str) -> Settings:
    """Resolve every option: CLI > env > ini > default. Raises :class:`SettingError`."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for option in OPTIONS:
        values[option.field], sources[option.field] = resolve_one(option, config, environ, ini_name)
    if values["prune"] and not values["update"]:
        raise SettingError(
            f"--cudaperf-prune: only takes effect with --cudaperf-update ({sources['prune']})"
        )
    return Settings(**values, sources=sources)
