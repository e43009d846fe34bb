"""Smoke run of every benchmark script: each on the CPU at tiny sizes, a few seconds, so that a
change to the package that breaks a script (a renamed function, a moved module, a changed report)
fails CI instead of the next evidence run on a GPU.

Each smoke is a list of steps run in order in a temporary folder (``{out}``); a step is a
script of this folder with its arguments (mostly ``--smoke``, which shrinks the script and, for
a script that needs a GPU or a public project, runs its CPU-reachable parts on a small
synthetic input: README.md says what each covers). Smokes run side by side (``--jobs``); the run
fails when a step exits non-zero or runs past ``--timeout``, or when a script of this folder is
in no smoke.

    python benchmarks/smoke.py [--jobs 2] [--only bench_suite.py ...] [--keep DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from bench_suite import plugin_env  # noqa: E402

#: smoke name -> steps; a step is a script of benchmarks/ (or a suite folder, run by pytest)
#: and its arguments; ``{out}`` is the smoke's own temporary folder. The longest first, so that
#: the short ones fill in beside them
SMOKES: dict[str, list[list[str]]] = {
    "bench_busy_entry.py": [["bench_busy_entry.py", "--smoke", "--out", "{out}"]],
    "bench_batch_confirm.py": [["bench_batch_confirm.py", "--smoke", "--out", "{out}"]],
    "bench_allreduce.py": [["bench_allreduce.py", "--smoke"]],
    "bench_suite.py": [
        ["bench_suite.py", "--suite", "cpu", "--smoke", "--out", "{out}/suite"],
        ["rejudge.py", "{out}/suite", "--realised", "1.5"],
        ["fresh_tally.py", "{out}/suite", "--list"],
    ],
    "bench_xdist.py": [["bench_xdist.py", "--smoke", "--out", "{out}"]],
    "bench_timing.py": [["bench_timing.py", "--smoke", "--out", "{out}"]],
    "bench_history_commits.py": [["bench_history_commits.py", "--smoke", "--out", "{out}"]],
    "bench_host_causes.py": [["bench_host_causes.py", "--smoke", "--out", "{out}/causes.json"]],
    "public_suites": [["public_suites/smoke.sh", "{out}"]],
    "bench_ab.py": [["bench_ab.py", "--smoke", "--out", "{out}/ab"]],
    "bench_leak_sweep.py": [["bench_leak_sweep.py", "--smoke", "--out", "{out}"]],
    "bench_leak_cost.py": [["bench_leak_cost.py", "--smoke", "--out", "{out}"]],
    "bench_roofline.py": [["bench_roofline.py", "--smoke", "--out", "{out}"]],
    "bench_host_plant.py": [["bench_host_plant.py", "--smoke", "--out", "{out}/plant.json"]],
    "bench_host_probe.py": [
        ["bench_host_probe.py", "--smoke", "--out", "{out}/probe.json"],
        [
            "bench_host_probe.py",
            "--smoke",
            "--busy-between",
            "0.2",
            "--profile-between",
            "--keep-cupti",
        ],
    ],
    "suite_gpu": [["suite_gpu", "-k", "add", "--cudaperf-max-time=0.05"]],
    "bench_breakdown_cost.py": [["bench_breakdown_cost.py", "--smoke", "--out", "{out}"]],
    "bench_overhead.py": [["bench_overhead.py", "--smoke", "--out", "{out}"]],
    "bench_own_time.py": [["bench_own_time.py", "--smoke"]],
    "bench_phases.py": [["bench_phases.py", "--smoke"]],
    "bench_kernel_times.py": [["bench_kernel_times.py", "--smoke", "--out", "{out}"]],
    "launch_gaps.py": [
        ["launch_gaps.py", "--smoke", "{out}"],
        ["rejudge.py", "{out}/gpu-suite", "--series", "time:device"],
    ],
    "rejudge_host.py": [["rejudge_host.py", "--smoke", "{out}"]],
    "bench_ab_confirm.py": [["bench_ab_confirm.py", "--smoke", "--out", "{out}"]],
    "bench_ab_stop.py": [["bench_ab_stop.py", "--smoke", "--out", "{out}"]],
    "bench_changepoints.py": [["bench_changepoints.py", "--smoke", "--out", "{out}"]],
    "bench_drift.py": [["bench_drift.py", "--smoke", "--out", "{out}"]],
    "bench_bisect.py": [["bench_bisect.py", "--smoke", "--out", "{out}/bisect"]],
    "walk.py": [["walk.py"]],
}

#: scripts that another script's smoke runs, not run on their own
RUN_BY = {"bench_worker.py": "bench_timing.py --smoke runs it in two processes"}


@dataclass
class Outcome:
    name: str
    seconds: float
    cpu: float  #: CPU seconds of its processes
    failed: str | None  # the failing step and the tail of its output


def scripts() -> list[str]:
    """Every script of benchmarks/ that a smoke must run (helpers ``_*.py`` and this file
    aside), relative to benchmarks/."""
    found = [p.name for p in HERE.glob("*.py") if not p.name.startswith("_")]
    found += [f"public_suites/{p.name}" for p in (HERE / "public_suites").glob("*.py")]
    found += [f"public_suites/{p.name}" for p in (HERE / "public_suites").glob("*.sh")]
    return sorted(set(found) - {"smoke.py"})


def uncovered() -> list[str]:
    """Scripts in no smoke's steps and not run by another's (a new script must be added)."""
    named = {step[0] for steps in SMOKES.values() for step in steps} | set(RUN_BY)
    # the public suites' smoke runs their plugins, their runner and the judged-at-defaults steps
    named |= {
        "public_suites/ground_truth.py",
        "public_suites/plant.py",
        "public_suites/defaults_table.py",
        "public_suites/tally_waits.py",
        "public_suites/wait_budget.py",
        "public_suites/second_reading.py",
    }
    runners = {"public_suites/run-on-device.sh", "public_suites/judged-at-defaults.sh"}
    named |= runners if "public_suites" in SMOKES else set()
    return [s for s in scripts() if s not in named]


def command(step: list[str], out: Path) -> tuple[list[str], Path]:
    """The command line of one step and the folder it runs in."""
    head, *args = (part.replace("{out}", str(out)) for part in step)
    if head.endswith(".py"):
        return [sys.executable, str(HERE / head), *args], ROOT
    if head.endswith(".sh"):
        return ["bash", str(HERE / head), *args], ROOT
    suite = HERE / head  # a suite folder: its own rootdir and pytest.ini
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", *args], suite


def run_step(cmd: list[str], cwd: Path, timeout: float) -> tuple[int | None, str, float]:
    """Exit status (None: past ``timeout``, its process group killed), output and CPU seconds
    (the step's processes and the ones they waited for) of one step."""
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(
            cmd, cwd=cwd, env=plugin_env(), stdout=log, stderr=subprocess.STDOUT, text=True,
            start_new_session=True,
        )  # fmt: skip
        late = threading.Event()

        def kill() -> None:
            late.set()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)

        timer = threading.Timer(timeout, kill)
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        log.seek(0)
        said = log.read()
    cpu = usage.ru_utime + usage.ru_stime
    return (None if late.is_set() else proc.returncode), said, cpu


def run_smoke(name: str, steps: list[list[str]], base: Path, timeout: float) -> Outcome:
    out = base / name.replace("/", "_").removesuffix(".py")
    out.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    cpu = 0.0
    for step in steps:
        cmd, cwd = command(step, out)
        code, said, used = run_step(cmd, cwd, timeout)
        cpu += used
        if code != 0:
            tail = "\n".join(said.splitlines()[-40:])
            why = f"over {timeout:g} s" if code is None else f"exit {code}"
            return Outcome(name, time.monotonic() - began, cpu, f"{' '.join(step)}: {why}\n{tail}")
    return Outcome(name, time.monotonic() - began, cpu, None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2, help="smokes run side by side")
    parser.add_argument("--only", nargs="+", default=[], metavar="NAME", help="these smokes")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds per step")
    parser.add_argument("--keep", type=Path, default=None, help="leave the outputs in this folder")
    args = parser.parse_args()
    missing = uncovered()
    if missing:
        print(
            f"smoke: no smoke runs {', '.join(missing)}: add it to SMOKES in "
            "benchmarks/smoke.py (and to the table in benchmarks/README.md)",
            file=sys.stderr,
        )
        return 1
    unknown = sorted(set(args.only) - set(SMOKES))
    if unknown:
        parser.error(f"--only: no smoke named {', '.join(unknown)} (known: {', '.join(SMOKES)})")
    chosen = {k: v for k, v in SMOKES.items() if not args.only or k in args.only}
    base = args.keep or Path(tempfile.mkdtemp(prefix="cudaperf-smoke-"))
    began = time.monotonic()
    failed: list[Outcome] = []
    try:
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            futures = [
                pool.submit(run_smoke, name, steps, base.resolve(), args.timeout)
                for name, steps in chosen.items()
            ]
            for future in as_completed(futures):
                outcome = future.result()
                word = "FAILED" if outcome.failed else "ok"
                print(
                    f"{word:<6} {outcome.name:<26} {outcome.seconds:6.1f} s "
                    f"({outcome.cpu:5.1f} s of CPU)",
                    flush=True,
                )
                if outcome.failed:
                    failed.append(outcome)
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = usage.ru_utime + usage.ru_stime
    print(
        f"smoke: {len(chosen) - len(failed)} of {len(chosen)} smokes passed in "
        f"{time.monotonic() - began:.1f} s ({cpu:.1f} s of CPU, {os.cpu_count()} cores, "
        f"--jobs {args.jobs})"
    )
    for outcome in failed:
        print(f"\n== {outcome.name}: {outcome.failed}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
