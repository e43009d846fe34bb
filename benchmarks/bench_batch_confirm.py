"""What does confirming regressions in a fresh process cost a run?

A 30-test CPU suite written for pytest-benchmark (the ``benchmark`` fixture: 3 torch ops x 10
sizes) is run by pytest-benchmark itself, recorded by ``cudaperf record --runs K`` with the
fixture served by this plugin (``--cudaperf-benchmark``), then judged against those baselines
unchanged and with the ``--planted`` tests made slower by each of ``--factors`` (the timed
callable called that many times); ``--repeat`` rounds of (pytest-benchmark, unchanged, each
planted run), in that order. With ``--before DIR`` each planted run is also made with the package
of another checkout (an earlier design of the confirmation), in the same round. On a shared host
a 3x plant can read INCONCLUSIVE (the CPU contention rule), and then no fresh process confirms
anything: a larger factor shows what the confirmation costs.

Prints each run's wall time, its verdicts (REGRESSION / INCONCLUSIVE counts) and the fresh
processes it started, the load average before each, and the ratios the acceptance reads: the
planted run against the unchanged one, the unchanged one against pytest-benchmark's, and the
recording against one judged run.

    python benchmarks/bench_batch_confirm.py --repeat 2 --factors 3,10 --out out/batch
        [--before /path/to/old]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _table import publish  # noqa: E402
from bench_suite import plugin_env  # noqa: E402

SUITE = """
import os, pytest, torch

torch.set_num_threads(1)
PLANTED = set(filter(None, os.environ.get("PLANT", "").split(",")))
SIZES = [int(n) for n in os.environ.get("SIZES", "16,24,32,48,64,96,128,160,192,256").split(",")]
OPS = {"mm": lambda a: a @ a, "sum": lambda a: a.sum(), "sort": lambda a: a.flatten().sort()}
if os.environ.get("PYTEST_CUDAPERF_FRESH_PROCESS") and os.environ.get("FRESH_LOG"):
    with open(os.environ["FRESH_LOG"], "a") as log:
        log.write(f"{os.getpid()}\\n")


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("op", list(OPS))
def test_op(benchmark, op, n):
    x = torch.randn(n, n, generator=torch.Generator().manual_seed(n))
    fn = OPS[op]
    times = int(os.environ.get("FACTOR", "3")) if f"{op}-{n}" in PLANTED else 1

    def call():
        for _ in range(times):
            fn(x)

    benchmark(call)
"""
PLANTED = "mm-64,sum-128,sort-32"


def _pytest(folder: Path, args: list[str], env: dict[str, str]) -> tuple[float, str]:
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
    began = time.monotonic()
    done = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True, check=False)
    return time.monotonic() - began, done.stdout + done.stderr


def judged(
    folder: Path, store: Path, env: dict[str, str], timing: list[str], name: str
) -> dict[str, object]:
    """One judged run: wall, verdict counts, fresh processes started."""
    report, log = folder / f"{name}.json", folder / f"{name}.fresh"
    log.unlink(missing_ok=True)
    args = ["--cudaperf-benchmark", f"--cudaperf-baseline-dir={store}", *timing]
    args += ["--cudaperf-breakdown=off", f"--cudaperf-json={report}"]
    load = os.getloadavg()[0]
    wall, _ = _pytest(folder, args, {**env, "FRESH_LOG": str(log)})
    kinds: list[str] = []
    if report.exists():
        for test in json.loads(report.read_text())["tests"]:
            kinds += [r["verdict"]["kind"] for r in test["records"]]
    fresh = len(log.read_text().split()) if log.exists() else 0
    return {"wall": wall, "load": load, "kinds": kinds, "fresh": fresh}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--runs", type=int, default=5, help="cudaperf record --runs")
    parser.add_argument("--planted", default=PLANTED, help="op-size of each test planted")
    parser.add_argument("--factors", default="3", help="comma-separated slowdowns planted")
    parser.add_argument("--before", help="a checkout whose package also runs the planted run")
    parser.add_argument("--max-time", help="--cudaperf-max-time (default: the plugin's)")
    parser.add_argument("--smoke", action="store_true", help="3 tests, 1 recording, 1 round")
    parser.add_argument("--out", default="out/batch-confirm")
    args = parser.parse_args()
    env = plugin_env()
    timing = [f"--cudaperf-max-time={args.max_time}"] if args.max_time else []
    if args.smoke:
        env["SIZES"] = "16"  # one test per op: its five pytest processes are the cost
        args.repeat, args.runs, args.planted = 1, 1, "mm-16"
        timing = ["--cudaperf-max-time=0.05"]
    env["PLANT"] = ""
    rows: dict[str, list[dict[str, object]]] = {}
    with tempfile.TemporaryDirectory(prefix="batch-confirm-") as tmp:
        folder = Path(tmp)
        (folder / "test_suite.py").write_text(SUITE)
        store = folder / "baselines"
        cmd = [sys.executable, "-m", "pytest_cudaperf.cli", "record", "--runs", str(args.runs)]
        cmd += ["--baseline-dir", str(store), "--", "-p", "no:cacheprovider"]
        cmd += ["--cudaperf-benchmark", "--cudaperf-breakdown=off", *timing]
        load = os.getloadavg()[0]
        began = time.monotonic()
        subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True, check=False)
        record = {"wall": time.monotonic() - began, "load": load, "kinds": [], "fresh": 0}
        print(f"record --runs {args.runs}: {record['wall']:.0f} s (load {load:.1f})", flush=True)
        for _ in range(args.repeat):
            load = os.getloadavg()[0]
            wall, _ = _pytest(folder, ["-p", "no:cudaperf"], env)
            theirs = {"wall": wall, "load": load, "kinds": [], "fresh": 0}
            runs = {"pytest-benchmark": theirs}
            runs["judged, unchanged"] = judged(folder, store, env, timing, "unchanged")
            for factor in args.factors.split(","):
                planted = {**env, "PLANT": args.planted, "FACTOR": factor}
                name = f"judged, planted {factor}x"
                runs[name] = judged(folder, store, planted, timing, "planted")
                if args.before:
                    old = {**planted, "PYTHONPATH": args.before}
                    runs[f"{name}, --before"] = judged(folder, store, old, timing, "before")
            for name, found in runs.items():
                rows.setdefault(name, []).append(found)
                print(f"{name}: {found['wall']:.0f} s (load {found['load']:.1f})", flush=True)
        rows[f"record --runs {args.runs}"] = [record]
    publish(table(rows), args.out, "RESULTS-batch-confirm.md")
    return 0


def _median(found: list[dict[str, object]]) -> float:
    return statistics.median(float(f["wall"]) for f in found)  # type: ignore[arg-type]


def table(rows: dict[str, list[dict[str, object]]]) -> list[str]:
    lines = ["| run | wall (each round) | load average before | verdicts | fresh processes |"]
    lines.append("|---|---|---|---|---|")
    for name, found in rows.items():
        walls = " / ".join(f"{float(f['wall']):.0f} s" for f in found)  # type: ignore[arg-type]
        loads = " / ".join(f"{float(f['load']):.1f}" for f in found)  # type: ignore[arg-type]
        verdicts = []
        for f in found:
            kinds = list(f["kinds"])  # type: ignore[call-overload]
            verdicts.append(
                f"{kinds.count('regression')} R, {kinds.count('inconclusive')} I" if kinds else "-"
            )
        fresh = " / ".join(str(f["fresh"]) for f in found)
        lines.append(f"| {name} | {walls} | {loads} | {' / '.join(verdicts)} | {fresh} |")
    unchanged = _median(rows["judged, unchanged"])
    record = next(v for k, v in rows.items() if k.startswith("record"))
    lines += [
        "",
        f"unchanged / pytest-benchmark: {unchanged / _median(rows['pytest-benchmark']):.2f}x; "
        f"record / unchanged: {_median(record) / unchanged:.2f}x (medians)",
    ]
    for name, found in rows.items():
        if name.startswith("judged, planted"):
            lines.append(f"{name} / unchanged: {_median(found) / unchanged:.2f}x")
    return lines


if __name__ == "__main__":
    sys.exit(main())
