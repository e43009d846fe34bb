from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pytest_cudaperf.baselines import (
    BaselineError,
    BaselineStore,
    Record,
    dumps,
    read_file,
    slug,
)


def record(key: str, value: float, series: str = "time:wall", cls: str = "CPU X") -> Record:
    return Record(
        key=key,
        series=series,
        value=value,
        unit="ms",
        noise=0.01,
        n=20,
        ci=(value * 0.99, value * 1.01),
        device_class=cls,
        env={"torch": "2.13", "date": "2026-11-22"},
    )


def test_slug() -> None:
    assert slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    assert slug("CPU Intel(R) Xeon(R)") == "cpu-intel-r-xeon-r"


def test_dumps_is_deterministic_and_rounded() -> None:
    text = dumps({"b": 1.0 / 3, "a": [2.0 / 3]})
    assert text == '{\n  "a": [\n    0.666667\n  ],\n  "b": 0.333333\n}\n'
    assert dumps(json.loads(text)) == text


def test_update_merges_and_keeps_other_entries(tmp_path: Path) -> None:
    store = BaselineStore.load(tmp_path)
    first = store.update("CPU X", [record("t.py::a", 1.0), record("t.py::b", 2.0)])
    assert first.added == ["t.py::a [time:wall]", "t.py::b [time:wall]"]
    again = BaselineStore.load(tmp_path)
    summary = again.update("CPU X", [record("t.py::a", 1.5)])
    assert summary.changed == ["t.py::a [time:wall]"]
    assert summary.unchanged == 1
    final = BaselineStore.load(tmp_path)
    assert final.lookup("CPU X", "t.py::a", "time:wall")["value"] == 1.5  # type: ignore[index]
    assert final.lookup("CPU X", "t.py::b", "time:wall")["value"] == 2.0  # type: ignore[index]
    assert final.lookup("CPU Y", "t.py::a", "time:wall") is None
    assert final.others("CPU Y", "t.py::a", "time:wall")[0][0] == "CPU X"


def test_update_re_reads_the_file_so_concurrent_shards_keep_entries(tmp_path: Path) -> None:
    shard_a = BaselineStore.load(tmp_path)
    shard_b = BaselineStore.load(tmp_path)
    shard_a.update("CPU X", [record("t.py::a", 1.0)])
    shard_b.update("CPU X", [record("t.py::b", 2.0)])
    assert BaselineStore.load(tmp_path).keys("CPU X") == ["t.py::a", "t.py::b"]


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
    assert store.obsolete("CPU X", seen, {"t.py"}, True, tmp_path) == [
        "deleted.py::x",
        "t.py::gone",
    ]
    # a partial run (-k, a crashed worker) never calls a test it did not see obsolete
    assert store.obsolete("CPU X", seen, {"t.py"}, False, tmp_path) == ["deleted.py::x"]
    summary = store.update("CPU X", [], prune=["deleted.py::x"])
    assert summary.pruned == ["deleted.py::x"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not valid JSON (line 1, column 2"),
        ("[]", "expected a JSON object at the top"),
        ('{"schema": 99, "device_class": "x", "entries": {}}', "schema 99 was written by a newer"),
        ('{"schema": "1", "device_class": "x", "entries": {}}', "unknown schema '1'"),
        ('{"schema": 1, "device_class": "x"}', "expected 'device_class' (string) and 'entries'"),
        (
            '{"schema": 1, "device_class": "x", "entries": {"t": {"s": {"value": "1"}}}}',
            "entry 't' / 's' has a bad or missing 'value'",
        ),
    ],
)
def test_strict_reading_names_the_file(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "cpu.json"
    path.write_text(content)
    with pytest.raises(BaselineError) as excinfo:
        read_file(path)
    assert str(excinfo.value).startswith(f"{path}: ")
    assert message in str(excinfo.value)
    with pytest.raises(BaselineError):
        BaselineStore.load(tmp_path)


def test_sigkill_during_write_leaves_the_previous_file_intact(tmp_path: Path) -> None:
    store = BaselineStore.load(tmp_path)
    store.update("CPU X", [record("t.py::a", 1.0)])
    path = store.path_for("CPU X")
    before = path.read_text()
    marker = tmp_path / "renaming"
    script = textwrap.dedent(f"""
        import os, time
        from pathlib import Path
        from pytest_cudaperf.baselines import BaselineStore, Record
        real = os.replace
        def slow_replace(src, dst):
            Path({str(marker)!r}).write_text("x")
            time.sleep(60)
            real(src, dst)
        os.replace = slow_replace
        store = BaselineStore.load(Path({str(tmp_path)!r}))
        rec = Record("t.py::a", "time:wall", 99.0, "ms", 0.0, 1, (99.0, 99.0), "CPU X", {{}})
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
    assert BaselineStore.load(tmp_path).lookup("CPU X", "t.py::a", "time:wall")["value"] == 1.0  # type: ignore[index]
