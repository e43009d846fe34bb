"""Which plugin serves the ``benchmark`` fixture, decided once per process before
``pytest_configure``.

Where pytest-benchmark is not loaded (not installed, or ``-p no:benchmark``) this plugin serves
the fixture, the marker and the ``--benchmark-*`` options. Where it is loaded, it serves, and this
plugin registers none of its options (they would clash), unless the run opts in with
``--cudaperf-benchmark`` (ini ``cudaperf_benchmark``, ``PYTEST_CUDAPERF_BENCHMARK``): then
pytest-benchmark's plugin is unregistered before it is configured (so it creates no session, no
``.benchmarks`` folder, prints no table and writes no file), its options stay parsed by it and are
read from there, and this plugin's fixture, registered later, is the one tests get (why:
docs/decisions.md, "Why does pytest-benchmark keep the benchmark fixture unless a run opts
in?").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from pytest_cudaperf.settings import OPTIONS, ConfigLike, resolve_one

#: pytest-benchmark's plugin module (registered as ``benchmark`` by its entry point)
PLUGIN_MODULE = "pytest_benchmark.plugin"
#: the name pytest-benchmark registers its session object under in ``pytest_configure``
SESSION_NAME = "pytest-benchmark"


class PluginManagerLike(Protocol):
    """The part of pytest's plugin manager this module uses (a protocol: tests need no pytest)."""

    def get_plugins(self) -> set[object]: ...

    def get_name(self, plugin: object) -> str | None: ...

    def set_blocked(self, name: str) -> None: ...


def loaded_name(manager: PluginManagerLike) -> str | None:
    """The name pytest-benchmark's plugin is registered under, or None where it is not."""
    for plugin in manager.get_plugins():
        if getattr(plugin, "__name__", None) == PLUGIN_MODULE:
            return manager.get_name(plugin)
    return None


@dataclass(frozen=True)
class Serving:
    """Who serves the ``benchmark`` fixture in this run."""

    ours: bool
    #: pytest-benchmark was loaded and this run switched it off
    switched_off: bool = False
    #: where the opt-in came from (``from the command line``), when it was switched off
    source: str = ""

    def header(self) -> str:
        """The report header's line saying who serves."""
        if not self.ours:
            return (
                "benchmark fixture: pytest-benchmark (--cudaperf-benchmark would measure it "
                "with pytest-cudaperf)"
            )
        if self.switched_off:
            return (
                "benchmark fixture: pytest-cudaperf (pytest-benchmark switched off by "
                f"--cudaperf-benchmark, {self.source})"
            )
        return "benchmark fixture: pytest-cudaperf (pytest-benchmark not loaded)"


def choose(manager: PluginManagerLike, opted_in: bool, source: str = "") -> Serving:
    """Decide who serves; where pytest-benchmark is loaded and the run opted in, switch it off
    (unregistered and blocked, with the name of the session object it would register)."""
    name = loaded_name(manager)
    if name is None:
        return Serving(ours=True)
    if not opted_in:
        return Serving(ours=False)
    manager.set_blocked(name)
    manager.set_blocked(SESSION_NAME)
    return Serving(ours=True, switched_off=True, source=source)


def decide(
    manager: PluginManagerLike, config: ConfigLike, environ: Mapping[str, str], ini_name: str
) -> Serving:
    """:func:`choose`, with the opt-in read as every ``--cudaperf-*`` option is (command line >
    environment > ini). Raises :class:`pytest_cudaperf.settings.SettingError`."""
    option = next(o for o in OPTIONS if o.field == "benchmark")
    opted_in, source = resolve_one(option, config, environ, ini_name)
    return choose(manager, bool(opted_in), source)
