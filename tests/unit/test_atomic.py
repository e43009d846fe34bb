"""The one writer of user-facing files: whole files or nothing, the mode kept, no leftovers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_cudaperf import atomic


def test_a_write_creates_the_folder_and_replaces_the_file_whole(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "report.json"
    atomic.write_text(target, "first\n")
    atomic.write_text(target, "second ✓\n")
    assert target.read_text(encoding="utf-8") == "second ✓\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["report.json"]


def test_an_existing_file_keeps_its_mode(tmp_path: Path) -> None:
    target = tmp_path / "shared.json"
    target.write_text("old")
    target.chmod(0o640)
    atomic.write_bytes(target, b"new")
    assert target.read_bytes() == b"new"
    assert target.stat().st_mode & 0o777 == 0o640


def test_a_failed_write_leaves_the_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "summary.md"
    target.write_text("kept")

    def interrupted(src: object, dst: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        atomic.write_text(target, "lost")
    assert target.read_text() == "kept"
    assert [p.name for p in tmp_path.iterdir()] == ["summary.md"]


def test_append_adds_at_the_end_and_creates_a_missing_file(tmp_path: Path) -> None:
    target = tmp_path / "step_summary.md"
    atomic.append_text(target, "one\n")
    atomic.append_text(target, "two\n")
    assert target.read_text() == "one\ntwo\n"
