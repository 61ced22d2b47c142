"""Whether upstream's own later commits edited the lines a landed patch added.

Pure. Upstream took a patch's very diff (same patch id) and then kept working on that code: a
line the patch adds is no longer in the head as the patch wrote it, but a later commit of the
range took that line out and the head has an edited form of it. That is upstream's own
evolution of the fix, not a loss of it. A line that later commits took out with no edited form
left in the head (deleted, or moved to another file) is not accounted for: upstream may have
dropped part of the fix, and a human decides.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class LaterEdit:
    """One added line the head has only in an edited form, and the commits that edited it."""

    line: str  # the patch's added line, normalized
    commits: tuple[str, ...]  # the commits after the landing that changed it, oldest first


@dataclass(frozen=True)
class FileChange:
    """One commit's change to one file: the substantive lines it removes and adds (normalized)."""

    sha: str
    removed: Counter[str]
    added: tuple[str, ...]
    undoing: bool = False  # the commit says it reverts something, in whole or in part


def edited_later(
    added: Sequence[str], head: Counter[str], later: Sequence[FileChange], cutoff: float
) -> list[LaterEdit] | None:
    """Each line of `added` (normalized) followed through `later` (the commits after the
    landing that changed the file, oldest first): a line no later commit took out is still
    where the landing put it; each commit that takes it out must add an edited form of it (a
    difflib ratio of at least `cutoff`; a line moved within the file is its own edited form),
    which is followed on. The lines that were edited, with the commits that edited them; None
    when some line is not accounted for so: taken out with no edited form added in its place
    (deleted, rewritten, moved elsewhere), edited by a commit that says it reverts something
    (the edit may be part of undoing the fix), or its last form is not in the head's file
    (`head`, its normalized lines: then a commit outside the history read took it out)."""
    import difflib  # here: `carry check` runs as a short process, and few reports need it

    edits = []
    for line in dict.fromkeys(added):
        current, commits = line, []
        for change in later:
            if not change.removed[current]:
                continue
            if change.undoing:
                return None
            form = difflib.get_close_matches(current, change.added, 1, cutoff)
            if not form:
                return None
            if form[0] != current:
                commits.append(change.sha)
            current = form[0]
        if not head[current]:
            return None
        if commits:
            edits.append(LaterEdit(line, tuple(commits)))
    return edits
