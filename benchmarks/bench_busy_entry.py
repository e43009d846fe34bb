"""Is every entry point honest on a busy host?

One suite holds every way of measuring on the CPU: ``benchmark(...)``, ``benchmark.pedantic``
with and without a per-round ``setup``, ``benchmark.extra_info``, the ``benchmark`` marker,
``@pytest.mark.perf`` on a whole test, ``cuda_timer.region``, ``cuda_timer.compare`` and
``benchmark.weave`` (with a stand-in aspectlib where it is not installed). Recorded by three
``--cudaperf-update`` runs on the host as it is, then compared unchanged ``--runs`` times on
the host as it is (``quiet``), ``--runs`` times serially with two busy loops holding the cores
(``busy``), ``--xdist-runs`` times under ``-n 2`` with the busy loops (``busy -n2``), and
``--plant-runs`` times on the host as it is with a 3x slowdown planted in ``test_pedantic``
(``quiet+3x``). Then ``cudaperf record --runs 3`` (``--record-runs``) under the busy loops into
a folder of its own, and one unchanged run on the host as it is against what it stored.

Prints the table "entry point x phase: false REGRESSION / false IMPROVED / 3x caught" (caught:
REGRESSION; INCONCLUSIVE with the 3x seen is counted apart) and the load average at the start
and the end; writes the message of every time verdict that is not a pass to ``verdicts.txt``.

    python benchmarks/bench_busy_entry.py --runs 10 --xdist-runs 5 --plant-runs 10 --out out/busy
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _table import publish  # noqa: E402
from bench_suite import plugin_env  # noqa: E402

SUITE = """
import os, pytest, torch
SLOW = int(os.environ.get("SLOW", "1"))
x = torch.randn(256, 256)
def mm(a): return a @ a
def test_plain(benchmark): benchmark(mm, x)
def test_pedantic(benchmark):
    def setup(): return (torch.randn(128, 128),), {}
    def planted(a):
        for _ in range(SLOW):
            mm(a)
    benchmark.pedantic(planted, setup=setup, rounds=20)
def test_extra(benchmark):
    benchmark.extra_info["size"] = 256; benchmark(mm, x)
@pytest.mark.benchmark(group="g", min_rounds=5)
def test_marker(benchmark): benchmark(lambda: mm(x))
def test_pedantic_no_setup(benchmark):
    benchmark.pedantic(mm, args=(x,), rounds=20)
def test_weave(benchmark):
    pytest.importorskip("aspectlib")
    benchmark.weave(mm, lazy=True)
    mm(x)
@pytest.mark.perf
def test_whole(): mm(x)
def test_region(cuda_timer):
    for _ in range(20):
        with cuda_timer.region("mm"):
            mm(x)
@pytest.mark.perf(min_speedup=0.6)
def test_compare(cuda_timer):
    cuda_timer.compare(lambda: mm(x), lambda: x @ x)
"""
#: where aspectlib is not installed, a stand-in beside the suite: aspectlib's weave of a
#: function (its module's attribute replaced by what the aspect returns, and a Rollback); the
#: woven call is ``benchmark(fn, *args)``, measured as any
ASPECTLIB = """
import sys

class Rollback:
    def __init__(self, undo):
        self.rollback = undo

def weave(target, aspects, **options):
    owner, name = sys.modules[target.__module__], target.__name__
    original = owner.__dict__[name]
    setattr(owner, name, aspects(original))
    return Rollback(lambda: setattr(owner, name, original))
"""
#: a spinning process, bounded in time were it left running
SPIN = "import time\nend = time.monotonic() + 900\nwhile time.monotonic() < end: pass"


@contextmanager
def busy_loops(n: int = 2) -> Iterator[None]:
    loops = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(n)]
    try:
        yield
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


def run(
    folder: Path, args: list[str], env: dict[str, str], notes: list[str] | None = None
) -> dict[str, list[str]]:
    """One pytest run of the suite: test name -> its time verdicts ('regression', ...); a
    compare's miss of min_speedup reads 'regression' too. ``notes`` gets the message of each
    time verdict that is not a pass, and the lines that say how exact rounds waited."""
    out = folder / "report.json"
    out.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:benchmark"]
    cmd += ["--cudaperf-breakdown=off", f"--cudaperf-json={out}", *args]
    subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True, check=False)
    if not out.exists():
        return {}
    found: dict[str, list[str]] = {}
    for test in json.loads(out.read_text())["tests"]:
        name = test["nodeid"].split("::")[1]
        times = [r for r in test["records"] if r["series"].startswith("time:")]
        kinds = [r["verdict"]["kind"] for r in times]
        if notes is not None:
            notes += [
                f"{name}: {r['verdict']['message']}"
                for r in times
                if r["verdict"]["kind"] != "pass"
            ]
            notes += [f"{name}: {line}" for line in test["details"] if "exact rounds:" in line]
        if any("min_speedup" in message for _, message in test.get("failures", [])):
            kinds.append("regression")
        found[name] = kinds
    return found


def tally(runs: list[dict[str, list[str]]]) -> dict[str, Counter[str]]:
    counts: dict[str, Counter[str]] = {}
    for found in runs:
        for name, kinds in found.items():
            counts.setdefault(name, Counter()).update(kinds)
            counts[name]["runs"] += 1
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--xdist-runs", type=int, default=5)
    parser.add_argument("--plant-runs", type=int, default=10)
    parser.add_argument("--max-time", default="0.3", help="--cudaperf-max-time of each run")
    parser.add_argument(
        "--record-runs",
        type=int,
        default=3,
        help="cudaperf record --runs under the loops (0: none)",
    )
    parser.add_argument(
        "--smoke", action="store_true", help="one run of each phase, two entry points"
    )
    parser.add_argument("--out", default="out/busy-entry")
    args = parser.parse_args()
    if args.smoke:
        args.runs = args.plant_runs = 1
        args.xdist_runs = 0  # -n 2 adds a minute on a loaded 2-core machine
        args.max_time = "0.05"
    load = os.getloadavg()[0]
    print(f"load average at the start: {load:.1f} on {os.cpu_count()} CPUs", flush=True)
    env = plugin_env()
    timing = [f"--cudaperf-max-time={args.max_time}"]
    if args.smoke:  # that it runs, not its figures: two entry points, no fresh processes
        timing += ["-k", "pedantic or region", "--cudaperf-confirm-process=off"]
        timing += ["--cudaperf-state-wait=1"]  # its busy phase would wait for the CPU in vain
    # the smoke's busy phase spins one loop, not one per core: the smoke beside it keeps a core
    loops = 1 if args.smoke else 2
    phases: dict[str, list[dict[str, list[str]]]] = {}
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="busy-entry-") as tmp:
        folder = Path(tmp)
        (folder / "test_entry.py").write_text(SUITE)
        stand_in = importlib.util.find_spec("aspectlib") is None
        if stand_in:
            (folder / "aspectlib.py").write_text(ASPECTLIB)
        for _ in range(1 if args.smoke else 3):
            run(folder, [*timing, "--cudaperf-update"], env)

        def phase(name: str, count: int, extra: list[str], busy: bool, slow: str = "1") -> None:
            started = time.monotonic()
            said: list[str] = []
            with busy_loops(loops) if busy else _nothing():
                found = [
                    run(folder, [*timing, *extra], {**env, "SLOW": slow}, said)
                    for _ in range(count)
                ]
            phases[name] = found
            notes.extend(f"{name}: {line}" for line in said)
            print(f"{name}: {count} runs in {time.monotonic() - started:.0f} s", flush=True)

        phase("quiet", args.runs, [], busy=False)
        phase("busy", args.runs, [], busy=True)
        phase("busy -n2", args.xdist_runs, ["-n", "2"], busy=True)
        phase("quiet+3x", args.plant_runs, [], busy=False, slow="3")
        # the smoke records nothing: its busy loops would hold both cores from the other smokes
        runs = 0 if args.smoke else args.record_runs
        recorded = record_then_compare(folder, env, timing, runs) if runs else []
    lines = table(phases, load)
    if stand_in:
        lines.append("`test_weave`: with a stand-in aspectlib (aspectlib is not installed)")
    lines += ["", *recorded, "", f"load average at the end: {os.getloadavg()[0]:.1f}"]
    publish(lines, args.out, "RESULTS-busy-entry.md")
    publish(notes or ["(none)"], args.out, "verdicts.txt")
    return 0


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def record_then_compare(
    folder: Path, env: dict[str, str], timing: list[str], runs: int
) -> list[str]:
    """``cudaperf record`` under the busy loops into a folder of its own, then one unchanged run
    on the host as it is: the lines record printed about the CPU it shared, and the IMPROVED."""
    store = folder / "recorded"
    cmd = [sys.executable, "-m", "pytest_cudaperf.cli", "record", "--runs", str(runs)]
    cmd += ["--baseline-dir", str(store), "--", "-p", "no:benchmark", "-p", "no:cacheprovider"]
    with busy_loops():
        done = subprocess.run(
            [*cmd, *timing], cwd=folder, env=env, capture_output=True, text=True, check=False
        )
    named = [
        line for line in done.stdout.splitlines() if "shared the CPU" in line or "BLIND" in line
    ]
    after = run(folder, [*timing, f"--cudaperf-baseline-dir={store}"], env)
    improved = sorted(name for name, kinds in after.items() if "improved" in kinds)
    stored = len(list(store.glob("*.json")))
    return [
        f"cudaperf record --runs {runs} under two busy loops: exit {done.returncode}, "
        f"{stored} baseline file(s), {len(named)} series named as recorded on a shared CPU "
        "or BLIND;",
        f"an unchanged run afterwards on the host as it is: IMPROVED in {improved or 'none'}",
    ]


def table(phases: dict[str, list[dict[str, list[str]]]], load: float) -> list[str]:
    counts = {name: tally(found) for name, found in phases.items()}
    names = sorted({test for c in counts.values() for test in c})
    lines = [
        f"load average {load:.1f} at the start; each cell: false REGRESSION / false IMPROVED "
        "(of runs); quiet+3x: caught (REGRESSION) / seen but INCONCLUSIVE (of runs)",
        "",
        "| entry point | " + " | ".join(phases) + " |",
        "|---" * (len(phases) + 1) + "|",
    ]
    for test in names:
        cells = []
        for phase in phases:
            c = counts[phase].get(test, Counter())
            runs = c["runs"]
            if not runs:
                cells.append("skipped")
            elif phase.endswith("3x"):
                planted = test == "test_pedantic"
                cells.append(
                    f"{c['regression']} / {c['inconclusive']} of {runs}"
                    if planted
                    else f"{c['regression']} / {c['improved']} of {runs} (unplanted)"
                )
            else:
                cells.append(f"{c['regression']} / {c['improved']} of {runs}")
        lines.append(f"| `{test}` | " + " | ".join(cells) + " |")
    return lines


if __name__ == "__main__":
    sys.exit(main())
