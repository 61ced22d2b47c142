"""Upstream history as evidence: matching commits (patch-id, subject), reverts, conflict blame."""

from __future__ import annotations

import re
from dataclasses import dataclass

from bot.core.linetrack import CommitHunks, ZeroHunk
from bot.core.patchfile import PatchFile
from bot.git.runner import Git

MAX_CANDIDATES = 400
_SUBJECT_NOISE = re.compile(r"(\[[^\]]*\]\s*)|(\s*\(#\d+\)\s*$)|(^cherry[- ]pick(ed)?:?\s*)", re.I)
_REVERT_OF = re.compile(r"This reverts commit ([0-9a-f]{7,40})")
_ZERO_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
MIN_SUBJECT_CHARS = 12


def subject_key(subject: str) -> str:
    previous = None
    text = subject.strip()
    while previous != text:
        previous = text
        text = _SUBJECT_NOISE.sub("", text).strip()
    return " ".join(text.lower().split())


@dataclass(frozen=True)
class UpstreamCommit:
    sha: str
    subject: str
    body: str


@dataclass(frozen=True)
class Match:
    commit: UpstreamCommit
    how: str  # "patch-id" | "subject"
    reverted_by: str | None


def range_commits(git: Git, rev_range: str, paths: tuple[str, ...]) -> list[UpstreamCommit]:
    if not paths:
        return []
    fmt = "%H%x1f%s%x1f%b%x1e"
    out = git.run(
        "log", "--no-merges", f"-n{MAX_CANDIDATES}", f"--format={fmt}", rev_range, "--", *paths
    ).stdout.decode("utf-8", "replace")
    commits = []
    for record in out.split("\x1e"):
        fields = record.strip("\n").split("\x1f")
        if len(fields) == 3:
            commits.append(UpstreamCommit(*fields))
    return commits


def patch_id(git: Git, diff: bytes) -> str | None:
    out = git.run("patch-id", "--stable", input=diff).text
    return out.split()[0] if out else None


def commit_patch_ids(git: Git, rev_range: str, paths: tuple[str, ...]) -> dict[str, str]:
    """commit -> stable patch-id of its diff restricted to `paths`."""
    log = git.run(
        "log",
        "--no-merges",
        f"-n{MAX_CANDIDATES}",
        "-p",
        "--format=commit %H",
        rev_range,
        "--",
        *paths,
    ).stdout
    if not log.strip():
        return {}
    ids: dict[str, str] = {}
    for line in git.run("patch-id", "--stable", input=log).text.splitlines():
        pid, sha = line.split()
        ids[sha] = pid
    return ids


def find_matches(git: Git, rev_range: str, patch: PatchFile, data: bytes) -> list[Match]:
    """Upstream commits in range that look like this patch, each with the commit reverting it."""
    paths = patch.touched_paths
    candidates = range_commits(git, rev_range, paths)
    if not candidates:
        return []
    own = patch_id(git, data)
    ids = commit_patch_ids(git, rev_range, paths) if own else {}
    wanted = subject_key(patch.meta.subject)
    matches = []
    for commit in candidates:
        how = None
        if own and ids.get(commit.sha) == own:
            how = "patch-id"
        elif len(wanted) >= MIN_SUBJECT_CHARS and subject_key(commit.subject) == wanted:
            how = "subject"
        if how:
            newer = candidates[: candidates.index(commit)]
            matches.append(Match(commit, how, _reverted_by(commit, newer)))
    return matches


def _reverted_by(target: UpstreamCommit, newer: list[UpstreamCommit]) -> str | None:
    """The newest commit that reverts `target` and was not itself reverted later."""
    revert_subject = f'revert "{target.subject}"'.lower()
    for commit in newer:  # newest first
        reverts = _REVERT_OF.findall(commit.body)
        is_revert = any(target.sha.startswith(r) for r in reverts) or (
            commit.subject.lower() == revert_subject
        )
        if is_revert and _reverted_by(commit, newer[: newer.index(commit)]) is None:
            return commit.sha
    return None


def file_history(git: Git, rev_range: str, path: str) -> list[CommitHunks]:
    """Oldest-first commits touching `path` in range, with their zero-context hunks."""
    out = git.run(
        "log",
        "--reverse",
        "--no-merges",
        "-U0",
        "-p",
        "--format=%x1e%H%x1f%s",
        "--no-renames",
        rev_range,
        "--",
        path,
    ).stdout.decode("utf-8", "replace")
    history = []
    for record in out.split("\x1e")[1:]:
        head, _, diff = record.partition("\n")
        sha, _, subject = head.partition("\x1f")
        hunks = []
        for line in diff.splitlines():
            match = _ZERO_HUNK.match(line)
            if match:
                old_len = int(match.group(2)) if match.group(2) is not None else 1
                new_len = int(match.group(4)) if match.group(4) is not None else 1
                hunks.append(ZeroHunk(int(match.group(1)), old_len, int(match.group(3)), new_len))
        history.append(CommitHunks(sha, subject, tuple(hunks)))
    return history


def recent_commits(git: Git, head: str, path: str, limit: int = 5) -> list[tuple[str, str]]:
    out = git.run("log", f"-n{limit}", "--format=%H%x1f%s", head, "--", path).text
    return [tuple(line.split("\x1f", 1)) for line in out.splitlines() if "\x1f" in line]  # type: ignore[misc]
