"""Shared by the benchmark scripts: write a Markdown table to OUT/NAME and print it."""

from __future__ import annotations

from pathlib import Path


def publish(lines: list[str], out: str | Path, name: str) -> None:
    table = "\n".join(lines) + "\n"
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / name).write_text(table)
    print(table)
