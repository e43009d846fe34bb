"""Controls of the fresh process that confirms a test loop's suspects: a few times that PASSED in
this process, measured again beside the suspects in that process (why: docs/decisions.md, "Why
does the fresh process also measure tests that passed?").

The code under a control did not change within the run, so a control that reads slower in the
fresh process than in this one (:func:`shift`, by the low end of that ratio's CI) shows a process
that runs unchanged code slower than this one ran it when the control passed: the host's state,
which the launch reference need not follow. A regression that process confirms of the same series is
judged with that slowdown (the least of its series' controls', :class:`Slowdown`) taken out, and
stands INCONCLUSIVE where it no longer clears its threshold
(:func:`pytest_cudaperf.verdict.host_moved`). A code change cannot move a control: the same code
ran on both sides.

Which tests serve (:func:`offer`, :func:`choose`): per series of the suspects' regressions,
:data:`CONTROLS` times of that series that passed on the same GPU with a reading that rules out a
change beyond the tolerance (:func:`rules_out_a_change`), those in a folder of a suspect first,
then those whose calls the host's speed moves most (a host-bound call's share outside its
kernels), then those that read closest to their baseline.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pytest_cudaperf.keys import SeriesKey
from pytest_cudaperf.measure.stats import ratio_ci
from pytest_cudaperf.run.context import Control, Deferred, Suspect, TestContext, env_key
from pytest_cudaperf.run.judging import observation, process_dependent, visible_device
from pytest_cudaperf.units import format_pct
from pytest_cudaperf.verdict import Kind, Verdict

if TYPE_CHECKING:
    from pytest_cudaperf.measure.measurement import Measurement
    from pytest_cudaperf.report.model import JudgedRecord
    from pytest_cudaperf.run.child import Fresh

#: controls measured per series of the suspects' regressions, and kept per series, GPU and folder
CONTROLS = 2


def folder(key: SeriesKey) -> str:
    """The folder of a series' test file: ``benchmarks/color`` for
    ``benchmarks/color/yuv_test.py::t``."""
    return key.file.rpartition("/")[0]


def host_share(measured: Measurement) -> float:
    """The share of a host-bound call outside its kernels (0 for any other measurement)."""
    if measured.metric != "host" or measured.fixed_ms is None or measured.median_ms <= 0:
        return 0.0
    return max(0.0, 1.0 - measured.fixed_ms / measured.median_ms)


def rules_out_a_change(verdict: Verdict) -> bool:
    """Whether a PASS's CI lies within the user's tolerance at its high end: a pass only under a
    threshold that the series' noise raised may be a slowdown this process read low (a suite that
    regresses everywhere has such passes), and one of them would withdraw every real regression
    its fresh process confirms."""
    ci, tolerance = verdict.ci, verdict.tolerance
    return ci is not None and tolerance is not None and ci[1] <= 1 + tolerance


def _rank(control: Control) -> tuple[float, float]:
    ratio = control.record.verdict.ratio
    return -host_share(control.measured), abs(math.log(ratio)) if ratio else math.inf


def offer(test: TestContext, record: JudgedRecord, measured: Measurement) -> None:
    """Keep ``record`` as a control where it PASSED within the tolerance
    (:func:`rules_out_a_change`), its test's reports are held by the loop (the loop's fresh
    process can run it again) and its series is one a fresh process confirms
    (:func:`pytest_cudaperf.run.judging.process_dependent`): the best :data:`CONTROLS` per series,
    GPU and folder."""
    deferred, run = test.run.deferred, test.run
    if deferred is None or run.fresh is None or not deferred.defers(test.nodeid):
        return
    if record.verdict.kind is not Kind.PASS or record.verdict.ratio is None or test.settings.update:
        return
    if not rules_out_a_change(record.verdict):
        return
    if not process_dependent(test, record, measured):
        return
    place = (record.series, env_key(visible_device(measured.device)), folder(record.key))
    kept = deferred.controls.setdefault(place, [])
    kept.append(Control(test, record, measured))
    kept.sort(key=_rank)
    del kept[CONTROLS:]


def choose(deferred: Deferred, group: Sequence[Suspect]) -> list[Control]:
    """The controls to measure beside ``group`` (suspects of one GPU): per series of its
    regressions, :data:`CONTROLS` of the kept ones of that series and GPU, none a test of the
    group; those of a suspect's folder first."""
    regressions = [s for s in group if s.first.verdict.kind is Kind.REGRESSION]
    if not regressions:
        return []
    taken = {s.test.nodeid for s in group}
    folders = {folder(s.first.key) for s in regressions}
    env = env_key(regressions[0].env)
    chosen: list[Control] = []
    for series in dict.fromkeys(s.first.series for s in regressions):
        pool = [
            control
            for (kept_series, kept_env, _), kept in deferred.controls.items()
            if kept_series == series and kept_env == env
            for control in kept
            if control.test.nodeid not in taken
        ]
        pool.sort(key=lambda c: (folder(c.record.key) not in folders, *_rank(c)))
        chosen.extend(pool[:CONTROLS])
    return chosen


def shift(control: Control, found: Fresh) -> float | None:
    """How many times slower at least ``control`` read in the fresh process (``found``: its
    test's measurements there) than in this one: the low end of the CI of the fresh reading over
    this process's, their noise combined as a verdict combines its two sides'
    (:func:`pytest_cudaperf.measure.stats.ratio_ci`). None where the fresh process did not
    measure it."""
    record = control.record
    again = None if isinstance(found, str) else found.get((str(record.key), record.series))
    if again is None:
        return None
    before, after = observation(control.measured, record.env), observation(again, record.env)
    if before.value <= 0 or after.value <= 0:
        return None
    return ratio_ci(after.value, after.noise, before.value, before.noise)[1]


@dataclass(frozen=True)
class Slowdown:
    """How many times slower at least the fresh process ran the code of the controls ``names``
    of one series than this process ran it (``factor``, above 1: the least of their shifts)."""

    factor: float
    names: tuple[str, ...]

    def explains(self, confirmed: Verdict) -> str | None:
        """Why ``confirmed`` (a REGRESSION that process read) is no regression once the
        slowdown is taken out of its CI's low end (None: it is one still)."""
        if confirmed.ci is None or confirmed.threshold is None:
            return None
        beyond = confirmed.ci[0] / self.factor
        if beyond > 1 + confirmed.threshold:
            return None
        *first, last = self.names
        which = f"{', '.join(first)} and {last}" if first else last
        return (
            f"{which}, which passed in this run, read at least {format_pct(self.factor - 1)} "
            f"there against this run; that taken out, at least {format_pct(beyond - 1)}, within "
            f"the threshold {confirmed.threshold:.1%}"
        )


def slowdowns(controls: Sequence[Control], found: dict[str, Fresh]) -> dict[str, Slowdown]:
    """Per series, how much slower the fresh process (``found``) ran its controls' code: the
    least shift (:func:`shift`) of those it measured, where above 1."""
    shifts: dict[str, list[tuple[float, str]]] = {}
    for control in controls:
        by = shift(control, found.get(control.test.nodeid, "not run"))
        if by is not None:
            name = control.test.nodeid.rsplit("::", 1)[-1]
            shifts.setdefault(control.record.series, []).append((by, name))
    least = {series: min(by for by, _ in read) for series, read in shifts.items()}
    return {
        series: Slowdown(least[series], tuple(name for _, name in read))
        for series, read in shifts.items()
        if least[series] > 1
    }
