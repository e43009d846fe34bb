"""Where one judged test's time goes: a per-phase account of a pytest process that runs one test of
a suite (or a selection of them), and how many times the timed callable was called in each phase.

The test runs in a pytest process of its own (with its suite's conftest and the plugin from this
checkout). A thread samples the main thread's stack every millisecond and gives each interval
to the innermost phase on the stack: the pytest phases (start-up, collection, the test's setup,
call and teardown, the report at the end) or, inside the measurement, the plugin's own steps
(warm-up and sampling rounds of the adaptive loop, judging, the kernels timed apart, confirming,
the breakdown, peak memory, the speed-of-light checks). The callable the test times is wrapped
so that each call is counted in the phase it was made in. Phases are found by function name, so
a step the plugin renames is counted in the phase around it (the script lists the steps that no
sample or call met: renamed, not run, or too short for a 1 ms sample). The interpreter's start
(with pytest's import) and the process's exit are timed from the parent.

    python benchmarks/bench_phases.py [--suite benchmarks/suite_cpu] [--test EXPR] [--repeat N]
        [--smoke] [-- PYTEST_ARGS]

``--test`` is a ``-k`` expression choosing the tests (default: the suite's first; with several,
the account is the process's, and the tests that spent most in each phase are named after it);
``--repeat`` runs that many processes and prints each account (the phases move with the load);
``--smoke`` runs two small tests with a 0.05 s time budget. Nothing is written.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_suite import plugin_env  # noqa: E402

#: the plugin's steps, by function name (innermost wins); ``run_adaptive`` is split at its
#: sampling loop into warm-up and sampling rounds
STEPS: dict[str, str] = {
    "run_adaptive": "sampling rounds",
    "_rounds": "sampler set-up and finish",
    "judge": "judging",
    "judge_measured": "judging",
    "judge_time": "judging",
    "add_time": "judging",
    "until_back": "waiting for the host's state",
    "kernels": "kernels timed apart",
    "kernel_times": "kernels timed apart",
    "confirm_time": "confirming (in process)",
    "host_back": "confirming (in process)",
    "confirm_fresh": "confirming (fresh process)",
    "confirm_deferred": "confirming (fresh process)",
    "_with_breakdown": "breakdown",
    "read_peak": "peak memory",
    "peak": "peak memory",
    "add_peak": "peak memory",
    "after_measurement": "speed of light and checks",
    "count_work": "speed of light and checks",
    "runs_cuda_work": "CUDA-work and sync checks",
    "synchronizes": "CUDA-work and sync checks",
    "_synchronizes": "CUDA-work and sync checks",
}
#: the order of the account
ORDER = [
    "interpreter start, pytest import",
    "start-up (imports, plugins, configure)",
    "collection",
    "test setup (fixtures)",
    "test body (outside the timer)",
    "warm-up",
    "sampling rounds",
    "sampler set-up and finish",
    "judging",
    "kernels timed apart",
    "waiting for the host's state",
    "confirming (in process)",
    "confirming (fresh process)",
    "breakdown",
    "peak memory",
    "CUDA-work and sync checks",
    "speed of light and checks",
    "test teardown",
    "report (session finish, terminal, JSON)",
    "process exit",
]
INTERVAL_S = 0.001
#: the phase between the pytest phases, and after the last one
AFTER = "report (session finish, terminal, JSON)"


class Account:
    """The child's bookkeeping: the pytest phase now, seconds and callable calls per phase."""

    def __init__(self) -> None:
        self.phase = "start-up (imports, plugins, configure)"
        #: the test whose run protocol is on (None between tests)
        self.test: str | None = None
        self.seconds: dict[str, float] = {}
        #: seconds per test and phase, of the time a test's run protocol was on
        self.by_test: dict[tuple[str, str], float] = {}
        self.calls: dict[str, int] = {}
        self.met: set[str] = set()
        self._codes: dict[CodeType, str | None] = {}
        self._warmup_ends: int | None = None
        self._main = threading.main_thread().ident or 0
        self._stop = threading.Event()

    def _step(self, code: CodeType) -> str | None:
        if code not in self._codes:
            name = code.co_name
            ours = "pytest_cudaperf" in code.co_filename
            self._codes[code] = STEPS.get(name) if ours else None
            if ours and name == "run_adaptive":
                self._warmup_ends = _loop_start(code)
        return self._codes[code]

    def where(self, frame: FrameType | None) -> str:
        """The innermost phase of a stack."""
        while frame is not None:
            step = self._step(frame.f_code)
            if step is not None:
                self.met.add(frame.f_code.co_name)
                if step == "sampling rounds" and self._warmup_ends is not None:
                    return "warm-up" if frame.f_lineno < self._warmup_ends else step
                return step
            frame = frame.f_back
        return self.phase

    def sample(self) -> None:
        last = time.perf_counter()
        while not self._stop.wait(INTERVAL_S):
            frame = sys._current_frames().get(self._main)
            now = time.perf_counter()
            phase = self.where(frame)
            self.seconds[phase] = self.seconds.get(phase, 0.0) + now - last
            test = self.test
            if test is not None:
                self.by_test[test, phase] = self.by_test.get((test, phase), 0.0) + now - last
            last = now

    def stop(self) -> None:
        self._stop.set()

    def counted(self, call: Callable[[], object]) -> Callable[[], object]:
        @functools.wraps(call)
        def counting(*args: Any, **kwargs: Any) -> object:
            phase = self.where(sys._getframe(1))
            self.calls[phase] = self.calls.get(phase, 0) + 1
            return call(*args, **kwargs)

        return counting


def _loop_start(code: CodeType) -> int | None:
    """The first line of run_adaptive's sampling loop (after the warm-up's)."""
    try:
        lines, first = inspect.getsourcelines(code)
    except (OSError, TypeError):
        return None
    for offset, line in enumerate(lines):
        if "samples: list[float] = []" in line or line.strip().startswith("compiled_before ="):
            return first + offset
    return None


class PhasePlugin:
    """pytest hooks that move the account's pytest phase."""

    def __init__(self, account: Account) -> None:
        self.account = account

    def _during(self, phase: str, after: str) -> Any:
        self.account.phase = phase
        yield
        self.account.phase = after

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Any:
        self.account.test = item.nodeid
        yield
        self.account.test = None

    @pytest.hookimpl(hookwrapper=True)
    def pytest_collection(self) -> Any:
        yield from self._during("collection", AFTER)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_setup(self) -> Any:
        yield from self._during("test setup (fixtures)", AFTER)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self) -> Any:
        yield from self._during("test body (outside the timer)", AFTER)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_teardown(self) -> Any:
        yield from self._during("test teardown", AFTER)


def child(out: str, started: float, pytest_args: list[str]) -> int:
    """In the pytest process: sample, count, run pytest, write the account to ``out``."""
    account = Account()
    sampler = threading.Thread(target=account.sample, daemon=True)
    sampler.start()
    from pytest_cudaperf.fixtures import timer

    target = timer.Timer.target  # every callable `cuda_timer` and `benchmark` time is built here

    def target_counted(self: Any, call: Callable[[], object], *args: Any, **kw: Any) -> Any:
        return target(self, account.counted(call), *args, **kw)

    timer.Timer.target = target_counted  # type: ignore[method-assign]
    rc = pytest.main(pytest_args, plugins=[PhasePlugin(account)])
    account.stop()
    sampler.join()
    unmet = sorted(set(STEPS) - account.met)
    Path(out).write_text(
        json.dumps(
            {
                "rc": int(rc),
                "child_began": started,
                "seconds": account.seconds,
                "calls": account.calls,
                "by_test": [[t, p, x] for (t, p), x in account.by_test.items()],
                "unmet": unmet,
            }
        )
    )
    return 0


def account_of(suite: Path, selected: list[str], out: Path) -> dict[str, Any]:
    """One pytest process's account; its wall time and interpreter start from here."""
    args = [*selected, "-q", "-p", "no:cacheprovider"]
    cmd = [sys.executable, __file__, "--child", str(out), "--", *args]
    began = time.perf_counter()
    wall_began = time.time()
    done = subprocess.run(
        cmd, check=False, cwd=suite, env=plugin_env(), capture_output=True, text=True
    )
    wall = time.perf_counter() - began
    if not out.exists():
        sys.exit(f"bench_phases: the pytest process failed:\n{done.stdout[-3000:]}{done.stderr}")
    found: dict[str, Any] = json.loads(out.read_text())
    found["wall"] = wall
    found["seconds"]["interpreter start, pytest import"] = max(
        0.0, found["child_began"] - wall_began
    )
    found["seconds"]["process exit"] = max(0.0, wall - sum(found["seconds"].values()))
    found["tail"] = done.stdout.strip().splitlines()[-1:] or [""]
    return found


def record(suite: Path, selected: list[str], out: Path) -> None:
    """The baseline the accounted run is judged against: one process in update mode, its
    callable wrapped the same way (the count costs a few µs a call)."""
    found = account_of(suite, [*selected, "--cudaperf-update"], out)
    if found["rc"] != 0:
        sys.exit(f"bench_phases: recording the baseline failed: {found['tail'][-1]}")


def _first_test(suite: Path) -> str:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(suite),
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
        ],
        check=False,
        cwd=suite,
        env=plugin_env(),
        capture_output=True,
        text=True,
    )
    tests = [line for line in done.stdout.splitlines() if "::" in line]
    if not tests:
        sys.exit(f"bench_phases: no test collected in {suite}:\n{done.stdout[-2000:]}")
    return tests[0]


def table(found: dict[str, Any]) -> list[str]:
    seconds: dict[str, float] = found["seconds"]
    calls: dict[str, int] = found["calls"]
    total = sum(seconds.values())
    lines = [
        f"{'phase':<42} {'seconds':>8} {'share':>6} {'calls':>7}",
    ]
    for phase in ORDER + sorted(set(seconds) - set(ORDER)):
        s, n = seconds.get(phase, 0.0), calls.get(phase, 0)
        if s < 0.0005 and not n:
            continue
        lines.append(f"{phase:<42} {s:8.3f} {s / total:6.1%} {n:7d}")
    lines.append(f"{'process wall':<42} {total:8.3f} {'':>6} {sum(calls.values()):7d}")
    return lines


#: the tests named for each step in :func:`by_test`, and the least a step must take to be shown
MOST_TESTS = 3
SHOWN_S = 0.5


def by_test(found: dict[str, Any]) -> list[str]:
    """For each phase that took :data:`SHOWN_S` or more within tests (the plugin's steps, the
    tests' own setup and bodies), the :data:`MOST_TESTS` tests that spent most in it; nothing
    where one test ran."""
    spent: dict[str, dict[str, float]] = {}
    for test, phase, seconds in found.get("by_test", []):
        spent.setdefault(phase, {})[test] = seconds
    if len({t for tests in spent.values() for t in tests}) < 2:
        return []
    lines = ["most in a step, by test:"]
    for phase in ORDER:
        tests = spent.get(phase, {})
        if sum(tests.values()) < SHOWN_S:
            continue
        top = sorted(tests, key=lambda t: -tests[t])[:MOST_TESTS]
        named = ", ".join(f"{t.rsplit('::', 1)[-1]} {tests[t]:.2f} s" for t in top)
        lines.append(f"  {phase}: {named}")
    return lines if len(lines) > 1 else []


def main() -> int:
    if "--child" in sys.argv:
        at = sys.argv.index("--child")
        started = time.time()
        rest = sys.argv[sys.argv.index("--") + 1 :]
        return child(sys.argv[at + 1], started, rest)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default=str(HERE / "suite_cpu"))
    parser.add_argument("--test", default=None, help="a -k expression choosing one test")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("pytest_args", nargs="*")
    args = parser.parse_args()
    suite = Path(args.suite).resolve()
    extra = list(args.pytest_args)
    test = args.test
    if args.smoke:
        extra.append("--cudaperf-max-time=0.05")
        test = test or (
            "test_sorted_list and (1000 or 3000) and not 10000 and not 30000 and not 100000"
        )
    import tempfile

    with tempfile.TemporaryDirectory(prefix="bench-phases-") as tmp:
        extra.append(f"--cudaperf-baseline-dir={Path(tmp) / 'baselines'}")
        selected = [*(["-k", test] if test else [_first_test(suite)]), *extra]
        record(suite, selected, Path(tmp) / "record.json")
        for k in range(args.repeat):
            found = account_of(suite, selected, Path(tmp) / f"account{k}.json")
            print(
                f"bench_phases: {suite.name}, {test or selected[0]}, judged against a baseline "
                f"of one process (the callable counted in both); pytest says: {found['tail'][-1]}"
            )
            print("\n".join(table(found) + by_test(found)))
            if found["unmet"]:
                print(f"(steps no sample or call met: {', '.join(found['unmet'])})")
    print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
