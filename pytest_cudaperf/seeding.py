"""The same random draws in every process, for the runs whose result must not depend on them.

Each measured test starts from :func:`reseed` (``--cudaperf-seed``, 0 by default): its fixtures
draw the same inputs whichever tests ran before it in its process (a ``-k`` selection, xdist's
scheduling, a fresh process that confirms a suspect, ``cudaperf record`` run in parts), so a
callable whose sizes follow its random inputs does the same work at recording and when judged.

A callable that draws its sizes or its operations at random (a random crop, an auto-augment
policy) allocates and launches differently from one process to the next. Its peak-memory run and
its profiled kernel calls therefore start from torch's random state seeded with :data:`SEED`, and
Python's ``random`` and NumPy's global generator (where NumPy is loaded) from the same seed; the
caller's states are restored after. torch is imported inside: importing this module never loads
it.
"""

from __future__ import annotations

import contextlib
import random
import sys
from collections.abc import Iterator

#: the seed those runs start from, in every process
SEED = 0


@contextlib.contextmanager
def same_draws(device_index: int | None) -> Iterator[None]:
    """torch's CPU generator and that of CUDA device ``device_index`` (None: the CPU's only),
    Python's ``random`` and NumPy's global generator seeded with :data:`SEED` inside, the
    caller's states back after."""
    import torch

    devices = [] if device_index is None else [device_index]
    numpy = sys.modules.get("numpy")
    python_state = random.getstate()
    numpy_state = numpy.random.get_state() if numpy is not None else None
    try:
        with torch.random.fork_rng(devices=devices):
            reseed(SEED)
            yield
    finally:
        random.setstate(python_state)
        if numpy is not None:
            numpy.random.set_state(numpy_state)


def reseed(seed: int, *, accelerator: bool = True) -> None:
    """Python's ``random``, NumPy's global generator (where NumPy is loaded) and torch's CPU and
    accelerator generators (where torch is loaded: seeding initialises no device) seeded with
    ``seed``, for good.

    ``accelerator=False`` leaves the accelerator's generators alone: after a sticky CUDA error,
    seeding them would raise that error again, ahead of the message that names its test."""
    random.seed(seed)
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed(seed)
    torch = sys.modules.get("torch")
    if torch is None:
        return
    if accelerator:
        torch.manual_seed(seed)
    else:
        torch.default_generator.manual_seed(seed)


def written(seed: int | None) -> str:
    """``--cudaperf-seed`` as written: the number, or ``off`` (None: the generators left
    alone). A record's environment keeps it (``seed``), and a child process is given it."""
    return "off" if seed is None else str(seed)
