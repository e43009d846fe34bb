"""Where a run's code came from: the commit, whether the work tree had changes, the branch.

Read with git in the run's root; where git is absent or the root is not a repository, from the
CI's variables (GitHub Actions' ``GITHUB_SHA`` and ``GITHUB_REF_NAME``), else empty."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path

from pytest_cudaperf.history.store import Source


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args], cwd=root, capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def describe(root: Path, environ: Mapping[str, str]) -> Source:
    """The run's :class:`Source`."""
    commit = _git(root, "rev-parse", "HEAD")
    if commit is None:
        return Source(environ.get("GITHUB_SHA", ""), False, environ.get("GITHUB_REF_NAME", ""))
    status = _git(root, "status", "--porcelain", "--untracked-files=no")
    branch = _git(root, "rev-parse", "--abbrev-ref", "HEAD") or ""
    if branch == "HEAD":  # a detached checkout, as CI makes
        branch = environ.get("GITHUB_REF_NAME", "")
    return Source(commit, bool(status), branch)
