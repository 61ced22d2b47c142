"""Upstream history as evidence: matching commits (patch-id, subject), reverts, conflict blame.

The range's commits are read once per series: one `git log -p` over the paths the series
touches (or only the commits a touch index named); patch ids are computed in process, with one
`git patch-id` call for the diffs bot.core.patchid cannot vouch for.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from bot.core.changeid import change_id
from bot.core.classify import added_runs, normalize
from bot.core.linetrack import CommitHunks, ZeroHunk
from bot.core.patchfile import PatchFile, split_lines
from bot.core.patchid import patch_id
from bot.git.runner import Git

MAX_CANDIDATES = 400
MIN_SUBJECT_CHARS = 12
_SUBJECT_NOISE = re.compile(r"(\[[^\]]*\]\s*)|(\s*\(#\d+\)\s*$)|(^cherry[- ]pick(ed)?:?\s*)", re.I)
_REVERT_OF = re.compile(r"This reverts commit ([0-9a-f]{7,40})")
_TITLED_REVERT = re.compile(r'^Revert "(.*)"$', re.S)
_SAYS_REVERT = re.compile(r"\brevert", re.I)
_PR_NUMBER = re.compile(r"\(#(\d+)\)\s*$")
UNDONE_RATIO = 0.5  # a landing counts as undone once at most this share of its lines is left
_ZERO_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_RECORD = b"\x1eCARRY-COMMIT "


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
    sections: dict[str, bytes] = field(default_factory=dict, compare=False)  # path -> file diff


class Undone(StrEnum):
    """How upstream undid a matching commit."""

    TITLED_REVERT = "titled-revert"  # `Revert "<title>"` or a `This reverts commit` line
    LINES_REMOVED = "lines-removed"  # later commits took its added lines out again


@dataclass(frozen=True)
class Match:
    commit: UpstreamCommit
    how: str  # "patch-id" | "changes" (the same changed lines, other context) | "subject"
    reverted_by: str | None
    reverted_how: Undone | None = None


def _split_sections(diff: bytes) -> dict[str, bytes]:
    sections: dict[str, bytes] = {}
    for chunk in re.split(rb"(?m)^(?=diff --git )", diff):
        if not chunk.startswith(b"diff --git "):
            continue
        header = chunk.split(b"\n", 1)[0].decode("utf-8", "surrogateescape")
        paths = re.findall(r"[ab]/(\S+)", header)
        for path in dict.fromkeys(paths):
            sections[path] = chunk
    return sections


SAME_DIFF = ("patch-id", "changes")  # match kinds that mean upstream took the patch's diff

LOG_FORMAT = "--format=%x1eCARRY-COMMIT %H%x1f%s%x1f%b%x1f"


def read_range(
    git: Git,
    rev_range: str,
    paths: tuple[str, ...],
    path_sets: tuple[tuple[str, ...], ...] = (),
) -> list[UpstreamCommit]:
    """Newest-first commits in range touching any of `paths`, with their per-file diffs: the
    newest MAX_CANDIDATES, and, where `path_sets` (each patch's files) are given and that
    window is full, the newest MAX_CANDIDATES of each set too (see window)."""
    if not paths:
        return []
    out = git.run(
        "log",
        "--no-merges",
        f"-n{MAX_CANDIDATES}",
        "-p",
        "--no-renames",
        LOG_FORMAT,
        rev_range,
        "--",
        *paths,
    ).stdout
    commits = parse_commits(out)
    if len(commits) < MAX_CANDIDATES or len(set(path_sets)) < 2:
        return commits
    listing = git.run(
        "log",
        "--no-merges",
        "--no-renames",
        "--name-only",
        "--format=%x1e%H",
        rev_range,
        "--",
        *paths,
    ).stdout.decode("utf-8", "surrogateescape")  # not .text: str.strip() takes \x1e too
    touched: dict[str, frozenset[str]] = {}
    for record in listing.split("\x1e")[1:]:
        sha, *names = record.strip("\n").split("\n")
        touched[sha] = frozenset(name for name in names if name)
    order = list(touched)
    wanted = window(order, [[s for s in order if touched[s] & set(ps)] for ps in path_sets])
    have = {c.sha: c for c in commits}
    read = {c.sha: c for c in read_commits(git, [s for s in wanted if s not in have], paths)}
    return [found for s in wanted if (found := have.get(s) or read.get(s)) is not None]


def window(order: list[str], per_patch: list[list[str]]) -> list[str]:
    """The commits history evidence reads: the newest MAX_CANDIDATES touching each patch's own
    files, in `order` (all of them, newest first). One window over the whole series' files
    would let hundreds of upstream commits to one patch's busy file push an older landing of
    another patch out of sight (a drop by patch id turned into a review, on the vLLM fork)."""
    keep = {sha for shas in per_patch for sha in shas[:MAX_CANDIDATES]}
    return [sha for sha in order if sha in keep]


def read_commits(git: Git, shas: list[str], paths: tuple[str, ...]) -> list[UpstreamCommit]:
    """The given commits, in the given order, with their diffs limited to `paths`."""
    if not shas or not paths:
        return []
    out = git.run(
        "log", "--no-walk=unsorted", "-p", "--no-renames", LOG_FORMAT, *shas, "--", *paths
    ).stdout
    found = {c.sha: c for c in parse_commits(out)}
    return [found[sha] for sha in shas if sha in found]


def parse_commits(out: bytes) -> list[UpstreamCommit]:
    commits = []
    for record in out.split(_RECORD)[1:]:
        meta, _, diff = record.rpartition(b"\x1f")
        sha, subject, body = meta.decode("utf-8", "replace").split("\x1f", 2)
        commits.append(UpstreamCommit(sha.strip(), subject, body, _split_sections(diff)))
    return commits


class SeriesHistory:
    """Matches for every patch of a series against one range's commits (read with `git log`
    unless the caller already has them). Patch ids are computed in one `git patch-id` call and
    remembered in `patch_ids` (diff digest -> id), so a later check only computes new ones."""

    def __init__(
        self,
        git: Git,
        rev_range: str,
        patches: list[tuple[PatchFile, bytes]],
        commits: list[UpstreamCommit] | None = None,
        patch_ids: dict[bytes, str] | None = None,
    ):
        self.rev_range = rev_range
        if commits is None:
            union = tuple(dict.fromkeys(p for parsed, _ in patches for p in parsed.touched_paths))
            own = tuple(tuple(parsed.touched_paths) for parsed, _ in patches)
            commits = read_range(git, rev_range, union, own)
        self.commits = commits
        self.patch_ids = {} if patch_ids is None else patch_ids
        self.change_ids: dict[bytes, str | None] = {}
        self.matches = self._match_all(git, patches)

    def _match_all(self, git: Git, patches: list[tuple[PatchFile, bytes]]) -> list[list[Match]]:
        own: list[bytes] = []
        pairs: dict[tuple[int, int], bytes] = {}
        for pi, (parsed, data) in enumerate(patches):
            own.append(b"".join(split_lines(data)[parsed.diff_offset :]))  # no "From <sha>" line
            for ci, commit in enumerate(self.commits):
                chunks = [commit.sections[p] for p in parsed.touched_paths if p in commit.sections]
                if chunks:
                    pairs[(pi, ci)] = b"".join(chunks)
        if pairs:
            self._compute_ids(git, [*own, *pairs.values()])
        result: list[list[Match]] = [[] for _ in patches]
        for (pi, ci), diff in pairs.items():
            parsed = patches[pi][0]
            commit = self.commits[ci]
            own_id = self.patch_ids.get(_digest(own[pi]))
            wanted = subject_key(parsed.meta.subject)
            how = None
            if own_id and self.patch_ids.get(_digest(diff)) == own_id:
                how = "patch-id"
            elif self._same_changes(own[pi], diff):
                how = "changes"
            elif len(wanted) >= MIN_SUBJECT_CHARS and subject_key(commit.subject) == wanted:
                how = "subject"
            if how:
                result[pi].append(_match(git, commit, how, self.commits[:ci]))
        return result

    def _same_changes(self, own: bytes, diff: bytes) -> bool:
        """The commit's diff makes the patch's very changes in the same functions, with other
        context (a cherry-pick onto a line whose surrounding code differs): changeid."""
        mine = self._change_id(own)
        if mine is None or _first_change(own) not in diff:  # a cheap look before parsing
            return False
        return self._change_id(diff) == mine

    def _change_id(self, diff: bytes) -> str | None:
        key = _digest(diff)
        if key not in self.change_ids:
            self.change_ids[key] = change_id(diff)
        return self.change_ids[key]

    def _compute_ids(self, git: Git, diffs: list[bytes]) -> None:
        """Fills `patch_ids` for the diffs it lacks, in process where bot.core.patchid is sure
        and with `git patch-id` otherwise; a diff git finds no change in gets ""."""
        missing = {}
        for diff in diffs:
            key = _digest(diff)
            if key not in self.patch_ids:
                pid = patch_id(diff)
                if pid is None:
                    missing[key] = diff
                else:
                    self.patch_ids[key] = pid
        if not missing:
            return
        order = list(missing)
        feed = [f"commit {n:040x}\n".encode() + missing[key] for n, key in enumerate(order)]
        out = git.run("patch-id", "--stable", input=b"\n".join(feed)).text
        for key in order:
            self.patch_ids[key] = ""
        for line in out.splitlines():
            pid, fake = line.split()
            self.patch_ids[order[int(fake, 16)]] = pid


def _first_change(diff: bytes) -> bytes:
    """The text of the diff's first added or removed line with text: a diff with the same
    changes has it (unless upstream also changed its spacing: then no match, as before)."""
    for line in diff.split(b"\n"):
        if line[:1] in (b"+", b"-") and not line.startswith((b"+++", b"---")) and line[1:].strip():
            return line[1:].strip()
    return b""


def _digest(diff: bytes) -> bytes:
    return hashlib.sha1(diff).digest()


def _match(git: Git, commit: UpstreamCommit, how: str, newer: list[UpstreamCommit]) -> Match:
    reverted = _reverted_by(commit, newer)
    if reverted is not None:
        return Match(commit, how, reverted, Undone.TITLED_REVERT)
    removed = _lines_removed_by(git, commit, newer)
    if removed is not None:
        return Match(commit, how, removed, Undone.LINES_REMOVED)
    return Match(commit, how, None)


def _reverted_by(target: UpstreamCommit, newer: list[UpstreamCommit]) -> str | None:
    """The newest commit that reverts `target` by its title or trailer and was not itself
    reverted later."""
    for position, commit in enumerate(newer):  # newest first
        if _reverts(commit, target) and _reverted_by(commit, newer[:position]) is None:
            return commit.sha
    return None


def says_revert(commit: UpstreamCommit) -> bool:
    """The commit's subject or message says it reverts something (in whole or in part)."""
    return bool(_SAYS_REVERT.search(commit.subject) or _REVERT_OF.search(commit.body))


def _reverts(commit: UpstreamCommit, target: UpstreamCommit) -> bool:
    """`This reverts commit <sha>`, or a `Revert "<title>"` subject naming the target by its
    title or by its PR number. Real titles carry PR numbers on both sides
    (`Revert "Fix x (#101)" (#102)`), and the target's title may have been edited since."""
    if any(target.sha.startswith(sha) for sha in _REVERT_OF.findall(commit.body)):
        return True
    titled = _TITLED_REVERT.match(_PR_NUMBER.sub("", commit.subject).strip())
    if titled is None:
        return False
    named = titled.group(1)
    if subject_key(named) == subject_key(target.subject):
        return True
    number, target_number = _PR_NUMBER.search(named), _PR_NUMBER.search(target.subject)
    return bool(number and target_number and number.group(1) == target_number.group(1))


def _lines_removed_by(git: Git, target: UpstreamCommit, newer: list[UpstreamCommit]) -> str | None:
    """The commit after which most of the substantive lines `target` added are gone again from
    the files it added them to (followed through later commits, oldest first: a removal and a
    re-adding cancel), or None. A remover that adds the same lines anywhere else moved the
    code rather than undoing it, so it does not count."""
    added = Counter(n for section in target.sections.values() for n in _added(section))
    if not added:
        return None
    live = Counter(added)
    undone_by = None
    for commit in reversed(newer):  # oldest first
        sections = [commit.sections[p] for p in target.sections if p in commit.sections]
        if not sections:
            continue
        for section in sections:
            live -= Counter(n for n in _removed(section) if n in added)
            live += Counter(n for n in _added(section) if n in added)
        live &= added  # never more than the landing added
        share = sum(live.values()) / sum(added.values())
        if share > UNDONE_RATIO:
            undone_by = None
        elif undone_by is None:
            undone_by = commit.sha
    if undone_by is not None and _moves_lines(git, undone_by, added):
        return None
    return undone_by


def _moves_lines(git: Git, sha: str, lines: Counter[str]) -> bool:
    """True when `sha` adds, in any file, most of the given lines."""
    diff = git.run("show", "--format=", "--no-renames", "-p", sha).stdout
    readded = Counter(n for n in _added(diff) if n in lines) & lines
    return sum(readded.values()) > sum(lines.values()) * UNDONE_RATIO


def _added(diff: bytes) -> list[str]:
    return [n for run in added_runs(diff) for n in run]


def added_lines(diff: bytes) -> list[str]:
    """The substantive lines a diff adds, normalized."""
    return _added(diff)


def removed_lines(diff: bytes) -> list[str]:
    """The substantive lines a diff removes, normalized."""
    return _removed(diff)


def _removed(diff: bytes) -> list[str]:
    lines = (line[1:] for line in diff.splitlines() if line.startswith(b"-"))
    return [n for line in lines if not line.startswith(b"--") and (n := normalize(line))]


def file_histories(
    git: Git, rev_range: str, paths: list[str], touching: list[str] | None = None
) -> dict[str, list[CommitHunks]]:
    """Per path, the oldest-first commits touching it in range with their zero-context hunks,
    read in one walk of the range (one walk per path took minutes on a big, distant patch).
    `touching` (newest first: every commit of the range that touches the paths, as the touch
    index knows them) spares git the walk."""
    if not paths:
        return {}
    if touching == []:
        return {path: [] for path in paths}
    walk = ["--reverse", rev_range] if touching is None else ["--no-walk=unsorted", *touching[::-1]]
    out = git.run(
        "log",
        "--no-merges",
        "-U0",
        "-p",
        "--format=%x1e%H%x1f%s",
        "--no-renames",
        *walk,
        "--",
        *paths,
    ).stdout
    return _zero_histories(out, paths)


def _zero_histories(out: bytes, paths: list[str]) -> dict[str, list[CommitHunks]]:
    """Per path, the commits of a `git log -U0 -p --format=%x1e%H%x1f%s` output, in its order."""
    wanted = set(paths)
    histories: dict[str, list[CommitHunks]] = {path: [] for path in paths}
    for record in out.split(b"\x1e")[1:]:
        head, _, diff = record.partition(b"\n")
        sha, _, subject = head.decode("utf-8", "replace").partition("\x1f")
        for path, section in _split_sections(diff).items():
            if path in wanted:
                hunks = tuple(_zero_hunks(section))
                histories[path].append(CommitHunks(sha, subject, hunks))
    return histories


RECENT_LINE_HISTORY = 20  # commits on a file read to say which recent ones touched a hunk


def recent_file_history(
    git: Git, head: str, path: str, limit: int = RECENT_LINE_HISTORY
) -> list[CommitHunks]:
    """The newest `limit` commits touching `path` at `head`, oldest first, with their
    zero-context hunks: one walk, read when no range bounds the history."""
    out = git.run(
        "log",
        f"-n{limit}",
        "--no-merges",
        "-U0",
        "-p",
        "--format=%x1e%H%x1f%s",
        "--no-renames",
        head,
        "--",
        path,
    ).stdout
    return _zero_histories(out, [path])[path][::-1]


def file_commits(git: Git, shas: list[str], path: str) -> list[CommitHunks]:
    """`recent_file_history` for commits already known to touch `path` (newest first, from
    the touch index): their zero-context hunks on `path`, oldest first, without a walk."""
    if not shas:
        return []
    out = git.run(
        "log",
        "--no-walk=unsorted",
        "-U0",
        "-p",
        "--format=%x1e%H%x1f%s",
        "--no-renames",
        *shas,
        "--",
        path,
    ).stdout
    return _zero_histories(out, [path])[path][::-1]


def added_by(git: Git, text: str, rev: str, path: str) -> tuple[str, str] | None:
    """(sha, subject) of the newest commit of `rev` (a range or a head) that changed how often
    `path` holds `text` (`git log -S`), or None."""
    out = git.run(
        "log", "-n1", "--no-merges", "--format=%H%x1f%s", f"-S{text}", rev, "--", path, check=False
    ).text
    sha, sep, subject = out.partition("\x1f")
    return (sha, subject) if sep else None


def naming_prs(git: Git, head: str, numbers: list[int]) -> list[tuple[str, str]]:
    """(sha, subject) of the commits of `head`'s first-parent history, newest first, whose
    subject names one of the PR `numbers` anywhere (`(#N)`, `pull request #N`, reverts of
    those): bot.core.dropwhen reads which of them merged or reverted a PR."""
    if not numbers:
        return []
    wanted = "|".join(str(n) for n in sorted(set(numbers)))
    out = git.run(
        "log",
        "--first-parent",
        "--format=%H%x1f%s",
        "-E",
        "-i",
        f"--grep=#({wanted})([^0-9]|$)",
        head,
        "--",
        check=False,
    ).text
    found = []
    for line in out.splitlines():
        sha, sep, subject = line.partition("\x1f")
        if sep:
            found.append((sha, subject))
    return found


def merged_by(git: Git, sha: str, head: str) -> tuple[str, str] | None:
    """(sha, subject) of the merge commit that brought `sha` into `head`: the oldest merge on
    the ancestry path between them, or None when `sha` came in without one."""
    merges = git.run(
        "rev-list", "--merges", "--ancestry-path", f"{sha}..{head}", check=False
    ).text.split()
    if not merges:
        return None
    subject = git.run("log", "-n1", "--format=%s", merges[-1], check=False).text
    return merges[-1], subject


def _zero_hunks(section: bytes) -> list[ZeroHunk]:
    hunks = []
    for line in section.decode("utf-8", "replace").splitlines():
        match = _ZERO_HUNK.match(line)
        if match:
            old_len = int(match.group(2)) if match.group(2) is not None else 1
            new_len = int(match.group(4)) if match.group(4) is not None else 1
            hunks.append(ZeroHunk(int(match.group(1)), old_len, int(match.group(3)), new_len))
    return hunks


MAX_RENAME_HOPS = 5


@dataclass(frozen=True)
class Rename:
    old: str
    new: str
    commit: str  # the upstream commit that moved it (the last one, after several moves)


def renamed_to(git: Git, head: str, path: str, exists: Callable[[str], bool]) -> Rename | None:
    """Where upstream moved `path`, which the head lacks: the newest commit that deleted it,
    read with rename detection, names the new path; moves are followed until a path `exists`
    in the head."""
    current, commit = path, None
    for _ in range(MAX_RENAME_HOPS):
        deleted = git.run("log", "-n1", "--format=%H", "--diff-filter=D", head, "--", current).text
        if not deleted:
            return None
        moved = _moved_in(git, deleted, current)
        if moved is None:
            return None
        current, commit = moved, deleted
        if exists(current):
            return Rename(path, current, commit)
    return None


def _moved_in(git: Git, sha: str, path: str) -> str | None:
    out = git.run("show", "-M", "--format=", "--name-status", "-z", sha).stdout
    fields = out.decode("utf-8", "surrogateescape").split("\0")
    index = 0
    while index < len(fields) - 2:
        status = fields[index]
        if status.startswith(("R", "C")):
            if status.startswith("R") and fields[index + 1] == path:
                return fields[index + 2]
            index += 3
        else:
            index += 2
    return None
