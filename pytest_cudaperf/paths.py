"""Whether a file or folder can be written where the user points: checked when a run starts (every
output file: the JSON and HTML reports, the history file, ``--benchmark-json``, JUnit XML, the
GitHub step summary; the baseline folder of an update) and before ``cudaperf record``'s first
run, so that a bad target is one line up front instead of an error after all the work."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def unwritable(path: Path, folder: bool = False) -> str | None:
    """Why ``path`` (a file, or with ``folder`` a folder, created when missing) cannot be written,
    or None when it can. As root every existing folder is writable: only the kinds are checked
    then."""
    if path.exists():
        if folder and not path.is_dir():
            return "exists but is not a folder"
        if not folder and path.is_dir():
            return "is a folder"
        if not os.access(path, os.W_OK):
            return "is not writable"
        return None
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        return f"cannot be created: {parent} is a file, not a folder"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"cannot be created: the folder {parent} is not writable"
    return _refused(parent, folder=path.parent != parent)


def _refused(parent: Path, folder: bool) -> str | None:
    """Why ``parent`` refuses a new file (or with ``folder``, a new folder), tried with a
    temporary one removed at once; None when it takes one. Permission bits do not tell: as root
    every folder looks writable, ``/proc`` and ``/sys`` included."""
    try:
        if folder:
            os.rmdir(tempfile.mkdtemp(prefix=".cudaperf-probe-", dir=parent))
        else:
            handle, name = tempfile.mkstemp(prefix=".cudaperf-probe-", dir=parent)
            os.close(handle)
            os.unlink(name)
    except OSError as exc:
        return f"cannot be created: the folder {parent} takes no new files ({exc.strerror})"
    return None
