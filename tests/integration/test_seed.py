"""A measured test's random inputs are the same whichever tests ran before it in its process
(``--cudaperf-seed``): a suite run whole, a ``-k`` selection of it and the same suite spread over
two xdist workers draw the same fixtures for the tests that use a cudaperf marker or fixture or
the ``benchmark`` fixture, and leave the others' draws alone; ``--cudaperf-seed=off`` leaves
every test's alone."""

from __future__ import annotations

import json
from typing import Any

import pytest

# In-process runs: pytester drops the modules a run imported when it ends, and torch cannot be
# imported a second time in one process; imported here, it stays for every run.
import torch  # noqa: F401

FAST = [
    "--cudaperf-max-time=0.05",
    "--cudaperf-breakdown=off",
    "-p",
    "no:cacheprovider",
    "-p",
    "no:benchmark",  # this plugin serves the benchmark fixture
]

SUITE = """
import json, os, random
import numpy as np
import pytest
import torch

def draws():
    return [torch.rand(2).tolist(), random.random(), float(np.random.rand())]

def keep(name, value):  # a file each: xdist's workers write side by side
    with open(os.path.join(os.environ["DRAWS"], name + ".json"), "w") as f:
        json.dump(value, f)

@pytest.fixture
def inputs():
    return draws()

def test_a_draws_first():
    draws()

@pytest.mark.perf
def test_perf(inputs):
    keep("perf", inputs)

def test_fixture(inputs, cuda_device):
    keep("fixture", inputs)

def test_benchmark(inputs, benchmark):
    keep("benchmark", inputs)
    benchmark(lambda: None)

def test_plain(inputs):
    keep("plain", inputs)
"""


def _draws(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, *args: str) -> Any:
    """What each test that keeps its inputs drew in one run: name -> draws."""
    folder = pytester.mkdir(f"draws-{len(list(pytester.path.glob('draws-*')))}")
    monkeypatch.setenv("DRAWS", str(folder))
    assert pytester.runpytest(*FAST, *args).ret == pytest.ExitCode.OK
    return {path.stem: json.loads(path.read_text()) for path in folder.glob("*.json")}


def test_a_measured_test_draws_the_same_inputs_whatever_ran_before_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_suite=SUITE)
    whole = _draws(pytester, monkeypatch)
    for name in ("perf", "fixture", "benchmark"):
        assert _draws(pytester, monkeypatch, "-k", f"test_{name}")[name] == whole[name], name
    assert whole["perf"] == whole["fixture"] == whole["benchmark"]  # each starts from the seed
    assert whole["plain"] != whole["perf"]  # no cudaperf marker or fixture: left alone
    spread = _draws(pytester, monkeypatch, "-n", "2")
    assert {name: spread[name] for name in ("perf", "fixture", "benchmark")} == {
        name: whole[name] for name in ("perf", "fixture", "benchmark")
    }


def test_off_leaves_every_tests_generators_alone_and_a_verdict_names_the_other_seed(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_suite=SUITE)
    _draws(pytester, monkeypatch, "--cudaperf-update", "-k", "test_perf")  # recorded with seed 0
    entry = json.loads(next((pytester.path / ".cudaperf").glob("*.json")).read_text())["entries"]
    assert entry["test_suite.py::test_perf"][""]["time:wall"]["env"]["seed"] == "0"
    whole = _draws(pytester, monkeypatch, "--cudaperf-seed=off", "--cudaperf-json=off.json")
    alone = _draws(pytester, monkeypatch, "--cudaperf-seed=off", "-k", "test_perf")
    assert alone["perf"] != whole["perf"]
    assert whole["perf"] != whole["fixture"]
    report = json.loads((pytester.path / "off.json").read_text())
    (perf,) = [t for t in report["tests"] if t["nodeid"].endswith("test_perf")]
    assert "now seed 0 → off" in perf["records"][0]["verdict"]["message"]


def test_a_seed_other_than_a_whole_number_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest(*FAST, "--cudaperf-seed=-1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*--cudaperf-seed: expected a whole number from 0 to 4294967295, or off, got '-1' (from the command line)*"
        ]
    )
