"""``benchmark.stats`` and the ``--benchmark-json`` file, against pytest-benchmark's own code."""

from __future__ import annotations

import datetime
import io
import json
import random
from pathlib import Path

import pytest

from pytest_cudaperf.benchcompat import jsonfile
from pytest_cudaperf.benchcompat.stats import FIELDS, BenchmarkStats, Stats

DATASETS = {
    "one": [0.5],
    "two": [2e-6, 1e-6],
    "odd": [3.0, 1.0, 2.0, 9.0, 4.0, 4.0, 7.0],
    "q1": [5.0, 1.0, 2.0, 3.0, 4.0],  # rounds % 4 == 1
    "q3": [5.0, 1.0, 2.0, 3.0, 4.0, 6.0, 100.0, 7.0, 8.0, 9.0, 0.5],  # rounds % 4 == 3
    "random": [random.Random(7).lognormvariate(-9, 0.3) for _ in range(257)],
}


@pytest.mark.parametrize("name", DATASETS)
def test_every_statistic_is_pytest_benchmarks(name: str) -> None:
    theirs_module = pytest.importorskip("pytest_benchmark.stats")
    data = DATASETS[name]
    theirs = theirs_module.Stats()
    for x in data:
        theirs.update(x)
    assert Stats(data).as_dict() == theirs.as_dict()  # the same arithmetic: equal, not close


def _stats() -> BenchmarkStats:
    return BenchmarkStats(
        Stats([1e-3, 2e-3, 3e-3]),
        name="test_x[4]",
        fullname="t.py::test_x[4]",
        group="g",
        param="4",
        params={"n": 4},
        extra_info={"size": 4},
        options={"timer": "perf_counter", "disable_gc": False},
        iterations=1,
    )


def test_the_stats_read_as_pytest_benchmarks_do() -> None:
    stats = _stats()
    assert stats["mean"] == stats.stats.mean == stats.mean == stats.get("mean") == 2e-3
    assert stats["rounds"] == 3
    assert stats["name"] == "test_x[4]"
    assert stats.get("nothing", 7) == 7
    with pytest.raises(KeyError):
        stats["nothing"]
    with pytest.raises(AttributeError):
        _ = stats.nothing
    assert stats.stats["median"] == 2e-3
    with pytest.raises(KeyError):
        stats.stats["data"]


def test_one_benchmark_as_pytest_benchmark_writes_it() -> None:
    entry = _stats().as_dict()
    assert list(entry) == [
        "group", "name", "fullname", "params", "param", "extra_info", "options", "stats"
    ]  # fmt: skip
    assert list(entry["stats"]) == [*FIELDS, "data", "iterations"]
    assert entry["stats"]["data"] == [1e-3, 2e-3, 3e-3]
    assert entry["stats"]["outliers"] == "0;0"
    assert "data" not in _stats().as_dict(include_data=False)["stats"]


def test_values_json_cannot_hold_become_pytest_benchmarks_text() -> None:
    class Opaque:
        def __repr__(self) -> str:
            return "Opaque()"

    assert jsonfile.json_safe({"a": (1, 2), "b": Opaque()}) == {
        "a": [1, 2],
        "b": "UNSERIALIZABLE[Opaque()]",
    }


def _document() -> dict[str, object]:
    when = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
    entry = jsonfile.json_safe(_stats().as_dict())
    commit = {"id": "abc", "time": None, "author_time": None, "dirty": False}
    return jsonfile.document([entry], jsonfile.machine_info(), commit, when)


def test_the_document_has_pytest_benchmarks_sections() -> None:
    doc = _document()
    assert list(doc) == ["machine_info", "commit_info", "benchmarks", "datetime", "version"]
    assert doc["datetime"] == "2026-01-02T03:04:05+00:00"
    assert doc["version"] == jsonfile.FORMAT_VERSION
    machine = doc["machine_info"]
    assert isinstance(machine, dict)
    assert {"node", "machine", "python_version", "system", "cpu"} <= set(machine)


def test_pytest_benchmarks_storage_reads_the_file(tmp_path: Path) -> None:
    storage_module = pytest.importorskip("pytest_benchmark.storage.file")
    logger_module = pytest.importorskip("pytest_benchmark.logger")
    written = jsonfile.write(tmp_path / "out" / "run.json", _document())
    assert written == str(tmp_path / "out" / "run.json")
    storage = storage_module.FileStorage(tmp_path / "out", logger_module.Logger())
    (bench,) = storage.load_benchmarks(str(tmp_path / "out" / "run.json"))
    assert bench["fullname"] == "t.py::test_x[4]"
    assert bench["mean"] == 2e-3  # load_benchmarks flattens "stats" into the benchmark
    assert bench["extra_info"] == {"size": 4}


def test_an_open_file_is_written_and_closed() -> None:
    buffer = io.BytesIO()
    closed: list[bytes] = []
    buffer.close = lambda: closed.append(buffer.getvalue())  # type: ignore[method-assign]
    jsonfile.write(buffer, _document())
    assert json.loads(closed[0])["benchmarks"][0]["name"] == "test_x[4]"


def test_an_unwritable_target_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    line = jsonfile.unwritable_line(jsonfile.target("file/out.json", tmp_path))
    assert line is not None
    assert line.startswith(f"--benchmark-json: {tmp_path}/file/out.json cannot be created")
    assert line.endswith("; point --benchmark-json at a writable file")
    assert jsonfile.unwritable_line(tmp_path / "ok.json") is None


def test_entries_keep_the_last_attempt_in_report_order() -> None:
    entries = jsonfile.Entries()
    entries.add("t.py::a", "setup", None)
    entries.add("t.py::a", "call", {"name": "a", "try": 1})
    entries.add("t.py::b", "call", {"name": "b"})
    entries.add("t.py::a", "setup", None)  # re-run: the first attempt's benchmark goes
    assert entries.benchmarks() == [{"name": "b"}]
    entries.add("t.py::a", "call", {"name": "a", "try": 2})
    assert entries.benchmarks() == [{"name": "b"}, {"name": "a", "try": 2}]


def test_extra_info_becomes_junit_properties() -> None:
    entry = {"extra_info": {"size": 4, "kind": "fp16"}}
    assert jsonfile.extra_info_properties(entry) == [
        ("benchmark extra_info size", "4"),
        ("benchmark extra_info kind", '"fp16"'),
    ]
