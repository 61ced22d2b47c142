"""Which upstream commits brought upstream's version of a patch into the head, by content, and
the PR a commit names.

Pure. The engine gives each hunk's lines as upstream has them and the commits of the range with
the lines each adds and removes; the commit that adds most of a hunk's lines (or, for a hunk
that only removes, takes most of them out) is where upstream's version came from.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

_SQUASHED = re.compile(r"\(#(\d+)\)\s*$")
_MERGED = re.compile(r"^Merge pull request #(\d+)\b")
MAX_LANDINGS = 5


class How(StrEnum):
    """How a landing commit was found."""

    PATCH_ID = "patch-id"  # the commit's diff has the patch's patch id
    CHANGES = "changes"  # the commit makes the patch's changed lines in the same functions
    SUBJECT = "subject"  # the commit has the patch's subject
    LINKED_PR = "linked-pr"  # the merge commit of a PR linked to the patch
    DECLARED_PR = "declared-pr"  # the merge of the PR a fix page or drop_when declares
    CONTENT = "content"  # the commit added the lines upstream's version has


@dataclass(frozen=True)
class Landing:
    sha: str
    subject: str
    how: How
    pr: int | None = None

    def as_dict(self) -> dict[str, object]:
        return {"sha": self.sha, "subject": self.subject, "pr": self.pr, "how": self.how.value}


@dataclass(frozen=True)
class CommitLines:
    """One upstream commit's substantive added and removed lines (normalized), over its files."""

    sha: str
    subject: str
    added: Counter[str]
    removed: Counter[str]


def pr_number(subject: str) -> int | None:
    """The PR a commit subject names: a squash merge's `title (#123)`, or a merge commit's
    `Merge pull request #123 from ...`."""
    found = _SQUASHED.search(subject) or _MERGED.match(subject)
    return int(found.group(1)) if found else None


def counterparts(theirs: Sequence[str], added: Sequence[str], cutoff: float) -> list[str]:
    """The lines of upstream's version (`theirs`) that are the patch's added lines, as they are
    or edited (a difflib ratio of at least `cutoff`): what upstream's change took of the patch,
    without the lines other commits put in the same place."""
    wanted = set(added)
    if not wanted:
        return []
    import difflib  # here: `carry check` runs as a short process, and few reports need it

    pool = list(wanted)
    return [
        line
        for line in theirs
        if line in wanted or difflib.get_close_matches(line, pool, 1, cutoff)
    ]


def landing_for(
    added: Sequence[str], removed: Sequence[str], commits: Sequence[CommitLines]
) -> CommitLines | None:
    """The commit (of `commits`, newest first) that adds most of `added`, the lines upstream's
    version of a hunk has that the patch's pre-image lacks; for a hunk that only removes, the
    one that removes most of `removed`. Ties go to the newest: after a revert and a re-landing,
    the head's lines are the re-landing's. None when no commit adds (or removes) any."""
    wanted = Counter(added) if added else Counter(removed)
    if not wanted:
        return None
    best, score = None, 0
    for commit in commits:
        have = commit.added if added else commit.removed
        hits = sum(min(n, have[line]) for line, n in wanted.items())
        if hits > score:
            best, score = commit, hits
    return best


def brought(added: Sequence[str], removed: Sequence[str], commit: CommitLines) -> bool:
    """Whether `commit` brought a hunk upstream's way: it adds at least half of `added` (the
    lines upstream has there that the patch's pre-image lacks), or, for a hunk that only
    removes, takes out at least half of `removed`. One line of a long block turning up in a
    commit (an edit nearby, a shared call) is where it came from for a pointer, but it is not
    upstream taking the hunk."""
    wanted = Counter(added) if added else Counter(removed)
    have = commit.added if added else commit.removed
    hits = sum(min(n, have[line]) for line, n in wanted.items())
    return hits > 0 and hits * 2 >= sum(wanted.values())


def ranked(found: Iterable[str]) -> list[str]:
    """Commit ids found for several hunks, the one found most often first (then first found)."""
    counts = Counter(found)
    order = {sha: i for i, sha in enumerate(counts)}
    return sorted(counts, key=lambda sha: (-counts[sha], order[sha]))[:MAX_LANDINGS]
