"""Measurements under a tracer (coverage), end to end: labelled, never judged a regression, never
written to a baseline."""

from __future__ import annotations

import json
import sys

import pytest

pytest.importorskip("coverage")

FAST = ["--cudaperf-max-time=0.05", "--cudaperf-tolerance=30%", "-p", "no:cacheprovider"]

SLEEPY = """
import os, time

def busy(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass

def test_busy(cuda_timer):
    cuda_timer(lambda: busy(0.002 * float(os.environ.get("SLOW", "1"))))
"""


def test_a_run_under_coverage_is_neither_judged_nor_recorded(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_busy=SLEEPY)
    pytester.runpytest_subprocess(*FAST, "--cudaperf-update").assert_outcomes(passed=1)
    (path,) = (pytester.path / ".cudaperf").glob("*.json")
    before = path.read_text()
    monkeypatch.setenv("SLOW", "3")  # three times slower: a regression, were it judged
    covered = pytester.run(
        sys.executable, "-m", "coverage", "run", "-m", "pytest", *FAST, "--cudaperf-update",
        "--cudaperf-json=out.json",
    )  # fmt: skip
    assert covered.ret == 0, covered.stdout.str()
    covered.stdout.fnmatch_lines(
        [
            "cudaperf: 1 measured under coverage's trace function, which slows Python code: not "
            "judged, not recorded; measure without it (coverage: a run of its own)"
        ]
    )
    assert path.read_text() == before  # nothing recorded
    (record,) = json.loads((pytester.path / "out.json").read_text())["tests"][0]["records"]
    assert record["verdict"]["kind"] == "inconclusive"
    assert record["measurement"]["traced"] == "coverage's trace function"
    # the same slowdown without a tracer is judged: a regression (or, on a loaded machine, an
    # INCONCLUSIVE that says why), never "not judged"
    pytester.runpytest_subprocess(*FAST, "--cudaperf-json=plain.json")
    (judged,) = json.loads((pytester.path / "plain.json").read_text())["tests"][0]["records"]
    assert judged["verdict"]["kind"] in ("regression", "inconclusive")
    assert "not judged" not in judged["verdict"]["message"]
    assert judged["measurement"]["traced"] is None
