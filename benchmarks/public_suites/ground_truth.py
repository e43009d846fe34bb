"""A CUDA-event ground truth for a pytest-benchmark suite, served as its ``benchmark`` fixture.

Loaded with ``-p no:cudaperf -p ground_truth`` (this folder on ``PYTHONPATH``), it switches
pytest-benchmark off before it is configured, as ``--cudaperf-benchmark`` does (its options and
hooks stay registered: a suite's ``--benchmark-*`` addopts and its conftest's
``pytest_benchmark_*`` hooks still load). Each ``benchmark(fn, ...)`` or
``benchmark.pedantic(...)`` call is run 5 times to warm up, then timed 30 times, each call
between two CUDA events on the current stream and synchronized after it, the way a careful
hand-written loop does it: the device's span of one call, from its first queued work to its
last, with no launch hidden and no sync round trip on the host clock. The median per test goes
as a JSON line to the file named by ``GROUND_TRUTH_OUT``.
"""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Callable, Generator
from typing import Any

import pytest

WARMUP = 5
CALLS = 30


class GroundTruth:
    """pytest-benchmark's call surface, timed with CUDA events around each call."""

    def __init__(self, nodeid: str) -> None:
        self.nodeid = nodeid
        self.extra_info: dict[str, Any] = {}
        self.group: str | None = None
        self.name = nodeid

    def _time(self, call: Callable[[], Any], setup: Callable[[], Any] | None = None) -> Any:
        import torch

        result = None
        times = []
        for i in range(WARMUP + CALLS):
            if setup is not None:
                setup()
            torch.cuda.synchronize()
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            result = call()
            end.record()
            end.synchronize()
            if i >= WARMUP:
                times.append(start.elapsed_time(end))
        line = {"nodeid": self.nodeid, "median_ms": statistics.median(times), "n": len(times)}
        with open(os.environ["GROUND_TRUTH_OUT"], "a", encoding="utf-8") as out:
            out.write(json.dumps(line) + "\n")
        return result

    def __call__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return self._time(lambda: fn(*args, **kwargs))

    def pedantic(  # noqa: PLR0913 - pytest-benchmark's signature
        self,
        target: Callable[..., Any],
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        setup: Callable[[], Any] | None = None,
        teardown: Callable[..., Any] | None = None,
        rounds: int = 1,
        warmup_rounds: int = 0,
        iterations: int = 1,
    ) -> Any:
        held: dict[str, Any] = {"args": args, "kwargs": kwargs or {}}

        def prepare() -> None:
            if setup is not None:
                made = setup()
                if made is not None:
                    held["args"], held["kwargs"] = made

        return self._time(lambda: target(*held["args"], **held["kwargs"]), prepare)


class Served:
    """The ``benchmark`` fixture, registered after pytest-benchmark's plugin (which loads after
    this one and is parsed for fixtures even once blocked), so that it is the one tests get."""

    @pytest.fixture
    def benchmark(self, request: pytest.FixtureRequest) -> GroundTruth:
        return GroundTruth(request.node.nodeid)


@pytest.hookimpl(wrapper=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> Generator[None, None, None]:
    """After every plugin and the initial conftests loaded, before pytest-benchmark is
    configured (as pytest-cudaperf's own opt-in does)."""
    result = yield
    manager = early_config.pluginmanager
    for plugin in list(manager.get_plugins()):
        if getattr(plugin, "__name__", None) == "pytest_benchmark.plugin":
            manager.set_blocked(manager.get_name(plugin) or "benchmark")
    manager.set_blocked("pytest-benchmark")  # the session object its configure would register
    manager.register(Served(), "ground-truth-benchmark")
    return result


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "benchmark(**kwargs): pytest-benchmark's marker (ignored)")
