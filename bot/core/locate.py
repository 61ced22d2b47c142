"""Where a hunk's lines are in another version of its file, found by content, and the diff of
the text there against the patch's.

Pure. Line numbers in a patch are those of the file it was made on; upstream's versions of the
file have moved them. A block is found where it occurs exactly (the occurrence nearest the
hunk's own line number), else where most of its substantive lines line up at one offset.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from bot.core.classify import normalize
from bot.core.patchfile import Hunk

MIN_ALIGNED_SHARE = 0.3  # of a block's substantive lines, found at one offset, to place it
MAX_DIFF_LINES = 80  # an upstream diff kept in the report, for people to read


@dataclass(frozen=True)
class Span:
    start: int  # 0-based index of the first line
    length: int
    exact: bool  # the block occurs there as is


def _key(line: bytes) -> bytes:
    return b"".join(line.split())


class FileLines:
    """One version of a file as lines (without endings), with what find_block searches built
    once: a big patch asks about many hunks of the same file."""

    def __init__(self, lines: Sequence[bytes]):
        self.lines = list(lines)
        self._keys: list[bytes] | None = None
        self._where: dict[str, list[int]] | None = None

    @property
    def keys(self) -> list[bytes]:
        if self._keys is None:
            self._keys = [_key(line) for line in self.lines]
        return self._keys

    @property
    def where(self) -> dict[str, list[int]]:
        """Substantive line (normalized) -> the indexes it is at."""
        if self._where is None:
            self._where = {}
            for i, line in enumerate(self.lines):
                if n := normalize(line):
                    self._where.setdefault(n, []).append(i)
        return self._where


def find_block(file: FileLines, block: Sequence[bytes], hint: int) -> Span | None:
    """The span of the file's lines that holds `block` (lines without endings), nearest to
    index `hint` when it occurs more than once; None when too little of it lines up anywhere."""
    lines = file.lines
    if not block:
        return Span(max(0, min(hint, len(lines))), 0, True)
    keys = file.keys
    wanted = [_key(line) for line in block]
    width = len(wanted)
    exact = [
        i
        for i in range(len(keys) - width + 1)
        if keys[i] == wanted[0] and keys[i : i + width] == wanted
    ]
    if exact:
        start = min(exact, key=lambda i: (abs(i - hint), i))
        return Span(start, width, True)
    return _aligned(file, block, hint)


def _aligned(file: FileLines, block: Sequence[bytes], hint: int) -> Span | None:
    """Where most substantive lines of `block` line up at one offset (lines inserted or taken
    out inside the block widen the span by that much)."""
    where = file.where
    substantive = [(j, n) for j, line in enumerate(block) if (n := normalize(line))]
    votes: Counter[int] = Counter()
    for j, n in substantive:
        for i in where.get(n, ()):
            votes[i - j] += 1
    if not votes:
        return None
    best = max(votes, key=lambda o: (votes[o], -abs(o - hint), -o))
    slack = max(3, len(block) // 2)
    near = sum(v for o, v in votes.items() if abs(o - best) <= slack)
    if near < max(1.0, MIN_ALIGNED_SHARE * len(substantive)):
        return None
    matched = [
        (i, j) for j, n in substantive for i in where.get(n, ()) if abs(i - j - best) <= slack
    ]
    first_i, first_j = min(matched)
    last_i, last_j = max(matched)
    start = max(0, first_i - first_j)
    end = min(len(file.lines), last_i + (len(block) - last_j))
    return Span(start, max(end - start, 0), False)


def upstream_diff(hunk: Hunk, head: FileLines) -> str | None:
    """The head's text where the hunk's post-image belongs, against the post-image, as a
    unified diff (the patch's side first); None when the head has it as the patch does or
    when no such place is found."""
    post = [line.rstrip(b"\r\n") for line in hunk.side("+")]
    span = find_block(head, post, hunk.new_start - 1)
    if span is None or span.exact:
        return None
    theirs = head.lines[span.start : span.start + span.length]
    import difflib  # here: `carry check` runs as a short process, and few reports need it

    text = list(
        difflib.unified_diff(
            [_text(line) for line in post],
            [_text(line) for line in theirs],
            "patch",
            "upstream (head)",
            lineterm="",
            n=3,
        )
    )
    if not text:
        return None
    header, body = text[:2], text[2:]
    # Line numbers: the patch's post-image as the patch numbers it, upstream's in the head.
    body = [_renumber(line, hunk.new_start, span.start + 1) for line in body]
    if len(body) > MAX_DIFF_LINES:
        body = [*body[:MAX_DIFF_LINES], f"… {len(body) - MAX_DIFF_LINES} more lines"]
    return "\n".join([*header, *body])


def upstream_lines(hunk: Hunk, head: FileLines) -> list[bytes]:
    """The head's lines where the hunk's post-image belongs (the post-image itself when the
    head has it as is), or [] when no such place is found."""
    post = [line.rstrip(b"\r\n") for line in hunk.side("+")]
    span = find_block(head, post, hunk.new_start - 1)
    if span is None:
        return []
    return head.lines[span.start : span.start + span.length]


def _text(line: bytes) -> str:
    return line.decode("utf-8", "replace")


def _renumber(line: str, ours: int, theirs: int) -> str:
    """A difflib hunk header (numbered from 1 within the two snippets) numbered as the files."""
    if not line.startswith("@@ "):
        return line
    import re

    found = re.match(r"@@ -(\d+)(,\d+)? \+(\d+)(,\d+)? @@", line)
    if found is None:
        return line
    old, new = int(found.group(1)) + ours - 1, int(found.group(3)) + theirs - 1
    return f"@@ -{old}{found.group(2) or ''} +{new}{found.group(4) or ''} @@"
