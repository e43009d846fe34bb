"""benchmarks/bench_suite.py names the tests that failed on an exception rather than on a
verdict: they have no verdict in the report, so its verdict tables alone would miss them."""

from __future__ import annotations

from pathlib import Path

from benchmark_scripts import benchmark_script

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
<testcase classname="test_sync" name="test_op[tolist]">
<failure message="ZeroDivisionError: float division by zero">traceback</failure></testcase>
<testcase classname="test_sync" name="test_op[crop]">
<failure message="perf regression: median 26.8 loops vs baseline 22.7 loops">lines</failure>
</testcase>
<testcase classname="test_sync" name="test_op[flip]">
<error message="failed on setup with &quot;KeyError: 'x'&quot;">setup</error></testcase>
<testcase classname="test_sync" name="test_op[cutmix]">
<failure message="DeprecationWarning: RandomCutMixV2 currently uses the old lambda">tb</failure>
</testcase>
<testcase classname="test_sync" name="test_op[mixup]"/>
</testsuite></testsuites>
"""


def test_the_tests_that_failed_on_an_exception_are_named_apart(tmp_path: Path) -> None:
    suite = benchmark_script("bench_suite.py")
    junit = tmp_path / "run.xml"
    junit.write_text(JUNIT)
    failed, errors = suite.read_junit(junit)
    assert failed == {
        "test_sync::test_op[tolist]": True,
        "test_sync::test_op[crop]": True,
        "test_sync::test_op[flip]": True,
        "test_sync::test_op[cutmix]": True,
        "test_sync::test_op[mixup]": False,
    }
    assert errors == {
        "test_sync::test_op[tolist]": "ZeroDivisionError: float division by zero",
        "test_sync::test_op[flip]": "failed on setup with \"KeyError: 'x'\"",
        # a library's warning that the run's -W error turned into an exception
        "test_sync::test_op[cutmix]": "DeprecationWarning: RandomCutMixV2 currently uses the old lambda",
    }
    runs = [
        {"mode": "serial", "phase": "planted", "plant": "host:0.25", "errors": errors},
        {"mode": "serial", "phase": "planted", "plant": "host:0.25", "errors": {}},
        {"mode": "serial", "phase": "unchanged", "plant": "", "errors": {}},
    ]
    lines = suite.Table([], runs, 0.0, 0.0).errors()
    assert (
        "| serial | host:0.25 | `test_sync::test_op[tolist]` | 1 | ZeroDivisionError: float "
        "division by zero |" in lines
    )
    assert len([line for line in lines if line.startswith("| serial |")]) == 3
    assert suite.Table([], runs[1:], 0.0, 0.0).errors()[-1] == "none"
