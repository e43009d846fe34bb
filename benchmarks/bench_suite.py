"""Suite-scale A/A and planted-slowdown benchmark, run as a user runs the plugin.

    python benchmarks/bench_suite.py --suite gpu --record-runs 3 --runs 20 \
        --plant 0.03,0.05,0.10,0.20 --plant-runs 3 --xdist 4 --out out/suite-gpu

1. record the baselines with the documented workflow (``cudaperf record --runs K -- <pytest
   args>``; ``--record-with-updates`` runs ``pytest --cudaperf-update`` K times instead);
2. N unchanged runs, each its own pytest process (``--cudaperf-json`` and ``--junitxml`` each);
3. planted runs at each level (CUDAPERF_PLANT, see _plant.py), ``--plant-runs`` each;
4. with ``--xdist X[,Y...]``: steps 2 and 3 again under ``pytest -n X`` (and ``-n Y``), against
   the same baselines (recorded serially).

``--smoke`` (CPU suites): two tests, one recording (``pytest --cudaperf-update``), one unchanged
and one planted (3x) run, a short measurement budget: the whole pipeline in seconds, its folder
one that ``rejudge.py`` and ``fresh_tally.py`` can read.

Failures are counted from the JUnit XML, which also names the tests that failed on an exception
rather than on a verdict (``read_junit``: the table lists them); verdict kinds and medians come
from the JSON report
through ``read_report`` (which knows the report's layout) and ``series_kinds`` (through the
plugin's own reader). The
realised change of a planted test-run is its median over the median of that test's unchanged
runs in the same mode. Writes ``rows.jsonl`` (one row per test-run), ``runs.jsonl`` (one row per
pytest process) and ``table.md`` (with the verdicts of every series, by mode and plant) into
--out. ``--max-seconds`` stops before a run that would not fit, with a partial table.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import re
import statistics
import sys
import time
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from pytest_cudaperf.cli.process import run_in_session  # noqa: E402
from pytest_cudaperf.report.document import read_report as read_document  # noqa: E402
from pytest_cudaperf.signals import Terminated, sigterm_raises  # noqa: E402

#: the tests a --smoke run selects (-k), per suite
SMOKE_TESTS = {"cpu": "test_json_dumps and (10] or 100])", "ops": "test_add or test_sort"}

#: realised-change bins of the catch-rate table: (label, low, high) as ratios - 1
BINS = [
    ("< +2%", -1.0, 0.02),
    ("+2…4% (≈ +3%)", 0.02, 0.04),
    ("+4…7.5% (≈ +5%)", 0.04, 0.075),
    ("+7.5…15% (≈ +10%)", 0.075, 0.15),
    ("+15…30% (≈ +20%)", 0.15, 0.30),
    ("≥ +30%", 0.30, float("inf")),
]


@dataclass
class TestResult:
    kind: str | None  # verdict kind of the test's first time series: pass, regression, ...
    median_ms: float | None


def read_report(path: Path) -> dict[str, TestResult]:
    """nodeid -> verdict kind and median of the test's first time series, from a
    --cudaperf-json report."""
    document = json.loads(path.read_text())
    results: dict[str, TestResult] = {}
    for test in document.get("tests", []):
        for record in test.get("records", []):
            series = str(record.get("series", record.get("key", "")))
            if series.startswith("memory"):
                continue
            verdict = record.get("verdict") or {}
            measurement = record.get("measurement") or {}
            results[test["nodeid"]] = TestResult(
                kind=verdict.get("kind"), median_ms=measurement.get("median_ms")
            )
            break
    return results


def series_kinds(path: Path) -> Counter[tuple[str, str]]:
    """(series, verdict kind) of every judged record of a --cudaperf-json report (read by the
    plugin's own reader), the series without its cache state (``time:device/cold`` ->
    ``time:device``)."""
    return Counter(
        (judged.record.series.split("/")[0], judged.verdict.kind.value)
        for test in read_document(path).tests
        for judged in test.records
    )


def series_table(out: Path) -> list[str]:
    """Verdicts per series, over the unchanged runs of each mode and over each plant's runs."""
    groups: dict[tuple[str, str], Counter[tuple[str, str]]] = defaultdict(Counter)
    for path in sorted(out.glob("*-*-*.json")):
        mode, phase, rest = path.stem.split("-", 2)
        if phase not in ("unchanged", "planted"):
            continue
        plant = rest.rsplit("-", 1)[0] if phase == "planted" else ""
        groups[(mode, plant)] += series_kinds(path)
    lines = [
        "| mode | plant | series | verdicts | PASS | INCONCLUSIVE | REGRESSION | NEW |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (mode, plant), kinds in sorted(groups.items()):
        for name in sorted({series for series, _ in kinds}):
            count = {kind: n for (series, kind), n in kinds.items() if series == name}
            lines.append(
                f"| {mode} | {plant or '—'} | `{name}` | {sum(count.values())} | "
                f"{count.get('pass', 0)} | {count.get('inconclusive', 0)} | "
                f"{count.get('regression', 0)} | {count.get('new', 0)} |"
            )
    return lines


#: a JUnit failure message that is an exception's (``ZeroDivisionError: float division by zero``,
#: or a warning that ``-W error`` raised), not a verdict's (``perf regression: …``)
EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Warning|Interrupt|Exit)\b")


def read_junit(path: Path) -> tuple[dict[str, bool], dict[str, str]]:
    """From a JUnit XML file, read once: 'classname::name' -> failed (failure or error), for
    every test not skipped; and 'classname::name' -> the first line of the message of each test
    that failed on an exception (an ``error`` element, or a ``failure`` whose message names one:
    :data:`EXCEPTION`). Such a test has no verdict in the report, so the verdict tables miss it."""
    failed: dict[str, bool] = {}
    errors: dict[str, str] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        if case.find("skipped") is not None:
            continue
        key = f"{case.get('classname', '')}::{case.get('name', '')}"
        bad = case.find("failure") is not None or case.find("error") is not None
        failed[key] = failed.get(key, False) or bad
        for tag in ("error", "failure"):
            element = case.find(tag)
            if element is None:
                continue
            message = (element.get("message") or "").strip().splitlines()
            first = message[0] if message else tag
            if tag == "error" or EXCEPTION.match(first):
                errors.setdefault(key, first)
    return failed, errors


def junit_key(nodeid: str) -> str:
    """The JUnit 'classname::name' of a pytest node id (path/mod.py::Cls::test[p])."""
    path, _, rest = nodeid.partition("::")
    parts = rest.split("::")
    module = path.removesuffix(".py").replace("/", ".")
    return ".".join([module, *parts[:-1]]) + "::" + parts[-1]


def unchanged_medians(rows: list[dict[str, Any]], mode: str) -> dict[str, float]:
    """nodeid -> median of the test's medians over the unchanged runs of one mode."""
    by_test: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        if r["mode"] == mode and r["phase"] == "unchanged" and r["median_ms"]:
            by_test[r["nodeid"]].append(r["median_ms"])
    return {k: statistics.median(v) for k, v in by_test.items()}


def plugin_env() -> dict[str, str]:
    """PYTHONPATH + PYTEST_PLUGINS as scripts/gpu-suite.sh does: the plugin from this checkout."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    names = {e.name for e in importlib.metadata.entry_points(group="pytest11")}
    if "cudaperf" not in names:
        env["PYTEST_PLUGINS"] = "pytest_cudaperf.plugin"
    env.pop("CUDAPERF_PLANT", None)
    return env


class Driver:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.suite = HERE / f"suite_{args.suite}"
        self.out = Path(args.out).resolve()
        self.out.mkdir(parents=True, exist_ok=True)
        self.baselines = self.out / "baselines"
        self.env = plugin_env()
        self.began = time.monotonic()
        self.last_wall = 0.0
        self.stopped: str | None = None
        self.record_wall = 0.0
        #: how the baselines were recorded, as record.json keeps it: its runs and its way
        self.recorded = recording_of(args)
        self.runs: list[dict[str, Any]] = []
        self.rows: list[dict[str, Any]] = []
        self.done: set[str] = set()
        if args.resume and (self.out / "runs.jsonl").exists():
            # a folder seeded with only the baselines (and record.json) to run more on them
            (self.out / "rows.jsonl").touch()
            self.runs = [json.loads(x) for x in (self.out / "runs.jsonl").read_text().splitlines()]
            self.rows = [json.loads(x) for x in (self.out / "rows.jsonl").read_text().splitlines()]
            self.done = {self.tag(r["mode"], r["phase"], r["plant"], r["index"]) for r in self.runs}
            meta = self.out / "record.json"
            kept = json.loads(meta.read_text()) if meta.exists() else {"wall_s": 0.0}
            self.record_wall = kept["wall_s"]
            self.recorded = {**self.recorded, **kept}  # a folder recorded before it kept its runs
        else:
            (self.out / "rows.jsonl").write_text("")
            (self.out / "runs.jsonl").write_text("")

    def pytest_args(self, mode: str, baseline_dir: bool = True) -> list[str]:
        args = [str(self.suite), "-p", "no:cacheprovider", "-p", "no:randomly"]
        if baseline_dir:  # cudaperf record takes the folder as its own --baseline-dir
            args.append(f"--cudaperf-baseline-dir={self.baselines}")
        args += self.args.pytest_arg
        if self.args.require_gpu:
            args.append("--cudaperf-require-gpu")
        if mode != "serial":
            args += ["-n", mode.removeprefix("n")]
        return args

    def fits(self) -> bool:
        if self.args.max_seconds is None:
            return True
        left = self.args.max_seconds - (time.monotonic() - self.began)
        if left < self.last_wall * 1.2:
            self.stopped = f"stopped by --max-seconds with {left:.0f} s left"
            return False
        return True

    def call(self, cmd: list[str], extra_env: dict[str, str], log: Path) -> tuple[int, float]:
        began = time.monotonic()
        with log.open("w") as out:  # stopped with all it started on Ctrl-C or SIGTERM
            rc = run_in_session(
                cmd, cwd=self.suite, env={**self.env, **extra_env}, stdout=out, stderr=out
            )
        wall = time.monotonic() - began
        self.last_wall = max(self.last_wall, wall)
        return rc, wall

    @staticmethod
    def tag(mode: str, phase: str, plant: str, index: int) -> str:
        return f"{mode}-{phase}-{plant or '0'}-{index}"

    def record(self) -> None:
        if self.args.resume and any(self.baselines.glob("*.json")):
            print(f"record: kept the baselines in {self.baselines} (--resume)")
            return
        k = self.args.record_runs
        log = self.out / "record.log"
        if self.args.record_with_updates:
            self.record_wall = 0.0
            for i in range(k):
                cmd = [sys.executable, "-m", "pytest", *self.pytest_args("serial")]
                rc, wall = self.call([*cmd, "--cudaperf-update"], {}, self.out / f"record-{i}.log")
                self.record_wall += wall
                print(f"record {i + 1}/{k} (pytest --cudaperf-update): exit {rc}, {wall:.0f} s")
        else:
            cmd = [sys.executable, "-m", "pytest_cudaperf.cli", "record", "--runs", str(k)]
            cmd += ["--baseline-dir", str(self.baselines), "--"]
            cmd += self.pytest_args("serial", baseline_dir=False)
            rc, self.record_wall = self.call(cmd, {}, log)
            print(f"record (cudaperf record --runs {k}): exit {rc}, {self.record_wall:.0f} s")
            if rc not in (0, 1):
                sys.exit(
                    f"cudaperf record failed (exit {rc}, see {log}); try --record-with-updates"
                )
        self.last_wall = 0.0  # --max-seconds plans runs by the longest run, not the recording
        self.recorded = {**recording_of(self.args), "wall_s": round(self.record_wall, 1)}
        (self.out / "record.json").write_text(json.dumps(self.recorded))
        if not any(self.baselines.glob("*.json")):
            sys.exit(
                f"recording wrote no baseline into {self.baselines} (see {self.out}/record*.log)"
            )

    def run(self, mode: str, phase: str, plant: str, index: int) -> bool:
        tag = self.tag(mode, phase, plant, index)
        if tag in self.done:
            return True
        if not self.fits():
            return False
        report, junit = self.out / f"{tag}.json", self.out / f"{tag}.xml"
        cmd = [sys.executable, "-m", "pytest", *self.pytest_args(mode)]
        cmd += [f"--cudaperf-json={report}", f"--junitxml={junit}"]
        extra = {"CUDAPERF_PLANT": plant} if plant else {}
        if plant and self.args.plant_tests:
            extra["CUDAPERF_PLANT_TESTS"] = self.args.plant_tests
        if plant and (ref := self.reference(mode)):
            extra["CUDAPERF_PLANT_REF"] = str(ref)
        rc, wall = self.call(cmd, extra, self.out / f"{tag}.log")
        results = read_report(report) if report.exists() else {}
        failed, errors = read_junit(junit) if junit.exists() else ({}, {})
        run = {
            "mode": mode,
            "phase": phase,
            "plant": plant,
            "index": index,
            "rc": rc,
            "wall_s": round(wall, 2),
            "tests": len(failed),
            "failed": sum(failed.values()),
            "errors": errors,
        }
        self.runs.append(run)
        with (self.out / "runs.jsonl").open("a") as f:
            f.write(json.dumps(run) + "\n")
        with (self.out / "rows.jsonl").open("a") as f:
            for nodeid, res in sorted(results.items()):
                row = {
                    "mode": mode,
                    "phase": phase,
                    "plant": plant,
                    "index": index,
                    "nodeid": nodeid,
                    "kind": res.kind,
                    "median_ms": res.median_ms,
                    "failed": failed.get(junit_key(nodeid)),
                }
                self.rows.append(row)
                f.write(json.dumps(row) + "\n")
        print(
            f"{tag}: exit {rc}, {run['failed']} of {run['tests']} failed, {wall:.0f} s", flush=True
        )
        return True

    def reference(self, mode: str) -> Path | None:
        medians = unchanged_medians(self.rows, mode)
        if not medians:
            return None
        path = self.out / f"plant-ref-{mode}.json"
        path.write_text(json.dumps(medians, indent=1))
        return path

    def main(self) -> None:
        self.record()
        workers = [int(x) for x in self.args.xdist.split(",") if x.strip()]
        modes = ([] if self.args.skip_serial else ["serial"]) + [f"n{n}" for n in workers]
        plants = [p for p in self.args.plant.split(",") if p]
        for mode in modes:
            for i in range(self.args.runs):
                if not self.run(mode, "unchanged", "", i):
                    break
            for plant in plants:
                for i in range(self.args.plant_runs):
                    if not self.run(mode, "planted", plant, i):
                        break
        total = self.record_wall + sum(r["wall_s"] for r in self.runs)
        table = Table(self.rows, self.runs, self.record_wall, total)
        text = table.markdown(self.args, self.stopped, self.recorded)
        text += "\n## Verdicts by series\n\n" + "\n".join(series_table(self.out)) + "\n"
        (self.out / "table.md").write_text(text)
        print(text)


def recording_of(args: argparse.Namespace) -> dict[str, Any]:
    """How this invocation records: its runs and its way (``record.json`` keeps it beside the
    recording's wall time)."""
    how = "pytest --cudaperf-update" if args.record_with_updates else "cudaperf record"
    return {"runs": args.record_runs, "how": how}


class Table:
    def __init__(
        self,
        rows: list[dict[str, Any]],
        runs: list[dict[str, Any]],
        record_wall: float,
        total_wall: float,
    ) -> None:
        self.rows, self.runs = rows, runs
        self.record_wall, self.total_wall = record_wall, total_wall

    def unchanged(self, mode: str) -> dict[str, float]:
        return unchanged_medians(self.rows, mode)

    def markdown(
        self, args: argparse.Namespace, stopped: str | None, recorded: dict[str, Any]
    ) -> str:
        """The folder's table; ``recorded``: how its baselines were recorded (``record.json``,
        which a resumed run keeps from the run that recorded them)."""
        lines = [f"# bench_suite: suite_{args.suite}", ""]
        if args.pytest_arg:
            lines += [f"pytest arguments added to every run: `{' '.join(args.pytest_arg)}`", ""]
        lines.append(
            f"record: {recorded['runs']} runs ({recorded['how']}), "
            f"{self.record_wall:.0f} s; total (recording + every run) {self.total_wall:.0f} s"
            + (f"; **partial: {stopped}**" if stopped else "")
        )
        lines += ["", "## Unchanged runs", ""]
        lines.append(
            "| mode | red suite runs | false failures / test-runs | inconclusive | "
            "verdicts | median wall per run |"
        )
        lines.append("|---|---|---|---|---|---|")
        modes = list(dict.fromkeys(r["mode"] for r in self.runs))
        for mode in modes:
            runs = [r for r in self.runs if r["mode"] == mode and r["phase"] == "unchanged"]
            rows = [r for r in self.rows if r["mode"] == mode and r["phase"] == "unchanged"]
            if not runs:
                continue
            red = sum(1 for r in runs if r["failed"] or r["rc"] not in (0,))
            fails = sum(1 for r in rows if r["failed"])
            inc = sum(1 for r in rows if r["kind"] == "inconclusive")
            kinds: defaultdict[str | None, int] = defaultdict(int)
            for r in rows:
                kinds[r["kind"]] += 1
            n = max(len(rows), 1)
            lines.append(
                f"| {mode} | {red} / {len(runs)} | {fails} / {len(rows)} | {inc} ({inc / n:.1%}) | "
                + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items(), key=str))
                + f" | {statistics.median(r['wall_s'] for r in runs):.0f} s |"
            )
        lines += ["", "## Planted runs: caught (failed) by realised change", ""]
        lines.append(
            "| mode | plant | realised change | test-runs | caught | inconclusive | "
            "caught, tests ≥ 1 ms |"
        )
        lines.append("|---|---|---|---|---|---|---|")
        for mode in modes:
            ref = self.unchanged(mode)
            plants = list(
                dict.fromkeys(
                    r["plant"] for r in self.rows if r["mode"] == mode and r["phase"] == "planted"
                )
            )
            for plant in plants:
                rows = [
                    r
                    for r in self.rows
                    if r["mode"] == mode
                    and r["plant"] == plant
                    and r["phase"] == "planted"
                    and r["median_ms"]
                    and r["nodeid"] in ref
                ]
                for label, lo, hi in [("all", -1.0, float("inf")), *BINS]:
                    sel = [r for r in rows if lo <= r["median_ms"] / ref[r["nodeid"]] - 1 < hi]
                    if not sel:
                        continue
                    caught = sum(1 for r in sel if r["failed"])
                    inc = sum(1 for r in sel if r["kind"] == "inconclusive")
                    big = [r for r in sel if ref[r["nodeid"]] >= 1.0]
                    big_caught = sum(1 for r in big if r["failed"])
                    big_txt = f"{big_caught} / {len(big)}" if big else "—"
                    lines.append(
                        f"| {mode} | {plant} | {label} | {len(sel)} | {caught} "
                        f"({caught / len(sel):.0%}) | {inc} | {big_txt} |"
                    )
        lines += self.errors()
        lines += self.per_test()
        return "\n".join(lines) + "\n"

    def per_test(self) -> list[str]:
        """Each serial test's unchanged median, and its realised change and catches per plant."""
        lines = ["", "## Per test (serial): unchanged median, realised change per plant", ""]
        ref = self.unchanged("serial")
        plants = list(dict.fromkeys(r["plant"] for r in self.rows if r["phase"] == "planted"))
        lines.append(
            "| test | unchanged median | unchanged failed | "
            + " | ".join(f"plant {p}: realised, caught" for p in plants)
            + " |"
        )
        lines.append("|---|---|---|" + "---|" * len(plants))
        for nodeid in sorted(ref):
            mine = [r for r in self.rows if r["mode"] == "serial" and r["nodeid"] == nodeid]
            un = [r for r in mine if r["phase"] == "unchanged"]
            cells = []
            for p in plants:
                pr = [
                    r
                    for r in mine
                    if r["plant"] == p and r["phase"] == "planted" and r["median_ms"]
                ]
                if pr:
                    real = statistics.median(r["median_ms"] for r in pr) / ref[nodeid] - 1
                    cells.append(f"{real:+.1%}, {sum(1 for r in pr if r['failed'])}/{len(pr)}")
                else:
                    cells.append("—")
            lines.append(
                f"| `{nodeid}` | {ref[nodeid]:.4g} ms | "
                f"{sum(1 for r in un if r['failed'])}/{len(un)} | " + " | ".join(cells) + " |"
            )
        return lines

    def errors(self) -> list[str]:
        """The tests that failed on an exception, not a verdict, in any run: how often, by mode
        and plant, with the first message each met."""
        seen: dict[tuple[str, str, str], list[str]] = {}
        for run in self.runs:
            for test, message in run.get("errors", {}).items():
                seen.setdefault((run["mode"], run["plant"] or "—", test), []).append(message)
        lines = ["", "## Tests that failed on an exception, not a verdict", ""]
        if not seen:
            return [*lines, "none"]
        lines += ["| mode | plant | test | runs | first message |", "|---|---|---|---|---|"]
        for (mode, plant, test), messages in sorted(seen.items()):
            lines.append(f"| {mode} | {plant} | `{test}` | {len(messages)} | {messages[0][:100]} |")
        return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", choices=["gpu", "cpu", "ops", "host"], required=True)
    parser.add_argument("--record-runs", type=int, default=3, help="K recording processes")
    parser.add_argument(
        "--record-with-updates",
        action="store_true",
        help="record with K runs of pytest --cudaperf-update (no cudaperf record)",
    )
    parser.add_argument("--runs", type=int, default=20, help="N unchanged runs per mode")
    parser.add_argument(
        "--plant",
        default="0.05,0.10,0.20",
        help="plant levels: fractions (0.10 adds 10%%) or factors (3x)",
    )
    parser.add_argument("--plant-runs", type=int, default=3, help="runs per plant level")
    parser.add_argument(
        "--plant-tests",
        default="",
        help="plant only in tests whose id contains one of these (comma-separated substrings)",
    )
    parser.add_argument(
        "--xdist", default="", help="also run steps 2-3 under -n X for each X of a list: 4 or 2,8"
    )
    parser.add_argument(
        "--skip-serial", action="store_true", help="only the --xdist modes (after the recording)"
    )
    parser.add_argument("--max-seconds", type=float, default=None, help="stop cleanly before this")
    parser.add_argument(
        "--require-gpu", action="store_true", help="pass --cudaperf-require-gpu (GPU suite)"
    )
    parser.add_argument(
        "--pytest-arg",
        action="append",
        default=[],
        help="extra pytest argument (repeatable), e.g. --pytest-arg=-k --pytest-arg=add",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue in OUT: keep its baselines and skip the runs already there (for runs "
        "split over several commands with --max-seconds)",
    )
    parser.add_argument("--out", required=True)
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a smoke run of a CPU suite: 2 tests, 1 recording (--record-with-updates), 1 "
        "unchanged and 1 planted (3x) run, --cudaperf-max-time=0.05",
    )
    args = parser.parse_args()
    if args.smoke:
        if args.suite not in SMOKE_TESTS:
            parser.error(f"--smoke: a CPU suite ({', '.join(SMOKE_TESTS)}), not {args.suite}")
        args.record_runs, args.runs, args.plant, args.plant_runs = 1, 1, "3x", 1
        args.record_with_updates = True  # one process; cudaperf record takes two
        args.pytest_arg += ["-k", SMOKE_TESTS[args.suite], "--cudaperf-max-time=0.05"]
    driver = Driver(args)
    try:
        with sigterm_raises():  # a `timeout` leaves no pytest behind on the GPU
            driver.main()
    except (KeyboardInterrupt, Terminated) as stop:
        said = "terminated" if isinstance(stop, Terminated) else "interrupted"
        sys.exit(f"bench_suite: {said}; the runs so far are in {driver.out} (--resume)")


if __name__ == "__main__":
    main()
