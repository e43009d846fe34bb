"""A test's call report: the outcome the plugin concluded rides on it (for the controller and
JUnit), and a passed body with failures becomes a one-line failure. A sticky CUDA error poisons the
process; after a CUDA OOM the report gets a memory summary and the allocator is cleaned. A call
report held back for a suspect's confirmation gets the confirmed outcome later
(:func:`apply_outcome` again, :func:`drop_properties` first)."""

from __future__ import annotations

import pytest

from pytest_cudaperf.report.junit import failure_text, junit_properties
from pytest_cudaperf.report.model import TestOutcome
from pytest_cudaperf.run.context import RunContext, TestContext


def finish_call_report(
    run: RunContext,
    test: TestContext | None,
    item: pytest.Item,
    rep: pytest.TestReport,
    call: pytest.CallInfo[None],
) -> None:
    """Apply a test's outcome to its call report: the payload for the controller, JUnit
    properties, and a passed body with failures turned into a one-line failure. A sticky CUDA
    error poisons the process; after a CUDA OOM, summarise and clean up."""
    body_passed = rep.passed
    if call.excinfo is not None:
        run.note_error(item.nodeid, call.excinfo.value)
        _after_oom(rep, call)
    if test is None or test.state.empty:
        return
    outcome = test.state.outcome(body_passed, location_of(rep))
    apply_outcome(rep, outcome, body_passed, item.user_properties)


def location_of(rep: pytest.TestReport) -> tuple[str, int]:
    """The test's file and (1-based) line, as its outcome names them."""
    return (rep.location[0], (rep.location[1] or 0) + 1)


def body_passed_of(rep: pytest.TestReport) -> bool:
    """Whether the test's body passed, from a call report :func:`finish_call_report` finished: a
    failure of the plugin's own says so."""
    return rep.passed or getattr(rep, "cudaperf_failure", None) is not None


def apply_outcome(
    rep: pytest.TestReport,
    outcome: TestOutcome,
    body_passed: bool,
    item_properties: list[tuple[str, object]],
) -> None:
    """The outcome on the call report: its JSON, its JUnit properties (on the report and in
    ``item_properties``: junitxml writes the teardown report's, which copies the item's), and a
    passed body with failures turned into a one-line failure (one without them passed)."""
    rep.cudaperf = outcome.to_json()  # type: ignore[attr-defined]
    for prop in junit_properties(outcome):
        rep.user_properties.append(prop)
        item_properties.append(prop)
    if not body_passed:
        return
    if outcome.failures:
        rep.outcome = "failed"
        rep.longrepr = failure_text(outcome)
        rep.cudaperf_failure = outcome.failures[0].kind.value  # type: ignore[attr-defined]
    elif getattr(rep, "cudaperf_failure", None) is not None:
        rep.outcome = "passed"
        rep.longrepr = None
        del rep.cudaperf_failure  # type: ignore[attr-defined]


def drop_properties(
    props: list[tuple[str, object]], outcome: TestOutcome
) -> list[tuple[str, object]]:
    """``props`` without those ``outcome`` added (each once)."""
    left = list(props)
    for prop in junit_properties(outcome):
        if prop in left:
            left.remove(prop)
    return left


def _after_oom(rep: pytest.TestReport, call: pytest.CallInfo[None]) -> None:
    from pytest_cudaperf import memory

    assert call.excinfo is not None
    if memory.is_oom(call.excinfo.value):
        rep.sections.append(("cudaperf memory at OOM", memory.oom_summary()))
        memory.release_frames(call.excinfo.tb)
        memory.recover_after_oom()
