"""benchmarks/smoke.py's own rules: every script of benchmarks/ is in a smoke, a step's command
line. The smoke run itself is CI's (``python benchmarks/smoke.py``), not this suite's."""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

import pytest
from benchmark_scripts import BENCHMARKS, benchmark_script


@pytest.fixture(scope="module")
def smoke() -> ModuleType:
    return benchmark_script("smoke.py")


def test_every_script_of_benchmarks_is_in_a_smoke(smoke: ModuleType) -> None:
    assert "bench_suite.py" in smoke.scripts()
    assert "public_suites/run-on-device.sh" in smoke.scripts()
    assert not [s for s in smoke.scripts() if s.startswith("_") or s == "smoke.py"]
    assert smoke.uncovered() == []


def test_a_script_in_no_smoke_is_named(smoke: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    smokes = {k: v for k, v in smoke.SMOKES.items() if k != "bench_drift.py"}
    monkeypatch.setattr(smoke, "SMOKES", smokes)
    assert smoke.uncovered() == ["bench_drift.py"]


def test_a_step_runs_a_script_a_shell_script_or_a_suite(smoke: ModuleType, tmp_path: Path) -> None:
    cmd, cwd = smoke.command(["bench_drift.py", "--smoke", "--out", "{out}/d"], tmp_path)
    assert cmd == [
        sys.executable,
        str(BENCHMARKS / "bench_drift.py"),
        "--smoke",
        "--out",
        f"{tmp_path}/d",
    ]
    assert cwd == BENCHMARKS.parent
    cmd, _ = smoke.command(["public_suites/smoke.sh", "{out}"], tmp_path)
    assert cmd == ["bash", str(BENCHMARKS / "public_suites/smoke.sh"), str(tmp_path)]
    cmd, cwd = smoke.command(["suite_gpu", "-k", "add"], tmp_path)
    assert cmd[:3] == [sys.executable, "-m", "pytest"]
    assert cmd[-2:] == ["-k", "add"]
    assert cwd == BENCHMARKS / "suite_gpu"


def test_every_step_bench_phases_names_is_a_function_of_the_package() -> None:
    """bench_phases finds the plugin's steps by function name: a renamed function would be
    counted, silently, in the phase around it."""
    import ast

    source = (BENCHMARKS / "bench_phases.py").read_text()
    tree = ast.parse(source)
    steps = next(
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.AnnAssign)
        and isinstance(node.target, ast.Name)
        and node.target.id == "STEPS"
    )
    assert isinstance(steps, ast.Dict)
    names = {key.value for key in steps.keys if isinstance(key, ast.Constant)}
    package = BENCHMARKS.parent / "pytest_cudaperf"
    defined = {
        node.name
        for path in package.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef)
    }
    assert len(names) > 15
    assert sorted(names - defined) == []
