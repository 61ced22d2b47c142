"""What kind of refresh a carried patch got: its context moved, or its own lines changed. Pure.

A refresh that only renumbers a patch or gives it new context lines changes nothing it does; one
whose `+`/`-` lines changed (upstream took some of them, or changed a line the patch removes)
changes the patch itself, and a reviewer wants those apart, each with the upstream commit that
forced it. The engine names that commit; this module tells the two kinds apart and says which
hunks of the carried patch changed.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from bot.core.patchfile import FileDiff, Hunk, PatchFile


class RefreshClass(StrEnum):
    CONTEXT_ONLY = "context-only"  # the same `+`/`-` lines, moved or with new context
    CONTENT_CHANGED = "content-changed"  # its `+`/`-` lines changed


def change_lines(hunk: Hunk) -> tuple[bytes, ...]:
    """The hunk's `+` and `-` lines, in order, line endings left out."""
    return tuple(line.rstrip(b"\r\n") for line in hunk.lines if line[:1] in (b"+", b"-"))


def _file_changes(fdiff: FileDiff) -> tuple[bytes, ...]:
    return tuple(line for hunk in fdiff.hunks for line in change_lines(hunk))


def _file_shape(fdiff: FileDiff) -> tuple[object, ...]:
    """What a file diff does besides its lines: create, delete, binary, mode."""
    return (fdiff.is_new, fdiff.is_deleted, fdiff.binary, fdiff.old_mode, fdiff.new_mode)


@dataclass(frozen=True)
class Refresh:
    kind: RefreshClass
    changed: tuple[tuple[FileDiff, Hunk], ...] = ()  # the carried patch's hunks that changed


def classify_refresh(carried: PatchFile, refreshed: PatchFile) -> Refresh:
    """Context-only when every file has the same `+`/`-` lines in the same order (hunks may be
    split, joined or renumbered, a file may have moved with upstream); else content-changed,
    with the carried hunks whose lines the refreshed patch no longer has as they were."""
    old, new = carried.files, refreshed.files
    same = len(old) == len(new) and all(
        _file_changes(a) == _file_changes(b) and _file_shape(a) == _file_shape(b)
        for a, b in zip(old, new, strict=True)
    )
    if same:
        return Refresh(RefreshClass.CONTEXT_ONLY)
    kept = [_file_changes(f) for f in new]
    changed = tuple(
        (f, h)
        for f in old
        for h in f.hunks
        if not any(_within(change_lines(h), lines) for lines in kept)
    )
    return Refresh(RefreshClass.CONTENT_CHANGED, changed)


def _within(block: tuple[bytes, ...], lines: tuple[bytes, ...]) -> bool:
    """True when `block` occurs in `lines` as consecutive entries (a hunk the refresh joined
    with a neighbour still has its lines)."""
    size = len(block)
    return any(lines[i : i + size] == block for i in range(len(lines) - size + 1))
