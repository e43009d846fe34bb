from __future__ import annotations

from pathlib import Path

import pytest

from pytest_cudaperf.paths import unwritable


def test_a_folder_that_takes_no_new_file_is_found_up_front(tmp_path: Path) -> None:
    """As root, permission bits say yes to /proc: a file created and removed at once tells."""
    if not Path("/proc").is_dir():
        pytest.skip("no /proc here")
    why = unwritable(Path("/proc/r.json"))
    assert why is not None
    assert why.startswith("cannot be created: the folder /proc takes no new files (")
    assert unwritable(Path("/proc/new/r.json")) is not None
    assert unwritable(tmp_path / "r.json") is None
    assert unwritable(tmp_path / "a" / "b" / "r.json") is None
    assert list(tmp_path.iterdir()) == []  # the probes are gone
