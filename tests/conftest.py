"""Shared helpers for the plugin's own tests."""

from __future__ import annotations

import pytest

#: how the integration tests run the inner pytest: without xdist, with -n0 and with -n2
MODES = {"plain": [], "n0": ["-n0"], "n2": ["-n2"]}


@pytest.fixture(params=list(MODES), ids=list(MODES))
def mode(request: pytest.FixtureRequest) -> list[str]:
    return MODES[request.param]
