"""Write the bytecode of every module of ``pytest_cudaperf``, as pytest's assertion rewriting
makes it, where pytest looks for it (``__pycache__/*-pytest-<version>.pyc``).

pytest rewrites the asserts of a plugin's modules as it imports them and caches the result next
to them; where no bytecode is written (``PYTHONDONTWRITEBYTECODE``) every process rewrites them
again: about half a second for each of the few hundred pytest processes the tests start (ranks,
xdist workers, ``cudaperf`` commands). Run once per copy of the package, with ``PYTHONPATH``
naming the checkout for the checkout's copy.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import tempfile

import pytest


class ImportAll:
    """Imports every module of the package while pytest's rewriting hook is installed."""

    def pytest_sessionstart(self) -> None:
        import pytest_cudaperf

        for module in pkgutil.walk_packages(pytest_cudaperf.__path__, "pytest_cudaperf."):
            if module.name.endswith("__main__"):  # a command line, run on import
                continue
            try:
                importlib.import_module(module.name)
            except ImportError:  # an optional dependency (triton) that is not installed
                continue


if __name__ == "__main__":
    sys.dont_write_bytecode = False
    with tempfile.TemporaryDirectory() as empty:
        code = pytest.main(["-q", "--co", "-p", "no:cacheprovider", empty], plugins=[ImportAll()])
    # no tests collected (5) is the run meant: an empty folder, collected for the imports alone
    sys.exit(0 if code == pytest.ExitCode.NO_TESTS_COLLECTED else code)
