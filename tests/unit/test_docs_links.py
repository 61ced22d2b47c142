"""The README and docs/ link to files and headings that exist (as GitHub resolves them), so a
newcomer reading top to bottom never follows a dead link: a moved section (the security model,
now docs/security.md) or a renamed heading fails here."""

from __future__ import annotations

import re
from itertools import pairwise
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from markdown_it import MarkdownIt

from bot.core.markdown import links
from tests.support.paths import REPO_ROOT

PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]


def anchors(page: Path) -> set[str]:
    """GitHub's ids for a page's headings: the text lowercased, punctuation other than `-`
    and `_` dropped, spaces made hyphens; a repeated one gets -1, -2, ..."""
    tokens = MarkdownIt("commonmark").enable("table").parse(page.read_text())
    found: set[str] = set()
    for opening, inline in pairwise(tokens):
        if opening.type != "heading_open":
            continue
        text = "".join(
            c.content for c in inline.children or [] if c.type in ("text", "code_inline")
        )
        slug = re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")
        candidate, n = slug, 0
        while candidate in found:
            n += 1
            candidate = f"{slug}-{n}"
        found.add(candidate)
    return found


def local_links(page: Path) -> list[tuple[int, str]]:
    return [
        (link.line, link.target)
        for link in links(page.read_text())
        if not urlsplit(link.target).scheme and not link.target.startswith("//")
    ]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_local_link_resolves(page: Path) -> None:
    dead = []
    for line, target in local_links(page):
        path, _, fragment = target.partition("#")
        resolved = (page.parent / unquote(path)).resolve() if path else page
        if not resolved.exists():
            dead.append(f"{page.name}:{line}: {target} (no such file)")
        elif fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
            dead.append(f"{page.name}:{line}: {target} (no heading #{fragment})")
    assert dead == []


def test_the_readme_starts_with_the_two_commands_and_links_the_security_model() -> None:
    text = (REPO_ROOT / "README.md").read_text()
    block = text.split("```sh\n", 1)[1].split("```", 1)[0].splitlines()
    assert [line.split()[:2] for line in block] == [["make", "run"], ["make", "test"]]
    assert any(target == "docs/security.md" for _, target in local_links(REPO_ROOT / "README.md"))
    assert "config/carry.example.yaml" in text and "carry init" in text
