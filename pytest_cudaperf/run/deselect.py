"""Exact deselection: ``--cudaperf-deselect=NODEID`` (repeatable) deselects the test with that
id and no other. pytest's own ``--deselect`` takes a prefix, so deselecting
``test_ops.py::test_add`` also drops ``test_ops.py::test_add_hot``; ``cudaperf ab`` deselects
the tests it has decided, and those it is not confirming, with this option instead."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Protocol, TypeVar

OPTION = "--cudaperf-deselect"
HELP = (
    "deselect the test with exactly this node id (repeatable); pytest's --deselect also drops "
    "every test whose id starts with it"
)


class Item(Protocol):
    """A collected test as :func:`split` reads it (``pytest.Item``; not imported, so that
    ``cudaperf ab``, which passes :func:`arg`, does not import pytest)."""

    @property
    def nodeid(self) -> str: ...


ItemT = TypeVar("ItemT", bound=Item)


def arg(nodeid: str) -> str:
    """The command-line argument that deselects exactly ``nodeid``."""
    return f"{OPTION}={nodeid}"


def split(items: Sequence[ItemT], exact: Collection[str]) -> tuple[list[ItemT], list[ItemT]]:
    """``items`` kept and deselected: those whose node id is one of ``exact``, no prefix match."""
    chosen = set(exact)
    kept = [item for item in items if item.nodeid not in chosen]
    return kept, [item for item in items if item.nodeid in chosen]
