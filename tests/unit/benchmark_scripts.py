"""Load a ``benchmarks/`` script as a module, for the unit tests of its logic (the walk, the
smoke's rules, the defaults table). A module of its own, not a conftest: the GPU tests' conftest
is imported as ``conftest`` too, so ``from conftest import`` finds whichever came first."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

#: the benchmark scripts, which some unit tests load as modules (:func:`benchmark_script`)
BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def benchmark_script(path: str) -> ModuleType:
    """``benchmarks/<path>`` loaded as a module named ``benchmarks_<its stem>``, left in
    ``sys.modules`` (its dataclasses look their module up there); the folders it puts first on
    ``sys.path`` to import its neighbours are taken off again once it is loaded."""
    name = f"benchmarks_{Path(path).stem}"
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    before = list(sys.path)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = before
    return module
