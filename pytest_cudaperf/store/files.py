"""The baseline folder on disk: atomic writes (:mod:`pytest_cudaperf.atomic`) under the folder's
lock, and the folder's own ``.gitignore`` so that the lock and temporary
files never show in ``git status``."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

from pytest_cudaperf import atomic
from pytest_cudaperf.locks import file_lock
from pytest_cudaperf.store.format import BaselineError

#: temporary files of a killed writer older than this are removed at the next update
STALE_TMP_SECONDS = 300.0
GITIGNORE = (
    "# written by pytest-cudaperf: only the *.json files here are meant to be committed\n"
    ".gitignore\n.lock\n*.tmp\n"
)


def write_error(path: Path, exc: OSError) -> BaselineError:
    return BaselineError(
        f"{path}: cannot write the baseline ({exc.strerror or exc}); make the folder writable, "
        "or choose another one with --cudaperf-baseline-dir"
    )


def prepare_folder(folder: Path) -> None:
    """Create ``folder`` with its ``.gitignore`` (lock and temporary files stay out of git)."""
    if folder.exists() and not folder.is_dir():
        raise BaselineError(
            f"{folder}: exists but is not a folder; move it away, or choose another baseline "
            "folder with --cudaperf-baseline-dir"
        )
    try:
        folder.mkdir(parents=True, exist_ok=True)
        ignore = folder / ".gitignore"
        if not ignore.exists():
            atomic.write_text(ignore, GITIGNORE)
    except OSError as exc:
        raise write_error(folder, exc) from None


def remove_stale_tmp(folder: Path, older_than: float = STALE_TMP_SECONDS) -> list[Path]:
    """Remove ``*.tmp`` files a killed writer left behind (older than ``older_than`` seconds)."""
    removed = []
    now = time.time()
    for tmp in folder.glob("*.tmp"):
        with contextlib.suppress(OSError):
            if now - tmp.stat().st_mtime > older_than:
                tmp.unlink()
                removed.append(tmp)
    return removed


@contextlib.contextmanager
def locked(folder: Path) -> Iterator[None]:
    """Hold the folder's lock (``.lock``, created with the folder) while inside."""
    prepare_folder(folder)
    try:
        lock = file_lock(folder / ".lock")
        lock.__enter__()
    except OSError as exc:
        raise write_error(folder / ".lock", exc) from None
    try:
        yield
    finally:
        lock.__exit__(None, None, None)
