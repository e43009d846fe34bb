"""``cudaperf record [--runs K] [--baseline-dir DIR] [--] PYTEST_ARGS``: fresh baselines from K
separate pytest processes, each series made of one recording per process."""

from __future__ import annotations

import dataclasses
import math
import os
import statistics
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from pytest_cudaperf import turns
from pytest_cudaperf.cli.process import run_in_session, run_in_turns, run_log
from pytest_cudaperf.cli.sources import CliError, has_option, read_report, report_records
from pytest_cudaperf.keys import SeriesKey
from pytest_cudaperf.measure import instability
from pytest_cudaperf.paths import unwritable
from pytest_cudaperf.series import MIN_PROCESSES, Record
from pytest_cudaperf.settings import OPTIONS
from pytest_cudaperf.store.baselines import BaselineStore
from pytest_cudaperf.store.format import BaselineError
from pytest_cudaperf.units import format_ms

#: a series of one device class: (device class, key, series name)
Where = tuple[str, SeriesKey, str]
#: runs pytest command lines (each the arguments after ``python -m pytest``), whose output and
#: scratch files may go into the folder given, and returns their exit codes in order
Runner = Callable[[Sequence[Sequence[str]], Path], list[int]]


#: what pytest's exit codes other than 0 (passed) and 1 (tests failed) mean
EXIT_CODES = {
    2: "interrupted",
    3: "an internal error",
    4: "a usage error",
    5: "no tests collected",
}


def run_pytest(runs: Sequence[Sequence[str]], folder: Path) -> list[int]:
    """The default :data:`Runner`: each ``python -m pytest ARGS`` its own process and session
    (a Ctrl-C or SIGTERM reaches ``cudaperf record`` alone, which stops every run still going;
    a run writes nothing that outlives it). The runs start together and measure in turns
    (:func:`run_in_turns`: their start-ups overlap, their measurements do not), each one's
    output in ``folder`` (:func:`run_log`) and its end said as it comes; where processes cannot
    take turns (no ``fcntl``), one after another, their output on the terminal."""
    if not turns.AVAILABLE:
        return one_by_one(run_alone)(runs, folder)
    cmds = [[sys.executable, "-m", "pytest", *args] for args in runs]
    print(
        f"cudaperf record: {len(cmds)} pytest processes started together, each measuring in "
        "its turn"
    )

    def ended(index: int, rc: int, wall: float, log: Path) -> None:
        print(
            f"cudaperf record: run {index + 1}/{len(cmds)} ended: exit {rc}, {wall:.0f} s after "
            "the start"
        )

    return run_in_turns(cmds, folder, ended)


def run_alone(args: Sequence[str]) -> int:
    """``python -m pytest ARGS`` in its own process and session, its output on the terminal."""
    return run_in_session([sys.executable, "-m", "pytest", *args])


def one_by_one(run: Callable[[Sequence[str]], int]) -> Runner:
    """A :data:`Runner` that runs each command line with ``run`` (its arguments to pytest; its
    exit code back), one after another."""

    def runs(cmds: Sequence[Sequence[str]], folder: Path) -> list[int]:
        return [run(cmd) for cmd in cmds]

    return runs


#: the last lines of a run's output shown when it could not run its tests
TAIL_LINES = 15


def _show_tail(log: Path) -> None:
    """The last :data:`TAIL_LINES` of a run's output, where it went to a file
    (:func:`run_pytest`), indented under the line that says the run failed."""
    if log.is_file():
        tail = log.read_text(errors="replace").splitlines()[-TAIL_LINES:]
        print("\n".join(f"    {line}" for line in tail))


#: what a recording run leaves out: a verdict against the old baseline counts for nothing there,
#: so nothing is measured again for it (neither in this process nor in a fresh one) and no
#: host-bound change waits for the host: each series gets the run's one measurement (why:
#: docs/decisions.md, "What does a `cudaperf record` run leave out?")
RECORDING = (
    "--cudaperf-confirm-process=off",
    "--cudaperf-state-wait=off",
    "--cudaperf-remeasure=off",
)
#: the runs but the last profile nothing; the last profiles each series' breakdown after its
#: measurement (why: docs/decisions.md, "Why does `cudaperf record` profile in its last run?")
NO_BREAKDOWN = "--cudaperf-breakdown=off"
BREAKDOWN = "--cudaperf-breakdown=always"
#: from MIN_PROCESSES runs on, each measuring run measures one round of a three-round
#: measurement: the K processes are the series' rounds (why: docs/decisions.md, "Why does a
#: recording of `cudaperf record` measure one round?")
ONE_ROUND = "--cudaperf-round-of=3"


def given(args: Sequence[str], name: str, env: Mapping[str, str]) -> str | None:
    """The value the pytest arguments (``--cudaperf-NAME=V`` or ``--cudaperf-NAME V``, the last
    one) or else the option's environment twin give the option ``name`` (``settings.OPTIONS``);
    None where neither does (the ini file may still)."""
    option = next(o for o in OPTIONS if o.name == name)
    found = None
    for i, arg in enumerate(args):
        if arg.startswith(option.cli + "="):
            found = arg.split("=", 1)[1]
        elif arg == option.cli and i + 1 < len(args):
            found = args[i + 1]
    return found if found is not None else env.get(option.env)


def measuring(args: Sequence[str], runs: int, env: Mapping[str, str]) -> list[list[str]]:
    """What record adds to the pytest arguments of each of its ``runs``: :data:`RECORDING`;
    :data:`NO_BREAKDOWN`, but :data:`BREAKDOWN` for the last run unless the arguments or the
    environment switch breakdowns off; and :data:`ONE_ROUND` from
    ``series.MIN_PROCESSES`` runs on unless the arguments or the environment set
    ``--cudaperf-rounds`` or ``--cudaperf-round-of`` themselves."""
    added = list(RECORDING)
    if runs >= MIN_PROCESSES and all(
        given(args, name, env) is None for name in ("rounds", "round-of")
    ):
        added.append(ONE_ROUND)
    last = NO_BREAKDOWN if given(args, "breakdown", env) == "off" else BREAKDOWN
    return [[*added, NO_BREAKDOWN if run < runs else last] for run in range(1, runs + 1)]


def _ended(reports: Sequence[Path]) -> list[Path]:
    """The reports of the runs that had ended when the recording was stopped: written whole (a
    run stopped on the way writes none) and not of an interrupted run."""
    found = []
    for report in reports:
        try:
            if report.exists() and not read_report(report).interrupted:
                found.append(report)
        except CliError:  # half written as it was stopped
            continue
    return found


def _stopped(reports: Sequence[Path], runs: int) -> list[Path] | None:
    """The reports to record from when the recording was stopped (Ctrl-C, SIGTERM) as it ran:
    those of the measuring runs that had ended, where there are ``series.MIN_PROCESSES`` or
    more; else None, and a line that says nothing is recorded."""
    ended = _ended(reports)
    if len(ended) < MIN_PROCESSES:
        print(
            f"cudaperf record: {len(ended)} of {runs} runs had ended ({MIN_PROCESSES} needed): "
            "nothing recorded"
        )
        return None
    print(
        f"cudaperf record: {len(ended)} of {runs} runs had ended: their series are recorded "
        f"from those {len(ended)}"
    )
    return ended


def _say_breakdowns(asked: bool, last_ended: bool, complete: dict[Where, list[Record]]) -> None:
    """The line on the breakdowns the last run profiled (``asked``: breakdowns were not switched
    off; ``last_ended``: its report is among those recorded from), each on its series' last
    recording, which is that run's."""
    if not asked:
        print("cudaperf record: breakdowns: off (--cudaperf-breakdown=off), none profiled")
        return
    if not last_ended:
        print("cudaperf record: breakdowns: the last run had not ended; none kept")
        return
    found = sum(1 for records in complete.values() if records[-1].breakdown is not None)
    print(f"cudaperf record: breakdowns: {found} series profiled (in the last run)")


@dataclasses.dataclass
class _Gathered:
    """What the measuring runs' reports hold, run by run (:func:`_gather`)."""

    folder: Path | None
    references: list[float | None] = dataclasses.field(default_factory=list)
    collected: dict[Where, list[Record]] = dataclasses.field(default_factory=dict)
    failed_bodies: set[Where] = dataclasses.field(default_factory=set)
    worst: int = 0

    def complete(self, runs: int) -> dict[Where, list[Record]]:
        """The series whose test body passed in every one of the ``runs``."""
        return {
            where: records
            for where, records in self.collected.items()
            if len(records) == runs and where not in self.failed_bodies
        }


def _gather(
    codes: Sequence[int], reports: Sequence[Path], tmp: Path, folder: Path | None
) -> _Gathered | int:
    """Each measuring run's series, one line a run; or the exit code of the first run that
    could not run its tests (no report, or a code other than 0 or 1), which stops the
    recording: nothing is recorded."""
    found_all = _Gathered(folder)
    runs = len(reports)
    for run, (rc, report) in enumerate(zip(codes, reports, strict=False), 1):
        if rc not in (0, 1) or not report.exists():
            why = EXIT_CODES.get(rc, "no report") if rc not in (0, 1) else "no report"
            _show_tail(run_log(tmp, run - 1))
            print(
                f"cudaperf record: run {run}/{runs}: pytest exited {rc} ({why}); "
                "stopped, nothing recorded"
            )
            return rc or 2
        document = read_report(report)
        found = report_records(document)
        found_all.references.append(_median_reference(record for record, _ in found))
        if found_all.folder is None and document.baseline_dir:
            found_all.folder = Path(document.baseline_dir)
            _check_folder(found_all.folder, "the runs' baseline folder")
        for record, passed in found:
            where = (record.device_class, record.key, record.series)
            if passed:
                found_all.collected.setdefault(where, []).append(record)
            else:
                found_all.failed_bodies.add(where)
        measured_failed = {r.key.nodeid for r, passed in found if not passed}
        bodies_failed = max(document.failed_bodies, len(measured_failed))
        if bodies_failed:
            found_all.worst = 1
        print(
            f"cudaperf record: run {run}/{runs}: pytest exited {rc}, {len(found)} series"
            + (f", {bodies_failed} with a failed test body" if bodies_failed else "")
        )
    return found_all


def cmd_record(
    runs: int, baseline_dir: Path | None, pytest_args: Sequence[str], runner: Runner = run_pytest
) -> int:
    """Run the pytest command ``runs`` times, each its own process writing a JSON report (nothing
    written to the baseline, one round per measurement from ``MIN_PROCESSES`` runs on,
    breakdowns off but in the last run, which profiles each series' after measuring it:
    :func:`measuring`; a test may fail against the old baseline, its recording counts all the
    same), all started together by ``runner`` (the default measures in turns:
    :func:`run_pytest`); then every series whose test body passed in every run becomes a fresh
    series made of its ``runs`` recordings, with the last run's breakdown, in the baseline
    folder the runs used. Stopped (Ctrl-C, SIGTERM) once ``series.MIN_PROCESSES`` or more runs
    had ended, the series are made of those runs' recordings (the breakdowns where the last run
    had ended) and the interruption goes on up after they are written; with fewer, nothing is
    written (:func:`_stopped`; why: docs/decisions.md, "What does an interrupted update
    keep?")."""
    args = [a for a in pytest_args if a != "--"]
    _check_arguments(args, baseline_dir)
    if baseline_dir is not None:  # one argument: pytest takes a bare existing path for a
        # test path when it looks for the rootdir, and the folder exists from the second run on
        args.append(f"--cudaperf-baseline-dir={baseline_dir}")
    _check_folder(baseline_dir, "--baseline-dir")
    added = measuring(args, runs, os.environ)
    stopped: BaseException | None = None
    with tempfile.TemporaryDirectory(prefix="cudaperf-record-") as name:
        tmp = Path(name)
        reports = [tmp / f"run{run}.json" for run in range(1, runs + 1)]
        last = reports[-1]
        cmds = [
            [*args, *more, f"--cudaperf-json={r}"] for r, more in zip(reports, added, strict=True)
        ]
        try:
            codes = runner(cmds, tmp)
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (Terminated)
            ended = _stopped(reports, runs)
            if ended is None:
                raise
            stopped, reports = exc, ended
            codes = [0] * len(reports)  # each ended run's outcome is in its report
        gathered = _gather(codes, reports, tmp, baseline_dir)
        if isinstance(gathered, int):
            return gathered
        complete = gathered.complete(len(reports))
    if complete:
        _say_breakdowns(BREAKDOWN in added[-1], last in reports, complete)
    skipped = len(gathered.collected.keys() | gathered.failed_bodies) - len(complete)
    uneven = uneven_host(gathered.references)
    if uneven:
        print(uneven)
    for line in shared_cpu(complete):
        print(line)
    _write(BaselineStore(gathered.folder or Path(".cudaperf")), complete)
    if skipped:
        print(f"cudaperf record: {skipped} series not recorded (not passed in every run)")
    if stopped is not None:
        raise stopped
    return gathered.worst


def _write(store: BaselineStore, complete: dict[Where, list[Record]]) -> None:
    """Each series of ``complete`` replaced by its recordings, one summary per device class and
    a line for each series too noisy to fail."""
    by_class: dict[str, list[Record]] = {}
    for (device_class, _, _), records in sorted(complete.items()):
        by_class.setdefault(device_class, []).extend(records)
    try:
        for device_class, records in sorted(by_class.items()):
            summary = store.replace(device_class, records)
            print(summary.line())
            for note in [*summary.notes(), *summary.beyond_tolerance_lines()]:
                print(note)
    except BaselineError as exc:
        raise CliError(str(exc)) from None


def _check_arguments(args: Sequence[str], baseline_dir: Path | None) -> None:
    """The pytest arguments ``record`` cannot run with, refused before any run: its own
    options, those that would record nothing, a second name for the baseline folder."""
    for bad in ("--cudaperf-json", "--cudaperf-prune", "--cudaperf-update"):
        if has_option(args, bad):
            raise CliError(f"record: leave {bad} out of the pytest arguments (record sets it)")
    for bad in ("--cudaperf-disable", "--collect-only", "--co"):
        if has_option(args, bad):
            raise CliError(f"record: {bad} in the pytest arguments would record nothing")
    if baseline_dir is not None and has_option(args, "--cudaperf-baseline-dir"):
        raise CliError(
            "record: --baseline-dir and --cudaperf-baseline-dir in the pytest arguments both "
            "name the folder: give one"
        )


def _check_folder(folder: Path | None, what: str) -> None:
    """The baseline folder can be written, checked before a run (not after all of them)."""
    why = unwritable(folder, folder=True) if folder is not None else None
    if why:
        raise CliError(f"record: {what} {folder} {why}")


def _median_reference(records: Iterable[Record]) -> float | None:
    """A run's median reference time (``Recording.reference_ms``), or None."""
    found = [
        r.recording.reference_ms
        for r in records
        if r.recording.reference_ms is not None and math.isfinite(r.recording.reference_ms)
    ]
    return statistics.median(found) if found else None


def uneven_host(references: Sequence[float | None]) -> str | None:
    """The line ``cudaperf record`` prints when its runs' references (each run's median of the
    reference timed beside the samples: the CPU backend's loop, or the launch reference of GPU
    code that synchronizes) differ by more than ``instability.HOST_MIN``: the host itself ran
    at different speeds, so the series move more between the recordings than the code does,
    and a slowdown is harder to tell from that (why: docs/decisions.md, "Why does the
    host-speed finding start at 25%?")."""
    known = [x for x in references if x is not None]
    if len(known) < 2 or instability.host_speed(max(known), min(known)) is None:
        return None
    return (
        f"cudaperf record: the host ran at different speeds during the runs (the reference "
        f"timed beside the samples took {format_ms(min(known))}-{format_ms(max(known))}, median "
        f"per run): the series recorded move with it and fewer slowdowns will fail; record "
        f"again on a quiet machine"
    )


def shared_cpu(complete: dict[Where, list[Record]]) -> list[str]:
    """One line per series most of whose recordings were taken while other processes took the
    CPU (a contention finding among their ``unstable``), whatever measured it (``cuda_timer``,
    ``benchmark``, its pedantic rounds, a region, a whole test): their noise carries it, and the
    series is not written in silence (why: docs/decisions.md, "Why is every entry point judged
    with the host's state?")."""
    lines = []
    for (_, key, series), records in sorted(complete.items()):
        shared = [
            next(why for why in r.recording.unstable if instability.is_contention(why))
            for r in records
            if any(instability.is_contention(why) for why in r.recording.unstable)
        ]
        if 2 * len(shared) > len(records):
            lines.append(
                f"cudaperf record: {key} {{{series}}}: {len(shared)} of {len(records)} recordings "
                f"taken while other processes shared the CPU (e.g. {shared[0]}); the series "
                "carries that noise: record it again on a quiet machine"
            )
    return lines
