"""Refresh a patch whose hunks applied at an offset: same bytes, new positions.

When every hunk of a patch applied as written, only at other lines, the refreshed patch is the
original file with each hunk header renumbered to where the hunk landed and each `index` line
pointing at the new blobs. Everything else (message, context, diffstat, signature) keeps its
bytes, so the interdiff shows exactly the move.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bot.core.patchfile import PatchFile, split_lines

_HUNK_LINE = re.compile(rb"^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@(?P<rest>.*?)(?P<eol>\r?\n?)$", re.S)
_INDEX_LINE = re.compile(rb"^index (?P<old>[0-9a-f]+)\.\.(?P<new>[0-9a-f]+)(?P<rest>.*)$", re.S)


@dataclass(frozen=True)
class FileMove:
    """Where one file's hunks landed: per hunk, its offset from the expected line (as the
    applier reports it), and the file's content before and after the patch."""

    offsets: Sequence[int]
    before: bytes
    after: bytes


def blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def renumber(data: bytes, parsed: PatchFile, moves: Mapping[str, FileMove]) -> bytes:
    """`data` with hunk headers and index lines rewritten for `moves` (path -> FileMove).
    Files without a move keep their lines."""
    headers = iter(_new_headers(parsed, moves))
    lines = split_lines(data)
    out = lines[: parsed.diff_offset]
    current: str | None = None
    files = iter(parsed.files)
    for line in lines[parsed.diff_offset :]:
        if line.startswith(b"diff --git "):
            current = next(files).path
        elif line.startswith(b"index ") and current is not None and current in moves:
            line = _index_line(line, moves[current])
        elif _HUNK_LINE.match(line):
            new_header = next(headers)
            if new_header is not None:
                match = _HUNK_LINE.match(line)
                assert match is not None
                line = new_header + match.group("rest") + match.group("eol")
        out.append(line)
    return b"".join(out)


def _new_headers(parsed: PatchFile, moves: Mapping[str, FileMove]) -> list[bytes | None]:
    """One entry per hunk of the patch, in file order: the new `@@ ... @@` or None."""
    headers: list[bytes | None] = []
    for fdiff in parsed.files:
        move = moves.get(fdiff.path)
        growth = 0  # lines added minus removed by this file's earlier hunks
        for position, hunk in enumerate(fdiff.hunks):
            if move is None:
                headers.append(None)
                continue
            expected = hunk.new_start - 1 if hunk.new_start else 0
            landed = expected + move.offsets[position]  # lines before the hunk, post-image
            new_start = landed + 1 if hunk.new_len else landed
            old_start = landed - growth + 1 if hunk.old_len else landed - growth
            old, new = _range(old_start, hunk.old_len), _range(new_start, hunk.new_len)
            headers.append(b"@@ -%s +%s @@" % (old, new))
            growth += hunk.new_len - hunk.old_len
    return headers


def _range(start: int, length: int) -> bytes:
    return b"%d" % start if length == 1 else b"%d,%d" % (start, length)  # git omits ",1"


def _index_line(line: bytes, move: FileMove) -> bytes:
    match = _INDEX_LINE.match(line)
    if match is None:
        return line
    old = blob_id(move.before)[: len(match.group("old"))]
    new = blob_id(move.after)[: len(match.group("new"))]
    return b"index %s..%s%s" % (old.encode(), new.encode(), match.group("rest"))
