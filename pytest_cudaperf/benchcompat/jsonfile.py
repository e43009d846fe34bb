"""``--benchmark-json=PATH``: the measurements of the ``benchmark`` fixture in pytest-benchmark's
own JSON format (``machine_info``, ``commit_info``, ``benchmarks[]``, ``datetime``,
``version``), so that ``pytest-benchmark compare PATH`` and the tools built on its files read
it. What pytest-cudaperf adds (how each benchmark was timed, its verdict) is under a
``cudaperf`` key of each benchmark, which those tools ignore.

Each test's benchmark is a plain dict of builtins (:func:`json_safe`): it rides on the test's
report from an xdist worker to the controller, which alone writes the file (:class:`Entries`).
"""

from __future__ import annotations

import datetime
import json
import os
import platform
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_cudaperf import atomic
from pytest_cudaperf.devices.probe import cpu_model
from pytest_cudaperf.history.source import describe
from pytest_cudaperf.paths import unwritable

#: the pytest-benchmark release whose file format this follows (its ``version`` field)
FORMAT_VERSION = "5.1.0"


def _unserializable(value: object) -> str:
    return f"UNSERIALIZABLE[{value!r}]"  # what pytest-benchmark writes for such a value


def dumps(document: object) -> str:
    """pytest-benchmark's text of a JSON document (ASCII, indent 4)."""
    return json.dumps(document, default=_unserializable, ensure_ascii=True, indent=4)


def json_safe(value: object) -> Any:
    """``value`` as JSON builtins (a parameter or ``extra_info`` value that JSON cannot hold
    becomes pytest-benchmark's ``UNSERIALIZABLE[...]`` string), fit to travel through xdist."""
    return json.loads(json.dumps(value, default=_unserializable))


def machine_info() -> dict[str, Any]:
    """pytest-benchmark's ``machine_info`` (without torch: the controller writes it). Its
    ``cpu`` holds what the plugin knows without py-cpuinfo."""
    return {
        "node": platform.node(),
        "processor": platform.processor(),
        "machine": platform.machine(),
        "python_compiler": platform.python_compiler(),
        "python_implementation": platform.python_implementation(),
        "python_implementation_version": platform.python_version(),
        "python_version": platform.python_version(),
        "python_build": list(platform.python_build()),
        "release": platform.release(),
        "system": platform.system(),
        "cpu": {"brand_raw": cpu_model(), "arch": platform.machine(), "count": os.cpu_count()},
    }


def commit_info(root: Path, environ: Mapping[str, str]) -> dict[str, Any]:
    """pytest-benchmark's ``commit_info``: the commit, whether the tree had changes, the branch
    (git in ``root``, else the CI's variables); the commit times are not read."""
    source = describe(root, environ)
    return {
        "id": source.commit or "unknown",
        "time": None,
        "author_time": None,
        "dirty": source.dirty,
        "project": root.name,
        "branch": source.branch or "(unknown)",
    }


def document(
    benchmarks: list[dict[str, Any]],
    machine: Mapping[str, Any],
    commit: Mapping[str, Any],
    now: datetime.datetime | None = None,
) -> dict[str, Any]:
    """The whole file."""
    when = now or datetime.datetime.now(datetime.timezone.utc)
    return {
        "machine_info": dict(machine),
        "commit_info": dict(commit),
        "benchmarks": benchmarks,
        "datetime": when.isoformat(),
        "version": FORMAT_VERSION,
    }


def write(target: Any, doc: Mapping[str, Any]) -> str:
    """Write ``doc`` to ``target`` (a path, or an open binary file from an older pytest-benchmark
    parser); returns where it went. Raises OSError."""
    data = dumps(doc).encode()
    if hasattr(target, "write"):
        with target:
            target.write(data)
        return str(getattr(target, "name", target))
    path = Path(target)
    atomic.write_bytes(path, data)
    return str(path)


def target(value: Any, base: Path) -> Any:
    """Where ``--benchmark-json``'s value writes: a path relative to ``base`` (where pytest was
    started), or the open file an older pytest-benchmark's parser made of it."""
    return value if hasattr(value, "write") else base / Path(value)


def unwritable_line(where: Any) -> str | None:
    """One line when the file cannot be written (checked before any test runs), else None."""
    why = None if hasattr(where, "write") else unwritable(Path(where))
    return (
        f"--benchmark-json: {where} {why}; point --benchmark-json at a writable file"
        if why
        else None
    )


def write_run(
    where: Any, benchmarks: list[dict[str, Any]], root: Path, environ: Mapping[str, str]
) -> str:
    """The run's file, with this machine's and this checkout's information; returns where it
    went. Raises OSError."""
    return write(where, document(benchmarks, machine_info(), commit_info(root, environ)))


def extra_info_properties(entry: Mapping[str, Any]) -> list[tuple[str, str]]:
    """A benchmark's ``extra_info`` as JUnit properties (``benchmark extra_info KEY``, JSON)."""
    info = entry.get("extra_info") or {}
    return [(f"benchmark extra_info {key}", json.dumps(value)) for key, value in info.items()]


@dataclass
class Entries:
    """Controller side: each test's benchmark (from its call report), the last attempt's."""

    by_test: dict[str, dict[str, Any]] = field(default_factory=dict)

    def add(self, nodeid: str, when: str, entry: Mapping[str, Any] | None) -> None:
        if when == "setup":  # a new attempt (pytest-rerunfailures): its own measurement
            self.by_test.pop(nodeid, None)
        if entry is not None:
            self.by_test[nodeid] = dict(entry)

    def benchmarks(self) -> list[dict[str, Any]]:
        """In the order the tests reported (pytest-benchmark's order without xdist)."""
        return list(self.by_test.values())
