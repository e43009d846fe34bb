"""pytest-cudaperf: GPU performance and memory regression testing for PyTorch code.

Importing this package never imports torch; the plugin module is loaded by pytest through the
``pytest11`` entry point ``cudaperf`` (disable it with ``-p no:cudaperf``).
"""

from __future__ import annotations

from pytest_cudaperf.timing import Comparison, Measurement

__version__ = "0.1.0"
__all__ = ["Comparison", "Measurement", "__version__"]
