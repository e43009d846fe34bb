"""Markers, fixtures, baselines and verdicts end to end on the CPU backend; the paths that xdist
changes (updates, the records and counts merged into the reports) in every xdist mode."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

# A loose tolerance: CI runs these on two busy cores; the planted slowdown is 3x.
FAST = ["--cudaperf-max-time=0.2", "--cudaperf-tolerance=30%", "-p", "no:cacheprovider"]

SLEEPERS = """
import os, time
import pytest

SLOW = float(os.environ.get("SLOW", "1"))

@pytest.mark.perf
@pytest.mark.parametrize("i", range(4))
def test_sleep(i):
    time.sleep(0.003 * SLOW)

def test_timed(cuda_timer):
    m = cuda_timer(lambda: time.sleep(0.002 * SLOW), name="inner")
    assert m.n >= 10
"""


def _baseline_entries(pytester: pytest.Pytester) -> dict[str, dict[str, dict[str, Any]]]:
    """The one baseline file's schema-2 entries: test id -> measurement name -> series -> entry."""
    files = list((pytester.path / ".cudaperf").glob("*.json"))
    assert len(files) == 1, files
    document = json.loads(files[0].read_text())
    assert document["schema"] == 2
    return document["entries"]  # type: ignore[no-any-return]


def _series_keys(pytester: pytest.Pytester) -> list[tuple[str, str]]:
    """(test id, measurement name) of every stored series, sorted."""
    return sorted(
        (nodeid, name) for nodeid, names in _baseline_entries(pytester).items() for name in names
    )


def test_update_compare_regress_update_cycle(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, mode: list[str]
) -> None:
    """The first update and the planted regression run in the test's xdist mode: the records a
    worker sends the controller, written to a new baseline, and the verdicts, failures and counts
    merged from the workers. The unchanged compare and the update that follows the change run
    without workers under -n2 (the same records and counts reach the controller as in those two
    runs; what they add, a pass and a series started afresh, is the controller's): each -n2 run
    starts two workers that each import torch."""
    settled = [] if "-n2" in mode else mode
    # two parametrized sleepers and the timed one: each run measures three tests, not five
    pytester.makepyfile(test_sleepers=SLEEPERS.replace("range(4)", "range(2)"))
    first = pytester.runpytest(*mode, *FAST, "--cudaperf-update")
    first.assert_outcomes(passed=3)
    first.stdout.fnmatch_lines(
        ["cudaperf: baselines */.cudaperf/cpu-*.json: 3 added, 0 updated, 0 kept"]
    )
    assert _series_keys(pytester) == [
        *[(f"test_sleepers.py::test_sleep[{i}]", "") for i in range(2)],
        ("test_sleepers.py::test_timed", "inner"),
    ]
    timed = _baseline_entries(pytester)["test_sleepers.py::test_timed"]["inner"]["time:wall"]
    assert len(timed["recordings"]) == 1

    same = pytester.runpytest(*settled, *FAST)
    same.assert_outcomes(passed=3)
    same.stdout.fnmatch_lines(
        ["cudaperf: 3 measured, 0 regressions, 0 improved, 0 new, 0 inconclusive"]
    )

    # 10x, not 3x: a one-process baseline recorded on two loaded cores can carry instability
    # noise above 100% (samples bimodal from oversleeping), and the verdict's threshold and CI
    # both widen with it; a 3x slowdown is then honestly INCONCLUSIVE, 10x still a regression
    # judged in this process only: the fresh process's batch has its own tests
    # (test_fresh_process.py), and here it would double the slow run's time
    # one round a measurement: the rounds have their own tests, and a 30 ms call's warm-up
    # batches make each of three rounds cost a third of a second
    monkeypatch.setenv("SLOW", "10")
    slow = pytester.runpytest(*mode, *FAST, "--cudaperf-confirm-process=off", "--cudaperf-rounds=1")
    slow.stdout.fnmatch_lines(
        [
            "*perf regression: median * ms vs baseline * ms (+*%, 95% CI +*%…+*%, tolerance "
            "30.0%*) — CPU *; baseline since * from 1 process*",
        ]
    )
    said = slow.stdout.str()
    counts = re.search(r"cudaperf: 3 measured, (\d+) regressions?, .* (\d+) inconclusive", said)
    assert counts is not None, said
    regressions, inconclusive = int(counts[1]), int(counts[2])
    if inconclusive and "by this run's CPU contention" in said:
        # a 10x read under contention in one round: a CI's low end, widened by the one-process
        # baseline's noise, can lie under the raised threshold; measured again, it stays
        # INCONCLUSIVE and passes (seen twice in CI on a loaded 2-core VM)
        assert regressions >= 1, said
        assert regressions + inconclusive == 3, said
        slow.assert_outcomes(failed=regressions, passed=inconclusive)
        assert said.count("not confirmed, re-measured") == inconclusive, said
    else:
        slow.assert_outcomes(failed=3)
        slow.stdout.fnmatch_lines(
            ["REGRESSED test_sleepers.py::test_sleep[[]0[]] - perf regression:*"]
        )
        slow.stdout.fnmatch_lines(
            [
                "[[]inner[]] perf regression: median *",
                "cudaperf: 3 measured, 3 regressions, 0 improved, 0 new, 0 inconclusive",
            ]
        )
        slow.stdout.fnmatch_lines(["test_sleepers.py::test_timed [[]inner[]]  *REGRESSION*"])

    # the update follows the change: every series starts afresh at the new level
    again = pytester.runpytest(*settled, *FAST, "--cudaperf-update", "--cudaperf-rounds=1")
    again.assert_outcomes(passed=3)
    again.stdout.fnmatch_lines(
        ["cudaperf: baselines *: 0 added, 3 updated (3 started afresh), 0 kept"]
    )
    timed = _baseline_entries(pytester)["test_sleepers.py::test_timed"]["inner"]["time:wall"]
    assert len(timed["recordings"]) == 1
    assert timed["value"] > 10.0  # ms: the new level (10 x 2 ms), the old one dropped


WARNED = """
import os, time
import pytest

SLOW = float(os.environ.get("SLOW", "1"))

@pytest.mark.perf
def test_marked():
    time.sleep(0.003 * SLOW)

def test_timer(cuda_timer):
    cuda_timer(lambda: time.sleep(0.002 * SLOW))

def test_bench(benchmark):
    benchmark(lambda: time.sleep(0.002 * SLOW))

def test_pedantic(benchmark):
    benchmark.pedantic(lambda: time.sleep(0.002 * SLOW), setup=lambda: None, rounds=10)

@pytest.mark.no_leak
def test_leak_checked():
    [1] * 10

def test_guarded(memory_guard):
    with memory_guard():
        [1] * 10
"""


def test_a_suite_that_turns_warnings_into_errors_is_measured_and_judged(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under ``-W error`` (a suite's ``filterwarnings = error``), every CPU entry point records,
    judges and fails a planted 10x slowdown without a warning of the plugin's own turning into an
    error: the regressions are the only failures. A 10x read while the other xdist worker holds
    the CPU may honestly be INCONCLUSIVE instead, saying so (``benchmark.pedantic``'s ten rounds
    read a CI from +38% once in CI, under a threshold the contention raised to 100%)."""
    pytester.makepyfile(test_warned=WARNED)
    strict = [*FAST, "-W", "error", "--cudaperf-benchmark"]
    pytester.runpytest(*strict, "--cudaperf-update").assert_outcomes(passed=6)
    pytester.runpytest(*strict).assert_outcomes(passed=6)
    monkeypatch.setenv("SLOW", "10")  # why 10x, one round, no fresh process: the cycle above
    slowed = pytester.runpytest(
        *strict, "--cudaperf-json=out.json", "--cudaperf-confirm-process=off", "--cudaperf-rounds=1"
    )
    report = json.loads((pytester.path / "out.json").read_text())
    tests = {t["nodeid"].split("::")[1]: t for t in report["tests"]}
    failed = {name for name, t in tests.items() if t["failures"]}
    held = {
        name
        for name, t in tests.items()
        if t["records"]
        and (verdict := t["records"][0]["verdict"])["kind"] == "inconclusive"
        and verdict["ratio"] > 2
        and "by this run's CPU contention" in verdict["message"]
    }
    assert failed, slowed.stdout.str()
    assert failed | held == {"test_marked", "test_timer", "test_bench", "test_pedantic"}, report
    slowed.assert_outcomes(passed=2 + len(held), failed=len(failed))
    assert "Warning" not in slowed.stdout.str()


def test_missing_baseline_is_new_and_strict_fails(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_sleepers=SLEEPERS)
    result = pytester.runpytest(*FAST)
    result.assert_outcomes(passed=5)
    result.stdout.fnmatch_lines(
        ["NEW (no baseline for this device class): 5; record them with pytest --cudaperf-update"]
    )
    strict = pytester.runpytest(*FAST, "--cudaperf-strict")
    strict.assert_outcomes(failed=5)
    strict.stdout.fnmatch_lines(["*no baseline for time:wall on CPU * (--cudaperf-strict)*"])


def test_max_ms_budget(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import time
        import pytest

        @pytest.mark.perf(max_ms=5)
        def test_too_slow():
            time.sleep(0.02)

        @pytest.mark.perf(max_ms=50)
        def test_within_budget():
            time.sleep(0.002)
    """)
    result = pytester.runpytest(*FAST)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        ["perf: test_too_slow median 2*.* ms > max_ms 5 ms (wall time, * samples)"]
    )


def test_cuda_timer_sleep_is_two_ms_on_cpu(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import time

        def test_sleep(cuda_timer, cuda_device):
            assert str(cuda_device) == "cpu"
            m = cuda_timer(lambda: time.sleep(0.002))
            assert 1.9 < m.median_ms < 4.0, m.describe()
            assert m.metric == "wall"
    """)
    pytester.runpytest(*FAST).assert_outcomes(passed=1)


def test_bad_marker_errors_that_test_only(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest

        @pytest.mark.perf(max_ms=-1)
        def test_negative():
            pass

        @pytest.mark.gpu(min_memory="lots")
        def test_size():
            pass

        @pytest.mark.no_leak(iterationz=3)
        def test_typo():
            pass

        def test_fine():
            pass
    """)
    result = pytester.runpytest(*FAST)
    result.assert_outcomes(passed=1, errors=3)
    result.stdout.fnmatch_lines_random(
        [
            "*@pytest.mark.perf: max_ms: expected a positive number, got -1",
            "*@pytest.mark.gpu: min_memory: expected a size such as '512 MiB', '8GB' or bytes, got 'lots'",
            "*@pytest.mark.no_leak: unknown argument 'iterationz' (did you mean 'iterations'?); "
            "it takes tolerance, *",
        ]
    )
    assert "INTERNALERROR" not in result.stdout.str()


def test_gpu_tests_skip_with_the_reason(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest

        @pytest.mark.gpu
        def test_needs_gpu():
            pass

        def test_device(cuda_device):
            assert cuda_device.type == "cpu"
    """)
    result = pytester.runpytest("-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(
        [
            "SKIPPED [[]1[]] test_gpu_tests_skip_with_the_reason.py:3: needs a GPU: torch * is built without CUDA*"
        ]
    )
    forced = pytester.runpytest("-rs", "--cudaperf-device=cuda")
    forced.assert_outcomes(skipped=2)
    forced.stdout.fnmatch_lines(["SKIPPED*--cudaperf-device=cuda but no GPU: *"])


def test_n4_update_keeps_every_entry(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest

        @pytest.mark.perf(max_time=0.05)
        @pytest.mark.parametrize("i", range(24))
        def test_many(i):
            sum(range(2000))
    """)
    result = pytester.runpytest("-n4", "--cudaperf-update", "--cudaperf-json=out/report.json")
    result.assert_outcomes(passed=24)
    entries = _baseline_entries(pytester)
    assert len(entries) == 24
    report = json.loads((pytester.path / "out" / "report.json").read_text())
    assert len(report["tests"]) == 24
    assert report["summary"]["measured"] == 24
    assert all(t["records"][0]["measurement"]["samples_ms"] for t in report["tests"])


def test_corrupted_baseline_names_the_file(pytester: pytest.Pytester) -> None:
    pytester.mkdir(".cudaperf")
    (pytester.path / ".cudaperf" / "cpu-x.json").write_text('{"schema": 1,\n  oops}')
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest_subprocess()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: */.cudaperf/cpu-x.json: not valid JSON (line 2, column 3: *); fix it, or delete "
            "it and run pytest --cudaperf-update on a machine of its device class"
        ]
    )
    assert "Traceback" not in result.stderr.str()


def test_obsolete_entries_reported_and_pruned_only_from_full_runs(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = """
import os

import pytest

@pytest.mark.perf(max_time=0.05)
def test_keep():
    sum(range(1000))

@pytest.mark.perf(max_time=0.05)
def test_other():
    assert not os.environ.get("FAIL_OTHER")
    sum(range(1000))

@pytest.mark.perf(max_time=0.05)
def test_last():
    sum(range(1000))
"""
    old = """
@pytest.mark.perf(max_time=0.05)
def test_old():
    sum(range(1000))
"""
    test_file = pytester.path / "test_a.py"
    test_file.write_text(body + old)
    pytester.runpytest("--cudaperf-update").assert_outcomes(passed=4)
    test_file.write_text(body)
    partial = pytester.runpytest("-k", "keep", "--cudaperf-update", "--cudaperf-prune")
    partial.stdout.fnmatch_lines(["cudaperf: --cudaperf-prune skipped: this run was partial*"])
    assert "test_a.py::test_old" in _baseline_entries(pytester)
    with monkeypatch.context() as env:  # -x stops at test_other: test_last never starts
        env.setenv("FAIL_OTHER", "1")
        stopped = pytester.runpytest("-x", "--cudaperf-update", "--cudaperf-prune")
    stopped.assert_outcomes(passed=1, failed=1)
    stopped.stdout.fnmatch_lines(["cudaperf: --cudaperf-prune skipped: this run was partial*"])
    assert "test_a.py::test_last" in _baseline_entries(pytester)
    full = pytester.runpytest()
    full.stdout.fnmatch_lines(
        [
            "OBSOLETE in CPU * (1; remove with --cudaperf-update --cudaperf-prune):",
            "  test_a.py::test_old",
        ]
    )
    pruned = pytester.runpytest("--cudaperf-update", "--cudaperf-prune")
    pruned.stdout.fnmatch_lines(["cudaperf: baselines *: 0 added, *, 1 pruned"])
    assert sorted(_baseline_entries(pytester)) == [
        "test_a.py::test_keep",
        "test_a.py::test_last",
        "test_a.py::test_other",
    ]


def test_disable_runs_each_test_once(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest

        @pytest.mark.perf(max_ms=0.000001)
        def test_counted():
            with open(__file__ + ".calls", "a") as f:
                f.write("x")

        HELD = []

        @pytest.mark.no_leak
        def test_leaky():
            import torch
            HELD.append(torch.ones(1000))
    """)
    result = pytester.runpytest("--cudaperf-disable")
    result.assert_outcomes(passed=2)
    calls = list(pytester.path.glob("*.calls"))
    assert len(calls) == 1
    assert calls[0].read_text() == "x"
    measured = pytester.runpytest("--cudaperf-max-time=0.05")
    measured.assert_outcomes(failed=2)
    assert len(calls[0].read_text()) > 10


def test_ci_outputs(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    summary = pytester.path / "summary.md"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    pytester.makepyfile("""
        import time
        import pytest

        @pytest.mark.perf(max_ms=1, max_time=0.05)
        def test_slow():
            time.sleep(0.003)
    """)
    result = pytester.runpytest("--junitxml=junit.xml", "--cudaperf-html=report.html")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["::error file=test_ci_outputs.py,line=4::perf: test_slow median *"]
    )
    assert "| test_ci_outputs.py::test_slow |" in summary.read_text()
    junit = (pytester.path / "junit.xml").read_text()
    assert 'name="cudaperf time:wall"' in junit
    page = (pytester.path / "report.html").read_text()
    assert "<svg" in page
    assert "test_ci_outputs.py::test_slow" in page


def test_regions_are_recorded(pytester: pytest.Pytester, mode: list[str]) -> None:
    pytester.makepyfile("""
        import time

        import pytest

        def test_loop(cuda_timer):
            for _ in range(12):
                with cuda_timer.region("step"):
                    time.sleep(0.001)
            assert cuda_timer.result("step").n == 12
            with pytest.raises(ValueError) as info:
                cuda_timer.result("stpe")
            assert str(info.value) == (
                "cuda_timer.result: no region named str 'stpe' (regions: 'step')"
            )
    """)
    result = pytester.runpytest(*mode, "--cudaperf-json=out.json")
    result.assert_outcomes(passed=1)
    # the median's digits not asserted: a 1 ms sleep reads 2.5 ms on two loaded cores
    result.stdout.fnmatch_lines(
        ["test_regions_are_recorded.py::test_loop [[]step[]]  *.* ms  *NEW*"]
    )
    report = json.loads((pytester.path / "out.json").read_text())
    (record,) = report["tests"][0]["records"]
    assert record["series"] == "time:wall"  # the host clock on the CPU
    assert record["recording"]["n"] == 12
    assert (record["nodeid"], record["name"]) == ("test_regions_are_recorded.py::test_loop", "step")


def test_rounds_from_the_option_and_the_marker(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import time
        import pytest

        def test_default(cuda_timer):
            cuda_timer(lambda: time.sleep(0.001))

        @pytest.mark.perf(rounds=1)
        def test_one_round(cuda_timer):
            cuda_timer(lambda: time.sleep(0.001))
    """)
    result = pytester.runpytest(*FAST, "--cudaperf-json=out.json", "--cudaperf-rounds=2")
    result.assert_outcomes(passed=2)
    report = json.loads((pytester.path / "out.json").read_text())
    rounds = {
        t["nodeid"].split("::")[-1]: t["records"][0]["measurement"]["round_medians_ms"]
        for t in report["tests"]
    }
    assert len(rounds["test_default"]) == 2  # the option
    assert rounds["test_one_round"] == []  # the marker overrides it
    bad = pytester.runpytest("--cudaperf-rounds=0")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(
        ["ERROR: --cudaperf-rounds: expected a whole number from 1 to 100, got '0'*"]
    )


def test_the_report_counts_tests_that_failed_by_themselves(
    pytester: pytest.Pytester, mode: list[str]
) -> None:
    """``failed_bodies``: a test that failed without measuring counts; one failed by the
    plugin (over its budget) does not. ``cudaperf record`` tells the two apart with it."""
    pytester.makepyfile("""
        import pytest

        def test_broken():
            assert False

        @pytest.mark.perf(max_ms=0.000001, max_time=0.05)
        def test_over_budget():
            sum(range(100))

        def test_fine(cuda_timer):
            cuda_timer(lambda: sum(range(100)), max_time=0.05)
    """)
    result = pytester.runpytest(*mode, *FAST, "--cudaperf-json=out.json")
    result.assert_outcomes(passed=1, failed=2)
    report = json.loads((pytester.path / "out.json").read_text())
    assert report["failed_bodies"] == 1
    assert report["schema"] == 4


def test_a_cpu_callable_runs_with_one_intra_op_thread_and_the_series_says_so(
    pytester: pytest.Pytester,
) -> None:
    """``--cudaperf-cpu-threads`` (default 1): the callable runs with that many intra-op
    threads, the record's environment says so, and ``auto`` leaves torch's own setting."""
    pytester.makepyfile("""
        import json, torch
        from pathlib import Path

        def test_mm(cuda_timer):
            x = torch.randn(64, 64)
            seen = set()
            outside = torch.get_num_threads()
            cuda_timer(lambda: (seen.add(torch.get_num_threads()), x @ x))
            Path("threads.json").write_text(json.dumps([sorted(seen), outside, torch.get_num_threads()]))
    """)
    pytester.runpytest(*FAST, "--cudaperf-json=one.json").assert_outcomes(passed=1)
    inside, outside, after = json.loads((pytester.path / "threads.json").read_text())
    assert inside == [1]
    assert after == outside
    (record,) = json.loads((pytester.path / "one.json").read_text())["tests"][0]["records"]
    assert record["env"]["torch_threads"] == "1"
    assert record["measurement"]["threads"] == 1
    pytester.runpytest(*FAST, "--cudaperf-json=auto.json", "--cudaperf-cpu-threads=auto")
    inside, outside, _ = json.loads((pytester.path / "threads.json").read_text())
    assert inside == [outside]
    (record,) = json.loads((pytester.path / "auto.json").read_text())["tests"][0]["records"]
    assert record["env"]["torch_threads"] == str(outside)


def test_a_failing_callable_shows_a_traceback_that_starts_in_user_code(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile("""
        def broken():
            return 1 / 0

        def test_timer(cuda_timer):
            cuda_timer(broken)

        def test_guard(memory_guard):
            memory_guard.check(broken)

        def test_compare(cuda_timer):
            cuda_timer.compare(broken, lambda: None)
    """)
    result = pytester.runpytest(*FAST)
    result.assert_outcomes(failed=3)
    text = result.stdout.str()
    failures = text.split("= FAILURES =")[1].split("short test summary")[0]
    assert "pytest_cudaperf/" not in failures  # no frame of the plugin's files
    assert text.count(">       return 1 / 0") == 3
