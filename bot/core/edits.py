"""Whether upstream's own later commits edited the lines a landed patch added.

Pure. Upstream took a patch's very diff (same patch id) and then kept working on that code. Each
line the patch adds is followed through the commits after the landing: where a commit took it
out and put an edited form of it in its place (an argument added, a comment appended, a value
retuned), upstream evolved its own copy of the fix, and the head holding the last form means
nothing is left for the patch to do. A line taken out with nothing like it put in its place
(deleted, rewritten, moved to another file) is not accounted for: upstream may have dropped
part of the fix, and a human decides.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class LaterEdits:
    """What upstream's later commits did to a landed patch's added lines in one file."""

    lines: int  # copies of added lines the head has only in an edited form
    commits: tuple[str, ...]  # the commits that edited them, oldest first


@dataclass(frozen=True)
class FileChange:
    """One commit's change to one file: the substantive lines it removes and adds (normalized)."""

    sha: str
    removed: Counter[str]
    added: tuple[str, ...]
    undoing: bool = False  # the commit says it reverts something, in whole or in part


def edited_later(
    added: Sequence[str], head: Counter[str], later: Sequence[FileChange], cutoff: float
) -> LaterEdits | None:
    """`added` (the patch's added lines in one file, normalized, each copy counted) followed
    through `later` (the commits after the landing that changed the file, oldest first): a copy
    no later commit took out is where the landing put it; a commit that takes copies of a line
    out must add an edited form of it (a difflib ratio of at least `cutoff`; a line moved
    within the file is its own form), and those copies are followed on as that form. A commit
    that says it reverts something may only put a copy back into a form it already had (the
    patch's own line, or an earlier edit of it): anything else may be part of undoing the fix.
    None when some copy is not accounted for so: taken out with no edited form added in its
    place (deleted, rewritten, moved elsewhere), turned by a reverting commit into a form it
    never had, or the head's file (`head`, its normalized lines)
    has fewer copies of a last form than were followed to it (a commit outside the history read
    took them out)."""
    import difflib  # here: `carry check` runs as a short process, and few reports need it

    live = Counter(added)
    forms = set(added)  # every form a copy has been followed to: the patch's own, then edits
    commits: list[str] = []
    for change in later:
        for line, copies in list(live.items()):
            taken = min(copies, change.removed[line])
            if not taken:
                continue
            # A commit that says it reverts may only put back a form the copy already had
            # (undoing upstream's own edit, as when a big rebase is reverted and redone).
            allowed = [a for a in change.added if a in forms] if change.undoing else change.added
            form = difflib.get_close_matches(line, allowed, 1, cutoff)
            if not form:
                return None
            if form[0] != line:
                live[line] -= taken
                live[form[0]] += taken
                forms.add(form[0])
                commits.append(change.sha)
    if any(head[line] < copies for line, copies in live.items() if copies > 0):
        return None
    edited = sum((live - Counter(added)).values())  # copies the head has only as an edit
    return LaterEdits(edited, tuple(dict.fromkeys(commits)))
