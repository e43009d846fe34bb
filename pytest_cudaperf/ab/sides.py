"""The two sides of ``cudaperf ab``: git revisions of the user's repository, each checked out in a
temporary worktree that is removed afterwards, or the working tree itself; or two Python
environments. A side's own code comes first on the import path (the worktree, and its ``src/``
where the project uses that layout), ahead of an editable install of the main checkout, and each
side says where its packages were imported from."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path


class SideError(Exception):
    """A side that cannot be prepared (an unknown revision, a failed ``--setup``): one line, with
    the output that explains it."""

    def __init__(self, message: str, output: str = "") -> None:
        super().__init__(message)
        self.output = output


@dataclass
class Side:
    """One side: where its code is (the folder pytest runs in), the Python that runs it, and
    what it is called in the output."""

    name: str  #: "base" or "head"
    label: str  #: "origin/main (3f2a1c9)", "the working tree", "/opt/venv/bin/python"
    root: Path
    #: where its pytest processes run: the same place in its checkout as the user's current folder
    cwd: Path
    python: str = sys.executable
    #: folders put first on the import path: the side's root and its src/ where it has one
    paths: list[Path] = field(default_factory=list)
    commit: str | None = None

    def env(self, environ: Mapping[str, str]) -> dict[str, str]:
        """The environment this side's processes run in: its folders first on PYTHONPATH."""
        env = dict(environ)
        own = [str(p) for p in self.paths]
        rest = env.get("PYTHONPATH", "")
        env["PYTHONPATH"] = os.pathsep.join([*own, rest] if rest else own)
        return env


def git(repo: Path, *args: str) -> str:
    """``git -C repo args``; its error as a :class:`SideError` in one line."""
    try:
        done = subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, check=False
        )
    except OSError as exc:
        raise SideError(f"git could not run: {exc}") from None
    if done.returncode != 0:
        first = (done.stderr.strip().splitlines() or ["git failed"])[0]
        raise SideError(first.removeprefix("fatal: "))
    return done.stdout.strip()


def repository(cwd: Path) -> Path:
    """The top of the git repository ``cwd`` is in."""
    try:
        return Path(git(cwd, "rev-parse", "--show-toplevel"))
    except SideError:
        raise SideError(
            f"{cwd} is not in a git repository (cudaperf ab compares revisions)"
        ) from None


def resolve(repo: Path, rev: str) -> str:
    """The commit ``rev`` names, or a :class:`SideError` naming it."""
    try:
        return git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    except SideError:
        raise SideError(f"unknown revision {rev!r} in {repo}") from None


def dirty(repo: Path) -> list[str]:
    """Tracked files with uncommitted changes, staged or not (untracked files left out)."""
    return [line for line in git(repo, "diff", "--name-only", "HEAD").splitlines() if line]


def own_paths(root: Path) -> list[Path]:
    """The folders of a side's code: its root, and its ``src/`` when the project has one."""
    return [root, root / "src"] if (root / "src").is_dir() else [root]


def packages(root: Path) -> list[str]:
    """The project's top-level import packages: folders with an ``__init__.py`` at its root or
    under ``src/``, but not its tests."""
    found = []
    for base in own_paths(root):
        for init in sorted(base.glob("*/__init__.py")):
            name = init.parent.name
            if name not in ("tests", "test", "benchmarks", "docs") and name.isidentifier():
                found.append(name)
    return found


def imported_from(side: Side, names: Sequence[str], environ: Mapping[str, str]) -> dict[str, str]:
    """Where ``side``'s Python imports each of ``names`` from, with the side's import path."""
    code = (
        "import importlib.util as u, sys\n"
        "for n in sys.argv[1:]:\n"
        "    s = u.find_spec(n)\n"
        "    print(n, (s.origin or '') if s else '')\n"
    )
    done = subprocess.run(
        [side.python, "-c", code, *names],
        cwd=side.root,
        env=side.env(environ),
        capture_output=True,
        text=True,
        check=False,
    )
    found = {}
    for line in done.stdout.splitlines():
        name, _, origin = line.partition(" ")
        found[name] = origin
    return found


def check_imports(side: Side, environ: Mapping[str, str]) -> str:
    """One line saying where the side imports its project's packages from; a
    :class:`SideError` when one comes from outside the side's own folders."""
    names = packages(side.root)
    if not names:
        return f"{side.name}: {side.label}: no package of its own found to check"
    origins = imported_from(side, names, environ)
    wrong = [n for n in names if not _inside(origins.get(n, ""), side.paths)]
    if wrong:
        name = wrong[0]
        raise SideError(
            f"{side.name} ({side.label}) imports {name} from {origins.get(name) or 'nowhere'}, "
            f"not from its own code under {side.root}"
        )
    shown = ", ".join(f"{n} from {Path(origins[n]).parent}" for n in names)
    return f"{side.name}: {side.label}: imports {shown}"


def _inside(origin: str, folders: Sequence[Path]) -> bool:
    if not origin:
        return False
    path = Path(origin).resolve()
    return any(path.is_relative_to(folder.resolve()) for folder in folders)


def run_setup(side: Side, command: str, environ: Mapping[str, str]) -> None:
    """``--setup``: the command, once, in the side's folder; its output in the error if it fails."""
    done = subprocess.run(
        command,
        shell=True,
        cwd=side.root,
        env=side.env(environ),
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SideError(
            f"--setup failed on {side.name} ({side.label}) with exit code {done.returncode}",
            (done.stdout + done.stderr).strip(),
        )


@contextmanager
def worktrees(repo: Path, revisions: Mapping[str, str]) -> Iterator[dict[str, Path]]:
    """A detached worktree per ``{name: commit}``, in a temporary folder; every one removed when
    the block ends, by an exception or Ctrl-C as well."""
    folder = Path(tempfile.mkdtemp(prefix="cudaperf-ab-"))
    made: dict[str, Path] = {}
    try:
        for name, commit in revisions.items():
            path = folder / name
            git(repo, "worktree", "add", "--detach", "--quiet", str(path), commit)
            made[name] = path
        yield made
    finally:
        for path in made.values():
            subprocess.run(
                ["git", "-C", str(repo), "worktree", "remove", "--force", str(path)],
                capture_output=True,
                check=False,
            )
        subprocess.run(
            ["git", "-C", str(repo), "worktree", "prune"], capture_output=True, check=False
        )
        shutil.rmtree(folder, ignore_errors=True)
