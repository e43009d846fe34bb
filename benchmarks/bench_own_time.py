"""The plugin's own time on 2,000 trivial tests, measured from inside the pytest process.

Wall-clock A/B runs of a whole pytest process (bench_overhead.py) vary by ±10% between identical
runs, far more than the 2% the plugin may add. This script times what the plugin itself does:
importing it, and every call of each of its hook implementations (wrappers timed step by step,
excluding the time they yield to other hooks), summed over the session, against the wall time of
the same session. Default verbosity, so the report header runs as it does for a user.

    python benchmarks/bench_own_time.py [--suite torch|python]
"""

from __future__ import annotations

import argparse
import inspect
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

SUITES = {
    "torch": "import torch\nimport pytest\n\n@pytest.mark.parametrize('i', range({n}))\n"
    "def test_trivial(i):\n    assert torch.__version__\n",
    "python": "import pytest\n\n@pytest.mark.parametrize('i', range({n}))\n"
    "def test_trivial(i):\n    assert i >= 0\n",
}

SPENT: dict[str, float] = defaultdict(float)
CALLS: dict[str, int] = defaultdict(int)


def _timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.isgeneratorfunction(fn):

        def wrapper(*args: Any, **kwargs: Any) -> Generator[Any, Any, Any]:
            CALLS[name] += 2  # two timed steps
            began = time.perf_counter()
            gen = fn(*args, **kwargs)
            try:
                out = next(gen)
            finally:
                SPENT[name] += time.perf_counter() - began
            while True:
                sent = yield out
                began = time.perf_counter()
                try:
                    out = gen.send(sent)
                except StopIteration as stop:
                    return stop.value
                finally:
                    SPENT[name] += time.perf_counter() - began

        return wrapper

    def plain(*args: Any, **kwargs: Any) -> Any:
        CALLS[name] += 1
        began = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            SPENT[name] += time.perf_counter() - began

    return plain


class Stopwatch:
    """A plugin that wraps the cudaperf hook implementations once they are registered."""

    def pytest_configure(self, config: Any) -> None:
        pm = config.pluginmanager
        # registered by its entry point ("cudaperf") or, from a checkout, through PYTEST_PLUGINS
        names = ("cudaperf", "pytest_cudaperf.plugin", "cudaperf-run")
        ours = {pm.get_plugin(name) for name in names} - {None}
        for caller in vars(pm.hook).values():
            for impl in getattr(caller, "get_hookimpls", list)():
                if impl.plugin in ours:
                    impl.function = _timed(caller.name, impl.function)


def stopwatch_cost(calls: int = 200_000) -> float:
    """Seconds the timing itself adds to one timed call (measured on a no-op, subtracted)."""
    timed = _timed("calibration", lambda: None)
    for _ in range(calls):
        timed()
    CALLS.pop("calibration")
    return SPENT.pop("calibration") / calls


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--suite", choices=sorted(SUITES), default="torch")
    parser.add_argument("--tests", type=int, default=2000)
    parser.add_argument(
        "--smoke", action="store_true", help="a smoke run: the pure-Python suite of 20 tests"
    )
    args = parser.parse_args()
    if args.smoke:
        args.suite, args.tests = "python", 20
    import pytest

    began = time.perf_counter()
    import pytest_cudaperf.plugin  # noqa: F401  (the import the entry point triggers)

    SPENT["import"] = time.perf_counter() - began
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "test_trivial.py").write_text(SUITES[args.suite].replace("{n}", str(args.tests)))
        began = time.perf_counter()
        code = pytest.main(
            [tmp, "-p", "no:cacheprovider", "-p", "no:randomly"], plugins=[Stopwatch()]
        )
        wall = time.perf_counter() - began
    per_call = stopwatch_cost()
    own = {name: spent - per_call * CALLS.get(name, 0) for name, spent in SPENT.items()}
    total = sum(own.values())
    if not CALLS:
        raise SystemExit("the plugin was not loaded (install it, or set PYTEST_PLUGINS)")
    if code != 0:
        raise SystemExit(f"the session failed: pytest exit {code}")
    print(
        f"exit {code}; session wall {wall:.3f} s; plugin's own time {total * 1e3:.1f} ms "
        f"= {total / wall:.2%} of the session (stopwatch cost {per_call * 1e6:.2f} µs per "
        "timed step, subtracted)",
        file=sys.stderr,
    )
    for name, spent in sorted(own.items(), key=lambda kv: -kv[1]):
        print(f"  {name}: {spent * 1e3:.1f} ms over {CALLS.get(name, 1)} steps", file=sys.stderr)


if __name__ == "__main__":
    main()
