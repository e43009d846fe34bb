"""Whether a file or folder can be written where the user points: checked when a run starts (the
JSON and HTML reports, the baseline folder of an update) and before ``cudaperf record``'s first
run, so that a bad target is one line up front instead of an error after all the work."""

from __future__ import annotations

import os
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
    return None
