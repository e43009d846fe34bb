"""Write the bytecode of the installed modules that the tests' processes import, by importing
them once with bytecode writing on.

The tests start a few hundred Python processes (inner pytest runs, xdist workers, distributed
ranks, ``cudaperf`` commands). Where no bytecode is written (``PYTHONDONTWRITEBYTECODE``) each
of them would compile every module it imports from source again, torch's thousand and more among
them. Compiling the whole of site-packages (``compileall``) also compiles the many modules that
no process imports: importing what they import writes only theirs. A module imported later by
some process and missed here is compiled by that process, as it would be without this script.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import py_compile
import sys

#: what the tests' processes import (each pulls in its own dependencies)
MODULES = (
    "torch",
    "torch._dynamo",
    "torch.distributed",
    "torch.distributed.run",
    "torch.multiprocessing",
    "torch.profiler",
    "torch.utils.flop_counter",
    "torch.testing",
    "numpy",
    "pytest",
    "_pytest.pytester",
    "xdist",
    "xdist.plugin",
    "xdist.remote",
    "execnet",
    "pytest_benchmark.plugin",
    "pytest_rerunfailures",
    "coverage",
    "psycopg",
)


#: packages imported whole (pytest's builtin plugins load as a run's options ask), and the
#: ``__main__`` modules that ``python -m`` runs
WHOLE = ("_pytest", "xdist", "pytest_benchmark", "numpy.ma")
MAINS = ("pytest", "xdist")


def main() -> int:
    sys.dont_write_bytecode = False
    for name in MODULES:
        try:
            importlib.import_module(name)
        except ImportError:  # an optional test dependency that is not installed
            continue
    for package in WHOLE:
        try:
            found = importlib.import_module(package)
        except ImportError:
            continue
        for module in pkgutil.walk_packages(found.__path__, f"{package}."):
            if module.name.endswith("__main__") or ".tests" in module.name:
                continue
            try:
                importlib.import_module(module.name)
            except Exception:  # noqa: BLE001, S112 - an optional part that cannot load here
                continue
    for package in MAINS:
        spec = importlib.util.find_spec(f"{package}.__main__")
        if spec is not None and spec.origin is not None:
            py_compile.compile(spec.origin, cfile=importlib.util.cache_from_source(spec.origin))
    # what CI runs with, said once here, where torch is imported already
    import pytest
    import torch

    import pytest_cudaperf  # noqa: F401 - the installed package imports

    print("torch", torch.__version__, "pytest", pytest.__version__)
    return 0


if __name__ == "__main__":
    sys.exit(main())
