"""Kernel/op breakdowns end to end on the CPU: ``--cudaperf-update`` stores the aten-op
breakdown with the baseline, a regression names the op that explains it, in the failure text and
in the JSON report; a green run profiles nothing, unless ``--cudaperf-breakdown=always``."""

from __future__ import annotations

import json

import pytest

FAST = ["--cudaperf-max-time=0.3", "--cudaperf-tolerance=30%", "-p", "no:cacheprovider"]

# a small matmul; EXTRA plants a large exp (~10x the matmul's time) in the same timed callable
MATMUL = """
import os
import torch

torch.set_num_threads(1)
A = torch.randn(192, 192)
BIG = torch.randn(4 << 20)
EXTRA = bool(os.environ.get("EXTRA"))

def step():
    y = A @ A
    if EXTRA:
        torch.exp(BIG)
    return y

def test_mm(cuda_timer):
    cuda_timer(step, name="mm")
"""


def test_a_planted_extra_op_is_named_in_the_failure(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_matmul=MATMUL)
    recorded = pytester.runpytest(*FAST, "--cudaperf-update")
    recorded.assert_outcomes(passed=1)
    (path,) = (pytester.path / ".cudaperf").glob("*.json")
    entry = json.loads(path.read_text())["entries"]["test_matmul.py::test_mm"]["mm"]["time:wall"]
    stored = entry["breakdown"]
    assert stored["backend"] == "cpu"
    names = [e["name"] for e in stored["entries"]]
    assert any(n in names for n in ("aten::matmul", "aten::mm")), names
    assert "aten::exp" not in names

    # a wide tolerance for the unchanged run: on two shared cores a CPU-bound callable can sit
    # at another level (up to 1.6x seen) for a whole process, beyond a one-process baseline's noise
    green = pytester.runpytest(*FAST, "--cudaperf-tolerance=150%", "--cudaperf-json=green.json")
    green.assert_outcomes(passed=1)
    (record,) = json.loads((pytester.path / "green.json").read_text())["tests"][0]["records"]
    assert record["verdict"]["kind"] == "pass"
    assert record["explanation"] == []  # a pass profiles nothing
    assert "breakdown" not in record

    # with --cudaperf-breakdown=always a run that does not update profiles each series too
    # (`cudaperf record`'s last run): the record carries its breakdown, and a regression is
    # still explained against the stored one

    monkeypatch.setenv("EXTRA", "1")
    slow = pytester.runpytest(*FAST, "--cudaperf-json=slow.json", "--cudaperf-breakdown=always")
    slow.assert_outcomes(failed=1)
    slow.stdout.fnmatch_lines(
        [
            "[[]mm[]] perf regression: median * vs baseline * (+*",
            "*[[]mm[]] ops: * -> * per call (+*",
            "*[[]mm[]] *+*  new: aten::exp (1x per call)",
        ]
    )
    report = json.loads((pytester.path / "slow.json").read_text())
    (record,) = report["tests"][0]["records"]
    assert record["verdict"]["kind"] == "regression"
    assert any("new: aten::exp" in line for line in record["explanation"]), record["explanation"]
    assert "aten::exp" in json.dumps(record["compared"]["current"])
    assert "aten::exp" in [e["name"] for e in record["breakdown"]["entries"]]
