"""The GPU tests' inner runs each take a process of their own.

A CUDA context belongs to one process: an inner run that kills it (a device-side assert, an
out-of-memory test) would fail every GPU test run after it in the same process. The CPU tests
run their inner pytest in the test's process (tests/conftest.py says why); on the H100 on
2026-11-28 that made one device-side assert fail 23 GPU tests after it.
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _inner_runs_in_their_own_process(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``pytester.runpytest`` starts a pytest process (``--runpytest=subprocess``): set before
    the ``pytester`` fixture reads the option, which autouse fixtures are."""
    monkeypatch.setattr(request.config.option, "runpytest", "subprocess")
