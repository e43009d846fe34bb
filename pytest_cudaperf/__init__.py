"""pytest-cudaperf: GPU performance and memory regression testing for PyTorch code.

Importing this package never imports torch; the plugin module is loaded by pytest through the
``pytest11`` entry point ``cudaperf`` (disable it with ``-p no:cudaperf``). ``Measurement`` and
``Comparison`` load on first use, so a run that measures nothing never loads the timing code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_cudaperf.measure.comparison import Comparison
    from pytest_cudaperf.measure.measurement import Measurement

__version__ = "0.1.0"
__all__ = ["Comparison", "Measurement", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "Comparison":
        from pytest_cudaperf.measure.comparison import Comparison

        return Comparison
    if name == "Measurement":
        from pytest_cudaperf.measure.measurement import Measurement

        return Measurement
    raise AttributeError(f"module 'pytest_cudaperf' has no attribute {name!r}")
