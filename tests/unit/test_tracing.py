"""Tracers and profilers: found, named, and a measurement taken under one never judged."""

from __future__ import annotations

import sys
import types

import pytest

from pytest_cudaperf.measure.tracing import active_tracer
from pytest_cudaperf.observation import Observation
from pytest_cudaperf.series import Recording, entry_of
from pytest_cudaperf.verdict import Kind, judge

NO_TOOLS = types.SimpleNamespace(get_tool=lambda tool: None)


@pytest.fixture
def no_tracer(monkeypatch: pytest.MonkeyPatch) -> None:
    """This test process without whatever traces it (a coverage run of the suite)."""
    monkeypatch.setattr(sys, "gettrace", lambda: None)
    monkeypatch.setattr(sys, "getprofile", lambda: None)


def test_nothing_traces_a_plain_process(no_tracer: None) -> None:
    assert active_tracer(monitoring=NO_TOOLS) is None


def test_a_trace_function_is_named_by_its_package() -> None:
    def tracer(frame: object, event: str, arg: object) -> None:
        return None

    tracer.__module__ = "coverage.pytracer"
    before = sys.gettrace()  # a coverage run of this suite: put it back
    sys.settrace(tracer)
    try:
        found = active_tracer(monitoring=NO_TOOLS)
    finally:
        sys.settrace(before)
    assert found == "coverage's trace function"


def test_a_profile_function_and_a_monitoring_tool_are_found(
    no_tracer: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    profiler = types.SimpleNamespace(__module__="cProfile")
    monkeypatch.setattr(sys, "getprofile", lambda: profiler)
    assert active_tracer() == "cProfile's profile function"
    monkeypatch.setattr(sys, "getprofile", lambda: None)
    tools = {1: "coverage.py"}
    monitoring = types.SimpleNamespace(get_tool=tools.get)
    assert active_tracer(monitoring=monitoring) == "the sys.monitoring tool 'coverage.py'"


def test_a_traced_measurement_is_never_a_regression_or_an_improvement() -> None:
    steady = entry_of([Recording("2026-11-24", 1.0, 0.01, 20)] * 3, "ms", {}, "wall")
    for value in (3.0, 0.2, 1.0):
        verdict = judge(
            Observation(value, 0.01, traced="coverage's trace function"), steady, 0.05, "CPU"
        )
        assert verdict.kind is Kind.INCONCLUSIVE
        assert verdict.message.startswith(
            "not judged: measured under coverage's trace function, which slows Python code — median"
        )
    assert judge(Observation(3.0, 0.01), steady, 0.05, "CPU").kind is Kind.REGRESSION
    assert judge(Observation(3.0, 0.01, traced="x"), None, 0.05, "CPU").kind is Kind.NEW
