"""Tracers and profilers in this process (coverage, a debugger, ``sys.monitoring`` tools): Python
code runs slower under them, so a measurement taken under one says nothing about the code's
speed. It is labelled, never written to a baseline, and never judged a regression or an
improvement (:func:`active_tracer` names the one found)."""

from __future__ import annotations

import sys
from typing import Any

#: ``sys.monitoring``'s tool ids (Python 3.12+): debugger, coverage, profiler, three unnamed, ...
MONITORING_TOOLS = range(6)


def _owner(hook: Any) -> str:
    """The package a trace or profile function belongs to: ``coverage``, ``bdb`` (pdb)..."""
    module = getattr(hook, "__module__", None) or type(hook).__module__ or "unknown"
    return str(module).split(".", 1)[0]


def active_tracer(monitoring: Any = None) -> str | None:
    """What traces or profiles this thread now, in words (``coverage's trace function``), or
    None. ``monitoring``: ``sys.monitoring`` (for tests)."""
    trace = sys.gettrace()
    if trace is not None:
        return f"{_owner(trace)}'s trace function"
    profile = sys.getprofile()
    if profile is not None:
        return f"{_owner(profile)}'s profile function"
    monitor = monitoring if monitoring is not None else getattr(sys, "monitoring", None)
    if monitor is not None:
        for tool in MONITORING_TOOLS:
            name = monitor.get_tool(tool)
            if name:
                return f"the sys.monitoring tool {name!r}"
    return None
