"""A patch that needs a maintainer, as a work sheet: which hunks the head has and lacks, the
hunk that fails as a diff, the upstream commits that touched its lines, git's own words, and
the commands that reproduce it. Built from the engine's report as stored; nothing is asked."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from bot.core.classify import HunkState


class LineKind(StrEnum):
    ADDED = "add"
    REMOVED = "del"
    CONTEXT = "ctx"
    HEADER = "hdr"


@dataclass(frozen=True)
class DiffLine:
    text: str
    kind: LineKind


@dataclass(frozen=True)
class CommitLink:
    sha: str
    subject: str
    url: str | None


@dataclass(frozen=True)
class HunkRow:
    file: str
    header: str
    state: str
    detail: str
    needs_work: bool  # a hunk the head lacks, or has in another version
    commits: list[CommitLink] = field(default_factory=list)
    commits_touched_lines: bool = False  # True: these commits touched the hunk's lines
    diff: list[DiffLine] = field(default_factory=list)


@dataclass(frozen=True)
class Worksheet:
    hunks: list[HunkRow]
    apply_output: str
    reproduce: str

    @property
    def present(self) -> int:
        return sum(1 for h in self.hunks if not h.needs_work)

    @property
    def missing(self) -> int:
        return sum(1 for h in self.hunks if h.needs_work)


def diff_lines(text: str) -> list[DiffLine]:
    """Lines of a diff (a hunk or an interdiff), each with the kind a reader colours it by."""
    out = []
    for line in text.splitlines():
        if line.startswith(("@@", "diff ", "--- ", "+++ ", "index ")):
            kind = LineKind.HEADER
        elif line.startswith("+"):
            kind = LineKind.ADDED
        elif line.startswith("-"):
            kind = LineKind.REMOVED
        else:
            kind = LineKind.CONTEXT
        out.append(DiffLine(line, kind))
    return out


def worksheet(
    evidence: Sequence[Mapping[str, Any]],
    conflict: Mapping[str, Any] | None,
    commit_url: Callable[[str], str | None],
) -> Worksheet | None:
    """None for a patch with nothing to work on (no conflict details recorded)."""
    if not conflict:
        return None
    problems = {
        (str(h.get("file", "")), str(h.get("hunk", ""))): h
        for h in conflict.get("hunks") or []
        if isinstance(h, Mapping)
    }
    every = next((e.get("hunks") for e in evidence if e.get("signal") == "hunks"), None) or []
    rows = [_row(h, problems.get(_key(h)), commit_url) for h in every if isinstance(h, Mapping)]
    seen = {(r.file, r.header) for r in rows}
    rows += [_row(h, h, commit_url) for key, h in problems.items() if key not in seen]
    rows.sort(key=lambda r: not r.needs_work)  # what needs work first, in patch order
    reproduce = conflict.get("reproduce") or []
    return Worksheet(rows, str(conflict.get("apply_output") or ""), "\n".join(map(str, reproduce)))


def _key(hunk: Mapping[str, Any]) -> tuple[str, str]:
    return str(hunk.get("file", "")), str(hunk.get("hunk", ""))


def _row(
    hunk: Mapping[str, Any],
    problem: Mapping[str, Any] | None,
    commit_url: Callable[[str], str | None],
) -> HunkRow:
    file, header = _key(hunk)
    state = str(hunk.get("state", ""))
    if problem is None:
        return HunkRow(file, header, state, str(hunk.get("detail", "")), state != HunkState.APPLIED)
    touched = "upstream_commits" in problem
    listed = problem.get("upstream_commits") or problem.get("recent_commits") or []
    commits = [
        CommitLink(str(c.get("sha", "")), str(c.get("subject", "")), commit_url(str(c["sha"])))
        for c in listed
        if isinstance(c, Mapping) and c.get("sha")
    ]
    return HunkRow(
        file,
        header,
        state,
        str(hunk.get("detail", "")),
        needs_work=True,
        commits=commits,
        commits_touched_lines=touched,
        diff=diff_lines(str(problem.get("diff") or "")),
    )
