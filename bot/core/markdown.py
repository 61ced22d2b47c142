"""What a Markdown text (a GitHub comment, an issue body, a fix page) says as prose and where it
links, read by a CommonMark parser (markdown-it-py) rather than line patterns. Pure.

Prose is what a reader sees as a paragraph of the text itself: not code (fenced, indented or
a code span), not raw HTML, not what HTML comments, `<pre>`, `<code>` or `<details>` hold, and
not text quoted (`>`), listed, tabled or used as a heading."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from html.parser import HTMLParser
from typing import Any, Final

from markdown_it import MarkdownIt
from markdown_it.token import Token

# Inside these elements nothing is prose: code, preformatted text, and <details> (folded away,
# where a command would act unseen). <script>/<style>/<textarea>/<template> never show as text.
_HIDDEN_TAGS: Final = frozenset(
    {"details", "pre", "code", "samp", "kbd", "tt", "script", "style", "textarea", "template"}
)
# Blocks whose text is not a paragraph of the comment itself.
_NOT_PROSE_BLOCKS: Final = frozenset(
    {"blockquote", "bullet_list", "ordered_list", "table", "heading"}
)


@cache
def _parser() -> MarkdownIt:
    """GitHub's dialect as far as it matters here: CommonMark with tables and strikethrough.
    Escapes and entities stay tokens of their own, so text keeps the characters as written,
    and every link is kept as written (markdown-it drops `javascript:` ones silently; carry
    must see them to refuse them)."""
    parser = MarkdownIt("commonmark").enable(["table", "strikethrough"]).disable("text_join")
    parser.validateLink = lambda url: True  # type: ignore[method-assign]
    return parser


class _OpenTags(HTMLParser):
    """Which of _HIDDEN_TAGS are open, fed the raw HTML of a text in order."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.open: Counter[str] = Counter()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _HIDDEN_TAGS:
            self.open[tag] += 1

    def handle_endtag(self, tag: str) -> None:
        if self.open[tag] > 0:
            self.open[tag] -= 1

    @property
    def hiding(self) -> bool:
        return any(self.open.values())


@dataclass(frozen=True)
class _Segment:
    text: str
    prose: bool  # False: a code span's text, or a place where raw HTML stood


@dataclass(frozen=True)
class _Inline:
    """A run of inline text and the state it appears in."""

    token: Token
    in_prose_block: bool  # a top-level paragraph, not quoted, listed, tabled or a heading
    in_list_item: bool


def _inlines(text: str, tags: _OpenTags) -> Iterator[_Inline]:
    """The inline tokens of `text` outside code blocks and raw HTML blocks, in order; `tags`
    follows the raw HTML met so far, so the caller sees what is inside <details> and <pre>."""
    depth: Counter[str] = Counter()
    for token in _parser().parse(text):
        kind = token.type.removesuffix("_open").removesuffix("_close")
        if kind in _NOT_PROSE_BLOCKS or kind == "list_item":
            depth[kind] += token.nesting
        elif token.type == "html_block":
            tags.feed(token.content)
        elif token.type == "inline":
            not_prose = sum(depth[k] for k in _NOT_PROSE_BLOCKS)
            yield _Inline(token, not_prose == 0, depth["list_item"] > 0)


def _lines_of(inline: Token, tags: _OpenTags) -> list[list[_Segment]]:
    """An inline token as lines of segments, leaving out what hidden HTML elements hold.
    Emphasis, strikethrough, escapes and entities keep their markup, so a line reads as it
    was written (`~~/carry pause~~` does not start with `/carry`)."""
    lines: list[list[_Segment]] = [[]]
    for child in inline.children or []:
        if child.type in ("softbreak", "hardbreak"):
            lines.append([])
        elif child.type == "html_inline":
            tags.feed(child.content)
            lines[-1].append(_Segment("", prose=False))
        elif tags.hiding:
            continue
        elif child.type == "code_inline":
            lines[-1].append(_Segment(child.content, prose=False))
        elif child.type == "text":
            lines[-1].append(_Segment(child.content, prose=True))
        elif child.type == "text_special":
            lines[-1].append(_Segment(child.markup, prose=True))
        elif child.type == "link_open":
            lines[-1].append(_Segment("<" if child.info == "auto" else "[", prose=True))
        elif child.type == "link_close":
            lines[-1].append(_Segment(">" if child.info == "auto" else "]", prose=True))
        elif child.type == "image":
            lines[-1].append(_Segment(f"![{child.content}]", prose=True))
        elif child.markup:  # em, strong, s
            lines[-1].append(_Segment(child.markup, prose=True))
    return lines


def prose_lines(text: str) -> list[str]:
    """The stripped lines of `text` that begin as prose: each line of a top-level paragraph,
    outside code, HTML comments, <pre>, <code> and <details>, that does not begin with code,
    raw HTML or markup. A code span later in such a line keeps its text (`/carry keep
    \\`a.patch\\`` names a.patch)."""
    tags = _OpenTags()
    found: list[str] = []
    for run in _inlines(text, tags):
        lines = _lines_of(run.token, tags)  # also follows the inline HTML, prose or not
        if not run.in_prose_block:
            continue
        for segments in lines:
            words = [s for s in segments if s.text.strip() or not s.prose]
            if words and words[0].prose:
                found.append("".join(s.text for s in segments).strip())
    return found


def list_items(text: str) -> list[str]:
    """The source text of every list item's paragraphs (without its `- ` marker) outside code,
    HTML comments, <pre> and <details>: where a task list's boxes are, as written."""
    tags = _OpenTags()
    found: list[str] = []
    for run in _inlines(text, tags):
        hidden = tags.hiding
        _lines_of(run.token, tags)
        if run.in_list_item and not hidden:
            found.append(run.token.content)
    return found


@dataclass(frozen=True)
class Link:
    """A link or image target as written in a text, and its 1-based line."""

    target: str
    line: int


def links(text: str) -> list[Link]:
    """Every link, autolink, image and link reference definition of `text` (code excluded),
    in order of appearance."""
    source = text.splitlines()
    env: dict[str, Any] = {}
    tokens = _parser().parse(text, env)
    # a reference's target is named where it is defined, not at each use
    found = [
        Link(str(ref.get("href", "")), ref.get("map", [0])[0] + 1)
        for ref in env.get("references", {}).values()
    ]
    defined = {link.target for link in found}
    for token in tokens:
        for child in token.children or []:
            if child.type not in ("link_open", "image"):
                continue
            target = str(child.attrGet("src" if child.type == "image" else "href") or "")
            if target not in defined:
                found.append(Link(target, _line_of(target, token.map, source)))
    return sorted(found, key=lambda link: link.line)


def _line_of(target: str, where: Sequence[int] | None, source: Sequence[str]) -> int:
    """The line of the block `where` that names `target` (the block's first line if none
    shows it as written, e.g. after percent-encoding)."""
    start, end = (where[0], where[1]) if where else (0, 0)
    for number in range(start, min(end, len(source))):
        if target in source[number]:
            return number + 1
    return start + 1
