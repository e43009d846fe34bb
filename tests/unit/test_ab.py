"""cudaperf ab's paired statistics, its checks of the arguments, and the confirmation of a SLOWER
with scripted processes (real processes: tests/integration/test_ab_cli.py)."""

from __future__ import annotations

import itertools
import json
import math
import random
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from pytest_cudaperf import cli
from pytest_cudaperf.ab import prior
from pytest_cudaperf.ab.paired import (
    CONFIRM_PAIRS,
    Call,
    abba,
    compare_peaks,
    compare_times,
    decide,
    interval,
    leans,
    pair_ratios,
    reachable,
    repeats,
    t95,
)
from pytest_cudaperf.ab.result import AbResult, SideInfo, lines
from pytest_cudaperf.ab.session import AbBudget, AbSession, SideRuns, progress
from pytest_cudaperf.ab.sides import Side
from pytest_cudaperf.cli.ab import Request, check, cmd_ab
from pytest_cudaperf.cli.bisect import Bisector, BisectRequest
from pytest_cudaperf.cli.sources import CliError
from pytest_cudaperf.keys import SeriesKey
from pytest_cudaperf.report.document import Report, write_report
from pytest_cudaperf.report.model import JudgedRecord, TestOutcome
from pytest_cudaperf.series import Record, Recording
from pytest_cudaperf.units import format_duration
from pytest_cudaperf.verdict import Kind, Verdict


def test_the_order_is_balanced() -> None:
    assert abba(4) == ["base", "head", "head", "base", "base", "head", "head", "base"]


def test_the_interval_is_students_t_on_the_logs() -> None:
    ratio, (_, high) = interval([1.0, 1.02, 0.98])
    assert ratio == pytest.approx(1.0, abs=1e-3)
    logs = [math.log(r) for r in (1.0, 1.02, 0.98)]
    sd = (sum((x - sum(logs) / 3) ** 2 for x in logs) / 2) ** 0.5
    assert math.log(high) == pytest.approx(sum(logs) / 3 + 4.303 * sd / 3**0.5)
    assert interval([1.1])[1] == (0.0, math.inf)  # one pair: no interval
    assert t95(1) == 12.706
    assert t95(2.7) == 4.303  # a fraction of a degree of freedom rounds down
    assert t95(100) == pytest.approx(1.984, abs=0.001)
    assert t95(math.inf) == 1.96


@pytest.mark.parametrize(
    ("ci", "pairs", "call"),
    [
        ((1.03, 1.05), 3, Call.SLOWER),
        ((0.95, 0.97), 4, Call.FASTER),
        ((0.99, 1.01), 3, Call.SAME),
        ((1.01, 1.05), 6, Call.UNDECIDED),  # straddles the 2% edge
        ((1.10, 1.20), 2, Call.UNDECIDED),  # too few pairs
    ],
)
def test_a_call_against_the_smallest_effect(
    ci: tuple[float, float], pairs: int, call: Call
) -> None:
    assert decide(ci, pairs, 0.02) is call


def test_pairs_in_cycle_space_when_the_clocks_differ() -> None:
    same_clock = pair_ratios([1.0, 1.0], [1.1, 1.1], [1980, 1980], [1980, 1985])
    assert same_clock == ((1.1, 1.1), False)  # within 1%: time
    ratios, cycles = pair_ratios([1.0, 1.0], [1.1, 1.1], [1980, 1980], [1755, 1755])
    assert cycles
    assert ratios[0] == pytest.approx(1.1 * 1755 / 1980)
    assert pair_ratios([1.0, None, 1.0], [1.1, 1.2, None]) == ((1.1,), False)


def test_a_pair_the_test_did_not_run_in_neither_counts_nor_decides_the_space() -> None:
    """Confirming pairs run only the SLOWER tests: every other series has no value (and no clock)
    there, and keeps its ratios and its space."""
    clocks = ([1900.0, 1900.0, None], [1950.0, 1950.0, None])
    ratios, cycles = pair_ratios([1.0, 1.0, None], [1.1, 1.1, None], *clocks)
    assert cycles
    assert ratios == pytest.approx((1.1 * 1950 / 1900,) * 2)


def test_a_slowdown_every_pair_sees_is_slower_and_noise_is_not() -> None:
    slower = compare_times([1.0, 1.01, 0.99, 1.0], [1.1, 1.11, 1.09, 1.1], 0.02)
    assert slower.call is Call.SLOWER
    assert slower.ratio == pytest.approx(1.1, rel=1e-3)
    noisy = compare_times([1.0, 1.3, 0.8], [1.2, 1.0, 1.05], 0.02)
    assert noisy.call is Call.UNDECIDED


@pytest.mark.parametrize(
    ("call", "fresh", "holds"),
    [
        (Call.SLOWER, [1.05, 1.04, 1.06], True),
        (Call.SLOWER, [1.005, 1.01, 1.0], False),  # the mean shows less than half of 2%
        (Call.SLOWER, [1.30, 1.32, 0.98], False),  # one pair reads -2%: past -1%
        (Call.SLOWER, [1.30, 1.32, 0.995], True),  # -0.5% is within half the effect
        (Call.FASTER, [0.95, 0.96, 0.94], True),
        (Call.FASTER, [0.70, 0.72, 1.02], False),
        (Call.SAME, [1.05, 1.04, 1.06], False),  # only SLOWER and FASTER are repeated
        (Call.SLOWER, [], False),
    ],
)
def test_fresh_pairs_repeat_a_call_only_with_none_the_other_way(
    call: Call, fresh: list[float], holds: bool
) -> None:
    assert repeats(call, fresh, 0.02) is holds


def test_peaks_are_exact() -> None:
    assert compare_peaks([1000, 1000], [1000, 1000]).call is Call.SAME
    assert compare_peaks([1000, 1000], [1100, 1100]).call is Call.SLOWER


def test_a_peak_of_nothing_is_a_reading_and_a_missing_one_is_not_measured() -> None:
    """A call that allocates nothing reads 0 bytes: the same on both sides, a change when one
    side allocates; a side with no reading leaves the series unmeasured, not undecided."""
    assert compare_peaks([0, 0, 0], [0, 0, 0]).call is Call.SAME
    assert compare_peaks([0, 0, 0], [0, 0, 0]).ratio == 1.0
    assert compare_peaks([0, 0], [4096, 4096]).call is Call.SLOWER
    assert compare_peaks([4096], [0]).call is Call.FASTER
    missing = compare_peaks([None, None], [1000, 1000])
    assert (missing.call, missing.pairs) == (Call.UNMEASURED, 0)


def _request(**given: object) -> Request:
    fields: dict[str, object] = {
        "base": "main",
        "head": None,
        "base_python": None,
        "head_python": None,
        "setup": None,
        "pairs": 6,
        "max_time": 60.0,
        "min_effect": 0.02,
        "json": None,
        "pytest_args": [],
    }
    return Request(**{**fields, **given})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"base": None}, "ab: give --base REV (a revision to compare against) or --base-python"),
        ({"pairs": 2}, "ab: --pairs must be at least 3, got 2"),
        ({"max_time": 0.0}, "ab: --max-time must be positive, got 0"),
        (
            {"pytest_args": ["--cudaperf-json=x.json"]},
            "ab: leave --cudaperf-json out of the pytest arguments (ab sets it)",
        ),
        ({"base_python": "/no/such/python"}, "ab: --base-python: no such Python: /no/such/python"),
    ],
)
def test_bad_arguments_are_one_line_before_anything_runs(
    given: dict[str, object], said: str
) -> None:
    with pytest.raises(CliError) as excinfo:
        check(_request(**given))
    assert str(excinfo.value) == said


def test_a_json_target_that_cannot_be_written_is_refused(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("a file")
    with pytest.raises(CliError, match=r"ab: --json: .*notes\.txt/ab\.json cannot be created"):
        check(_request(json=tmp_path / "notes.txt" / "ab.json"))


class ScriptedSides:
    """Stands in for the pytest processes: the n-th process of a side measures each test not
    deselected at ``medians[test][side][n]`` ms, and writes the report ab asked for."""

    def __init__(
        self,
        medians: dict[str, dict[str, Sequence[float]]],
        peaks: dict[str, int] | None = None,
    ) -> None:
        self.medians = medians
        #: a peak-memory series of these tests, in bytes, the same in every process
        self.peaks = peaks or {}
        self.calls: dict[str, int] = {"base": 0, "head": 0}
        self.deselected: list[list[str]] = []

    def __call__(self, side: Side, args: Sequence[str]) -> tuple[int, str]:
        target = next(a.split("=", 1)[1] for a in args if a.startswith("--cudaperf-json="))
        skip = [a.split("=", 1)[1] for a in args if a.startswith("--cudaperf-deselect=")]
        prefixes = tuple(a.split("=", 1)[1] for a in args if a.startswith("--deselect="))
        self.deselected.append(skip)
        n = self.calls[side.name]
        self.calls[side.name] += 1
        tests = []
        for nodeid, by_side in self.medians.items():
            if nodeid in skip or nodeid.startswith(prefixes):  # pytest's --deselect: a prefix
                continue
            ms = by_side[side.name][n]
            record = Record(
                SeriesKey(nodeid, ""), "time:wall", "cpu-x", "ms",
                Recording("2026-11-25", ms, 0.001, 20), {},
            )  # fmt: skip
            records = [JudgedRecord(record, Verdict(Kind.NEW))]
            if nodeid in self.peaks:
                size = self.peaks[nodeid]
                peak = Record(
                    SeriesKey(nodeid, ""), "memory:peak", "cpu-x", "bytes",
                    Recording("2026-11-25", size, 0.0, 1), {},
                )  # fmt: skip
                records.append(JudgedRecord(peak, Verdict(Kind.NEW)))
            tests.append(TestOutcome(nodeid, records=tuple(records)))
        write_report(Path(target), Report(tests=tuple(tests)))
        return 0, ""


def _comparison(tmp_path: Path, runner: ScriptedSides) -> AbSession:
    sides = {name: Side(name, name, tmp_path, tmp_path) for name in ("base", "head")}
    result = AbResult(SideInfo("base", "base", None, "python"),
                      SideInfo("head", "head", None, "python"), 0.02)  # fmt: skip
    return AbSession(result, SideRuns(sides, ["tests"], tmp_path, runner), say=lambda _: None)


def test_a_slower_that_fresh_pairs_do_not_repeat_is_withdrawn(tmp_path: Path) -> None:
    """Three pairs that agree by chance call SLOWER; the confirming pairs, of that test alone,
    show no change: UNDECIDED, and named."""
    steady = [1.0] * 6
    runner = ScriptedSides(
        {
            "t.py::lucky": {"base": steady, "head": [1.06, 1.08, 1.05, 1.0, 0.99, 1.01]},
            "t.py::steady": {"base": steady, "head": steady},
        }
    )
    comparison = _comparison(tmp_path, runner)
    comparison.measure(AbBudget(pairs=3, seconds=600))
    assert [c.key.nodeid for c in comparison.result.calls(Call.SLOWER)] == ["t.py::lucky"]
    comparison.confirm()
    result = comparison.result
    assert result.calls(Call.SLOWER) == []
    assert result.unconfirmed == ["t.py::lucky {time:wall} (SLOWER)"]
    assert runner.calls == {"base": 3 + CONFIRM_PAIRS, "head": 3 + CONFIRM_PAIRS}
    assert runner.deselected[-1] == ["t.py::steady"]  # only the suspect ran again
    lucky = next(c for c in result.compared if c.key.nodeid == "t.py::lucky")
    assert lucky.paired.call is Call.UNDECIDED
    assert lucky.paired.pairs == 6
    assert "not confirmed by 3 fresh pairs (now UNDECIDED): t.py::lucky {time:wall} (SLOWER)" in (
        lines(result)
    )


def test_a_slower_with_a_fresh_pair_the_other_way_is_withdrawn(tmp_path: Path) -> None:
    """Two fresh pairs repeat +30% and carry the fresh pairs' mean, but the third reads -2%: on a
    host where one pair moves that far, the call does not stand (the combined interval alone
    would have kept it)."""
    runner = ScriptedSides(
        {"t.py::jumpy": {"base": [1.0] * 6, "head": [1.30, 1.31, 1.29, 1.30, 1.32, 0.98]}}
    )
    comparison = _comparison(tmp_path, runner)
    comparison.measure(AbBudget(pairs=3, seconds=600))
    assert [c.key.nodeid for c in comparison.result.calls(Call.SLOWER)] == ["t.py::jumpy"]
    comparison.confirm()
    jumpy = comparison.result.compared[0]
    assert jumpy.paired.ci[0] > 1.02  # all six pairs together still say SLOWER
    assert jumpy.paired.call is Call.UNDECIDED
    assert comparison.result.unconfirmed == ["t.py::jumpy {time:wall} (SLOWER)"]


def test_a_real_slowdown_survives_its_confirmation(tmp_path: Path) -> None:
    runner = ScriptedSides(
        {
            "t.py::slowed": {"base": [1.0] * 6, "head": [1.5, 1.52, 1.49, 1.5, 1.51, 1.5]},
            "t.py::steady": {"base": [1.0] * 6, "head": [1.0] * 6},
        }
    )
    comparison = _comparison(tmp_path, runner)
    comparison.measure(AbBudget(pairs=3, seconds=600))
    comparison.confirm()
    assert [c.key.nodeid for c in comparison.result.calls(Call.SLOWER)] == ["t.py::slowed"]
    assert comparison.result.unconfirmed == []
    assert comparison.result.to_json()["unconfirmed"] == []


def test_a_faster_is_confirmed_too(tmp_path: Path) -> None:
    """A false FASTER fails nothing, but reads as an improvement: it is confirmed the same way;
    a real one stands."""
    runner = ScriptedSides(
        {
            "t.py::lucky": {"base": [1.0] * 6, "head": [0.95, 0.96, 0.955, 1.0, 1.01, 0.99]},
            "t.py::sped_up": {"base": [1.0] * 6, "head": [0.5, 0.51, 0.5, 0.5, 0.49, 0.5]},
        }
    )
    comparison = _comparison(tmp_path, runner)
    comparison.measure(AbBudget(pairs=3, seconds=600))
    assert len(comparison.result.calls(Call.FASTER)) == 2
    comparison.confirm()
    assert [c.key.nodeid for c in comparison.result.calls(Call.FASTER)] == ["t.py::sped_up"]
    assert comparison.result.unconfirmed == ["t.py::lucky {time:wall} (FASTER)"]


def test_nothing_slower_runs_no_confirmation(tmp_path: Path) -> None:
    runner = ScriptedSides({"t.py::steady": {"base": [1.0] * 3, "head": [1.0] * 3}})
    comparison = _comparison(tmp_path, runner)
    comparison.measure(AbBudget(pairs=3, seconds=600))
    comparison.confirm()
    assert runner.calls == {"base": 3, "head": 3}
    assert [c.paired.call for c in comparison.result.compared] == [Call.SAME]


@pytest.mark.parametrize(
    ("elapsed", "processes", "said"),
    [
        (2.4, 1, "2 s elapsed, about 26 s more at this pace (--max-time 30 min)"),
        (130.0, 2, "2 min 10 s elapsed, about 10 min 50 s more at this pace (--max-time 30 min)"),
        (1500.0, 4, "25 min elapsed; --max-time 30 min ends it within 5 min"),
    ],
)
def test_progress_names_the_budget_in_its_own_unit(
    elapsed: float, processes: int, said: str
) -> None:
    """The default budget is 30 minutes: a line never reads as if it were 30 seconds."""
    assert progress(elapsed, processes, AbBudget(pairs=6)) == said


def test_durations_read_in_minutes_and_hours() -> None:
    assert [format_duration(s) for s in (0.4, 59.6, 60, 1800, 3725, 7200)] == [
        "0 s",
        "1 min",
        "1 min",
        "30 min",
        "1 h 2 min",
        "2 h",
    ]


def test_an_a_a_stops_at_the_minimum_once_every_series_is_same(tmp_path: Path) -> None:
    """Steady times and peaks (one of 0 bytes: a call that allocates nothing) are decided at the
    third pair: no fourth pair, no confirmation."""
    steady = {"base": [1.0, 1.002, 0.999] * 2, "head": [1.001, 1.0, 1.0] * 2}
    runner = ScriptedSides(
        {"t.py::a": steady, "t.py::b": steady}, peaks={"t.py::a": 0, "t.py::b": 1 << 20}
    )
    comparison = _comparison(tmp_path, runner)
    comparison.measure(AbBudget(pairs=6, seconds=600))
    comparison.confirm()
    result = comparison.result
    assert runner.calls == {"base": 3, "head": 3}
    assert [(c.key.nodeid, c.unit, c.paired.call) for c in result.compared] == [
        ("t.py::a", "bytes", Call.SAME),
        ("t.py::a", "ms", Call.SAME),
        ("t.py::b", "bytes", Call.SAME),
        ("t.py::b", "ms", Call.SAME),
    ]
    assert result.stopped == ""
    peak_row = next(line for line in lines(result) if line.startswith("t.py::a {peak}"))
    assert peak_row.split()[2:6] == ["0", "B", "0", "B"]
    assert lines(result)[-1].startswith("cudaperf ab: 4 compared, 0 slower, 0 faster, 4 same, 0 ")


def test_a_decided_test_leaves_the_pairs_and_a_slower_goes_on_to_its_confirmation(
    tmp_path: Path,
) -> None:
    """``slowed`` is SLOWER at the third pair and ``settling`` not yet: with ``until_decided``
    the next pairs run ``settling`` alone until it is SAME (the fifth), then three fresh pairs
    of ``slowed`` alone confirm the call."""
    runner = ScriptedSides(
        {
            "t.py::slowed": {"base": [1.0] * 8, "head": [1.1] * 8},
            "t.py::settling": {"base": [1.0] * 8, "head": [1.02, 0.98] + [1.0] * 6},
        }
    )
    comparison = _comparison(tmp_path, runner)
    comparison.measure(AbBudget(pairs=6, seconds=600, until_decided=True))
    assert runner.calls == {"base": 5, "head": 5}
    assert runner.deselected[:6] == [[]] * 6
    assert runner.deselected[6:10] == [["t.py::slowed"]] * 4
    comparison.confirm()
    assert runner.deselected[10:] == [["t.py::settling"]] * 2 * CONFIRM_PAIRS
    result = comparison.result
    calls = {c.key.nodeid: (c.paired.call, c.paired.pairs) for c in result.compared}
    assert calls == {
        "t.py::slowed": (Call.SLOWER, 3 + CONFIRM_PAIRS),
        "t.py::settling": (Call.SAME, 5),
    }
    assert result.unconfirmed == []


NOISY = {
    "t.py::noisy": {"base": [1.0] * 6, "head": [1.2, 0.85, 1.1, 0.9, 1.15, 0.88]},
    "t.py::steady": {"base": [1.0] * 6, "head": [1.0] * 6},
}


def test_an_undecided_series_keeps_the_pairs_going_to_the_budget_until_decided(
    tmp_path: Path,
) -> None:
    runner = ScriptedSides(NOISY)
    comparison = _comparison(tmp_path, runner)
    comparison.measure(AbBudget(pairs=6, seconds=600, until_decided=True))
    result = comparison.result
    assert runner.calls == {"base": 6, "head": 6}
    assert runner.deselected[6:] == [["t.py::steady"]] * 6
    calls = {c.key.nodeid: (c.paired.call, c.paired.pairs) for c in result.compared}
    assert calls == {"t.py::noisy": (Call.UNDECIDED, 6), "t.py::steady": (Call.SAME, 3)}
    assert result.stopped == "stopped after 6 pairs (--pairs)"


def test_an_undecided_series_that_leans_toward_no_change_ends_the_pairs(tmp_path: Path) -> None:
    """``noisy`` reads +3.8% over three pairs that move ±17%: six pairs could not show a change
    from there, so the comparison ends at three and says why, ``noisy`` UNDECIDED."""
    runner = ScriptedSides(NOISY)
    comparison = _comparison(tmp_path, runner)
    comparison.measure(AbBudget(pairs=6, seconds=600))
    result = comparison.result
    assert runner.calls == {"base": 3, "head": 3}
    calls = {c.key.nodeid: (c.paired.call, c.paired.pairs) for c in result.compared}
    assert calls == {"t.py::noisy": (Call.UNDECIDED, 3), "t.py::steady": (Call.SAME, 3)}
    assert result.stopped == (
        "stopped after 3 pairs: no undecided series leans toward a change that 6 pairs could "
        "show (--until-decided goes on)"
    )
    assert f"cudaperf ab: {result.stopped}" in lines(result)


def test_an_undecided_series_that_leans_toward_a_change_keeps_the_pairs_going(
    tmp_path: Path,
) -> None:
    """``leaning`` reads +5% over three pairs that move ±2%: too wide a call at three pairs, one
    six pairs could make, so the pairs go on (``steady``, SAME, deselected) until it is SLOWER."""
    runner = ScriptedSides(
        {
            "t.py::leaning": {"base": [1.0] * 6, "head": [1.05, 1.03, 1.07, 1.04, 1.06, 1.05]},
            "t.py::steady": {"base": [1.0] * 6, "head": [1.0] * 6},
        }
    )
    comparison = _comparison(tmp_path, runner)
    comparison.measure(AbBudget(pairs=6, seconds=600))
    result = comparison.result
    calls = {c.key.nodeid: (c.paired.call, c.paired.pairs) for c in result.compared}
    assert calls["t.py::steady"] == (Call.SAME, 3)
    assert calls["t.py::leaning"][0] is Call.SLOWER
    assert calls["t.py::leaning"][1] > 3
    assert result.stopped == ""


def test_until_decided_is_a_flag_of_ab_and_always_on_in_bisect_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bisection step needs SAME or SLOWER to move on, so its pairs go on while the series is
    undecided; ``ab`` does so only when asked."""
    requests: list[Request] = []
    monkeypatch.setattr(cli, "cmd_ab", lambda request, runner: requests.append(request) or 0)
    assert cli.main(["ab", "--base", "main"]) == 0
    assert cli.main(["ab", "--base", "main", "--until-decided"]) == 0
    assert [r.until_decided for r in requests] == [False, True]
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    monkeypatch.chdir(tmp_path)
    request = BisectRequest("good", "bad", None, None, None, requests[0])
    assert Bisector(request, ScriptedSides({}), print).ab.until_decided


def test_a_series_reaches_a_change_only_from_a_centre_beyond_its_projected_interval() -> None:
    """Projected to six pairs with the variance so far: +5% over pairs moving ±2% could become
    SLOWER; +1% could not, but could become SAME; +4% over pairs moving ±17% could become
    neither. Below two ratios nothing is known, which keeps the pairs going."""
    assert reachable([1.05, 1.03, 1.07], None, 6, 0.02) == (False, True)
    assert leans([1.05, 1.03, 1.07], None, 6, 0.02)
    assert reachable([1.01, 1.0, 1.02], None, 6, 0.02) == (True, False)
    assert not leans([1.01, 1.0, 1.02], None, 6, 0.02)
    assert reachable([1.2, 0.85, 1.1], None, 6, 0.02) == (False, False)
    assert not leans([1.2, 0.85, 1.1], None, 6, 0.02)
    assert reachable([1.1], None, 6, 0.02) is None
    assert leans([1.1], None, 6, 0.02)


def test_a_shared_pair_noise_narrows_what_a_series_can_reach() -> None:
    """Three pairs at +3% that happen to agree within ±0.5%: alone their projection reaches a
    change; weighed with a shared noise of ±3% a pair (many degrees of freedom) it does not."""
    ratios = [1.03, 1.025, 1.035]
    assert leans(ratios, None, 6, 0.02)
    assert not leans(ratios, prior.Prior(0.03**2, 50.0, 20), 6, 0.02)


def _pair_noise(variances: Sequence[float], pairs: int, seed: int) -> list[tuple[float, int]]:
    """Each series' sample variance of ``pairs`` normal log ratios of true ``variances[i]``."""
    rng = random.Random(seed)
    out = []
    for true in variances:
        logs = [rng.gauss(0.0, math.sqrt(true)) for _ in range(pairs)]
        out.append((statistics.variance(logs), pairs - 1))
    return out


def test_the_series_share_their_pair_noise_where_they_have_the_same() -> None:
    """200 series of one true pair noise (1.3%), three pairs each: the prior finds that noise
    and holds it with many degrees of freedom, so one series' interval is near the normal's."""
    fitted = prior.fit(_pair_noise([0.013**2] * 200, 3, seed=1))
    assert fitted is not None
    assert fitted.sd == pytest.approx(0.013, rel=0.15)
    assert fitted.df > 20
    variance, df = fitted.moderated(0.013**2 / 4, 2)  # a series that agreed by chance
    assert variance > 0.013**2 * 0.8
    assert t95(df) < 2.1


def test_series_of_very_different_noise_keep_their_own() -> None:
    """Series whose true pair noise spans 0.3%…30% share little: the prior's degrees of
    freedom are few, and a quiet series is not widened nor a noisy one narrowed to the pool."""
    rng = random.Random(2)
    truths = [(0.003 * 100 ** rng.random()) ** 2 for _ in range(200)]
    fitted = prior.fit(_pair_noise(truths, 3, seed=3))
    assert fitted is not None
    assert fitted.df < 3
    noisy, _ = fitted.moderated(0.2**2, 2)
    assert noisy > 0.2**2 / 2


def test_too_few_series_fit_no_prior() -> None:
    few = _pair_noise([0.01**2] * (prior.MIN_SERIES - 1), 3, seed=4)
    assert prior.fit(few) is None
    assert prior.fit([*few, (0.0, 2)]) is None  # ratios that agree exactly have no log variance
    assert prior.fit([*few, (0.0001, 2)]) is not None


def test_the_gamma_functions_the_fit_needs() -> None:
    assert prior.digamma(1.0) == pytest.approx(-0.5772156649, abs=1e-9)
    assert prior.digamma(0.5) == pytest.approx(-1.9635100260, abs=1e-9)
    assert prior.trigamma(1.0) == pytest.approx(math.pi**2 / 6, abs=1e-9)
    assert prior.trigamma(0.5) == pytest.approx(math.pi**2 / 2, abs=1e-9)
    assert prior.trigamma_inverse(prior.trigamma(3.7)) == pytest.approx(3.7, rel=1e-9)
    assert prior.trigamma_inverse(0.0) == math.inf


def test_a_shared_noise_narrows_the_interval_of_three_pairs() -> None:
    """Three pairs of 1.3% noise: alone, Student's t with two degrees of freedom reaches past
    the 2% edge (UNDECIDED); with a prior of that noise held with 30 degrees of freedom the
    interval lies inside it (SAME)."""
    ratios = [1.013, 0.987, 1.0]
    _, alone = interval(ratios)
    assert decide(alone, 3, 0.02) is Call.UNDECIDED
    shared = prior.Prior(0.013**2, 30.0, 35)
    _, together = interval(ratios, shared)
    assert decide(together, 3, 0.02) is Call.SAME
    assert together[1] - together[0] < alone[1] - alone[0]


def test_an_a_a_of_many_steady_series_is_decided_at_three_pairs(tmp_path: Path) -> None:
    """Twelve series whose pairs move about 1%: each alone is UNDECIDED at three pairs, together
    their shared noise decides them SAME there; the comparison ends at three pairs and says what
    the shared noise is."""
    orders = list(itertools.permutations((-1.0, 0.0, 1.0)))
    medians = {
        f"t.py::s{i}": {
            "base": [1.0] * 6,
            "head": [math.exp(0.01 * (1 + i % 3 / 10) * z) for z in orders[i % 6]] * 2,
        }
        for i in range(12)
    }
    for by_side in medians.values():
        alone = compare_times(by_side["base"][:3], by_side["head"][:3], 0.02)
        assert alone.call is Call.UNDECIDED
    runner = ScriptedSides(medians)
    comparison = _comparison(tmp_path, runner)
    comparison.measure(AbBudget(pairs=6, seconds=600))
    result = comparison.result
    assert result.prior is not None
    assert result.prior.series == 12
    assert runner.calls == {"base": 3, "head": 3}
    assert {c.paired.call for c in result.compared} == {Call.SAME}
    assert any(
        line.startswith("cudaperf ab: pair noise shared by 12 time series: ±")
        for line in lines(result)
    )
    assert result.to_json()["prior"]["series"] == 12


def test_a_decided_test_leaves_the_pairs_without_a_test_whose_id_it_begins(
    tmp_path: Path,
) -> None:
    """``t.py::add`` is SAME at the third pair, ``t.py::add_hot`` (its id begins with the
    other's) not yet: the next pairs (``until_decided``) still measure ``add_hot``, until it is
    SAME too."""
    runner = ScriptedSides(
        {
            "t.py::add": {"base": [1.0] * 6, "head": [1.0] * 6},
            "t.py::add_hot": {"base": [1.0] * 6, "head": [1.02, 0.98] + [1.0] * 4},
        }
    )
    comparison = _comparison(tmp_path, runner)
    comparison.measure(AbBudget(pairs=6, seconds=600, until_decided=True))
    calls = {c.key.nodeid: (c.paired.call, c.paired.pairs) for c in comparison.result.compared}
    assert calls == {"t.py::add": (Call.SAME, 3), "t.py::add_hot": (Call.SAME, 5)}


class StoppedAt:
    """The scripted processes, stopped (Ctrl-C) as the ``at``-th process starts."""

    def __init__(self, sides: ScriptedSides, at: int) -> None:
        self.sides, self.at, self.started = sides, at, 0

    def __call__(self, side: Side, args: Sequence[str]) -> tuple[int, str]:
        self.started += 1
        if self.started == self.at:
            raise KeyboardInterrupt
        return self.sides(side, args)


LUCKY_AND_STEADY = {
    "t.py::lucky": {"base": [1.0] * 6, "head": [1.06, 1.08, 1.05, 1.0, 0.99, 1.01]},
    "t.py::steady": {"base": [1.0] * 6, "head": [1.0] * 6},
}


def _stopped_ab(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, at: int, **given: object
) -> tuple[list[str], Path]:
    """``cudaperf ab`` of the working tree against itself (no revisions, no package of its own)
    with :data:`LUCKY_AND_STEADY`, stopped at the ``at``-th process: what it said."""
    monkeypatch.chdir(tmp_path)
    said: list[str] = []
    report = tmp_path / "ab.json"
    request = _request(base=None, base_python=sys.executable, pairs=3, json=report, **given)
    with pytest.raises(KeyboardInterrupt):
        cmd_ab(request, StoppedAt(ScriptedSides(LUCKY_AND_STEADY), at), said.append)
    return said, report


def test_a_comparison_stopped_in_its_confirmation_says_what_its_pairs_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stopped as the first confirming process starts: the three pairs' calls are printed and
    written, the SLOWER they made withdrawn (its confirmation never ran), and Ctrl-C goes on up
    (exit 130)."""
    said, report = _stopped_ab(tmp_path, monkeypatch, at=7)
    assert (
        "cudaperf ab: stopped after 3 pairs: the calls of the pairs that had ended; not "
        "confirmed, so UNDECIDED: t.py::lucky {time:wall} (SLOWER)"
    ) in said
    assert said[-1].startswith("cudaperf ab: 2 compared, 0 slower, 0 faster, 1 same, 1 undecided")
    written = json.loads(report.read_text())
    assert written["stopped"].startswith("stopped after 3 pairs")
    assert written["unconfirmed"] == []  # no confirming pair withdrew it: the stop did
    assert {s["nodeid"]: s["call"] for s in written["series"]} == {
        "t.py::lucky": "undecided",
        "t.py::steady": "same",
    }


def test_a_comparison_stopped_while_profiling_keeps_its_confirmed_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three pairs, three confirming pairs (the SLOWER withdrawn by them), then stopped in the
    kernels' first profiling process: the calls stand as confirmed."""
    said, report = _stopped_ab(tmp_path, monkeypatch, at=13)
    assert "cudaperf ab: stopped while the kernels were profiled: the calls stand, no kernels" in (
        said
    )
    assert "not confirmed by 3 fresh pairs (now UNDECIDED): t.py::lucky {time:wall} (SLOWER)" in (
        said
    )
    assert json.loads(report.read_text())["unconfirmed"] == ["t.py::lucky {time:wall} (SLOWER)"]


def test_a_comparison_stopped_before_a_pair_ended_says_nothing_more(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    said, report = _stopped_ab(tmp_path, monkeypatch, at=2)
    assert [line for line in said if "stopped" in line or "compared" in line] == []
    assert not report.exists()


def test_a_stop_after_one_pair_reads_in_the_singular() -> None:
    from pytest_cudaperf.ab.session import _pairs

    assert (_pairs(1), _pairs(3)) == ("1 pair", "3 pairs")
