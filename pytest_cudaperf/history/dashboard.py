"""The dashboard: a static site of the run history, written to a folder that works opened from a
file or served by any static host, offline.

The folder holds ``index.html``, a page per test under ``tests/``, the script and style under
``assets/`` and :data:`MANIFEST`, the list of the files it wrote. A folder is written only when it
is new, empty, or holds a manifest (a dashboard written before): then every file is written again,
the files of the last build that this one no longer has are removed, and any other file is left
alone. Each file is replaced whole (written beside it, then renamed), so a server never serves half
a page. The manifest names the files of both builds while the pages are written and this build's
after, so a build stopped half way leaves a folder the next build takes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from importlib import resources
from pathlib import Path, PurePosixPath

from pytest_cudaperf import atomic
from pytest_cudaperf.history.pages import ASSETS, Site, page_name, render_index, render_test_page
from pytest_cudaperf.history.store import HistoryStore
from pytest_cudaperf.history.timelines import read_history
from pytest_cudaperf.paths import unwritable

#: the list of files a build wrote, in the folder it wrote them to
MANIFEST = ".cudaperf-dashboard.json"
#: the manifest's format
FORMAT = 1

#: ``progress(stage, done, total)``: stage "read" (tests read from the history) or "write"
#: (pages written)
Progress = Callable[[str, int, int], None]


class DashboardError(RuntimeError):
    """The folder cannot be written: the message says which and why, in one line."""


@dataclass(frozen=True)
class Built:
    index: Path
    tests: int
    series: int
    runs: int
    #: files of the previous build removed because this one no longer has them
    removed: int


def _previous_files(out_dir: Path) -> list[str]:
    """The files the last build wrote to ``out_dir`` (none when it is new or empty); an
    error when it holds anything else."""
    why = unwritable(out_dir, folder=True)
    if why:
        raise DashboardError(f"{out_dir}: {why}")
    if not out_dir.exists() or not any(out_dir.iterdir()):
        return []
    manifest = out_dir / MANIFEST
    if not manifest.is_file():
        raise DashboardError(
            f"{out_dir}: not empty and not a cudaperf dashboard (no {MANIFEST}); give a new or "
            "empty folder, or one a dashboard was written to"
        )
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
        files = data["files"]
        if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
            raise TypeError("files: expected a list of paths")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DashboardError(f"{manifest}: not a dashboard's manifest ({exc})") from None
    return [f for f in files if _inside(f)]


def _inside(relative: str) -> bool:
    path = PurePosixPath(relative)
    return bool(relative) and not path.is_absolute() and ".." not in path.parts


def _write_manifest(out_dir: Path, files: set[str]) -> None:
    manifest = {"format": FORMAT, "files": sorted(files)}
    atomic.write_text(out_dir / MANIFEST, json.dumps(manifest, indent=1) + "\n")


def asset(name: str) -> str:
    """The text of one of the site's own files (package data)."""
    return (
        resources.files("pytest_cudaperf.history")
        .joinpath("assets")
        .joinpath(name)
        .read_text("utf-8")
    )


def build(
    store: HistoryStore,
    out_dir: Path,
    source: str,
    since: str = "",
    progress: Progress | None = None,
) -> Built:
    """Write the dashboard of ``store`` (named ``source`` on its pages) to ``out_dir``; the runs
    from ``since`` on when given (a commit or a date:
    :meth:`~pytest_cudaperf.history.store.HistoryStore.since_time`)."""
    previous = _previous_files(out_dir)

    def report(stage: str) -> Callable[[int, int, str], None] | None:
        if progress is None:
            return None
        return lambda done, total, _: progress(stage, done, total)

    tests = read_history(store, since, report("read"))
    site = Site.of(source, tests)
    pages: dict[str, Callable[[], str]] = {f"assets/{n}": partial(asset, n) for n in ASSETS}
    pages["index.html"] = partial(render_index, tests, site)
    for test in tests:
        pages[f"tests/{page_name(test.nodeid)}"] = partial(render_test_page, test, site)
    try:
        # first the files of both builds: a build stopped half way leaves a folder a rebuild takes
        _write_manifest(out_dir, set(previous) | set(pages))
        for done, (relative, render) in enumerate(pages.items(), 1):
            atomic.write_text(out_dir / relative, render())
            if progress is not None:
                progress("write", done, len(pages))
        stale = sorted(set(previous) - set(pages))
        for relative in stale:
            (out_dir / relative).unlink(missing_ok=True)
        _write_manifest(out_dir, set(pages))
    except OSError as exc:
        raise DashboardError(f"{out_dir}: cannot write the dashboard ({exc})") from None
    return Built(
        index=out_dir / "index.html",
        tests=len(tests),
        series=sum(len(tl.lines) for t in tests for tl in t.timelines),
        runs=len(
            {r.run_id for t in tests for tl in t.timelines for ln in tl.lines for r in ln.runs}
        ),
        removed=len(stale),
    )
