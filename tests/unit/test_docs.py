"""The documents stay navigable: every relative link between the READMEs and docs/ pages reaches a
file (and a heading, when it names one), no hand-written page in docs/ has a line a reader must
scroll for, and nothing cites a document that is not in the repository.

Exempt from the line length: table rows (a Markdown table row cannot be wrapped) and lines holding
a URL; docs/generated/ is made by a program and not checked."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT

DOCS = ROOT / "docs"
WIDTH = 100
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*```")


def _pages() -> list[Path]:
    """The README, docs/README and every written page under docs/ (generated ones excluded)."""
    written = [p for p in DOCS.rglob("*.md") if "generated" not in p.relative_to(DOCS).parts]
    return sorted({ROOT / "README.md", DOCS / "README.md", *written})


def _outside_code(text: str) -> list[tuple[int, str]]:
    """(line number, line) of the lines outside fenced code blocks."""
    out, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((number, line))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    headings = [line.lstrip("#") for _, line in _outside_code(page.read_text()) if line.startswith("#")]
    return {slug(h) for h in headings}


def _links(page: Path) -> list[tuple[int, str]]:
    return [(n, target) for n, line in _outside_code(page.read_text()) for target in LINK.findall(line)]


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_reach_a_file_and_heading(page: Path) -> None:
    broken = []
    for number, target in _links(page):
        if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        reached = (page.parent / path).resolve() if path else page
        if not reached.exists():
            broken.append(f"{number}: {target} (no such file)")
        elif anchor and reached.suffix == ".md" and anchor not in _anchors(reached):
            broken.append(f"{number}: {target} (no such heading)")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_every_page_is_listed_in_the_index() -> None:
    listed = {(DOCS / target.partition("#")[0]).resolve() for _, target in _links(DOCS / "README.md")}
    pages = [p for p in _pages() if p.is_relative_to(DOCS) and p != DOCS / "README.md"]
    unlisted = [str(p.relative_to(ROOT)) for p in pages if p.resolve() not in listed]
    assert not unlisted, f"docs/README.md lists no link to {unlisted}"


@pytest.mark.parametrize(
    "page", [p for p in _pages() if p.is_relative_to(DOCS)], ids=lambda p: str(p.relative_to(ROOT))
)
def test_lines_fit_in_width(page: Path) -> None:
    long = [
        number
        for number, line in enumerate(page.read_text().splitlines(), 1)
        if len(line) > WIDTH and not line.lstrip().startswith("|") and "://" not in line
    ]
    assert not long, f"{page.relative_to(ROOT)}: lines over {WIDTH} characters: {long}"


def test_nothing_cites_a_reference_outside_the_repository() -> None:
    needle = "reference " + "\u00a7"  # spelled apart, so this file does not match itself
    tracked = (
        subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    )
    citing = []
    for name in filter(None, tracked):
        path = ROOT / name
        if not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        if needle in " ".join(text.split()):  # a citation broken across lines too
            citing.append(name)
    assert not citing, f"cite upstream's file or function, or a docs/ page, instead: {citing}"
