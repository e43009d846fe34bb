"""The one writer of files a user (or another process) reads: each file is replaced whole, never
seen half written, even when the writer is killed midway.

A write goes to a hidden ``.NAME.XXXX.tmp`` beside the file, is flushed to disk (fsync), then
renamed over the file; an existing file keeps its mode, a new one gets the umask's
(``0o666 & ~umask``); a missing parent folder is created. On any error, Ctrl-C included, the
temporary file is removed and the target is left as it was. ``*.tmp`` files that a killed process
left behind are the baseline store's to clean (``store/files.remove_stale_tmp``).
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

#: the suffix of the temporary file a write renames over its target
TMP_SUFFIX = ".tmp"


def write_bytes(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically. Raises OSError."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}{TMP_SUFFIX}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with contextlib.suppress(OSError):
            os.fchmod(fd, path.stat().st_mode & 0o7777)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_text(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` (UTF-8) atomically. Raises OSError."""
    write_bytes(path, text.encode("utf-8"))


def append_text(path: Path, text: str) -> None:
    """Add ``text`` at the end of ``path`` (created when missing), replacing the file whole: a
    reader sees the file before or after, never a half-written tail. For files that others append
    to between runs (GitHub's step summary), not for concurrent writers. Raises OSError."""
    try:
        before = path.read_bytes()
    except FileNotFoundError:
        before = b""
    write_bytes(path, before + text.encode("utf-8"))
