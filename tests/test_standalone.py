"""The repository stands alone: code, docs and the README never point at planning files outside
it (users get what they need from docs/), and every docs/ page they name exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_OUTSIDE = re.compile(r"DESIGN\.md|ENDPOINTS\.md|STYLE\.md|\.\./shared")
_DOC_REF = re.compile(r"docs/([a-z0-9_-]+\.md)")


def _files() -> list[Path]:
    found = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]
    for top in ("evalsvc", "tests", "benchmarks", "scripts", "examples", "deploy"):
        found += [
            p for p in (ROOT / top).rglob("*")
            if p.is_file() and p.suffix in {".py", ".md", ".yaml", ".yml", ".html", ".sh", ".toml"}
        ]
    return found


def test_nothing_cites_files_outside_the_repository() -> None:
    here = Path(__file__).resolve()
    offenders = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in _files()
        if p.resolve() != here
        for n, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
        if _OUTSIDE.search(line)
    ]
    assert offenders == []


def test_every_docs_page_named_exists() -> None:
    missing = {
        f"{p.relative_to(ROOT)}: docs/{m}"
        for p in _files()
        for m in _DOC_REF.findall(p.read_text(encoding="utf-8", errors="replace"))
        if not (ROOT / "docs" / m).exists()
    }
    assert missing == set()
