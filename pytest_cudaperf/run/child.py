"""Test items run again in a child pytest process.

Two parts of the plugin do this: the launcher of a ``@distributed`` test runs its item in each rank
(:mod:`pytest_cudaperf.distributed`), and a regression measured on the CPU is measured again in a
fresh process before it fails its test (:class:`FreshProcess`: the suspects of a test loop
together, after it, :mod:`pytest_cudaperf.run.confirm`). Both pass the run's resolved
settings as ``PYTEST_CUDAPERF_*`` variables (:func:`settings_env`) and select exactly their items
(:func:`item_args`, :func:`items_args`).

A process can sit in a slow state of its own for every round of a measurement and for its
re-measurement, so the second opinion on a regression of host-dominated code (the CPU's, or GPU
code that synchronizes inside) comes from another process (why:
docs/decisions.md, "Why is a CPU regression confirmed in a fresh process?").
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_cudaperf.report.document import Report, read_report
from pytest_cudaperf.report.fields import ReportError

if TYPE_CHECKING:
    from pytest_cudaperf.measure.measurement import Measurement
    from pytest_cudaperf.settings import Settings

#: set in a fresh process to a private lock folder: it takes its device locks there (the parent
#: holds the real ones while it waits), and confirms nothing in yet another process
FRESH_ENV = "PYTEST_CUDAPERF_FRESH_PROCESS"
#: at most this many tests re-measured in fresh processes of their own (one start-up each) per
#: pytest process (an xdist worker counts as one); past it such a regression stands on its
#: confirmation in the same process, and says so. The batch of a test loop's suspects is one
#: process, whatever its number of tests, and measures them all (why: docs/decisions.md, "Why
#: at most 20 processes of their own, and every suspect in the loop's batch?")
FRESH_LIMIT = 20
#: environment variables a fresh process does not inherit: the run's settings (it gets them
#: resolved, from :func:`settings_env`), and the GitHub job's, so that it appends no job summary
CHILD_DROPS = ("PYTEST_CUDAPERF_", "GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY")
#: how long a fresh process may take (start, collection, the test) before it counts as failed
FRESH_TIMEOUT_S = 300.0
#: set in a fresh process to a file it appends each finished test's node id to
#: (:func:`note_finished`), which its parent reads for its progress line
PROGRESS_ENV = "PYTEST_CUDAPERF_FRESH_PROGRESS"
#: at most one progress line per this many seconds while a fresh process runs, and only when
#: more of its tests have finished
PROGRESS_EVERY_S = 10.0


def note_finished(nodeid: str, environ: Mapping[str, str] = os.environ) -> None:
    """In a fresh process whose parent asked for progress (:data:`PROGRESS_ENV`): ``nodeid``
    has finished. Elsewhere nothing."""
    path = environ.get(PROGRESS_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as file:
            file.write(nodeid + "\n")


def finished_count(path: Path) -> int:
    """How many distinct tests a fresh process has noted finished in ``path`` (0 before the
    first; a ``@distributed`` test's ranks may note it again)."""
    try:
        return len(set(path.read_text(encoding="utf-8").splitlines()))
    except OSError:
        return 0


def settings_env(settings: Settings, baseline_dir: Path) -> dict[str, str]:
    """The run's resolved settings as ``PYTEST_CUDAPERF_*`` (the environment overrides the ini file
    in the child). A child never writes files: no JSON, HTML or history, no pruning; baselines
    are written by the parent's run. It re-measures times only: no speed of light or energy
    window of its own (the parent's stand), no leak sweep. A list is written as the
    environment variable reads it (comma-separated), an empty one not at all; an option with a
    writer of its own by it (:attr:`pytest_cudaperf.settings.Option.write`: a seed left off as
    ``off``, so that the child leaves the generators alone too)."""
    from pytest_cudaperf.settings import OPTIONS

    env: dict[str, str] = {}
    for option in OPTIONS:
        value = getattr(settings, option.field)
        if option.write is not None:
            value = option.write(value)
        if option.field in ("json", "html", "history") or value is None:
            continue
        if option.field == "baseline_dir":
            value = str(baseline_dir)
        elif option.field in ("prune", "roofline", "energy"):
            value = False
        elif option.field == "leak_sweep":
            value = "off"
        if isinstance(value, tuple):
            if not value:
                continue
            value = ",".join(map(str, value))
        env[option.env] = ("1" if value else "0") if isinstance(value, bool) else str(value)
    return env


def item_args(
    nodeid: str,
    item_path: Path,
    config: tuple[Path, Path | None],
    basetemp: Path,
    tbstyle: str = "auto",
) -> list[str]:
    """``pytest`` arguments that run exactly this item in a child process, under the parent's
    ``config`` (its rootdir and inifile). ``-n0`` (xdist is a dependency) rather than disabling
    xdist: a suite's ``addopts = -n auto`` still parses."""
    return items_args([(nodeid, item_path)], config, basetemp, tbstyle)


def items_args(
    items: Sequence[tuple[str, Path]],
    config: tuple[Path, Path | None],
    basetemp: Path,
    tbstyle: str = "auto",
) -> list[str]:
    """:func:`item_args` of several items (node id, the item's file), each selected exactly."""
    rootdir, inifile = config
    targets = []
    for nodeid, item_path in items:
        rest = nodeid.split("::", 1)[1] if "::" in nodeid else ""
        targets.append(f"{item_path}::{rest}" if rest else str(item_path))
    # no report header: a suite's header hooks may run subprocesses (kornia's runs lscpu,
    # nvidia-smi and gcc), and an addopts `-v` would print it despite the -q
    args = [*targets, "-n0", "-p", "no:cacheprovider", "-p", "no:randomly", "-q", "--no-header"]
    args.append(f"--tb={'short' if tbstyle == 'auto' else tbstyle}")
    args += ["--rootdir", str(rootdir), *private_paths(basetemp)]
    if inifile is not None:
        args += ["-c", str(inifile)]
    return args


def private_paths(basetemp: Path) -> list[str]:
    """A child's own base temporary directory, and its JUnit XML file beside it: with a
    ``--junitxml`` in the suite's ``addopts`` the child would write the user's file (the last
    value given wins), which its parent then overwrites."""
    return ["--basetemp", str(basetemp), f"--junitxml={basetemp}-junit.xml"]


#: options of the parent's command line a fresh process does not take, and whether each takes
#: a value: those that start workers or reruns, write the parent's files (the parent writes every
#: report), need the cache (the child runs with ``-p no:cacheprovider``) or stop for a debugger;
#: the child sets its own selection, report and breakdown options
DROPPED_OPTIONS = {
    **dict.fromkeys(("-n", "--numprocesses", "--maxprocesses", "--dist", "--tx"), True),
    **dict.fromkeys(("-d", "--distload", "-f", "--looponfail"), False),
    **dict.fromkeys(("--max-worker-restart", "--reruns", "--reruns-delay"), True),
    **dict.fromkeys(("--junitxml", "--junit-xml", "--junit-prefix", "--basetemp"), True),
    **dict.fromkeys(("--rootdir", "-c", "--config-file", "--lfnf"), True),
    **dict.fromkeys(("--last-failed-no-failures",), True),
    **dict.fromkeys(("--lf", "--last-failed", "--ff", "--failed-first", "--nf"), False),
    **dict.fromkeys(("--new-first", "--sw", "--stepwise", "--sw-skip"), False),
    **dict.fromkeys(("--stepwise-skip", "--cache-clear", "--cache-show"), False),
    **dict.fromkeys(("--pdb", "--trace"), False),
    **dict.fromkeys(("--pdbcls",), True),
    **dict.fromkeys(("--html", "--report-log", "--result-log", "--benchmark-json"), True),
    **dict.fromkeys(("--benchmark-save", "--benchmark-histogram"), True),
    **dict.fromkeys(("--benchmark-autosave", "--self-contained-html"), False),
    **dict.fromkeys(("--cudaperf-json", "--cudaperf-html", "--cudaperf-history"), True),
    **dict.fromkeys(("--cudaperf-breakdown",), True),
    **dict.fromkeys(("--cudaperf-update", "--cudaperf-prune"), False),
}


def passed_args(invocation: Sequence[str], positional: Sequence[str] = ()) -> list[str]:
    """The parent's command line as a fresh process takes it: every option, ``-p`` plugins and
    a suite's own options (a conftest's ``--device cuda`` decides which parametrized items
    exist) included, but the test paths (``positional``: the child names its one item) and
    :data:`DROPPED_OPTIONS` (``--opt=value``, ``--opt value`` and ``-nVALUE`` forms alike);
    every ``--cov*`` option too (coverage files are the parent's)."""
    paths = list(positional)
    kept: list[str] = []
    skip = False
    for arg in invocation:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name.startswith("--cov"):
            skip = "=" not in arg and name in ("--cov", "--cov-report", "--cov-config")
            continue
        if name in DROPPED_OPTIONS:
            skip = DROPPED_OPTIONS[name] and "=" not in arg
            continue
        if len(arg) > 2 and arg[:2] in ("-n", "-c", "-d") and not arg.startswith("--"):
            continue  # -n2, -cFILE
        if not arg.startswith("-") and arg in paths:
            paths.remove(arg)
            continue
        kept.append(arg)
    return kept


def read_times(report: Report, nodeid: str) -> dict[tuple[str, str], Measurement]:
    """The time measurements of ``nodeid`` in a report, by (series key, series)."""
    return {
        (str(judged.key), judged.series): judged.measurement
        for outcome in report.tests
        if outcome.nodeid == nodeid
        for judged in outcome.records
        if judged.series.startswith("time:") and judged.measurement is not None
    }


#: a test's time measurements in a fresh process, by (series key, series), or why there are none
Fresh = dict[tuple[str, str], "Measurement"] | str


@dataclass
class FreshProcess:
    """Runs tests again in a new pytest process (these items only, the run's settings, no
    breakdowns, nothing written but a private JSON report) and reads their time measurements
    back: one test in its own process (:meth:`measurements`: a suspect confirmed inside its
    call), or every suspect of this process's test loop together in one (:meth:`batch`). One run
    per test, whatever number of its measurements ask, unless asked ``again``; at most ``limit``
    tests re-measured in processes of their own per process; a batch, one start-up, runs every
    test it is given."""

    root: Path
    inifile: Path | None
    env: Mapping[str, str]
    options: Sequence[str] = ()
    #: where the child starts (the parent's invocation folder: a relative path among ``options``
    #: means there what it meant to the parent); None: ``root``
    cwd: Path | None = None
    limit: int = FRESH_LIMIT
    #: per test it runs
    timeout_s: float = FRESH_TIMEOUT_S
    _done: dict[str, Fresh] = field(default_factory=dict)
    #: the tests re-measured in fresh processes of their own so far
    _own: set[str] = field(default_factory=set)

    def measurements(
        self, nodeid: str, env: Mapping[str, str] | None = None, again: bool = False
    ) -> Fresh:
        """The test's time measurements in a fresh process (``env`` added to its environment:
        the GPU it must measure on), or why there are none; ``again``: in another fresh process
        than the one before. Past the ``limit`` of tests in processes of their own, a new test
        is not run."""
        if again:
            self._done.pop(nodeid, None)
        if nodeid not in self._done:
            if nodeid not in self._own and len(self._own) >= self.limit:
                return (
                    f"{self.limit} tests were already re-measured in fresh processes of their "
                    "own in this one"
                )
            self._own.add(nodeid)
            self._done[nodeid] = self.batch([nodeid], env or {})[nodeid]
        return self._done[nodeid]

    def batch(
        self,
        nodeids: Sequence[str],
        extra: Mapping[str, str],
        progress: Callable[[str], None] | None = None,
    ) -> dict[str, Fresh]:
        """The time measurements of each test in ``nodeids`` (distinct) taken together in ONE
        fresh process (``extra`` added to its environment), or why there are none. Every test
        is run: the process starts once, and each test costs about what measuring it cost the
        run. ``progress`` is told how many have finished, at most every
        :data:`PROGRESS_EVERY_S`."""
        with tempfile.TemporaryDirectory(prefix="cudaperf-fresh-") as tmp:
            report = Path(tmp, "fresh.json")
            items = [(nodeid, self.root / nodeid.split("::", 1)[0]) for nodeid in nodeids]
            args = [sys.executable, "-m", "pytest"]
            args += items_args(items, (self.root, self.inifile), Path(tmp, "basetemp"), "line")
            args += [*self.options, f"--cudaperf-json={report}", "--cudaperf-breakdown=off"]
            env = {k: v for k, v in os.environ.items() if not k.startswith(CHILD_DROPS)}
            env.update(self.env)
            env.update(extra)
            env[FRESH_ENV] = str(Path(tmp, "locks"))
            env[PROGRESS_ENV] = str(Path(tmp, "finished.txt"))
            timeout_s = self.timeout_s * len(nodeids)
            told = _Told(Path(env[PROGRESS_ENV]), len(nodeids), progress)
            try:  # on Ctrl-C (or any error) _completed kills the child before the folder goes
                done = _completed(args, self.cwd or self.root, env, timeout_s, told)
            except subprocess.TimeoutExpired:
                return dict.fromkeys(nodeids, f"it did not finish in {timeout_s:.0f} s")
            except OSError as exc:
                return dict.fromkeys(nodeids, f"it could not start: {exc}")
            try:
                read = read_report(report)
            except ReportError:
                read = None
        lines = (done.stdout + done.stderr).strip().splitlines()
        last = lines[-1].strip() if lines else "no output"
        why = f"pytest exited {done.returncode} without measuring it ({last})"
        found: dict[str, Fresh] = {}
        for nodeid in nodeids:
            times = read_times(read, nodeid) if read is not None else {}
            found[nodeid] = times or why
        return found


@dataclass
class _Told:
    """A fresh process's progress: how many of its ``total`` tests have finished (read from
    ``path``), told to ``progress`` when more have, at most every :data:`PROGRESS_EVERY_S`, and
    once it has ended (:meth:`close`): how many it measured in how long, and when its first
    finished (the process's start-up and collection, and that test)."""

    path: Path
    total: int
    progress: Callable[[str], None] | None
    last: float = field(default_factory=time.monotonic)
    finished: int = 0
    started: float = field(default_factory=time.monotonic)
    #: when a poll first found a finished test (to a poll's second)
    first_at: float | None = None

    def poll(self, now: float) -> None:
        if self.progress is None:
            return
        if self.first_at is None and finished_count(self.path):
            self.first_at = now
        if now - self.last < PROGRESS_EVERY_S:
            return
        self.last = now
        finished = min(finished_count(self.path), self.total)
        if finished > self.finished:
            self.finished = finished
            self.progress(
                f"cudaperf: the fresh process has measured {finished} of {self.total} tests"
            )

    def close(self, now: float) -> None:
        """The process has ended: how many of its tests it measured in how long (none
        measured: nothing to say, its tests say why)."""
        finished = min(finished_count(self.path), self.total)
        if self.progress is None or not finished:
            return
        line = f"cudaperf: the fresh process measured {finished} of {self.total} tests"
        line += f" in {now - self.started:.0f} s"
        if self.first_at is not None and self.total > 1:
            line += f" (the first after {self.first_at - self.started:.0f} s)"
        self.progress(line)


def _completed(
    args: Sequence[str], cwd: Path, env: Mapping[str, str], timeout_s: float, told: _Told
) -> subprocess.CompletedProcess[str]:
    """``args`` run to the end, their output captured, ``told`` polled each second meanwhile;
    killed past ``timeout_s`` (``subprocess.TimeoutExpired``) or on any error, Ctrl-C
    included."""
    started = time.monotonic()
    with subprocess.Popen(
        args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as child:
        try:
            while True:
                try:  # a retried communicate() loses no output
                    out, err = child.communicate(timeout=1.0)
                    told.close(time.monotonic())
                    return subprocess.CompletedProcess(args, child.returncode, out, err)
                except subprocess.TimeoutExpired:
                    now = time.monotonic()
                    if now - started > timeout_s:
                        raise subprocess.TimeoutExpired(args, timeout_s) from None
                    told.poll(now)
        except BaseException:
            child.kill()
            child.communicate()
            raise
