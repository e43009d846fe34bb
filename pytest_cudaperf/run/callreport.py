"""A test's call report: the outcome the plugin concluded rides on it (for the controller and
JUnit), and a passed body with failures becomes a one-line failure. A sticky CUDA error poisons the
process; after a CUDA OOM the report gets a memory summary and the allocator is cleaned."""

from __future__ import annotations

import pytest

from pytest_cudaperf.report.junit import failure_text, junit_properties
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
    outcome = test.state.outcome(body_passed, (rep.location[0], (rep.location[1] or 0) + 1))
    rep.cudaperf = outcome.to_json()  # type: ignore[attr-defined]
    for prop in junit_properties(outcome):
        rep.user_properties.append(prop)
        # junitxml writes the properties of the teardown report, which copies the item's
        item.user_properties.append(prop)
    if body_passed and outcome.failures:
        rep.outcome = "failed"
        rep.longrepr = failure_text(outcome)
        rep.cudaperf_failure = outcome.failures[0].kind.value  # type: ignore[attr-defined]


def _after_oom(rep: pytest.TestReport, call: pytest.CallInfo[None]) -> None:
    from pytest_cudaperf import memory

    assert call.excinfo is not None
    if memory.is_oom(call.excinfo.value):
        rep.sections.append(("cudaperf memory at OOM", memory.oom_summary()))
        memory.release_frames(call.excinfo.tb)
        memory.recover_after_oom()
