"""The baseline store: every baseline file of a folder (one per device class), read strictly at
start-up, looked up by series, and updated under the folder's lock. How new recordings join a
series is :func:`pytest_cudaperf.series.absorb`'s; the file format is
:mod:`pytest_cudaperf.store.format`'s."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from pytest_cudaperf import atomic
from pytest_cudaperf.keys import SeriesKey
from pytest_cudaperf.series import Entry, Record, absorb, beyond_tolerance, blindness
from pytest_cudaperf.store.files import locked, remove_stale_tmp, write_error
from pytest_cudaperf.store.format import BaselineError, Entries, dumps_baseline, to_document
from pytest_cudaperf.store.schema import parse_document, read_file

#: the series moving beyond their tolerance that ``cudaperf record`` names, widest first
BEYOND_NAMED = 3


def slug(device_class: str) -> str:
    """``NVIDIA H100 80GB HBM3`` -> ``nvidia-h100-80gb-hbm3``."""
    return re.sub(r"[^a-z0-9]+", "-", device_class.lower()).strip("-") or "unknown"


@dataclass
class UpdateSummary:
    path: Path
    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    #: series whose new recordings were at a new level (change point) or that were re-recorded
    afresh: list[str] = field(default_factory=list)
    unchanged: int = 0
    pruned: list[str] = field(default_factory=list)
    #: series written too noisy to fail a slowdown under 2x: ``label: why``
    blind: list[str] = field(default_factory=list)
    #: time series written whose noise lies above their tolerance (:func:`beyond_tolerance`):
    #: ``(label, noise, tolerance)``
    beyond_tolerance: list[tuple[str, float, float]] = field(default_factory=list)
    #: how many time series (not peak memory) were written
    timed: int = 0

    def line(self) -> str:
        updated = f"{len(self.changed)} updated"
        if self.afresh:
            updated += f" ({len(self.afresh)} started afresh)"
        parts = [f"{len(self.added)} added", updated, f"{self.unchanged} kept"]
        if self.pruned:
            parts.append(f"{len(self.pruned)} pruned")
        return f"cudaperf: baselines {self.path}: " + ", ".join(parts)

    def notes(self) -> list[str]:
        """One line per series written too noisy to fail (never written in silence)."""
        return [
            f"BLIND {line}; record it again on a quiet machine (cudaperf record)"
            for line in self.blind
        ]

    def beyond_tolerance_lines(self, named: int = BEYOND_NAMED) -> list[str]:
        """Where time series were written moving more than their tolerance: a line that counts
        them, then the ``named`` widest, one a line, and how many more; none where none did."""
        if not self.beyond_tolerance:
            return []
        widest = sorted(self.beyond_tolerance, key=lambda x: -x[1])
        lines = [
            f"cudaperf record: {len(widest)} of {self.timed} time series move between processes "
            "by more than their tolerance, so a change within that movement reads INCONCLUSIVE; "
            "record them again on a quiet machine (cudaperf show lists each series' noise):"
        ]
        lines += [
            f"  ±{noise:.0%} (tolerance {t:.0%}) {label}" for label, noise, t in widest[:named]
        ]
        if len(widest) > named:
            lines.append(f"  and {len(widest) - named} more")
        return lines


def _label(key: SeriesKey, series: str) -> str:
    return f"{key} {{{series}}}"


@dataclass(frozen=True)
class Seen:
    """What a run saw, for :meth:`BaselineStore.obsolete`: the test ids that ran, their files,
    whether the run was complete (no ``-k``, no crashed worker), and the keys its passing tests
    measured on the device class asked about."""

    tests: set[str]
    files: set[str]
    complete: bool
    produced: frozenset[SeriesKey] = frozenset()


class BaselineStore:
    """Every baseline file of a folder, read strictly at start-up."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.entries: dict[str, Entries] = {}
        self.paths: dict[str, Path] = {}

    @classmethod
    def load(cls, folder: Path) -> BaselineStore:
        store = cls(folder)
        if folder.exists() and not folder.is_dir():
            raise BaselineError(
                f"{folder}: exists but is not a folder; move it away, or choose another baseline "
                "folder with --cudaperf-baseline-dir"
            )
        if folder.is_dir():
            for path in sorted(folder.glob("*.json")):
                device_class, entries = read_file(path)
                store.entries[device_class] = entries
                store.paths[device_class] = path
        return store

    def path_for(self, device_class: str) -> Path:
        return self.paths.get(device_class, self.folder / f"{slug(device_class)}.json")

    def lookup(self, device_class: str, key: SeriesKey, series: str) -> Entry | None:
        return self.entries.get(device_class, {}).get(key, {}).get(series)

    def others(self, device_class: str, key: SeriesKey, series: str) -> list[tuple[str, Entry]]:
        """Entries of the same series in other device classes: shown, never enforced."""
        found = []
        for other, entries in sorted(self.entries.items()):
            entry = entries.get(key, {}).get(series)
            if other != device_class and entry is not None:
                found.append((other, entry))
        return found

    def keys(self, device_class: str) -> list[SeriesKey]:
        return sorted(self.entries.get(device_class, {}))

    def obsolete(self, device_class: str, seen: Seen, root: Path) -> list[SeriesKey]:
        """Keys whose series no longer exist: their test's file (under ``root``) is gone; a
        complete run of their file did not see their test id; or their test ran, was measured
        and passed in this run (``seen.produced``) without measuring this one (a measurement it
        dropped or renamed, or the extra series an earlier version stored for a re-run test). A
        partial run never calls an entry of an unseen test obsolete."""
        tests = {key.nodeid for key in seen.produced}
        return [
            key
            for key in self.keys(device_class)
            if not (root / key.file).exists()
            or (seen.complete and key.file in seen.files and key.nodeid not in seen.tests)
            or (key.nodeid in tests and key not in seen.produced)
        ]

    def update(
        self,
        device_class: str,
        records: Iterable[Record],
        prune: Iterable[SeriesKey] = (),
        tolerance: float = 0.05,
    ) -> UpdateSummary:
        """``--cudaperf-update``: add each record's recording to its series (the last
        ``MAX_RECORDINGS`` kept), or start the series afresh where it is clearly at a new level.
        Under the lock, re-reading the file first, so entries written meanwhile are kept.
        ``tolerance`` is for records that carry none of their own (``Record.tolerance``)."""
        return self._write(device_class, records, prune, tolerance, fresh=False)

    def replace(self, device_class: str, records: Iterable[Record]) -> UpdateSummary:
        """``cudaperf record``: the records of each series (one per run) become the series,
        replacing its recordings (``since`` = the earliest of them)."""
        return self._write(device_class, records, (), 0.0, fresh=True)

    def _write(
        self,
        device_class: str,
        records: Iterable[Record],
        prune: Iterable[SeriesKey],
        tolerance: float,
        fresh: bool,
    ) -> UpdateSummary:
        path = self.path_for(device_class)
        summary = UpdateSummary(path)
        grouped: dict[tuple[SeriesKey, str], list[Record]] = {}
        for record in records:
            grouped.setdefault((record.key, record.series), []).append(record)
        with locked(self.folder):
            remove_stale_tmp(self.folder)
            entries: Entries = read_file(path)[1] if path.exists() and not path.is_dir() else {}
            for (key, series), group in sorted(grouped.items()):
                old = entries.get(key, {}).get(series)
                entry, how = absorb(old, group, tolerance, afresh=fresh)
                label = _label(key, series)
                if how == "added":
                    summary.added.append(label)
                else:
                    summary.changed.append(label)
                    if how == "afresh":
                        summary.afresh.append(label)
                entries.setdefault(key, {})[series] = entry
                why = blindness(entry)
                if why:
                    summary.blind.append(f"{label}: {why}")
                summary.timed += entry.metric != "bytes"
                judged_at = max(
                    (r.tolerance for r in group if r.tolerance is not None), default=None
                )
                if judged_at is not None and beyond_tolerance(entry, judged_at):
                    summary.beyond_tolerance.append((label, entry.noise, judged_at))
            for key in prune:
                if entries.pop(key, None) is not None:
                    summary.pruned.append(str(key))
            total = sum(len(s) for s in entries.values())
            summary.unchanged = total - len(summary.added) - len(summary.changed)
            try:
                atomic.write_text(path, dumps_baseline(to_document(device_class, entries)))
            except OSError as exc:
                raise write_error(path, exc) from None
        self.entries[device_class] = parse_document(path, json.loads(path.read_text("utf-8")))[1]
        self.paths[device_class] = path
        return summary
