"""The dashboard's data, pages and folder, and ``cudaperf dashboard`` (the pages in a browser:
tests/integration/test_dashboard_browser.py)."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import pytest

from pytest_cudaperf.breakdown.model import Breakdown, Kernel
from pytest_cudaperf.cli import main
from pytest_cudaperf.cli.dashboard import progress_printer
from pytest_cudaperf.history import dashboard
from pytest_cudaperf.history.dashboard import MANIFEST, DashboardError, build
from pytest_cudaperf.history.pages import Site, page_name, render_index, render_test_page, sparkline
from pytest_cudaperf.history.regressions import STEP, regressions
from pytest_cudaperf.history.store import Ack, Confirmation, Source, open_store
from pytest_cudaperf.history.timelines import read_history
from pytest_cudaperf.keys import SeriesKey
from pytest_cudaperf.report.document import Report
from pytest_cudaperf.report.model import JudgedRecord, TestOutcome
from pytest_cudaperf.series import Record, Recording
from pytest_cudaperf.verdict import Kind, Verdict

GEMM_FAST = "sm90_xmma_gemm_bf16_128x128"
GEMM_SLOW = "ampere_sgemm_64x64_nn"


def breakdown(gemm: str, gemm_us: float) -> dict[str, Any]:
    """A CUDA breakdown's JSON: a GEMM kernel and a softmax."""
    return Breakdown(
        backend="cuda",
        calls=10,
        total_us=gemm_us + 40.0,
        host_us=12.0,
        entries=(
            Kernel(gemm, gemm, 1.0, gemm_us),
            Kernel("softmax_kernel", "softmax_kernel", 1, 40),
        ),
    ).to_json()


def judged(nodeid: str, device_class: str, median: float, stored: Any) -> JudgedRecord:
    """A judged device time of ``median`` ms (a tight CI around it), with its breakdown."""
    recording = Recording(
        date="2026-11-01", median=median, noise=0.004, n=40, ci=(median * 0.99, median * 1.01)
    )
    record = Record(
        SeriesKey(nodeid), "time:device/cold", device_class, "ms", recording, {}, stored
    )
    return JudgedRecord(record, Verdict(Kind.PASS, ratio=1.0))


def write_history(db: Path, runs: list[dict[tuple[str, str], tuple[float, Any]]]) -> None:
    """Run ``i`` of ``runs`` (commit ``c{i:02d}…``, recorded on day ``i``) gives each
    (test, device class) its median in ms and its breakdown (or None), through
    :meth:`HistoryStore.add_run` as a run's report."""
    with open_store(db) as store:
        for i, values in enumerate(runs):
            outcomes = tuple(
                TestOutcome(nodeid, (judged(nodeid, device_class, median, stored),))
                for (nodeid, device_class), (median, stored) in values.items()
            )
            commit = f"c{i:02d}" + "0123456789abcdef" * 2
            report = Report(tests=outcomes, run_id=f"run-{i}")
            assert store.add_run(
                report, Source(commit, False, "main"), f"2026-11-{i + 1:02d}T06:00"
            )


STEP_AT = 12


def stepped_runs(n: int = 20, seed: int = 5) -> list[dict[tuple[str, str], tuple[float, Any]]]:
    """``t.py::fwd`` 12% slower from run 12 on GPU A (a breakdown each run: the GEMM kernel
    replaced at the step) and on GPU B (from run 4 on: fewer runs); ``t.py::flat`` unchanged."""
    rng = random.Random(seed)
    runs = []
    for i in range(n):
        slow = i >= STEP_AT
        gemm = breakdown(GEMM_SLOW, 290.0) if slow else breakdown(GEMM_FAST, 250.0)
        values = {
            ("t.py::fwd", "GPU A"): (rng.gauss(2.0, 0.005) * (1.12 if slow else 1.0), gemm),
            ("t.py::flat", "GPU A"): (rng.gauss(1.0, 0.005), None),
        }
        if i >= 4:
            values["t.py::fwd", "GPU B"] = (rng.gauss(3.0, 0.008) * (1.12 if slow else 1.0), None)
        runs.append(values)
    return runs


@pytest.fixture(scope="module")
def history_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("history") / "h.sqlite"
    write_history(db, stepped_runs())
    return db


def test_timelines_share_a_commit_axis_and_name_each_step_by_its_two_runs(
    history_db: Path,
) -> None:
    with open_store(history_db) as store:
        tests = read_history(store)
    assert [t.nodeid for t in tests] == ["t.py::flat", "t.py::fwd"]
    flat, fwd = tests
    assert [line.changes for tl in flat.timelines for line in tl.lines] == [()]
    (timeline,) = fwd.timelines
    assert timeline.series == "time:device/cold"
    assert timeline.unit == "ms"
    assert len(timeline.axis) == 20
    assert [p.commit[:3] for p in timeline.axis] == [f"c{i:02d}" for i in range(20)]
    a, b = timeline.lines
    assert (a.device_class, len(a.runs)) == ("GPU A", 20)
    # GPU B's first run is at the fifth commit: the same place as GPU A's fifth
    assert (b.device_class, len(b.runs), b.runs[0].x) == ("GPU B", 16, 4)
    for line in (a, b):
        (change,) = line.changes
        assert change.last_good.commit.startswith(f"c{STEP_AT - 1}")
        assert change.first_bad.commit.startswith(f"c{STEP_AT}")
        assert change.worse
        assert change.point.change == pytest.approx(0.12, abs=0.02)
    # the interval of each run, from its recording's CI, surrounds its value
    assert all(r.lo is not None and r.hi is not None and r.lo <= r.value <= r.hi for r in a.runs)


def test_a_change_point_diffs_the_breakdowns_of_its_last_good_and_first_bad_runs(
    history_db: Path,
) -> None:
    with open_store(history_db) as store:
        (timeline,) = read_history(store)[1].timelines
    a, b = timeline.lines
    diff = a.changes[0].breakdown
    assert diff.missing == ""
    assert diff.lines[0] == "kernels: 290.0 µs -> 330.0 µs per call (+40.0 µs, +13.8%)"
    assert f"gemm: {GEMM_FAST} -> {GEMM_SLOW}" in diff.lines[1]
    assert GEMM_FAST in diff.table_html
    assert GEMM_SLOW in diff.table_html
    missing = b.changes[0].breakdown
    assert missing.lines == ()
    assert missing.missing == (
        "no breakdown recorded for the last good run (c110123456) nor the first bad run "
        "(c120123456)"
    )


def test_a_drift_and_an_acknowledged_step_show_as_history_regressions_lists_them(
    tmp_path: Path,
) -> None:
    """``t.py::creep`` creeps up 0.5% a run; ``t.py::step`` steps up 10% at run 15, acked."""
    rng = random.Random(4)
    db = tmp_path / "h.sqlite"
    write_history(
        db,
        [
            {
                ("t.py::creep", "GPU A"): (1.005**i * (1 + rng.gauss(0, 0.01)), None),
                ("t.py::step", "GPU A"): ((1.1 if i >= 15 else 1.0) * rng.gauss(1, 0.005), None),
            }
            for i in range(40)
        ],
    )
    with open_store(db) as store:
        step = next(r for r in regressions(store) if r.kind == STEP)
        store.acknowledge(
            [Ack(step.series, STEP, step.commit, "intended: exact", "2026-12-01", "ana")]
        )
        creep, stepped = read_history(store)
    line = creep.timelines[0].lines[0]
    assert line.drift is not None
    assert line.drift.ack is None
    assert line.runs[line.drift.last].commit.startswith("c39")
    # its straight line rises by the listed change, through the middle of its runs
    assert line.drift.end / line.drift.start - 1 == pytest.approx(line.drift.regression.change)
    assert line.drift.start < line.runs[line.drift.first + 2].value * 1.05
    assert line.changes == ()  # a change point inside the drift only cuts it in steps
    (change,) = stepped.timelines[0].lines[0].changes
    assert change.ack is not None
    assert change.ack.note == "intended: exact"
    site = Site.of("h.sqlite", [creep, stepped])
    index = render_index([creep, stepped], site)
    assert re.search(r"drift \+\d+\.\d%</span> <span class='meta'>over the last \d+ runs", index)
    assert ", acknowledged</span>" in index
    page = render_test_page(stepped, site)
    assert "<td>intended: exact (ana, 2026-12-01)</td>" in page
    drifted = render_test_page(creep, site)
    assert "<td>drift</td>" in drifted
    assert "id='drift-0-0' hidden" in drifted  # its kernels' panel


def test_a_step_cudaperf_bisect_confirmed_is_marked_with_its_commit(tmp_path: Path) -> None:
    rng = random.Random(4)
    db = tmp_path / "h.sqlite"
    write_history(
        db,
        [
            {("t.py::step", "GPU A"): ((1.1 if i >= 15 else 1.0) * rng.gauss(1, 0.005), None)}
            for i in range(30)
        ],
    )
    with open_store(db) as store:
        (step,) = regressions(store)
        store.confirm(
            Confirmation(
                step.series, step.first_bad, step.last_good, "f00dcafe" * 5, "pads", 0.1,
                0.09, 0.11, "2026-12-01T00:00:00+00:00",
            )
        )  # fmt: skip
        (test,) = read_history(store)
    (change,) = test.timelines[0].lines[0].changes
    assert change.confirmed is not None
    site = Site.of("h.sqlite", [test])
    assert ", confirmed at f00dcafe" in render_index([test], site)
    page = render_test_page(test, site)
    assert "<span class='confirmed'>confirmed at f00dcafe" in page
    assert "confirmed at f00dcafe" in json.dumps(json.loads(_plot_json(page)))


def _plot_json(page: str) -> str:
    found = re.search(r"<script type='application/json'[^>]*>(.*?)</script>", page, re.S)
    assert found is not None, "the page carries no plot data"
    return found.group(1)


def test_the_pages_escape_what_the_history_says(tmp_path: Path) -> None:
    nodeid = "t.py::test[</script><b>x]"
    db = tmp_path / "h.sqlite"
    write_history(db, [{(nodeid, "GPU <i>"): (1.0 + i / 100, None)} for i in range(3)])
    with open_store(db) as store:
        tests = read_history(store)
    site = Site.of("h.sqlite", tests)
    index = render_index(tests, site)
    page = render_test_page(tests[0], site)
    assert "<b>x" not in index
    assert "GPU <i>" not in index
    assert "t.py::test[&lt;/script&gt;&lt;b&gt;x]" in index
    assert f"href='tests/{page_name(nodeid)}'" in index
    assert re.fullmatch(r"t.py_test_script_b_x-[0-9a-f]{10}\.html", page_name(nodeid))
    # the inline JSON cannot end its script element early, and reads back whole
    payload = page.split("id='cudaperf-data'>", 1)[1].split("</script>", 1)[0]
    assert json.loads(payload)["plots"][0]["lines"][0]["deviceClass"] == "GPU <i>"
    assert "<b>x" not in page.replace(payload, "")


def test_a_sparkline_ticks_each_change_point_in_its_direction(history_db: Path) -> None:
    with open_store(history_db) as store:
        tests = read_history(store)
    fwd = tests[1].timelines[0].lines[0]
    flat = tests[0].timelines[0].lines[0]
    drawn = sparkline(fwd, "#0072B2")
    assert drawn.count("<line ") == 1
    assert "stroke='#C5221F'" in drawn  # a rise: red
    assert len(re.search(r"points='([^']*)'", drawn)[1].split()) == 20  # type: ignore[index]
    assert "<line " not in sparkline(flat, "#0072B2")


def test_the_folder_holds_the_site_and_a_rebuild_removes_only_its_own_stale_files(
    history_db: Path, tmp_path: Path
) -> None:
    out = tmp_path / "site"
    with open_store(history_db) as store:
        built = build(store, out, "h.sqlite")
    assert (built.tests, built.series, built.runs, built.removed) == (2, 3, 20, 0)
    pages = sorted(p.name for p in (out / "tests").iterdir())
    assert pages == sorted([page_name("t.py::flat"), page_name("t.py::fwd")])
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["files"] == sorted(
        [
            "assets/dashboard.css",
            "assets/dashboard.js",
            "index.html",
            *(f"tests/{p}" for p in pages),
        ]
    )
    index = (out / "index.html").read_text()
    assert re.search(r"https?://", index) is None  # nothing to fetch from elsewhere
    (out / "CNAME").write_text("perf.example.org\n")
    db = tmp_path / "one.sqlite"
    write_history(db, [{("t.py::fwd", "GPU A"): (1.0, None)}])
    with open_store(db) as store:
        rebuilt = build(store, out, "one.sqlite")
    assert rebuilt.removed == 1
    assert sorted(p.name for p in (out / "tests").iterdir()) == [page_name("t.py::fwd")]
    assert (out / "CNAME").read_text() == "perf.example.org\n"


def test_a_build_stopped_half_way_leaves_a_folder_the_next_build_takes(
    history_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "site"
    real = dashboard.atomic.write_text
    written: list[Path] = []

    def full_disk_at_the_third(path: Path, text: str) -> None:
        if len(written) == 2:
            raise OSError(28, "No space left on device")
        written.append(path)
        real(path, text)

    monkeypatch.setattr(dashboard.atomic, "write_text", full_disk_at_the_third)
    with open_store(history_db) as store, pytest.raises(DashboardError) as raised:
        build(store, out, "h.sqlite")
    assert str(raised.value) == (
        f"{out}: cannot write the dashboard ([Errno 28] No space left on device)"
    )
    monkeypatch.undo()
    with open_store(history_db) as store:
        assert build(store, out, "h.sqlite").tests == 2
    assert (out / "index.html").is_file()


def test_a_folder_that_is_not_a_dashboard_is_refused_untouched(
    history_db: Path, tmp_path: Path
) -> None:
    out = tmp_path / "docs"
    out.mkdir()
    (out / "notes.md").write_text("mine")
    with open_store(history_db) as store, pytest.raises(DashboardError) as raised:
        build(store, out, "h.sqlite")
    assert str(raised.value) == (
        f"{out}: not empty and not a cudaperf dashboard (no {MANIFEST}); give a new or empty "
        "folder, or one a dashboard was written to"
    )
    assert [p.name for p in out.iterdir()] == ["notes.md"]


def test_cudaperf_dashboard_writes_the_site_with_its_progress_on_stderr(
    history_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "site"
    assert main(["dashboard", str(history_db), str(out)]) == 0
    captured = capsys.readouterr()
    assert captured.out == (
        f"cudaperf dashboard: 2 tests, 3 series, 20 runs -> {out / 'index.html'}\n"
    )
    assert captured.err.splitlines() == [
        "reading the history: 1/2 tests",
        "reading the history: 2/2 tests",
        "writing: 1/5 files",
        "writing: 5/5 files",
    ]
    assert main(["dashboard", str(history_db), str(out), "--since", "2026-11-13"]) == 0
    assert "2 tests, 3 series, 8 runs" in capsys.readouterr().out
    assert main(["dashboard", str(history_db), str(out), "--since", "c1201234"]) == 0  # run 12's
    assert "2 tests, 3 series, 8 runs" in capsys.readouterr().out


def test_a_since_that_names_no_commit_of_the_history_nor_a_date_is_one_line(
    history_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "site"
    assert main(["dashboard", str(history_db), str(out), "--since", "beef"]) == 2
    assert capsys.readouterr().err == (
        f"cudaperf: dashboard: {history_db}: no run of commit beef is in the history (--since "
        "takes a commit recorded in the history or a date such as 2026-11-01)\n"
    )
    assert main(["dashboard", str(history_db), str(out), "--since", "last week"]) == 2
    assert capsys.readouterr().err == (
        "cudaperf: dashboard: --since takes a commit (4 or more hex digits of its sha) or an ISO "
        "date such as 2026-11-01, not 'last week'\n"
    )
    assert not out.exists()  # refused before anything was written


def test_progress_lines_are_at_most_one_a_second_between_each_stages_first_and_last() -> None:
    lines: list[str] = []

    class Stream:
        def write(self, text: str) -> None:
            lines.append(text)

        def flush(self) -> None:
            pass

    now = [0.0]
    show = progress_printer(Stream(), every=1.0, clock=lambda: now[0])  # type: ignore[arg-type]
    for done in range(1, 101):
        now[0] = done * 0.1
        show("write", done, 100)
    shown = "".join(lines).splitlines()
    assert shown[0] == "writing: 1/100 files"
    assert shown[-1] == "writing: 100/100 files"
    assert 10 <= len(shown) <= 12


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("missing", "cudaperf: dashboard: {db}: no such history file"),
        ("text", "cudaperf: dashboard: {db}: not a cudaperf history"),
        ("out-is-file", "cudaperf: dashboard: {out}: exists but is not a folder"),
        (
            "out-under-file",
            "cudaperf: dashboard: {out}: cannot be created: {file} is a file, not a folder",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    history_db: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    setup: str,
    message: str,
) -> None:
    db, out, file = history_db, tmp_path / "site", tmp_path / "file"
    if setup == "missing":
        db = tmp_path / "missing.sqlite"
    elif setup == "text":
        db = tmp_path / "notes.txt"
        db.write_text("not a database, only words in a file that is long enough\n" * 20)
    elif setup == "out-is-file":
        out.write_text("")
    else:
        file.write_text("")
        out = file / "site"
    assert main(["dashboard", str(db), str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1
    assert err.startswith(message.format(db=db, out=out, file=file))


def test_a_step_in_too_few_runs_says_so_instead_of_no_change_point(tmp_path: Path) -> None:
    """One run per commit, a 3x step after two: no change point can be told from noise yet,
    and the pages say why and how many runs it takes."""
    db = tmp_path / "h.sqlite"
    write_history(db, [{("t.py::s", "GPU A"): (v, None)} for v in (1.0, 1.01, 3.0, 3.02)])
    with open_store(db) as store:
        tests = read_history(store)
        assert regressions(store) == []
    site = Site.of("h.sqlite", tests)
    page = render_test_page(tests[0], site)
    assert "No change point." not in page
    assert (
        "GPU A: no change point can be found yet, too few runs to judge: a change point needs 3 "
        "runs on each side (6 in all), there are 4." in page
    )
    index = render_index(tests, site)
    assert "none: too few runs to judge" in index
    assert "1 with too few runs to judge (a change point needs 3 runs on each side, 6 in all)" in (
        index
    )
