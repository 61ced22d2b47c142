"""Apply one file's hunks in memory, exactly as `git apply` does with its default options.

The model is git 2.39's apply.c with no -C, --unidiff-zero, --ignore-whitespace, --3way,
--recount or --allow-overlap, and whitespace errors neither fixed nor reported: hunks are applied
one after another to the evolving image; each is searched for outward from its expected line,
never with fuzz. When a hunk is malformed in a way this module cannot be sure git would read the
same, the result is a failure, so that the caller falls back to real git.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from bot.core.patchfile import Hunk

_GIT_SPACE = frozenset(b" \t\n\r")  # git's own isspace(): \v and \f are not spaces
# git takes any "\ " line of 12 bytes or more as the "No newline" marker (its text is localized),
# but drops a marker of exactly 12 bytes at the very end of the patch: ask for more.
_MIN_MARKER_LEN = 13


@dataclass(frozen=True)
class FileApply:
    ok: bool
    content: bytes | None  # the new file content when ok, else None
    offsets: tuple[int, ...]  # per applied hunk: applied line index minus expected line index
    failed_hunk: int | None  # 0-based index of the first hunk that did not apply, None when ok

    @property
    def moved(self) -> bool:
        return any(self.offsets)


@dataclass(frozen=True)
class _Fragment:
    """A hunk as git sees it once it is about to be applied (sides already swapped if reversed)."""

    preimage: tuple[bytes, ...]
    postimage: tuple[bytes, ...]
    expected: int  # the line git expects the preimage at: the new side's start
    match_beginning: bool
    match_end: bool


class _Image:
    """The file being patched: lines as git splits them (on b'\\n' only) and which of them an
    earlier hunk wrote, since git never lets a later hunk match over those."""

    def __init__(self, content: bytes):
        pieces = content.split(b"\n")
        self.lines = [piece + b"\n" for piece in pieces[:-1]]
        if pieces[-1]:
            self.lines.append(pieces[-1])
        self.patched = [False] * len(self.lines)

    def replace(self, at: int, fragment: _Fragment) -> None:
        end = at + len(fragment.preimage)
        self.lines[at:end] = fragment.postimage
        self.patched[at:end] = [True] * len(fragment.postimage)

    def content(self) -> bytes:
        return b"".join(self.lines)


def apply_hunks(content: bytes, hunks: Sequence[Hunk], *, reverse: bool = False) -> FileApply:
    image = _Image(content)
    offsets: list[int] = []
    for index, hunk in enumerate(hunks):
        fragment = _fragment(hunk, reverse)
        found = None if fragment is None else _find_position(image, fragment)
        if fragment is None or found is None:
            return FileApply(False, None, tuple(offsets), index)
        image.replace(found, fragment)
        offsets.append(found - fragment.expected)
    return FileApply(True, image.content(), tuple(offsets), None)


def _fragment(hunk: Hunk, reverse: bool) -> _Fragment | None:
    """The hunk's two images and anchors, or None when git might read the hunk differently."""
    if not _well_formed(hunk):
        return None
    swap = {b"-": b"+", b"+": b"-"} if reverse else {}
    preimage: list[bytes] = []
    postimage: list[bytes] = []
    trailing = 0
    for index, line in enumerate(hunk.lines):
        tag = swap.get(line[:1], line[:1])
        if tag == b"\\":
            continue
        text = line[1:]
        if _before_marker(hunk.lines, index):
            text = text[:-1]
        if not text:
            # git drops or keeps an empty line depending on whether the patch wrote its ' '
            # prefix, which the parser does not tell.
            return None
        if tag != b"+":
            preimage.append(text)
        if tag != b"-":
            postimage.append(text)
        trailing = trailing + 1 if tag == b" " else 0
    old_start, new_start = (
        (hunk.new_start, hunk.old_start) if reverse else (hunk.old_start, hunk.new_start)
    )
    return _Fragment(
        preimage=tuple(preimage),
        postimage=tuple(postimage),
        expected=new_start - 1 if new_start else 0,
        match_beginning=old_start <= 1,
        match_end=trailing == 0,
    )


def _well_formed(hunk: Hunk) -> bool:
    """The checks git's parser makes, and a refusal of marker layouts it might read otherwise."""
    old_side = new_side = changes = 0
    previous = b"@"
    for line in hunk.lines:
        tag = line[:1]
        if not line.endswith(b"\n") or tag not in (b" ", b"-", b"+", b"\\"):
            return False
        if tag == b"\\" and (
            previous in (b"@", b"\\") or not line.startswith(b"\\ ") or len(line) < _MIN_MARKER_LEN
        ):
            return False
        old_side += tag in (b" ", b"-")
        new_side += tag in (b" ", b"+")
        changes += tag in (b"-", b"+")
        previous = tag
    return changes > 0 and (old_side, new_side) == (hunk.old_len, hunk.new_len)


def _before_marker(lines: Sequence[bytes], index: int) -> bool:
    return index + 1 < len(lines) and lines[index + 1].startswith(b"\\")


def _find_position(image: _Image, fragment: _Fragment) -> int | None:
    for position in _candidates(len(image.lines), fragment):
        if _matches_at(image, fragment, position):
            return position
    return None


def _candidates(image_len: int, fragment: _Fragment) -> Iterator[int]:
    """Positions in git's search order. An anchored hunk can only match at its anchor, so the
    walk git makes around it would find nothing else."""
    if fragment.match_beginning:
        yield 0
        return
    if fragment.match_end:
        yield image_len - len(fragment.preimage)
        return
    start = min(fragment.expected, image_len)
    yield start
    forward = backward = start
    while forward < image_len or backward > 0:
        if forward < image_len:
            forward += 1
            yield forward
        if backward > 0:
            backward -= 1
            yield backward


def _matches_at(image: _Image, fragment: _Fragment, position: int) -> bool:
    preimage = fragment.preimage
    end = position + len(preimage)
    if position < 0 or end > len(image.lines):
        return False
    if (fragment.match_end and end != len(image.lines)) or (
        fragment.match_beginning and position != 0
    ):
        return False
    if any(image.patched[position:end]):
        return False
    window = image.lines[position:end]
    if window == list(preimage):
        return True
    return _lines_may_straddle(window, preimage) and _git_byte_match(image, fragment, position)


def _lines_may_straddle(window: list[bytes], preimage: Sequence[bytes]) -> bool:
    """Whether, in the first pair of lines that differ, one is a prefix of the other: only then
    can the joined bytes still agree, and those are what git compares (so an incomplete line can
    match a longer one)."""
    for have, want in zip(window, preimage, strict=True):
        if have != want:
            return have.startswith(want) or want.startswith(have)
    return True


def _git_byte_match(image: _Image, fragment: _Fragment, position: int) -> bool:
    """git's full test: every line pair hashes alike (a hash that skips whitespace), and the
    preimage's bytes equal the image's bytes from `position` on, as a prefix or, when the hunk
    must match at the end, entirely."""
    wanted = b"".join(fragment.preimage)
    rest = b"".join(image.lines[position:])
    same_bytes = rest == wanted if fragment.match_end else rest.startswith(wanted)
    window = image.lines[position : position + len(fragment.preimage)]
    return same_bytes and all(
        _git_line_hash(have) == _git_line_hash(want)
        for have, want in zip(window, fragment.preimage, strict=True)
    )


def _git_line_hash(line: bytes) -> int:
    value = 0
    for byte in line:
        if byte not in _GIT_SPACE:
            value = (value * 3 + byte) & 0xFFFFFFFF
    return value
