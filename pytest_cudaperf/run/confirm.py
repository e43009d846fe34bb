"""A regression (or improvement) of process-dependent code confirmed in a fresh process: every
suspect of one pytest process's test loop (an xdist worker counts as one) together in ONE fresh
process at the end of that loop, selecting exactly the suspect tests, rather than one process per
suspect inside its call (why: docs/decisions.md, "Why are the suspects of a test loop confirmed
together after it?").

While the loop runs, a test's reports are held back (:class:`HeldReports`) once its call left a
suspect (:class:`pytest_cudaperf.run.context.Suspect`): its verdict as confirmed in this process
is on the call report. After the loop (or as soon as ``--maxfail`` could be reached counting the
held tests), :func:`confirm_deferred` measures the suspects in one fresh process, puts the fresh
process's verdict in each test's record (:func:`fresh_verdict`, the rule of a confirmation inside
the call), and the held reports are finished again and logged. A run interrupted before (or
during) the batch logs them as they were, each suspect saying it was not re-measured.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pytest_cudaperf.locks import Hold
from pytest_cudaperf.report.model import FailureKind, JudgedRecord
from pytest_cudaperf.run.context import Deferred, Suspect, TestContext, env_key
from pytest_cudaperf.run.controls import Slowdown, choose, slowdowns
from pytest_cudaperf.run.hoststate import HostWait, latest_reference
from pytest_cudaperf.run.judging import confirm_time, judge_time, visible_device
from pytest_cudaperf.units import format_pct
from pytest_cudaperf.verdict import Kind, host_moved, kernels_clause, left_unconfirmed

if TYPE_CHECKING:
    from pytest_cudaperf.measure.measurement import Measurement
    from pytest_cudaperf.run.child import Fresh, FreshProcess

#: fresh processes that may confirm one change, where each before met the host in another state
#: than at recording (host-bound time: ``Verdict.other_state``)
FRESH_STATE_TRIES = 3
#: verdicts whose failure (or report) says which kernels explain the change
EXPLAINED = frozenset({Kind.REGRESSION, Kind.IMPROVED, Kind.INCONCLUSIVE})
WHERE = " in a fresh process"
#: why a suspect started no fresh process of its own (why: docs/decisions.md, "Which suspects
#: start no fresh process of their own?"): a speed-up; a regression of a test that fails anyway
ALONE = "a speed-up starts none: --cudaperf-confirm-process=all"
FAILS_ANYWAY = "its test fails anyway: --cudaperf-confirm-process=all"


def _why_not(suspect: Suspect, fails_anyway: bool) -> str | None:
    """Why ``suspect`` starts no fresh process of its own (None: it starts one). A speed-up
    fails nothing; a regression of a test that fails whatever a fresh process finds
    (``fails_anyway``: :func:`_failing`) would not change its outcome.
    ``--cudaperf-confirm-process=all`` starts one for each, and so does a suspect that awaits
    the host (:attr:`Suspect.awaits_host`): it is measured there to be judged at all."""
    if suspect.test.settings.confirm_process == "all" or suspect.awaits_host:
        return None
    if suspect.first.verdict.kind is not Kind.REGRESSION:
        return ALONE
    return FAILS_ANYWAY if fails_anyway else None


def fresh_measurement(
    test: TestContext, first: JudgedRecord, measured: Measurement, found: Fresh
) -> Measurement | None:
    """What a fresh process ``found`` of ``first``'s series (its kernels' time this process's,
    where it timed none: they do not move between processes); None where it took no such
    measurement, and a line in the test's details says why."""
    again = None if isinstance(found, str) else found.get((str(first.key), first.series))
    if again is None:
        why = found if isinstance(found, str) else "it took no such measurement"
        test.state.details.append(f"{first.key.label()}not re-measured{WHERE}: {why}")
        return None
    if again.fixed_ms is None and measured.fixed_ms is not None:
        again = dataclasses.replace(again, fixed_ms=measured.fixed_ms)
    return again


def fresh_verdict(
    test: TestContext, first: JudgedRecord, measured: Measurement, found: Fresh
) -> tuple[JudgedRecord, Measurement] | None:
    """``first`` (confirmed in this process, re-measured as ``measured``) confirmed by what a
    fresh process ``found`` (:func:`pytest_cudaperf.run.judging.confirm_time`); None where it
    took no such measurement (:func:`fresh_measurement`): the verdict stands."""
    again = fresh_measurement(test, first, measured, found)
    return None if again is None else confirm_time(test, first, again, WHERE)


def host_back(
    details: list[str],
    wait: HostWait | None,
    record: JudgedRecord,
    measured: Measurement,
    within_s: float | None = None,
) -> bool:
    """Whether to measure ``record`` again: at once, unless it awaits the host
    (:attr:`Verdict.awaits_host`: a host-bound slowdown left undecided with the host in another
    state than at recording) and the wait can wait; then once the wait (at most ``within_s``,
    where given) saw the host back in the recordings' state (a line in ``details`` says how long
    it waited, or that the host did not come back: then not at all)."""
    verdict, now = record.verdict, measured.reference_ms
    if wait is None or not verdict.awaits_host or verdict.host_state is None or now is None:
        return True
    recorded = now / verdict.host_state  # the recordings' reference, as the verdict found it
    waited = wait.until_back(latest_reference(measured.references_ms, now), recorded, within_s)
    details.append(record.key.label() + waited.describe(recorded))
    return waited.back


#: the line a test's details get where its host-bound time goes to the loop's fresh process
DEFERRED = "host-bound: left to the fresh process at the end of the test loop, which measures it"


def defers_host(test: TestContext) -> bool:
    """Whether a host-bound time of ``test`` that the host's state left undecided may go to the
    test loop's fresh process instead of waiting out the state here: the loop holds the test
    (:class:`pytest_cudaperf.run.context.Deferred`) and has a fresh process, the run does not
    update the baselines, and the state is not in a spell
    (:class:`pytest_cudaperf.run.hoststate.Spell`): a state that outlasted a wait lasts
    minutes, the fresh process would likely meet it too, and a look costs less than measuring
    there (why: docs/decisions.md, "Why does a change read in the host's other state go to the
    fresh process after a few seconds?")."""
    deferred = test.run.deferred
    return (
        test.run.fresh is not None
        and deferred is not None
        and deferred.defers(test.nodeid)
        and not test.settings.update
        and not test.run.host_spell.looks_once(time.monotonic(), test.settings.state_wait)
    )


def defer_host(
    test: TestContext,
    first: JudgedRecord,
    measured: Measurement,
    lock: Hold,
    probe: Callable[[], float] | None,
) -> None:
    """``first`` (of ``measured``), left undecided by the host's state, joins the loop's batch
    as a suspect that awaits the host (:attr:`Suspect.awaits_host`): the loop holds its test,
    and :func:`confirm_deferred` judges what the fresh process measures of it."""
    deferred = test.run.deferred
    assert deferred is not None, "defers_host said the loop holds the test"
    env = visible_device(measured.device)
    deferred.suspects.append(Suspect(test, first, measured, env, lock, probe, awaits_host=True))
    test.state.details.append(f"{first.key.label()}{DEFERRED}")


def _wait(suspect: Suspect) -> HostWait | None:
    """The suspect's wait for the host's state (as its measurement's): None without a probe."""
    limit = suspect.test.settings.state_wait
    probe = suspect.probe
    if probe is None or limit <= 0:
        return None
    return HostWait(probe, limit, spell=suspect.test.run.host_spell, device=suspect.lock)


@dataclass
class _Shown:
    """A suspect's record as the test recorded it, where it lies in the test's records, and what
    the test's path added to its verdict's message (the kernels' line of a host-bound time)."""

    index: int
    record: JudgedRecord
    suffix: str


def _shown(suspect: Suspect) -> _Shown | None:
    first, records = suspect.first, suspect.test.state.records
    for index, record in enumerate(records):
        if record.key == first.key and record.series == first.series:
            message, said = record.verdict.message, first.verdict.message
            suffix = message[len(said) :] if message.startswith(said) else ""
            return _Shown(index, record, suffix)
    return None  # the test ended before it recorded it: nothing to correct


def _failure_line(suspect: Suspect, record: JudgedRecord) -> str:
    """The line ``record`` of ``suspect``'s series fails its test with, where it is a
    REGRESSION."""
    return f"{suspect.first.key.label()}{record.verdict.message}"


def settle(
    suspect: Suspect, shown: _Shown, confirmed: tuple[JudgedRecord, Measurement]
) -> JudgedRecord:
    """Put the fresh process's verdict (``confirmed``) in the test's record of ``suspect`` where
    ``shown`` recorded the verdict of this process: its failure replaced (or withdrawn), the
    breakdown's explanation kept where the verdict still calls for one (otherwise handed to the
    call's other time series where that one calls for it, :func:`_handed_on`, else dropped with
    its lines), and the kernels' line kept (:func:`_retell` brings it up to date where the
    kernels settled otherwise). Returns the record now in the test's records."""
    state, label = suspect.test.state, suspect.first.key.label()
    record, measurement = confirmed
    if suspect.refine is not None:
        record = suspect.refine(record, measurement)
    current = state.records[shown.index]
    kind = record.verdict.kind
    explained = kind in EXPLAINED
    suffix = shown.suffix if kind not in (Kind.PASS, Kind.NEW) else ""
    verdict = dataclasses.replace(record.verdict, message=record.verdict.message + suffix)
    settled = dataclasses.replace(
        current,
        record=record.record,
        verdict=verdict,
        measurement=record.measurement,
        others=record.others,
        explanation=current.explanation if explained else (),
        compared=current.compared if explained else None,
    )
    state.records[shown.index] = settled
    was = [i for i, f in enumerate(state.failures) if f.kind is FailureKind.REGRESSION]
    was = [i for i in was if state.failures[i].message == _failure_line(suspect, current)]
    if was:
        del state.failures[was[0]]
    if kind is Kind.REGRESSION and not suspect.test.settings.update:
        state.fail(FailureKind.REGRESSION, f"{label}{verdict.message}")
    if current.explanation and not explained and not _handed_on(state.records, settled, current):
        for line in current.explanation:
            if f"{label}{line}" in state.details:
                state.details.remove(f"{label}{line}")
    return settled


#: a host-bound call's two time series, which share one breakdown's explanation
_PAIRED = {"time:host": "time:kernels", "time:kernels": "time:host"}


def _handed_on(records: list[JudgedRecord], settled: JudgedRecord, was: JudgedRecord) -> bool:
    """Where ``settled`` (a host-bound call's host time or kernels) no longer calls for the
    breakdown's explanation ``was`` carried, the call's other time series takes it over where
    its verdict still calls for one and it has none: the explanation is said once, under one
    of the two (:meth:`pytest_cudaperf.run.judged.JudgedMeasurement._with_breakdown`). Returns
    whether one took it (its lines then stay in the test's details)."""
    other = _PAIRED.get(settled.series)
    for index, record in enumerate(records):
        if record.key != settled.key or record.series != other:
            continue
        if record.verdict.kind not in EXPLAINED or record.explanation:
            return False
        records[index] = dataclasses.replace(
            record, explanation=was.explanation, compared=was.compared
        )
        return True
    return False


def _retell(
    suspect: Suspect, was: JudgedRecord, now: JudgedRecord, shown: dict[int, _Shown | None]
) -> None:
    """Where a host-bound call's kernels (``suspect`` of ``time:kernels``, ``was`` as its own
    process read them) settled as ``now``, the host time's line that says what they did
    (:func:`pytest_cudaperf.verdict.kernels_clause`) follows them: in the test's record of
    that time, in its failure line, and in the suffix a host-time suspect adds as it settles."""
    old, new = kernels_clause(was.verdict), kernels_clause(now.verdict)
    if was.series != "time:kernels" or old is None or new is None or old == new:
        return
    state, key = suspect.test.state, was.key
    for index, record in enumerate(state.records):
        message = record.verdict.message
        if record.key != key or record.series != "time:host" or not message.endswith(old):
            continue
        verdict = dataclasses.replace(record.verdict, message=message[: -len(old)] + new)
        told = dataclasses.replace(record, verdict=verdict)
        line, retold = _failure_line(suspect, record), _failure_line(suspect, told)
        state.failures[:] = [
            dataclasses.replace(f, message=retold) if f.message == line else f
            for f in state.failures
        ]
        state.records[index] = told
    for place in shown.values():
        if place is None or place.suffix != old:
            continue
        if place.record.key == key and place.record.series == "time:host":
            place.suffix = new


def _failing(pending: Sequence[Suspect], shown: dict[int, _Shown | None]) -> set[int]:
    """The suspects (by ``id``) whose test fails whatever a fresh process finds: its state holds
    a failure that is no suspect's (a regression confirmed where it was measured, such as device
    time of one launch a call; a budget; a leak)."""
    theirs: dict[int, set[str]] = {}
    for suspect in pending:
        place = shown[id(suspect)]
        if place is not None:
            theirs.setdefault(id(suspect.test), set()).add(_failure_line(suspect, place.record))
    return {
        id(s)
        for s in pending
        if any(f.message not in theirs.get(id(s.test), set()) for f in s.test.state.failures)
    }


def _groups(suspects: Sequence[Suspect]) -> list[list[Suspect]]:
    """The suspects by the environment their fresh process needs (the GPU it measures on)."""
    groups: dict[tuple[tuple[str, str], ...], list[Suspect]] = {}
    for suspect in suspects:
        groups.setdefault(env_key(suspect.env), []).append(suspect)
    return list(groups.values())


def progress_line(nodeids: Sequence[str], suspects: Sequence[Suspect], controls: int = 0) -> str:
    """The line that says a batch starts: the suspected changes it confirms, the tests whose
    change the host's state left undecided that it measures (:attr:`Suspect.awaits_host`), and
    ``controls`` tests that passed beside them."""
    changes = [s for s in suspects if not s.awaits_host]
    suspected = {s.test.nodeid for s in changes}
    undecided = len({s.test.nodeid for s in suspects if s.awaits_host} - suspected)
    parts = []
    if tests := len(nodeids) - undecided:
        regressions = all(s.first.verdict.kind is Kind.REGRESSION for s in changes)
        what = "regression" if regressions else "change"
        parts.append(f"confirming {tests} suspected {what}{'s' * (tests != 1)}")
    if undecided:
        parts.append(
            f"measuring {undecided} test{'s' * (undecided != 1)} the host's state left undecided"
        )
    line = f"cudaperf: {' and '.join(parts)}{WHERE}"
    if controls:
        line += f", beside {controls} test{'s' * (controls != 1)} that passed"
    return line


def controlled(
    confirmed: tuple[JudgedRecord, Measurement], slower: dict[str, Slowdown]
) -> tuple[JudgedRecord, Measurement]:
    """A regression the fresh process confirmed, withdrawn (INCONCLUSIVE) where that process ran
    the controls of its series slower (``slower``:
    :func:`pytest_cudaperf.run.controls.slowdowns`) and, that slowdown taken out, it no longer
    clears its threshold."""
    record, measurement = confirmed
    slowdown = slower.get(record.series)
    if slowdown is None or record.verdict.kind is not Kind.REGRESSION:
        return confirmed
    why = slowdown.explains(record.verdict)
    if why is None:
        return confirmed
    return dataclasses.replace(record, verdict=host_moved(record.verdict, WHERE, why)), measurement


def confirm_deferred(
    deferred: Deferred, fresh: FreshProcess, progress: Callable[[str], None]
) -> None:
    """Confirm every suspect waiting in ``deferred`` in one fresh process per device (one in
    all on the CPU), the device held by this process meanwhile, and put each fresh verdict in
    its test's record (:func:`settle`). Beside the suspects, that process measures a few tests
    that passed (:func:`pytest_cudaperf.run.controls.choose`): a regression of a series whose
    controls read slower there stands INCONCLUSIVE where that slowdown explains it
    (:func:`controlled`). The suspects of a device of which none starts a process
    (:func:`_why_not`: speed-ups, and regressions of tests that fail anyway) start none: each
    stands INCONCLUSIVE (:func:`left_alone`); along with one that does, they are measured. A
    suspect whose fresh process met the host in another state than at recording is measured
    again in a later one, with the others of its kind, once the host is back (at most
    :data:`FRESH_STATE_TRIES` processes in all). A suspect that awaits the host
    (:attr:`Suspect.awaits_host`) is judged by what its fresh process reads
    (:func:`_judged_fresh`); a change read there is confirmed in the next one. On an
    interruption the suspects not yet settled stand unconfirmed (:func:`unconfirmed`)."""
    pending, deferred.suspects = list(deferred.suspects), []
    shown = {id(s): _shown(s) for s in pending}
    waits = {id(s): _wait(s) for s in pending}
    pending = [s for s in pending if shown[id(s)] is not None]
    failing = _failing(pending, shown)
    tries = dict.fromkeys(map(id, pending), 0)
    alive = list(pending)  # the suspects the dicts name, kept so that no id is used twice
    try:
        while pending:
            again: list[Suspect] = []
            for group in _groups(pending):
                why = {id(s): _why_not(s, id(s) in failing) for s in group}
                if all(why.values()):  # none starts a process: none is measured in one
                    for suspect in group:
                        pending.remove(suspect)
                    _leave([s for s in group if not tries[id(s)]], shown, why)
                    continue
                nodeids = list(dict.fromkeys(s.test.nodeid for s in group))
                controls = choose(deferred, [s for s in group if why[id(s)] is None])
                beside = list(dict.fromkeys(c.test.nodeid for c in controls))
                progress(progress_line(nodeids, group, len(beside)))
                with group[0].lock():
                    found = fresh.batch(nodeids + beside, group[0].env, progress)
                slower = slowdowns(controls, found)
                for suspect in group:
                    pending.remove(suspect)
                    tries[id(suspect)] += 1
                    there = found[suspect.test.nodeid]
                    if suspect.awaits_host:
                        follow = _judged_fresh(suspect, there, shown, waits)
                    else:
                        follow = _confirmed_fresh(suspect, there, slower, shown, waits)
                    if follow is None:
                        continue
                    if follow is not suspect:  # a change the next process confirms
                        alive.append(follow)
                        shown[id(follow)] = shown[id(suspect)]
                        waits[id(follow)] = waits[id(suspect)]
                        tries[id(follow)] = tries[id(suspect)]
                    elif tries[id(suspect)] >= FRESH_STATE_TRIES:
                        continue
                    again.append(follow)
            pending = again
    except BaseException:
        unconfirmed(pending, "the run was interrupted")
        raise


def _confirmed_fresh(
    suspect: Suspect,
    found: Fresh,
    slower: dict[str, Slowdown],
    shown: dict[int, _Shown | None],
    waits: dict[int, HostWait | None],
) -> Suspect | None:
    """``suspect``'s change confirmed by what its fresh process ``found`` (:func:`fresh_verdict`,
    :func:`controlled`) and settled in its test's record; the suspect again where that process
    met the host in another state and the wait saw it come back (the next process measures it),
    else None."""
    confirmed = fresh_verdict(suspect.test, suspect.first, suspect.measured, found)
    if confirmed is None:
        return None
    confirmed = controlled(confirmed, slower)
    place = shown[id(suspect)]
    assert place is not None
    record = settle(suspect, place, confirmed)
    _retell(suspect, place.record, record, shown)
    return _back(suspect, record, confirmed[1], waits)


def _judged_fresh(
    suspect: Suspect,
    found: Fresh,
    shown: dict[int, _Shown | None],
    waits: dict[int, HostWait | None],
) -> Suspect | None:
    """A suspect that awaits the host judged by what its fresh process ``found``, measured
    there as any test's first measurement is (no control plays a part: nothing is confirmed
    yet). A change read with the host as at recording is one process's word: a new suspect
    with that reading as its ``first`` is returned for the next process to confirm, the test's
    record left as it is meanwhile (a speed-up stands INCONCLUSIVE, as :func:`_why_not` leaves
    one). Any other reading is settled in the test's record; the suspect is returned again
    where it met the other state and the wait saw the host come back (:func:`_back`)."""
    test, first = suspect.test, suspect.first
    measured = fresh_measurement(test, first, suspect.measured, found)
    if measured is None:
        return None
    record = judge_time(test, first.key, measured, first.device_class)
    verdict = record.verdict
    read = format_pct(verdict.ratio - 1) if verdict.ratio is not None else "no ratio"
    said = f"host-bound: measured{WHERE}: {read} ({verdict.kind.value})"
    test.state.details.append(f"{first.key.label()}{said}")
    reading = record, measured
    if verdict.kind in (Kind.REGRESSION, Kind.IMPROVED) and not verdict.other_state:
        follow = dataclasses.replace(suspect, first=record, measured=measured, awaits_host=False)
        why = _why_not(follow, fails_anyway=False)
        if why is None:
            return follow
        reading = left_alone(record, measured, why)  # a speed-up: as a suspect of one would be
    place = shown[id(suspect)]
    assert place is not None
    settled = settle(suspect, place, reading)
    return _back(suspect, settled, measured, waits)


def _back(
    suspect: Suspect,
    record: JudgedRecord,
    measured: Measurement,
    waits: dict[int, HostWait | None],
) -> Suspect | None:
    """``suspect`` again where its fresh process met the host in another state than at
    recording (``record``, of ``measured``) and the wait saw the host come back; else None."""
    if not record.verdict.other_state:
        return None
    details = suspect.test.state.details
    return suspect if host_back(details, waits[id(suspect)], record, measured) else None


def _leave(
    group: Sequence[Suspect], shown: dict[int, _Shown | None], why: dict[int, str | None]
) -> None:
    """Each suspect of ``group`` left INCONCLUSIVE, saying why it started no process."""
    for suspect in group:
        place, reason = shown[id(suspect)], why[id(suspect)]
        assert place is not None
        assert reason is not None
        settled = settle(suspect, place, left_alone(suspect.first, suspect.measured, reason))
        _retell(suspect, place.record, settled, shown)


def confirm_now(
    suspect: Suspect, fresh: FreshProcess, back: Callable[[JudgedRecord, Measurement], bool]
) -> tuple[JudgedRecord, Measurement]:
    """``suspect`` confirmed at once in a fresh process of its own (a test the loop does not
    hold), by the batch's rule: a speed-up starts none and stands INCONCLUSIVE
    (:func:`left_alone`, unless ``--cudaperf-confirm-process=all``); a fresh process that met
    the host in another state than at recording is followed by another once ``back`` saw the
    host come back, up to :data:`FRESH_STATE_TRIES`; the suspect's ``refine`` applied."""
    test, first, measured = suspect.test, suspect.first, suspect.measured
    confirmed = first, measured
    why = _why_not(suspect, fails_anyway=False)  # the test's other records are still to come
    if why is not None:
        confirmed = left_alone(first, measured, why)
    else:
        for tries in range(FRESH_STATE_TRIES):
            with suspect.lock():
                found = fresh.measurements(test.nodeid, suspect.env, again=tries > 0)
            again = fresh_verdict(test, first, measured, found)
            if again is None:
                break
            confirmed = again
            if not confirmed[0].verdict.other_state or tries == FRESH_STATE_TRIES - 1:
                break
            if not back(*confirmed):
                break
    if suspect.refine is not None:
        confirmed = suspect.refine(*confirmed), confirmed[1]
    return confirmed


def left_alone(
    first: JudgedRecord, measured: Measurement, why: str
) -> tuple[JudgedRecord, Measurement]:
    """``first``, a change that started no fresh process (``why``: :func:`_why_not`) and that
    none measured: INCONCLUSIVE (:func:`pytest_cudaperf.verdict.left_unconfirmed`)."""
    return dataclasses.replace(first, verdict=left_unconfirmed(first.verdict, why)), measured


def unconfirmed(suspects: Sequence[Suspect], why: str) -> None:
    """Each suspect's verdict stands as this process confirmed it; a line says why no fresh
    process measured it."""
    for suspect in suspects:
        label = suspect.first.key.label()
        suspect.test.state.details.append(f"{label}not re-measured{WHERE}: {why}")
