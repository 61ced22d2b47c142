"""A patch that needs a maintainer, as a work sheet: which hunks the head has and lacks, the
hunk that fails as a diff, upstream's text there against the patch's, the upstream commits that
touched its lines (or a file's newest commits, once per file), git's own words, and the commands
that reproduce it; and the upstream commits that brought upstream's version of the patch. Built
from the engine's report as stored; nothing is asked."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
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
class LandingLink:
    """An upstream commit that brought upstream's version of the patch into the head."""

    sha: str
    subject: str
    url: str | None
    how: str  # in words
    pr: int | None = None
    pr_url: str | None = None


@dataclass(frozen=True)
class FileCommits:
    """A file's newest upstream commits, for hunks whose lines could not be traced."""

    file: str
    commits: list[CommitLink]


HOW_WORDS = {
    "patch-id": "the same patch id",
    "changes": "the same changed lines, other context",
    "subject": "the same subject",
    "linked-pr": "the merge of the linked PR",
    "content": "added the lines upstream has",
}


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
    upstream_diff: list[DiffLine] = field(default_factory=list)  # upstream's text vs the patch's


@dataclass(frozen=True)
class Worksheet:
    hunks: list[HunkRow]
    apply_output: str
    reproduce: str
    recent: list[FileCommits] = field(default_factory=list)  # once per file

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
    return Worksheet(
        rows,
        str(conflict.get("apply_output") or ""),
        "\n".join(map(str, reproduce)),
        _recent_per_file(problems.values(), commit_url),
    )


def landings(
    upstream_commits: Sequence[Mapping[str, Any]],
    commit_url: Callable[[str], str | None],
    pr_url: Callable[[int], str | None],
) -> list[LandingLink]:
    """The upstream commits that brought upstream's version of the patch, as links."""
    out = []
    for c in upstream_commits:
        if not isinstance(c, Mapping) or not c.get("sha"):
            continue
        sha, how = str(c["sha"]), str(c.get("how", ""))
        pr = c.get("pr") if isinstance(c.get("pr"), int) else None
        out.append(
            LandingLink(
                sha,
                str(c.get("subject", "")),
                commit_url(sha),
                HOW_WORDS.get(how, how),
                pr,
                pr_url(pr) if pr is not None else None,
            )
        )
    return out


def _links(listed: Any, commit_url: Callable[[str], str | None]) -> list[CommitLink]:
    return [
        CommitLink(str(c.get("sha", "")), str(c.get("subject", "")), commit_url(str(c["sha"])))
        for c in listed or []
        if isinstance(c, Mapping) and c.get("sha")
    ]


def _recent_per_file(
    problems: Iterable[Mapping[str, Any]], commit_url: Callable[[str], str | None]
) -> list[FileCommits]:
    """A file's newest commits, once per file, for the hunks whose lines were not traced (the
    report repeats them on each such hunk)."""
    found: dict[str, list[CommitLink]] = {}
    for problem in problems:
        if "upstream_commits" not in problem and problem.get("recent_commits"):
            file = str(problem.get("file", ""))
            found.setdefault(file, _links(problem["recent_commits"], commit_url))
    return [FileCommits(file, commits) for file, commits in found.items()]


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
    commits = _links(problem.get("upstream_commits"), commit_url) if touched else []
    return HunkRow(
        file,
        header,
        state,
        str(hunk.get("detail", "")),
        needs_work=True,
        commits=commits,
        commits_touched_lines=touched,
        diff=diff_lines(str(problem.get("diff") or "")),
        upstream_diff=diff_lines(str(problem.get("upstream_diff") or "")),
    )
