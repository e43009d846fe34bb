"""The package's shape holds: one name per concept (no class name defined in two modules), one
writer of files (:mod:`pytest_cudaperf.atomic`), no module over :data:`MAX_LINES` lines."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).parents[2] / "pytest_cudaperf"
MODULES = sorted(PACKAGE.rglob("*.py"))


def _name(path: Path) -> str:
    return path.relative_to(PACKAGE.parent).as_posix()


def _classes(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]


def test_the_package_has_modules_to_check() -> None:
    assert len(MODULES) > 50
    assert "Measurement" in _classes(PACKAGE / "measure" / "measurement.py")


def test_no_class_name_is_defined_twice() -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for path in MODULES:
        for name in _classes(path):
            where[name].append(_name(path))
    twice = {name: places for name, places in where.items() if len(places) > 1}
    assert not twice, f"class names defined more than once: {twice}"


#: a write of a file outside the atomic helper: text and bytes writes, opens for writing or
#: appending, renames (a hand-made atomic write)
PLAIN_WRITE = re.compile(
    r"(?<!atomic)\.write_(?:text|bytes)\(|\bopen\([^)]*[\"'][wax]b?\+?[\"']|os\.replace\(|os\.rename\("
)
#: writes that cannot be whole-file replacements, and why
STREAMS = {
    # a rank's stdout/stderr and faulthandler's stack dumps: streams as long as the process lives
    "pytest_cudaperf/distributed/rank.py": 2,
    # the console command's stdout silenced at exit, not a file
    "pytest_cudaperf/cli/__init__.py": 1,
    # the output of `cudaperf record`'s pytest processes, written as long as each one runs
    "pytest_cudaperf/cli/process.py": 1,
    # a fresh process's finished tests, appended one by one for its parent's progress line
    "pytest_cudaperf/run/child.py": 1,
}


def test_every_file_write_goes_through_the_atomic_helper() -> None:
    found: dict[str, int] = {}
    for path in MODULES:
        if path == PACKAGE / "atomic.py":
            continue
        hits = len(PLAIN_WRITE.findall(path.read_text(encoding="utf-8")))
        if hits:
            found[_name(path)] = hits
    assert found == STREAMS, "write files through pytest_cudaperf.atomic"


def test_the_plain_write_pattern_catches_each_kind_of_write() -> None:
    for line in (
        'path.write_text("x")',
        "p.write_bytes(b)",
        'open(p, "w")',
        'open(p, "ab")',
        'open(p, mode="w+")',
        "os.replace(tmp, p)",
    ):
        assert PLAIN_WRITE.search(line), line
    assert not PLAIN_WRITE.search('open(p, encoding="utf-8")')
    assert not PLAIN_WRITE.search("atomic.write_text(path, text)")


#: the most lines a module of the package may have: past it, it holds more than one concern
MAX_LINES = 600


def test_no_module_is_over_the_line_limit() -> None:
    long = {
        _name(path): lines
        for path in MODULES
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, f"split these by concern (at most {MAX_LINES} lines each): {long}"


#: functions allowed more than five parameters: public signatures and marker specs, whose
#: parameters are the user's arguments, and a few constructors of many parts
MAX_LONG_SIGNATURES = 10


def test_few_functions_take_more_than_five_parameters() -> None:
    long = [
        f"{_name(path)}:{number}"
        for path in MODULES
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "noqa: PLR0913" in line
    ]
    assert len(long) <= MAX_LONG_SIGNATURES, f"a parameter object is missing: {long}"
