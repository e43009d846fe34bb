"""``cudaperf dashboard DB OUT_DIR``: the run history as a static site
(:mod:`pytest_cudaperf.history.dashboard`), with its progress on stderr."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from pytest_cudaperf.cli.sources import CliError
from pytest_cudaperf.history.backends import is_url, shown
from pytest_cudaperf.history.dashboard import DashboardError, build
from pytest_cudaperf.history.store import HistoryError, open_store

#: at most one progress line per this many seconds (besides each stage's last)
PROGRESS_EVERY_S = 1.0

_STAGES = {
    "read": "reading the history: {done}/{total} tests",
    "write": "writing: {done}/{total} files",
}


def progress_printer(
    stream: TextIO, every: float = PROGRESS_EVERY_S, clock: Callable[[], float] = time.monotonic
) -> Callable[[str, int, int], None]:
    """Progress lines for ``stream``: the first and last of each stage, and at most one per
    ``every`` seconds between them."""
    last = [-float("inf")]

    def show(stage: str, done: int, total: int) -> None:
        now = clock()
        if done in (1, total) or now - last[0] >= every:
            last[0] = now
            print(_STAGES[stage].format(done=done, total=total), file=stream, flush=True)

    return show


def cmd_dashboard(db: str, out_dir: Path, since: str) -> int:
    """Write the dashboard of the history ``db`` (an SQLite file or a ``postgresql://`` URL) to
    ``out_dir``."""
    if not is_url(db) and not Path(db).is_file():
        raise CliError(f"dashboard: {db}: no such history file")
    try:
        with open_store(db) as store:
            built = build(store, out_dir, shown(db), since, progress_printer(sys.stderr))
    except (HistoryError, DashboardError) as exc:
        raise CliError(f"dashboard: {exc}") from None
    removed = f"; {built.removed} stale files removed" if built.removed else ""
    print(
        f"cudaperf dashboard: {built.tests} tests, {built.series} series, {built.runs} runs "
        f"-> {built.index}{removed}"
    )
    return 0
