"""The package's shape holds: one name per concept (no class name defined in two modules)."""

from __future__ import annotations

import ast
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
    assert "Measurement" in _classes(PACKAGE / "measure" / "timing.py")


def test_no_class_name_is_defined_twice() -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for path in MODULES:
        for name in _classes(path):
            where[name].append(_name(path))
    twice = {name: places for name, places in where.items() if len(places) > 1}
    assert not twice, f"class names defined more than once: {twice}"
