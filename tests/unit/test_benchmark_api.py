"""The ``benchmark`` fixture's argument checks and pedantic's rounds, with the test's context
stubbed (the measured path end to end: tests/integration/test_benchmark_fixture.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_cudaperf.benchcompat.marker import BenchmarkMark
from pytest_cudaperf.benchcompat.options import BenchmarkOptions
from pytest_cudaperf.fixtures import benchmark as served
from pytest_cudaperf.fixtures.arguments import ArgumentError
from pytest_cudaperf.keys import SeriesKey
from pytest_cudaperf.settings import Settings


class Lock:
    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        yield


def _fixture(
    measuring: bool = False, replaying: bool = False, mark: BenchmarkMark | None = None
) -> served.BenchmarkFixture:
    state = SimpleNamespace(
        replaying=replaying, records=[], key=lambda name: SeriesKey("t.py::test_x", "")
    )
    device = SimpleNamespace(is_cuda=False, name="cpu", device_class="CPU test", lock=Lock())
    test = SimpleNamespace(
        settings=Settings(disable=not measuring),
        state=state,
        measuring=measuring and not replaying,
        device=device,
        perf=None,
    )
    node = served.Benchmarked("test_x", "t.py::test_x")
    return served.BenchmarkFixture(None, test, node, BenchmarkOptions(), mark)  # type: ignore[arg-type]


def test_a_disabled_run_calls_once_and_returns_the_result() -> None:
    calls: list[tuple[Any, ...]] = []

    def fn(*args: Any, **kwargs: Any) -> str:
        calls.append((args, kwargs))
        return "result"

    benchmark = _fixture()
    assert benchmark(fn, 1, k=2) == "result"
    assert calls == [((1,), {"k": 2})]
    assert benchmark.stats is None
    assert benchmark.entry() is None
    assert benchmark.disabled
    assert not benchmark.enabled
    assert not benchmark.unused


def test_the_fixture_is_used_once_per_test() -> None:
    benchmark = _fixture()
    benchmark(len, "abc")
    with pytest.raises(served.FixtureAlreadyUsed) as info:
        benchmark.pedantic(len, args=("abc",))
    assert str(info.value) == (
        "Fixture can only be used once. Previously it was used in benchmark(...) mode."
    )
    assert benchmark.has_error


def test_the_body_rerun_by_no_leak_may_call_it_again() -> None:
    benchmark = _fixture(replaying=True)
    assert benchmark(len, "ab") == 2
    assert benchmark(len, "abc") == 3


def test_a_callable_is_required() -> None:
    with pytest.raises(TypeError) as info:
        _fixture()(3)
    assert str(info.value) == (
        "benchmark: expected a callable, got int 3 — pass the function and its arguments: "
        "benchmark(fn, x)"
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"target": 3}, "benchmark.pedantic: target: expected a callable, got int 3 — "),
        ({"target": len, "setup": (1,)}, "benchmark.pedantic: setup: expected a callable, got"),
        ({"target": len, "teardown": "x"}, "benchmark.pedantic: teardown: expected a callable"),
    ],
)
def test_pedantic_needs_callables(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(TypeError) as info:
        _fixture().pedantic(**kwargs)  # type: ignore[arg-type]
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"rounds": 0}, ValueError, "Must have positive int for `rounds`."),
        ({"iterations": 1.5}, ValueError, "Must have positive int for `iterations`."),
        ({"warmup_rounds": -1}, ValueError, "Must have positive int for `warmup_rounds`."),
        (
            {"iterations": 2, "setup": lambda: None},
            ValueError,
            "Can't use more than 1 `iterations` with a `setup` function.",
        ),
        (
            {"args": (1,), "setup": lambda: ((2,), {})},
            TypeError,
            "Can't use `args` or `kwargs` if `setup` returns the arguments.",
        ),
        (
            {"args": 5},
            TypeError,
            "benchmark.pedantic: args must be a tuple, got int 5 — args=(x,) for one argument",
        ),
        ({"kwargs": [1]}, TypeError, "benchmark.pedantic: kwargs must be a dict, got list [1]"),
        (
            {"setup": lambda: 5},
            TypeError,
            "benchmark.pedantic: setup must return None or (args, kwargs), got int 5",
        ),
    ],
)
def test_pedantic_checks_its_arguments_as_pytest_benchmark(
    kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    """pytest-benchmark's messages where it has them; one line, no traceback (ArgumentError,
    which is both a TypeError and a ValueError)."""
    benchmark = _fixture()
    with pytest.raises(error) as info:
        benchmark.pedantic(lambda *a: a, **kwargs)
    assert str(info.value) == message
    assert isinstance(info.value, ArgumentError)
    assert not info.value.pytrace
    assert benchmark.has_error


def test_a_disabled_pedantic_runs_setup_and_target_once() -> None:
    seen: list[str] = []

    def setup() -> tuple[tuple[int, ...], dict[str, Any]]:
        seen.append("setup")
        return (3,), {}

    result = _fixture().pedantic(
        lambda n: seen.append(f"target {n}") or n, setup=setup, teardown=lambda n: seen.append("x")
    )
    assert result == 3
    assert seen == ["setup", "target 3"]  # pytest-benchmark runs no teardown when disabled


def test_pedantic_with_a_setup_times_each_round_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    judged: list[tuple[SeriesKey, Any, str]] = []
    monkeypatch.setattr(
        served.exact,
        "exact_judged",
        lambda test, key, m, klass, again: judged.append((key, m, klass)) or m,
    )
    seen: list[str] = []
    made = iter(range(100))

    def setup() -> tuple[tuple[int], dict[str, Any]]:
        n = next(made)
        seen.append(f"setup {n}")
        return (n,), {}

    benchmark = _fixture(measuring=True, mark=BenchmarkMark(group="sorting"))
    result = benchmark.pedantic(
        lambda n: seen.append(f"call {n}") or n * 10,
        setup=setup,
        teardown=lambda n: seen.append(f"teardown {n}"),
        rounds=3,
        warmup_rounds=1,
    )
    assert result == 30  # the last round's
    assert seen == [f"{step} {n}" for n in range(4) for step in ("setup", "call", "teardown")]
    ((key, measured, klass),) = judged
    assert (key, klass, measured.metric, measured.n) == (
        SeriesKey("t.py::test_x", ""),
        "CPU test",
        "wall",  # the host clock: CPU wall time, with the host's state
        3,
    )
    assert benchmark.stats is not None
    assert benchmark.stats["rounds"] == 3
    assert benchmark.stats.group == "sorting"
    entry = benchmark.entry()
    assert entry is not None
    assert entry["group"] == "sorting"
    assert entry["stats"]["iterations"] == 1
    assert entry["options"]["min_rounds"] == 3
    assert entry["cudaperf"]["series"] == "time:wall"


def test_pedantic_iterations_make_a_sample_per_round(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(served.exact, "exact_judged", lambda test, key, m, *rest: m)
    calls: list[int] = []
    benchmark = _fixture(measuring=True)
    benchmark.pedantic(calls.append, args=(1,), teardown=lambda n: None, rounds=2, iterations=5)
    assert len(calls) == 10
    assert benchmark.stats is not None
    assert (benchmark.stats["rounds"], benchmark.stats.iterations) == (2, 5)


def test_pedantic_takes_more_rounds_with_fresh_arguments_when_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The judged path may take the rounds again (an INCONCLUSIVE verdict): each round gets
    its own setup and teardown, no warmup, and the rounds taken last are the stats'."""

    def judged(test: Any, key: SeriesKey, m: Any, klass: str, again: Any) -> Any:
        assert m.n == 2
        return again(4)

    monkeypatch.setattr(served.exact, "exact_judged", judged)
    made = iter(range(100))
    seen: list[str] = []

    def setup() -> tuple[tuple[int], dict[str, Any]]:
        n = next(made)
        seen.append(f"setup {n}")
        return (n,), {}

    benchmark = _fixture(measuring=True)
    result = benchmark.pedantic(
        lambda n: n * 10, setup=setup, teardown=lambda n: seen.append(f"teardown {n}"), rounds=2
    )
    assert result == 10  # the last of the rounds asked for
    assert seen == [f"{step} {n}" for n in range(6) for step in ("setup", "teardown")]
    assert benchmark.stats is not None
    assert benchmark.stats["rounds"] == 4


def test_the_round_clock_keeps_one_sample_per_round() -> None:
    clock = served._RoundClock(cuda=False)
    for _ in range(4):
        with clock.timed():
            sum(range(100))
    with pytest.raises(RuntimeError), clock.timed():
        raise RuntimeError("the target failed")
    assert len(clock.samples_ms()) == 4
