"""The pure bisection of ``cudaperf bisect``: the range, the next candidate, skipped commits, what
a step's comparison says of its candidate."""

from __future__ import annotations

import math

import pytest

from pytest_cudaperf.ab.bisection import Bisection, Mark, commit_range, step_mark, worst
from pytest_cudaperf.ab.paired import Call, Paired
from pytest_cudaperf.ab.result import AbResult, Compared, SideInfo
from pytest_cudaperf.cli.bisect import SERIES_FORM
from pytest_cudaperf.keys import SeriesKey

COMMITS = tuple(f"c{i:02d}" for i in range(33))  # c00 good, c32 bad


def run(bisection: Bisection, first_bad: int, broken: frozenset[int] = frozenset()) -> list[str]:
    """Bisect as the steps would mark: bad from ``first_bad`` on, ``broken`` skipped."""
    seen = []
    while (candidate := bisection.candidate()) is not None:
        seen.append(candidate)
        i = COMMITS.index(candidate)
        mark = Mark.SKIP if i in broken else Mark.BAD if i >= first_bad else Mark.GOOD
        bisection.mark(candidate, mark)
    return seen


def test_the_range_is_the_good_commit_then_rev_lists_own() -> None:
    assert commit_range("g", "a\nb\n\nbad\n") == ("g", "a", "b", "bad")


def test_the_first_candidate_is_the_middle() -> None:
    assert Bisection(COMMITS).candidate() == "c16"
    assert Bisection(COMMITS[:4]).candidate() == "c01"  # the earlier of two as near
    assert Bisection(COMMITS[:2]).candidate() is None  # good and bad next to each other


@pytest.mark.parametrize("first_bad", [1, 2, 16, 20, 31, 32])
def test_any_first_bad_commit_of_33_is_found_in_five_candidates(first_bad: int) -> None:
    bisection = Bisection(COMMITS)
    assert bisection.steps_left() == 5
    seen = run(bisection, first_bad)
    assert len(seen) <= 5
    assert bisection.suspects() == [COMMITS[first_bad]]
    assert bisection.first_bad == COMMITS[first_bad]
    assert bisection.last_good == COMMITS[first_bad - 1]


def test_a_skipped_commit_is_stepped_around() -> None:
    commits = COMMITS[:20]
    bisection = Bisection(commits)
    seen = run(bisection, first_bad=14, broken=frozenset({9}))
    assert seen[:2] == ["c09", "c10"]  # the middle was skipped: its neighbour instead
    assert bisection.suspects() == ["c14"]
    assert 9 in bisection.skipped


def test_skipped_commits_next_to_the_first_bad_one_are_named_with_it() -> None:
    bisection = Bisection(COMMITS)
    run(bisection, first_bad=20, broken=frozenset({18, 19}))
    assert bisection.candidate() is None
    assert bisection.suspects() == ["c18", "c19", "c20"]  # never a guess among them


def test_only_commits_inside_the_interval_are_marked() -> None:
    bisection = Bisection(COMMITS)
    bisection.mark("c16", Mark.BAD)
    with pytest.raises(ValueError, match="not inside the interval"):
        bisection.mark("c20", Mark.GOOD)
    with pytest.raises(ValueError, match="undecided step stops"):
        bisection.mark("c08", Mark.UNDECIDED)
    with pytest.raises(ValueError, match="needs a good and a bad"):
        Bisection(("only",))


def _compared(nodeid: str, call: Call, ratio: float = 1.0, series: str = "time:wall") -> Compared:
    paired = Paired((ratio,) * 3, ratio, (ratio * 0.9, ratio * 1.1), call)
    return Compared(SeriesKey(nodeid, ""), series, "ms", (), (), paired)


def _result(*compared: Compared, failed_side: str | None = None, **failed: list[str]) -> AbResult:
    info = SideInfo("base", "b", None, "python")
    return AbResult(info, info, 0.02, compared=list(compared), failed_side=failed_side,
                    failed_tests=dict(failed))  # fmt: skip


def test_a_step_is_bad_on_a_slower_concerned_series_only() -> None:
    slow_elsewhere = _result(_compared("t::a", Call.SAME), _compared("t::b", Call.SLOWER, 3.0))
    assert step_mark(slow_elsewhere, ["t::a"]) is Mark.GOOD
    assert step_mark(slow_elsewhere, []) is Mark.BAD  # no test named: every one decides
    assert step_mark(_result(_compared("t::a", Call.FASTER)), ["t::a"]) is Mark.GOOD
    undecided = _result(_compared("t::a", Call.SAME), _compared("t::a", Call.UNDECIDED, 1.1, "x"))
    assert step_mark(undecided, ["t::a"]) is Mark.UNDECIDED
    assert step_mark(undecided, ["t::a"], series="time:wall") is Mark.GOOD


def test_a_candidate_whose_run_or_test_failed_or_lacks_the_test_is_skipped() -> None:
    assert step_mark(_result(failed_side="head"), ["t::a"]) is Mark.SKIP
    assert step_mark(_result(head=["t::a"]), ["t::a"]) is Mark.SKIP
    assert step_mark(_result(_compared("t::other", Call.SAME)), ["t::a"]) is Mark.SKIP
    # failed on the good side, where it passed before: no answer, not a skip
    assert step_mark(_result(base=["t::a"]), ["t::a"]) is Mark.UNDECIDED


def test_the_worst_series_is_the_largest_slower_one() -> None:
    found = [
        _compared("t::a", Call.UNDECIDED, 5.0),
        _compared("t::b", Call.SLOWER, 1.5),
        _compared("t::c", Call.SLOWER, 2.5),
    ]
    chosen = worst(found)
    assert chosen is not None
    assert chosen.key.nodeid == "t::c"
    assert worst([]) is None
    assert math.isclose(worst(found[:1]).paired.ratio, 5.0)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("series", "named"),
    [
        ("time:device/cold", True),
        ("time:graph/hot", True),
        ("time:host", True),
        ("time:wall", True),
        ("memory:peak", True),
        ("wall", False),
        ("time:", False),
        ("time:device/", False),
        ("time:device/cold/x", False),
        ("energy:device", False),
    ],
)
def test_series_names_the_kind_and_its_mode(series: str, named: bool) -> None:
    """``--series`` takes every series a measurement writes, the cache mode after a slash
    included (``time:device/cold``, the default series of a CUDA test)."""
    assert bool(SERIES_FORM.match(series)) is named
