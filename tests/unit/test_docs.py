"""The repository's text stays connected: every "why: docs/decisions.md, "…"" in the package
names a heading of docs/decisions.md, and every relative Markdown link (and its #anchor) of the
README, docs/, benchmarks/ and benchmarks/public_suites/ points at a file and heading that exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
DOCS = sorted(
    [
        ROOT / "README.md",
        *(ROOT / "docs").glob("*.md"),
        *(ROOT / "benchmarks").glob("*.md"),
        *(ROOT / "benchmarks" / "public_suites").glob("*.md"),
    ]
)


def _plain(text: str) -> str:
    """Heading or reference text without Markdown quotes, comment markers and line breaks."""
    return " ".join(re.sub(r"#:?", " ", text.replace("`", "")).split())


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _headings(path: Path) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [line.lstrip("#").strip() for line in lines if re.match(r"#{1,6} ", line)]


def test_every_decision_the_code_cites_exists() -> None:
    headings = {_plain(h) for h in _headings(ROOT / "docs" / "decisions.md")}
    cited = [
        (path.relative_to(ROOT), _plain(ref))
        for path in sorted((ROOT / "pytest_cudaperf").rglob("*.py"))
        for ref in re.findall(r'decisions\.md,\s*"([^"]+)"', path.read_text(encoding="utf-8"))
    ]
    assert len(cited) > 10  # the pattern still finds the references
    missing = [(str(path), ref) for path, ref in cited if ref not in headings]
    assert missing == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_and_anchors_resolve(doc: Path) -> None:
    broken = []
    for target, anchor in re.findall(r"\]\(([^)#\s:]*)(?:#([^)\s]+))?\)", doc.read_text("utf-8")):
        path = (doc.parent / target).resolve() if target else doc
        if not path.exists():
            broken.append(f"{target}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in map(_slug, _headings(path)):
            broken.append(f"{target}#{anchor}: no such heading")
    assert broken == []
