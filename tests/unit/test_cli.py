from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_cudaperf.baselines import BaselineStore, Record
from pytest_cudaperf.cli import main


def _baseline(folder: Path, value: float, cls: str = "GPU X") -> Path:
    store = BaselineStore.load(folder)
    store.update(
        cls,
        [
            Record(
                "t.py::a",
                "time:device/cold",
                value,
                "ms",
                0.002,
                50,
                (value * 0.999, value * 1.001),
                cls,
                {"torch": "2.11"},
            )
        ],
    )
    return store.path_for(cls)


def _report(path: Path, nodeid: str, value: float, cls: str = "GPU X") -> Path:
    record = {
        "key": nodeid,
        "series": "time:device/cold",
        "value": value,
        "unit": "ms",
        "noise": 0.002,
        "n": 50,
        "ci": [value, value],
        "device_class": cls,
        "env": {"torch": "2.11"},
        "verdict": {"kind": "new"},
    }
    path.write_text(json.dumps({"schema": 1, "tests": [{"nodeid": nodeid, "records": [record]}]}))
    return path


def test_show(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", str(_baseline(tmp_path, 1.0))]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:3] == ["test", "series", "value"]
    assert out[1].split()[:3] == ["t.py::a", "time:device/cold", "1.000"]


def test_compare_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = _baseline(tmp_path / "b", 1.0)
    assert main(["compare", str(base), str(_report(tmp_path / "same.json", "t.py::a", 1.01))]) == 0
    assert main(["compare", str(base), str(_report(tmp_path / "slow.json", "t.py::a", 1.3))]) == 1
    assert "1 regression (tolerance 5.0%)" in capsys.readouterr().out
    other = _report(tmp_path / "other.json", "t.py::a", 3.0, cls="GPU Y")
    assert main(["compare", str(base), str(other)]) == 0
    assert "OTHER CLASS (GPU X), not enforced" in capsys.readouterr().out


def test_merge_reports_and_baselines(tmp_path: Path) -> None:
    a = _report(tmp_path / "a.json", "t.py::a", 1.0)
    b = _report(tmp_path / "b.json", "t.py::b", 2.0)
    assert main(["merge", str(tmp_path / "all.json"), str(a), str(b)]) == 0
    merged = json.loads((tmp_path / "all.json").read_text())
    assert [t["nodeid"] for t in merged["tests"]] == ["t.py::a", "t.py::b"]
    assert merged["summary"]["measured"] == 2
    one = _baseline(tmp_path / "x", 1.0)
    store = BaselineStore.load(tmp_path / "y")
    store.update(
        "GPU X", [Record("t.py::c", "time:device/cold", 2.0, "ms", 0.0, 5, (2.0, 2.0), "GPU X", {})]
    )
    assert main(["merge", str(tmp_path / "m.json"), str(one), str(store.path_for("GPU X"))]) == 0
    assert sorted(json.loads((tmp_path / "m.json").read_text())["entries"]) == [
        "t.py::a",
        "t.py::c",
    ]


def test_bad_files_give_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{oops")
    assert main(["show", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"cudaperf: {bad}: not valid JSON (line 1")
    assert err.count("\n") == 1
    assert main(["compare", str(bad), str(bad), "--tolerance", "fast"]) == 2
    assert main(["show", str(tmp_path / "missing.json")]) == 2
