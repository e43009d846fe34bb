from __future__ import annotations

import dataclasses
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pytest_cudaperf.keys import SeriesKey
from pytest_cudaperf.report.model import record_from_json, record_to_json
from pytest_cudaperf.series import MAX_RECORDINGS, Entry, Record, Recording, entry_of
from pytest_cudaperf.store.baselines import BaselineStore, Seen, slug
from pytest_cudaperf.store.files import GITIGNORE
from pytest_cudaperf.store.format import (
    BaselineError,
    dumps,
    recording_from_json,
    recording_to_json,
)
from pytest_cudaperf.store.schema import read_file, split_v1_key

K = SeriesKey


def record(
    key: SeriesKey | str,
    value: float,
    series: str = "time:wall",
    cls: str = "CPU X",
    date: str = "2026-11-22",
    noise: float = 0.01,
) -> Record:
    return Record(
        key=key if isinstance(key, SeriesKey) else K(key),
        series=series,
        device_class=cls,
        unit="ms",
        recording=Recording(date=date, median=value, noise=noise, n=20, rounds=(value, value)),
        env={"torch": "2.13", "date": date},
    )


def peak(key: str, nbytes: int) -> Record:
    rec = Recording(date="2026-11-22", median=nbytes, noise=0.0, n=1, ci=(nbytes, nbytes))
    return Record(K(key), "memory:peak", "CPU X", "bytes", rec, {})


def test_slug() -> None:
    assert slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    assert slug("CPU Intel(R) Xeon(R)") == "cpu-intel-r-xeon-r"


def test_dumps_is_deterministic_and_rounded() -> None:
    text = dumps({"b": 1.0 / 3, "a": [2.0 / 3]})
    assert text == '{\n  "a": [\n    0.666667\n  ],\n  "b": 0.333333\n}\n'
    assert dumps(json.loads(text)) == text


def test_update_appends_recordings_and_keeps_other_entries(tmp_path: Path) -> None:
    store = BaselineStore.load(tmp_path)
    first = store.update("CPU X", [record("t.py::a", 1.0), record("t.py::b", 2.0)])
    assert first.added == ["t.py::a {time:wall}", "t.py::b {time:wall}"]
    again = BaselineStore.load(tmp_path)
    summary = again.update("CPU X", [record("t.py::a", 1.02, date="2026-11-23")])
    assert summary.changed == ["t.py::a {time:wall}"]
    assert summary.afresh == []
    assert summary.unchanged == 1
    final = BaselineStore.load(tmp_path)
    a = final.lookup("CPU X", K("t.py::a"), "time:wall")
    assert a is not None
    assert [r.median for r in a.recordings] == [1.0, 1.02]
    assert a.value == pytest.approx(1.01)
    assert a.since == "2026-11-22"
    assert a.processes == 2
    b = final.lookup("CPU X", K("t.py::b"), "time:wall")
    assert b is not None
    assert b.value == 2.0
    assert final.lookup("CPU Y", K("t.py::a"), "time:wall") is None
    assert final.others("CPU Y", K("t.py::a"), "time:wall")[0][0] == "CPU X"


def test_update_keeps_the_last_ten(tmp_path: Path) -> None:
    store = BaselineStore.load(tmp_path)
    for day in range(1, 13):
        store.update("CPU X", [record("t.py::a", 1.0 + day / 1000, date=f"2026-11-{day:02d}")])
    entry = BaselineStore.load(tmp_path).lookup("CPU X", K("t.py::a"), "time:wall")
    assert entry is not None
    assert len(entry.recordings) == MAX_RECORDINGS
    assert entry.recordings[0].date == "2026-11-03"
    assert entry.since == "2026-11-01"


def test_change_point_starts_afresh(tmp_path: Path) -> None:
    store = BaselineStore.load(tmp_path)
    for day in (1, 2, 3):
        store.update("CPU X", [record("t.py::a", 1.0, date=f"2026-11-0{day}")])
    summary = store.update("CPU X", [record("t.py::a", 1.2, date="2026-11-04")])
    assert summary.afresh == ["t.py::a {time:wall}"]
    assert "1 updated (1 started afresh)" in summary.line()
    entry = BaselineStore.load(tmp_path).lookup("CPU X", K("t.py::a"), "time:wall")
    assert entry is not None
    assert entry.value == 1.2
    assert entry.since == "2026-11-04"
    assert len(entry.recordings) == 1


def test_change_point_uses_the_records_own_tolerance(tmp_path: Path) -> None:
    store = BaselineStore.load(tmp_path)
    steady = [record("t.py::a", 1.0, date=f"2026-11-0{d}", noise=0.002) for d in (1, 2, 3)]
    store.replace("CPU X", steady)
    assert store.update("CPU X", [record("t.py::a", 1.03, noise=0.002)]).afresh == []
    store.replace("CPU X", steady)
    strict = record("t.py::a", 1.03, noise=0.002)
    strict = Record(*[getattr(strict, f) for f in ("key", "series", "device_class", "unit")],
                    strict.recording, strict.env, tolerance=0.01)  # fmt: skip
    assert record_from_json(record_to_json(strict)) == strict
    assert store.update("CPU X", [strict]).afresh == ["t.py::a {time:wall}"]


def test_replace_makes_a_fresh_series_of_all_runs(tmp_path: Path) -> None:
    store = BaselineStore.load(tmp_path)
    store.update("CPU X", [record("t.py::a", 9.0, date="2026-10-01")])
    runs = [record("t.py::a", v, date="2026-11-05") for v in (1.0, 1.1, 0.9)]
    summary = store.replace("CPU X", runs)
    assert summary.afresh == ["t.py::a {time:wall}"]
    entry = store.lookup("CPU X", K("t.py::a"), "time:wall")
    assert entry is not None
    assert entry.value == 1.0
    assert entry.processes == 3
    assert entry.noise == pytest.approx(0.30)  # the spread (15%) is under the CPU floor
    assert entry.since == "2026-11-05"


def test_peak_memory_stays_exact(tmp_path: Path) -> None:
    store = BaselineStore.load(tmp_path)
    store.update("CPU X", [peak("t.py::a", 1 << 20)])
    store.update("CPU X", [peak("t.py::a", 1 << 21)])
    entry = BaselineStore.load(tmp_path).lookup("CPU X", K("t.py::a"), "memory:peak")
    assert entry is not None
    assert entry.value == 1 << 21
    assert isinstance(entry.value, int)
    assert entry.noise == 0.0
    assert len(entry.recordings) == 1
    assert '"ci": [2097152, 2097152]' in store.path_for("CPU X").read_text()


def test_update_re_reads_the_file_so_concurrent_shards_keep_entries(tmp_path: Path) -> None:
    shard_a = BaselineStore.load(tmp_path)
    shard_b = BaselineStore.load(tmp_path)
    shard_a.update("CPU X", [record("t.py::a", 1.0)])
    shard_b.update("CPU X", [record("t.py::b", 2.0)])
    assert BaselineStore.load(tmp_path).keys("CPU X") == [K("t.py::a"), K("t.py::b")]


def test_obsolete_only_from_complete_runs(tmp_path: Path) -> None:
    (tmp_path / "t.py").write_text("")
    store = BaselineStore.load(tmp_path / ".cudaperf")
    store.update(
        "CPU X",
        [
            record("t.py::a", 1.0),
            record("t.py::gone", 1.0),
            record("deleted.py::x", 1.0),
            record("u.py::y", 1.0),
        ],
    )
    (tmp_path / "u.py").write_text("")
    seen = {"t.py::a"}
    assert store.obsolete("CPU X", Seen(seen, {"t.py"}, True), tmp_path) == [
        K("deleted.py::x"),
        K("t.py::gone"),
    ]
    # a partial run (-k, a crashed worker) never calls a test it did not see obsolete
    assert store.obsolete("CPU X", Seen(seen, {"t.py"}, False), tmp_path) == [K("deleted.py::x")]
    summary = store.update("CPU X", [], prune=[K("deleted.py::x")])
    assert summary.pruned == ["deleted.py::x"]


def test_a_hash_in_a_test_id_is_never_obsolete_right_after_it_ran(tmp_path: Path) -> None:
    """``test_ids[c#d]`` was once listed obsolete and pruned right after it ran."""
    (tmp_path / "t.py").write_text("")
    store = BaselineStore.load(tmp_path / ".cudaperf")
    ran = [
        record("t.py::test_ids[c#d]", 1.0),
        record(K("t.py::test_ids[c#d]", "inner"), 1.0),
        record("t.py::test_ids[plain]", 1.0),
    ]
    store.update("CPU X", ran)
    seen = {"t.py::test_ids[c#d]", "t.py::test_ids[plain]"}
    obsolete = store.obsolete("CPU X", Seen(seen, {"t.py"}, True), tmp_path)
    assert obsolete == []
    summary = store.update("CPU X", ran, prune=obsolete)
    assert summary.pruned == []
    again = BaselineStore.load(tmp_path / ".cudaperf")
    assert again.lookup("CPU X", K("t.py::test_ids[c#d]", "inner"), "time:wall") is not None
    assert again.lookup("CPU X", K("t.py::test_ids[c#d]"), "time:wall") is not None


def test_update_diff_is_one_hunk_per_entry(tmp_path: Path) -> None:
    store = BaselineStore.load(tmp_path)
    store.update("CPU X", [record("t.py::a", 1.0), record("t.py::b", 1.0)])
    before = store.path_for("CPU X").read_text().splitlines()
    store.update("CPU X", [record("t.py::a", 1.01, date="2026-11-23")])
    after = store.path_for("CPU X").read_text().splitlines()
    import difflib

    hunks = [
        line for line in difflib.unified_diff(before, after, lineterm="") if line.startswith("@@")
    ]
    assert len(hunks) == 1
    # each recording is one line
    assert sum('"median"' in line for line in after) == 3


def test_split_v1_key() -> None:
    assert split_v1_key("t.py::a") == K("t.py::a")
    assert split_v1_key("t.py::a#2") == K("t.py::a", "2")
    assert split_v1_key("t.py::a#guard2") == K("t.py::a", "guard2")
    assert split_v1_key("t.py::a#fused-2") == K("t.py::a", "fused-2")
    assert split_v1_key("t.py::test_ids[c#d]") == K("t.py::test_ids[c#d]")
    assert split_v1_key("t.py::test_ids[c#d]#attn") == K("t.py::test_ids[c#d]", "attn")


def test_schema_1_migrates_to_one_recording_per_entry(tmp_path: Path) -> None:
    path = tmp_path / "cpu.json"
    v1 = {
        "schema": 1,
        "device_class": "CPU X",
        "entries": {
            "t.py::a[c#d]": {
                "time:wall": {
                    "value": 2.0,
                    "unit": "ms",
                    "noise": 0.02,
                    "n": 15,
                    "ci": [1.98, 2.02],
                    "env": {"date": "2026-11-20", "torch": "2.13"},
                }
            },
            "t.py::a#fused": {
                "time:device/cold": {
                    "value": 0.07,
                    "unit": "ms",
                    "noise": 0.003,
                    "n": 80,
                    "env": {"date": "2026-11-21", "sm_mhz": 1980},
                },
                "memory:peak": {"value": 1024, "unit": "bytes", "noise": 0.0, "n": 1, "env": {}},
            },
        },
    }
    path.write_text(json.dumps(v1))
    device_class, entries = read_file(path)
    assert device_class == "CPU X"
    wall = entries[K("t.py::a[c#d]")]["time:wall"]
    assert wall.value == 2.0
    assert wall.noise == 0.50  # one process: the CPU floor
    assert wall.since == "2026-11-20"
    assert wall.recordings == (Recording("2026-11-20", 2.0, 0.02, 15, ci=(1.98, 2.02)),)
    fused = entries[K("t.py::a", "fused")]
    assert fused["time:device/cold"].noise == 0.03
    assert fused["time:device/cold"].sm_mhz == 1980
    assert fused["memory:peak"].value == 1024
    assert fused["memory:peak"].noise == 0.0


def test_the_committed_example_baselines_are_schema_2() -> None:
    folder = Path(__file__).parents[2] / "example_project" / ".cudaperf"
    paths = sorted(folder.glob("*.json"))
    assert [p.name for p in paths] == ["nvidia-h100-80gb-hbm3.json"]
    for path in paths:
        assert json.loads(path.read_text())["schema"] == 2
    store = BaselineStore.load(folder)
    assert store.keys("NVIDIA H100 80GB HBM3")


GOOD = {"unit": "ms", "value": 1.0, "noise": 0.01, "n": 10, "env": {}}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not valid JSON (line 1, column 2"),
        ("[]", "expected a JSON object at the top"),
        ('{"schema": 99, "device_class": "x", "entries": {}}', "schema 99 was written by a newer"),
        ('{"schema": "1", "device_class": "x", "entries": {}}', "unknown schema '1'"),
        ('{"schema": 2, "device_class": "x"}', "expected 'device_class' (string) and 'entries'"),
        # a file saved as UTF-16 (an editor, PowerShell's >)
        (b"\xff\xfe{\x00}\x00", "not valid JSON (not UTF-8: invalid start byte at byte 0)"),
        # a report written into the folder (--cudaperf-json=.cudaperf/run.json)
        ('{"schema": 4, "tests": []}', "a --cudaperf-json report, not a baseline file; move it"),
    ],
)
def test_strict_reading_names_the_file(tmp_path: Path, content: str | bytes, message: str) -> None:
    path = tmp_path / "cpu.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    with pytest.raises(BaselineError) as excinfo:
        read_file(path)
    assert str(excinfo.value).startswith(f"{path}: ")
    assert message in str(excinfo.value)
    with pytest.raises(BaselineError):
        BaselineStore.load(tmp_path)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("env", "x", "'env' must be an object, got 'x'"),
        ("noise", -5, "'noise' must be a finite number >= 0, got -5"),
        ("noise", float("nan"), "'noise' must be a finite number >= 0, got nan"),
        ("value", float("nan"), "'value' must be a finite positive number, got nan"),
        ("value", -1, "'value' must be a finite positive number, got -1"),
        ("value", float("inf"), "'value' must be a finite positive number, got inf"),
        ("value", "1", "'value' must be a finite positive number, got '1'"),
        ("value", True, "'value' must be a finite positive number, got True"),
        ("ci", "abc", "'ci' must be a pair [low, high]"),
        ("ci", [1.0], "'ci' must be a pair [low, high]"),
        ("ci", [2.0, 1.0], "'ci' must be a pair [low, high]"),
        ("n", 0, "'n' must be an integer >= 1, got 0"),
        ("n", 1.5, "'n' must be an integer >= 1, got 1.5"),
        ("unit", "furlongs", "'unit' must be one of"),
    ],
)
@pytest.mark.parametrize("schema", [1, 2])
def test_every_field_is_checked(
    tmp_path: Path, field: str, value: object, message: str, schema: int
) -> None:
    """``"env": "x"``, ``"noise": -5``, NaN, -1, Infinity, ``"ci": "abc"``: each named."""
    old = {**GOOD, field: value}
    path = tmp_path / "cpu.json"
    if schema == 1:
        document = {"schema": 1, "device_class": "x", "entries": {"t.py::a": {"time:wall": old}}}
    else:
        rec = {"date": "2026-11-22", "median": 1.0, "noise": 0.01, "n": 10}
        entry = {"unit": "ms", "value": 1.0, "noise": 0.01, "since": "2026-11-22", "env": {}}
        if field in ("n", "ci"):
            rec[field] = value  # type: ignore[assignment]
        else:
            entry[field] = value  # type: ignore[assignment]
        entry["recordings"] = [rec]  # type: ignore[assignment]
        document = {
            "schema": 2,
            "device_class": "x",
            "entries": {"t.py::a": {"": {"time:wall": entry}}},
        }
    path.write_text(json.dumps(document))  # json writes NaN / Infinity as Python reads them
    with pytest.raises(BaselineError) as excinfo:
        read_file(path)
    text = str(excinfo.value)
    assert text.startswith(f"{path}: entry 't.py::a'")
    assert "time:wall" in text
    assert message in text


@pytest.mark.parametrize(
    ("recordings", "message"),
    [
        ("x", "'recordings' must be a non-empty list"),
        ([], "'recordings' must be a non-empty list"),
        (["x"], "recordings[0]: a recording must be an object"),
        ([{"date": "today", "median": 1.0, "noise": 0, "n": 1}], "'date' must be a date"),
        ([{"date": "2026-11-22", "median": 0, "noise": 0, "n": 1}], "'median' must be a finite"),
        (
            [{"date": "2026-11-22", "median": 1, "noise": 0, "n": 1, "rounds": ["a"]}],
            "'rounds' must be a list",
        ),
        (
            [{"date": "2026-11-22", "median": 1, "noise": 0, "n": 1, "sm_mhz": -3}],
            "'sm_mhz' must be a finite positive",
        ),
        (
            [{"date": "2026-11-22", "median": 1, "noise": 0, "n": 1, "unstable": "x"}],
            "'unstable' must be a list of strings",
        ),
        (
            [{"date": "2026-11-22", "median": 1, "noise": 0, "n": 1, "reference_ms": "fast"}],
            "'reference_ms' must be a finite positive",
        ),
        (
            [{"date": "2026-11-22", "median": 1, "noise": 0, "n": 1, "launch_gap_us": 0}],
            "'launch_gap_us' must be a finite positive",
        ),
        (
            [{"date": "2026-11-22", "median": 1, "noise": 0, "n": 1, "fixed_ms": -0.3}],
            "'fixed_ms' must be a finite positive",
        ),
    ],
)
def test_recordings_are_checked(tmp_path: Path, recordings: object, message: str) -> None:
    entry = {
        "unit": "ms",
        "value": 1.0,
        "noise": 0.01,
        "since": "2026-11-22",
        "env": {},
        "recordings": recordings,
    }
    path = tmp_path / "cpu.json"
    document = {"schema": 2, "device_class": "x", "entries": {"t::a": {"n": {"time:wall": entry}}}}
    path.write_text(json.dumps(document))
    with pytest.raises(BaselineError, match="entry 't::a' \\[n\\] / 'time:wall'") as excinfo:
        read_file(path)
    assert message in str(excinfo.value)


def test_entry_breakdown_is_kept_verbatim(tmp_path: Path) -> None:
    store = BaselineStore.load(tmp_path)
    rec = record("t.py::a", 1.0)
    breakdown = {"kernels": [{"name": "gemm", "share": 0.7}], "note": "x"}
    rec = Record(rec.key, rec.series, rec.device_class, rec.unit, rec.recording, rec.env, breakdown)
    store.update("CPU X", [rec])
    entry = BaselineStore.load(tmp_path).lookup("CPU X", K("t.py::a"), "time:wall")
    assert isinstance(entry, Entry)
    assert entry.breakdown == breakdown


# --- the folder: only committed JSON -------------------------------------------------------------


def test_folder_carries_its_gitignore_and_new_files_get_the_umask_mode(tmp_path: Path) -> None:
    folder = tmp_path / ".cudaperf"
    old = os.umask(0o022)
    try:
        BaselineStore.load(folder).update("CPU X", [record("t.py::a", 1.0)])
    finally:
        os.umask(old)
    assert (folder / ".gitignore").read_text() == GITIGNORE
    assert sorted(p.name for p in folder.iterdir()) == [".gitignore", ".lock", "cpu-x.json"]
    assert stat.S_IMODE((folder / "cpu-x.json").stat().st_mode) == 0o644


def test_rewrite_keeps_the_file_mode(tmp_path: Path) -> None:
    store = BaselineStore.load(tmp_path)
    store.update("CPU X", [record("t.py::a", 1.0)])
    path = store.path_for("CPU X")
    path.chmod(0o664)
    store.update("CPU X", [record("t.py::a", 1.0)])
    assert stat.S_IMODE(path.stat().st_mode) == 0o664


def test_gitignore_hides_lock_and_tmp_from_git(tmp_path: Path) -> None:
    git = subprocess.run(["git", "--version"], capture_output=True, check=False)
    if git.returncode != 0:
        pytest.skip("git not installed")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    folder = tmp_path / ".cudaperf"
    BaselineStore.load(folder).update("CPU X", [record("t.py::a", 1.0)])
    (folder / ".cpu-x.json.dead.tmp").write_text("junk")
    status = subprocess.run(
        ["git", "-C", str(tmp_path), "status", "--porcelain", "--untracked-files=all"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert status.strip() == "?? .cudaperf/cpu-x.json"


def test_stale_tmp_of_a_killed_writer_is_removed_at_update(tmp_path: Path) -> None:
    store = BaselineStore.load(tmp_path)
    store.update("CPU X", [record("t.py::a", 1.0)])
    stale = tmp_path / ".cpu-x.json.dead.tmp"
    fresh = tmp_path / ".cpu-x.json.live.tmp"
    stale.write_text("x" * 1000)
    fresh.write_text("x")
    an_hour_ago = time.time() - 3600
    os.utime(stale, (an_hour_ago, an_hour_ago))
    store.update("CPU X", [record("t.py::a", 1.0)])
    assert not stale.exists()
    assert fresh.exists()  # another writer's, maybe: too young to remove


def test_read_only_folder_is_one_baseline_error(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root ignores file modes")
    folder = tmp_path / ".cudaperf"
    BaselineStore.load(folder).update("CPU X", [record("t.py::a", 1.0)])
    folder.chmod(0o555)
    try:
        with pytest.raises(BaselineError) as excinfo:
            BaselineStore.load(folder).update("CPU X", [record("t.py::a", 2.0)])
    finally:
        folder.chmod(0o755)
    text = str(excinfo.value)
    assert str(folder) in text
    assert "cannot write the baseline" in text
    assert "--cudaperf-baseline-dir" in text
    assert [p.name for p in folder.glob("*.tmp")] == []


def test_a_failing_write_is_one_baseline_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As root a read-only folder is writable: simulate the PermissionError it gives others."""
    from pytest_cudaperf.store import baselines

    store = BaselineStore.load(tmp_path)
    store.update("CPU X", [record("t.py::a", 1.0)])

    def refuse(path: Path, text: str) -> None:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(baselines.atomic, "write_text", refuse)
    with pytest.raises(BaselineError) as excinfo:
        store.update("CPU X", [record("t.py::a", 2.0)])
    assert str(excinfo.value) == (
        f"{store.path_for('CPU X')}: cannot write the baseline (Permission denied); make the "
        "folder writable, or choose another one with --cudaperf-baseline-dir"
    )


def test_a_file_where_the_folder_should_be_is_one_baseline_error(tmp_path: Path) -> None:
    folder = tmp_path / ".cudaperf"
    folder.write_text("not a folder")
    with pytest.raises(BaselineError, match="exists but is not a folder"):
        BaselineStore.load(folder)
    store = BaselineStore(folder)
    with pytest.raises(BaselineError, match="exists but is not a folder"):
        store.update("CPU X", [record("t.py::a", 1.0)])
    nested = BaselineStore.load(folder / "deeper")
    with pytest.raises(BaselineError, match=str(folder)):
        nested.update("CPU X", [record("t.py::a", 1.0)])


def test_sigkill_during_write_leaves_the_previous_file_and_no_visible_junk(tmp_path: Path) -> None:
    store = BaselineStore.load(tmp_path)
    store.update("CPU X", [record("t.py::a", 1.0)])
    path = store.path_for("CPU X")
    before = path.read_text()
    marker = tmp_path.parent / f"{tmp_path.name}-renaming"
    script = textwrap.dedent(f"""
        import os, time
        from pathlib import Path
        from pytest_cudaperf.series import Record, Recording
        from pytest_cudaperf.store.baselines import BaselineStore
        from pytest_cudaperf.keys import SeriesKey
        real = os.replace
        def slow_replace(src, dst):
            Path({str(marker)!r}).write_text("x")
            time.sleep(60)
            real(src, dst)
        os.replace = slow_replace
        store = BaselineStore.load(Path({str(tmp_path)!r}))
        rec = Record(SeriesKey("t.py::a"), "time:wall", "CPU X", "ms",
                     Recording("2026-11-23", 99.0, 0.0, 1), {{}})
        store.update("CPU X", [rec])
    """)
    proc = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 30
        while not marker.exists():
            assert time.monotonic() < deadline, "the writer never reached the rename"
            assert proc.poll() is None, "the writer exited early"
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert path.read_text() == before
    leftovers = list(tmp_path.glob("*.tmp"))
    assert len(leftovers) == 1  # the killed writer's, hidden from git by the .gitignore
    an_hour_ago = time.time() - 3600
    os.utime(leftovers[0], (an_hour_ago, an_hour_ago))
    store = BaselineStore.load(tmp_path)
    entry = store.lookup("CPU X", K("t.py::a"), "time:wall")
    assert entry is not None
    assert entry.value == 1.0
    store.update("CPU X", [record("t.py::a", 1.0)])
    assert list(tmp_path.glob("*.tmp")) == []


def test_the_reference_loops_time_round_trips_and_older_recordings_lack_it() -> None:
    timed = Recording("2026-11-23", 1.0, 0.01, 20, reference_ms=0.17)
    assert recording_to_json(timed)["reference_ms"] == 0.17
    assert recording_from_json(recording_to_json(timed)) == timed
    older = Recording("2026-11-22", 1.0, 0.01, 20)
    assert "reference_ms" not in recording_to_json(
        older
    )  # files written before it stay as they were
    entry = entry_of([older, timed, Recording("2026-11-24", 1.0, 0.01, 20, reference_ms=0.19)],
                     "ms", {}, "wall")  # fmt: skip
    assert entry.reference_ms == pytest.approx(0.18)  # the median of those that have one


def test_the_launch_gap_round_trips_and_the_series_takes_the_recordings_median() -> None:
    probed = Recording("2026-11-27", 0.2, 0.01, 20, launch_gap_us=1.92)
    assert recording_to_json(probed)["launch_gap_us"] == 1.92
    assert recording_from_json(recording_to_json(probed)) == probed
    older = Recording("2026-11-22", 0.2, 0.01, 20)
    assert "launch_gap_us" not in recording_to_json(older)
    entry = entry_of([older, probed, Recording("2026-11-28", 0.2, 0.01, 20, launch_gap_us=2.12)],
                     "ms", {}, "device")  # fmt: skip
    assert entry.launch_gap_us == pytest.approx(2.02)


def test_a_host_bound_recordings_kernels_round_trip() -> None:
    timed = Recording("2026-11-27", 4.2, 0.01, 20, reference_ms=0.101, fixed_ms=0.338)
    assert recording_to_json(timed)["fixed_ms"] == 0.338
    assert recording_from_json(recording_to_json(timed), unit="loops") == timed
    assert "fixed_ms" not in recording_to_json(Recording("2026-11-22", 4.2, 0.01, 20))


def test_a_series_written_too_noisy_to_fail_is_named(tmp_path: Path) -> None:
    store = BaselineStore.load(tmp_path)
    summary = store.update("CPU X", [record("t.py::a", 1.0, noise=1.37), record("t.py::b", 1.0)])
    assert summary.blind == [
        "t.py::a {time:wall}: ±137% (its recordings were unstable themselves (median ±137%)): "
        "no slowdown under 2.4x can fail it"
    ]
    assert summary.notes() == [
        f"BLIND {summary.blind[0]}; record it again on a quiet machine (cudaperf record)"
    ]


def test_a_series_recorded_moving_more_than_its_tolerance_is_counted_and_the_widest_named(
    tmp_path: Path,
) -> None:
    def runs(key: str, series: str, *values: float, tolerance: float | None = 0.10) -> list[Record]:
        return [dataclasses.replace(record(key, v, series), tolerance=tolerance) for v in values]

    summary = BaselineStore.load(tmp_path).replace(
        "CPU X",
        [
            *runs("t.py::wide", "time:device/cold", 1.0, 1.2, 0.9),  # ±22.5% between processes
            *runs("t.py::wider", "time:device/cold", 1.0, 1.3, 0.9),  # ±30%
            *runs("t.py::calm", "time:device/cold", 1.0, 1.01, 0.99),
            *runs("t.py::own", "time:device/cold", 1.0, 1.2, 0.9, tolerance=0.25),
            *runs("t.py::unknown", "time:device/cold", 1.0, 1.2, 0.9, tolerance=None),
            *runs("t.py::two", "time:device/cold", 1.0, 1.5),  # two processes: the floor
            *runs("t.py::blind", "time:device/cold", 1.0, 4.0, 1.0),  # named as BLIND instead
            *runs("t.py::wall", "time:wall", 1.0, 1.2, 0.9),  # within the wall-time floor
            *runs("t.py::wall_wide", "time:wall", 1.0, 1.5, 0.8),  # ±52.5%, beyond it
            peak("t.py::wide", 100),
            peak("t.py::wide", 300),
            peak("t.py::wide", 100),
        ],
    )
    assert summary.timed == 9
    assert sorted(label for label, _, _ in summary.beyond_tolerance) == [
        "t.py::wall_wide {time:wall}",
        "t.py::wide {time:device/cold}",
        "t.py::wider {time:device/cold}",
    ]
    assert summary.beyond_tolerance_lines() == [
        "cudaperf record: 3 of 9 time series move between processes by more than their "
        "tolerance, so a change within that movement reads INCONCLUSIVE; record them again on a "
        "quiet machine (cudaperf show lists each series' noise):",
        "  ±52% (tolerance 10%) t.py::wall_wide {time:wall}",
        "  ±30% (tolerance 10%) t.py::wider {time:device/cold}",
        "  ±22% (tolerance 10%) t.py::wide {time:device/cold}",
    ]
    assert summary.beyond_tolerance_lines(named=1)[1:] == [
        "  ±52% (tolerance 10%) t.py::wall_wide {time:wall}",
        "  and 2 more",
    ]
    calm = BaselineStore.load(tmp_path / "calm").replace(
        "CPU X", runs("t.py::c", "time:wall", 1, 1)
    )
    assert calm.beyond_tolerance_lines() == []
