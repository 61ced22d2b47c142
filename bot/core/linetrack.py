"""Which upstream commits touched a range of lines: follow the range through -U0 diffs.

Pure. The git side lists, oldest first, each commit's zero-context hunks for one file; this
module maps the line range forward through them and reports the commits that overlapped it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class ZeroHunk:
    old_start: int
    old_len: int
    new_start: int
    new_len: int


@dataclass(frozen=True)
class CommitHunks:
    sha: str
    subject: str
    hunks: Sequence[ZeroHunk]


def touching_commits(
    start: int, length: int, history: Iterable[CommitHunks]
) -> list[tuple[str, str]]:
    """(sha, subject) of each commit whose hunks overlap lines [start, start+length)."""
    lo, hi = start, start + max(length, 1)  # a pure insertion point still counts as a line
    touched: list[tuple[str, str]] = []
    for commit in history:
        overlap = False
        shift_lo = shift_hi = 0
        for hunk in commit.hunks:
            h_lo = hunk.old_start if hunk.old_len else hunk.old_start + 1
            h_hi = h_lo + hunk.old_len
            delta = hunk.new_len - hunk.old_len
            if h_hi <= lo and not (hunk.old_len == 0 and h_lo == lo):
                shift_lo += delta
                shift_hi += delta
            elif h_lo >= hi:
                continue
            else:
                overlap = True
                shift_hi += delta
        if overlap:
            touched.append((commit.sha, commit.subject))
        lo, hi = lo + shift_lo, max(lo + shift_lo + 1, hi + shift_hi)
    return touched
