"""benchmarks/public_suites/defaults_table.py reads the waits for the host's state from the
lines the waits themselves leave in a test's details (each way a wait can end, as
``run.hoststate`` words it), and a recording's wall from every part it was made in."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from benchmark_scripts import benchmark_script

from pytest_cudaperf import verdict
from pytest_cudaperf.run.hoststate import CpuWaited, Waited


def test_every_way_a_wait_ends_is_read_from_its_line() -> None:
    table = benchmark_script("public_suites/defaults_table.py")
    details = [
        Waited(True, 1.5, 0.11).describe(0.12),
        Waited(False, 29.6, 0.068).describe(0.116),
        Waited(False, 0.5, 0.068, spell_s=42.0).describe(0.116),
        CpuWaited(True, 2.0).describe(),
        CpuWaited(False, 30.0, "2 other processes").describe(),
        "callable synchronizes inside: timed on the host in reference loops, its kernels apart",
        Waited(True, 0.8, 0.11, busy_s=0.3).describe(0.12),  # the device busy a while
        Waited(False, 5.0, 0.068, busy_s=4.5, cut=True).describe(0.116),  # busy to its end
    ]
    assert table.waits(details) == [
        ("back", 1.5),
        ("in vain", 29.6),
        ("looked once", 0.5),
        ("back", 2.0),
        ("in vain", 30.0),
        ("back", 0.8),
        ("in vain", 5.0),
    ]


def test_a_recording_made_in_parts_counts_every_part_that_ended(tmp_path: Path) -> None:
    table = benchmark_script("public_suites/defaults_table.py")
    record = tmp_path / "record"
    for folder, last in [
        (record / "part-1", "exit 0 after 300 s"),
        (record / "part-2", "command (in out): cudaperf record"),  # cut by the call's limit
        (record / "part-10", "exit 1 after 40 s"),
        (record, "exit 0 after 250 s"),
    ]:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "p-record-env.txt").write_text(f"2026-11-29T01:00:00Z\n{last}\n")
    one = tmp_path / "unchanged-1"
    one.mkdir()
    (one / "p-cudaperf-env.txt").write_text("exit 0 after 90 s\n")

    assert table.part_walls(record) == [(0, 300.0), None, (1, 40.0), (0, 250.0)]
    assert table.wall(record) == (1, 590.0)
    assert table.wall(one) == (0, 90.0)
    lines = table.table([tmp_path], [])
    assert "| record | 1 | 590 s (3 parts: 300 s, 40 s, 250 s; 1 cut) |" in "\n".join(lines)
    assert "| unchanged-1 | 0 | 90 s |" in "\n".join(lines)


def _unchanged_run(table: Any, **read: Any) -> Any:
    """A step ``unchanged-1`` that read nothing but ``read`` (its waits, its re-measurements)."""
    empty = {"outcomes": Counter(), "by_test": {}, "verdicts": [], "unsure": Counter()}
    fields = {**empty, "waited": [], "parts": [], "again": [], "speed_ups": [], **read}
    return table.Step(name="unchanged-1", step="unchanged", wall=None, **fields)


def test_the_waits_line_says_how_long_the_longest_wait_of_each_ending_took() -> None:
    table = benchmark_script("public_suites/defaults_table.py")
    waited = [("back", 0.5), ("back", 13.1), ("in vain", 29.6), ("back", 1.0)]
    run = _unchanged_run(table, waited=waited)
    assert table.waits_line([run]) == [
        "- waits for the host's state: unchanged-1: 3 back (14.6 s, the longest 13.1 s), "
        "1 in vain (29.6 s)"
    ]


def test_the_tests_left_undecided_by_a_speed_up_are_counted_with_their_time() -> None:
    """A report's node id is found under the name JUnit gives its test; each run's tests left
    INCONCLUSIVE by a speed-up that rules out a regression are counted with their pytest time
    and pytest-benchmark's."""
    table = benchmark_script("public_suites/defaults_table.py")
    assert table.junit_name("benchmarks/nn/test_x.py::TestA::test_f[a]") == (
        "benchmarks.nn.test_x.TestA::test_f[a]"
    )
    name = table.junit_name("benchmarks/test_q.py::test_tiles[batch_512]")
    ours = _unchanged_run(table, speed_ups=[name], by_test={name: 9.3, "b::other": 1.0})
    theirs = _unchanged_run(table, by_test={name: 1.5, "b::other": 0.9})
    assert table.speed_up_line([ours, _unchanged_run(table)], theirs) == [
        "- tests left INCONCLUSIVE by a speed-up that rules out a regression: unchanged-1: 1 "
        "(9.3 s against 1.5 s)"
    ]
    assert table.speed_up_line([_unchanged_run(table)], theirs) == []


def test_the_times_measured_again_are_read_from_their_lines_and_counted() -> None:
    from pytest_cudaperf.run.judging import measured_again
    from pytest_cudaperf.verdict import Kind, Verdict

    table = benchmark_script("public_suites/defaults_table.py")
    unsure, passed = Verdict(Kind.INCONCLUSIVE, ratio=1.062), Verdict(Kind.PASS, ratio=1.031)
    details = [
        "callable synchronizes inside: timed on the host in reference loops, its kernels apart",
        measured_again([(1, unsure), (2, unsure), (4, passed)]),
        "[inner] " + measured_again([(1, unsure), (1, unsure)]),
    ]
    assert table.measured_again(details) == [(2, "pass"), (1, "inconclusive")]
    run = _unchanged_run(table, again=table.measured_again(details))
    assert table.again_line([run]) == [
        "- INCONCLUSIVE times measured again: unchanged-1: 2 (3 measurements; then "
        "1 inconclusive, 1 pass)"
    ]


def test_the_waits_that_met_the_host_back_are_counted_by_how_long_they_took(
    tmp_path: Path,
) -> None:
    tally = benchmark_script("public_suites/tally_waits.py")
    found = tally.Tally()
    for ended, seconds in [("back", 0.5), ("back", 5.0), ("back", 9.5), ("back", 13.1)]:
        found.add(ended, seconds)
    found.add("in vain", 29.6)
    found.add("looked once", 0.5)
    assert (found.ran_out, found.looks) == ([29.6], 1)
    assert tally.bands(found.back) == "≤ 5 s 2, 5–10 s 1, 10–15 s 1, 15–30 s 0"
    assert tally.bands([31.0]).endswith("> 30 s 1")
    baseline = '{"schema": 3, "device_class": "NVIDIA H200", "entries": {}}'
    assert tally.tally(baseline, "nvidia-h200.json") is None  # a baseline file, not a report
    assert tally.tally("not json", "x.json") is None
    (tmp_path / "a.json").write_text(baseline)
    (tmp_path / "copy").mkdir()
    (tmp_path / "copy" / "a.json").write_text(baseline)
    said = tally.lines([tmp_path])
    assert said[0] == "reports: 0 (0 with a wait; 2 other or repeated JSON files passed over)"


def test_a_budget_for_the_waits_turns_the_waits_past_it_into_looks() -> None:
    """A limit of 15 s and a tenth of the time: a wait of 14.5 s in vain at the start fits;
    20 s in, 14.5 s waited is within 17 s, so the next (back after 6 s, a failing test) waits
    too; 40 s in, 20.5 s is past 19 s: a wait back after 0.5 s is found by the look, one back
    after 3 s is lost, and one in vain saves 14 s."""
    budget = benchmark_script("public_suites/wait_budget.py")
    tests = [
        (20.0, [("in vain", 14.5)], False),
        (20.0, [("back", 6.0)], True),
        (1.0, [("back", 0.5), ("looked once", 0.5)], False),
        (1.0, [("back", 3.0)], True),
        (1.0, [("in vain", 14.5)], False),
    ]
    out = budget.replay(tests, 0.1, 15.0)
    assert (out.waits, out.looked_back, out.catches, out.looked_in_vain) == (5, 1, 1, 1)
    assert out.saved_s == pytest.approx(0.0 + 2.5 + 14.0)
    assert out.wall_s == pytest.approx(43.0)
    assert budget.replay(tests, 1.0, 15.0).saved_s == 0.0  # a budget this large cuts nothing


def test_waits_cut_at_a_few_seconds_leave_their_tests_to_the_fresh_process() -> None:
    """Cut at 5 s: a wait of 14.5 s in vain saves 9.5 s, one back after 6 s (a failing test's)
    1 s and a catch the next process must confirm; waits within 5 s and looks stay."""
    budget = benchmark_script("public_suites/wait_budget.py")
    tests = [
        (20.0, [("in vain", 14.5)], False),
        (20.0, [("back", 6.0)], True),
        (1.0, [("back", 0.5), ("looked once", 0.5)], False),
        (1.0, [("back", 5.0)], True),
    ]
    out = budget.deferred(tests, 5.0)
    assert (out.waits, out.looked_in_vain, out.looked_back, out.catches) == (4, 1, 1, 1)
    assert out.saved_s == pytest.approx(9.5 + 1.0)
    assert out.wall_s == pytest.approx(42.0)
    assert budget.deferred_line(out, 1).endswith("1 runs without a fresh process would start one")


def test_the_fresh_processes_and_what_they_left_unmeasured_are_read_and_counted(
    tmp_path: Path,
) -> None:
    table = benchmark_script("public_suites/defaults_table.py")
    (tmp_path / "suite-cudaperf.log").write_text(
        "[gw0] cudaperf: confirming 34 suspected regressions in a fresh process, beside 4 tests "
        "that passed\n"
        "cudaperf: confirming 1 suspected change in a fresh process\n"
        "cudaperf: confirming 2 suspected regressions and measuring 3 tests the host's state "
        "left undecided in a fresh process, beside 1 test that passed\n"
        "cudaperf: the fresh process has measured 20 of 38 tests\n"
        "cudaperf: the fresh process measured 38 of 38 tests in 95 s (the first after 24 s)\n"
        "cudaperf: measuring 1 test the host's state left undecided in a fresh process\n"
        "cudaperf: the fresh process measured 1 of 1 tests in 21 s\n"
    )
    assert table.fresh_batches(tmp_path) == [
        (34, 4, None),
        (1, 0, None),
        (5, 1, 95.0),
        (1, 0, 21.0),
    ]
    details = [
        "kernels: 4.1 µs -> 4.2 µs per call",
        "not re-measured in a fresh process: 20 tests were already re-measured in fresh "
        "processes in this one",
        "[inner] not re-measured in a fresh process: pytest exited 4 without measuring it (no "
        "tests ran in 0.01s)",
    ]
    unmeasured = table.not_remeasured(details)
    assert unmeasured == [
        "N tests were already re-measured in fresh processes in this one",
        "pytest exited N without measuring it",
    ]
    run = _unchanged_run(table, batches=[(34, 4, 95.0)], unmeasured=unmeasured[:1] * 2)
    assert table.fresh_line([run, _unchanged_run(table)]) == [
        "- fresh processes at the loop's end: unchanged-1: 34 suspects beside 4 controls (95 s), 2 "
        "measurements not taken there: N tests were already re-measured in fresh processes in "
        "this one"
    ]


def _host_report(path: Path, *tests: tuple[str, str, float, float, str]) -> None:
    """A JSON report of host-bound verdicts: (test, kind, ratio, CI's low end, message)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    verdict = {"threshold": 0.2, "tolerance": 0.1}
    path.write_text(
        json.dumps(
            {
                "tests": [
                    {
                        "nodeid": nodeid,
                        "details": [],
                        "records": [
                            {
                                "series": "time:host",
                                "verdict": {
                                    **verdict,
                                    "kind": kind,
                                    "ratio": ratio,
                                    "ci": [low, ratio + 0.1],
                                    "message": message,
                                },
                            }
                        ],
                    }
                    for nodeid, kind, ratio, low, message in tests
                ]
            }
        )
    )


def test_an_undecided_slowdown_beyond_its_threshold_is_counted_where_another_run_reads_it_so(
    tmp_path: Path,
) -> None:
    """Against a threshold of 20% and a tolerance of 10%: `a` reads +30% (CI from +15%) in one
    run and +25% in the other, a candidate seconded; `c` a candidate whose other run read +5%;
    `b` beyond too but held for the host's state; `d` a regression."""
    reading = benchmark_script("public_suites/second_reading.py")
    held = f"inconclusive: … a host-bound slowdown is {reading.HELD[0]} (…)"
    host = tmp_path / "hs"
    runs = [
        [
            ("a", "inconclusive", 1.30, 1.15),
            ("c", "inconclusive", 1.30, 1.15),
            ("d", "pass", 1.0, 0.95),
        ],
        [
            ("a", "inconclusive", 1.25, 1.05),
            ("c", "pass", 1.05, 0.98),
            ("d", "regression", 1.5, 1.4),
        ],
    ]
    for i, run in enumerate(runs):
        _host_report(
            host / f"serial-unchanged-0-{i}.json",
            *[(f"t::{name}", kind, ratio, low, "") for name, kind, ratio, low in run],
            ("t::b", "inconclusive", 1.40, 1.20, held),
        )
    _host_report(host / "serial-planted-host:0.25-0.json", ("t::a", "regression", 1.3, 1.25, ""))
    judged = tmp_path / "kw"
    _host_report(judged / "unchanged-1" / "report.json", ("t::a", "pass", 1.0, 0.9, ""))
    _host_report(judged / "planted" / "report.json", ("t::a", "inconclusive", 1.3, 1.15, ""))
    assert reading.rows([host, judged])[2:] == [
        "| hs, planted host:0.25 | 1 | 1 | 1 | 0 | 0 (one run: no other) |",
        "| hs, unchanged | 2 | 8 | 1 | 2 | 1 |",
        "| kw, unchanged | 1 | 1 | 0 | 0 | 0 (one run: no other) |",
        "| kw, planted | 1 | 1 | 0 | 1 | 0 (one run: no other) |",
    ]


def test_the_words_of_a_verdict_held_for_the_hosts_state_are_the_plugins() -> None:
    reading = benchmark_script("public_suites/second_reading.py")
    source = Path(verdict.__file__).read_text("utf-8").replace("{speed}", "fast")
    assert reading.HELD[0] in source
    assert reading.HELD[1] in Waited(False, 29.6, 0.068).describe(0.116)
    assert reading.HELD[2] in source
