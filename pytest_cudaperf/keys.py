"""What a measured series is called: a test id and a measurement name, kept apart.

A test id may contain any character (``test_ids[c#d]``), so the two are never joined into one
string for lookups; :meth:`SeriesKey.__str__` is for people only.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class SeriesKey:
    """One measurement of one test: ``nodeid`` and ``name`` (``""`` for the test's own
    measurement; ``"attn"`` for ``cuda_timer(fn, name="attn")``; ``"2"``, ``"guard2"``… for
    further unnamed ones)."""

    nodeid: str
    name: str = ""

    @property
    def file(self) -> str:
        """The test file part of the id: what tells whether the test can still exist."""
        return self.nodeid.split("::", 1)[0]

    def label(self) -> str:
        """``[attn] `` before a named measurement's messages; nothing for the test's own."""
        return f"[{self.name}] " if self.name else ""

    def __str__(self) -> str:
        return f"{self.nodeid} [{self.name}]" if self.name else self.nodeid
