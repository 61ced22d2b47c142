"""Which paths each commit changes, kept next to a mirror and extended after every fetch.

History evidence asks "which commits in fork..head touch these paths". Git answers that with a
tree diff per commit, which costs the same on every check. This index pays it once per commit,
when the commit is fetched; a check then walks parent links in memory. It only answers for
linear ranges whose commits are all indexed, and says "unknown" (None) otherwise, so callers
fall back to git and never get a partial answer.

File format (in the mirror's git dir): records separated by NUL NUL. A commit record is
`C <sha> [<parent>...]` NUL `<path>` NUL ...; a tips record `T <sha> ...` lists the commits
(ref tips) whose whole ancestry is indexed.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Sequence, Set
from dataclasses import dataclass
from pathlib import Path

from bot.git.runner import Git, GitError

log = logging.getLogger("carry.touchindex")

FILE_NAME = "carry-touch-index"
_HEADER = re.compile(rb"^\x01([0-9a-f]{40})((?: [0-9a-f]{40})*) ?$")  # a root has no parent
MAX_WALK = 200_000


@dataclass(frozen=True)
class Touches:
    parents: tuple[str, ...]
    paths: frozenset[str]


def update(git: Git, git_dir: Path) -> int:
    """Indexes every commit reachable from the mirror's refs that is not indexed yet; returns
    how many were added. Called with the mirror's lock held. Failure only costs speed."""
    target = git_dir / FILE_NAME
    data = target.read_bytes() if target.exists() else b""
    _, tips, complete = _complete_records(data)
    try:
        current = _ref_tips(git)
        if not current or current == tips:
            return 0
        known = _present(git, tips)
        out = git.run(
            "log",
            "--format=%x01%H %P",
            "-z",
            "--name-only",
            "--no-renames",
            "--stdin",
            input="".join(f"{t}\n" for t in [*current, *(f"^{k}" for k in known)]).encode(),
        ).stdout
    except GitError as err:
        log.warning("could not index %s: %s", git_dir, err)
        return 0
    records = _parse_log(out)
    chunks = [_commit_record(sha, touches) for sha, touches in records]
    chunks.append(b"T " + " ".join(sorted(current)).encode())
    with open(target, "r+b" if data else "wb") as handle:
        handle.truncate(complete)  # drops a tail torn by a crash, which nobody trusts
        handle.seek(complete)
        handle.write(b"".join(chunk + b"\0\0" for chunk in chunks))
        handle.flush()
        os.fsync(handle.fileno())
    log.info("indexed %d commits of %s", len(records), git_dir)
    return len(records)


def _present(git: Git, oids: list[str]) -> list[str]:
    if not oids:
        return []
    out = git.run("cat-file", "--batch-check", input="".join(f"{o}\n" for o in oids).encode())
    return [line.split()[0] for line in out.text.splitlines() if not line.endswith("missing")]


def _ref_tips(git: Git) -> list[str]:
    out = git.run("for-each-ref", "--format=%(objectname) %(*objectname) %(objecttype)").text
    tips = set()
    for line in out.splitlines():
        parts = line.split()
        if parts and parts[-1] in ("commit", "tag"):
            tips.add(parts[1] if parts[-1] == "tag" and len(parts) == 3 else parts[0])
    return sorted(tips)


def _parse_log(out: bytes) -> list[tuple[str, Touches]]:
    records: list[tuple[str, Touches]] = []
    sha: str | None = None
    parents: tuple[str, ...] = ()
    paths: set[str] = set()
    for token in out.split(b"\0"):
        token = token.removeprefix(b"\n")
        match = _HEADER.match(token)
        if match:
            if sha is not None:
                records.append((sha, Touches(parents, frozenset(paths))))
            sha, parents, paths = (
                match.group(1).decode(),
                tuple(match.group(2).decode().split()),
                set(),
            )
        elif token and sha is not None:
            paths.add(token.decode("utf-8", "surrogateescape"))
    if sha is not None:
        records.append((sha, Touches(parents, frozenset(paths))))
    return records


def _commit_record(sha: str, touches: Touches) -> bytes:
    head = " ".join(["C", sha, *touches.parents]).encode()
    return b"\0".join(
        [head, *(p.encode("utf-8", "surrogateescape") for p in sorted(touches.paths))]
    )


def _complete_records(data: bytes) -> tuple[list[bytes], list[str], int]:
    """The commit records up to the last complete tips record, those tips, and the bytes they
    span. Anything after it is an append in progress (or torn by a crash) and is not trusted."""
    limit = len(data)
    while True:
        at = data.rfind(b"\0\0T ", 0, limit)
        start = at + 2 if at >= 0 else (0 if data.startswith(b"T ") else -1)
        if start < 0:
            return [], [], 0
        stop = data.find(b"\0\0", start)
        if stop >= 0:
            records = [r for r in data[:start].split(b"\0\0") if r.startswith(b"C ")]
            return records, data[start + 2 : stop].decode().split(), stop + 2
        if at < 0:
            return [], [], 0
        limit = at  # this tips record is torn: the one before it still holds


class TouchIndex:
    """The index loaded in memory; reloaded when the file grew."""

    def __init__(self, git_dir: Path):
        self.path = git_dir / FILE_NAME
        self.commits: dict[str, Touches] = {}
        self._loaded_size = 0
        self._consumed = 0  # bytes of the file read so far, through a tips record
        self._identity: tuple[int, int] | None = None
        self._walks: dict[str, tuple[str, tuple[str, ...]]] = {}  # fork -> (head, its range)
        self._touched: dict[tuple[str, frozenset[str]], tuple[str, list[str]]] = {}

    def refresh(self) -> None:
        """Reads what was appended since the last call. The file only grows while the mirror
        lives; a re-created mirror (another file) starts over."""
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            self._reset(None)
            return
        identity = (stat.st_dev, stat.st_ino)
        if identity != self._identity or stat.st_size < self._consumed:
            self._reset(identity)
        if stat.st_size == self._loaded_size:
            return
        with open(self.path, "rb") as handle:
            handle.seek(self._consumed)
            records, _, consumed = _complete_records(handle.read())
        for record in records:
            head, *paths = record.split(b"\0")
            sha, *parents = head[2:].decode().split()
            self.commits[sha] = Touches(
                tuple(parents), frozenset(p.decode("utf-8", "surrogateescape") for p in paths)
            )
        self._consumed += consumed
        self._loaded_size = stat.st_size

    def _reset(self, identity: tuple[int, int] | None) -> None:
        self.commits, self._walks, self._touched = {}, {}, {}
        self._consumed = self._loaded_size = 0
        self._identity = identity

    def linear_range(self, fork: str, head: str) -> tuple[str, ...] | None:
        """Commits of fork..head, newest first, when fork is reached from head through single
        parents, every one of them indexed; None otherwise (merges, unknown commits, fork not
        an ancestor). The walk stops early at the head of the last range asked for the fork."""
        known_head, known = self._walks.get(fork, (fork, ()))
        walked: list[str] = []
        current = head
        while current != fork:
            if current == known_head:
                walked.extend(known)
                break
            touches = self.commits.get(current)
            if touches is None or len(touches.parents) != 1 or len(walked) >= MAX_WALK:
                return None
            walked.append(current)
            current = touches.parents[0]
        answer = tuple(walked)
        self._walks[fork] = (head, answer)
        return answer

    def touching(self, commits: Sequence[str], paths: Set[str]) -> list[str]:
        return [c for c in commits if not self.commits[c].paths.isdisjoint(paths)]

    def touching_range(self, fork: str, head: str, paths: frozenset[str]) -> list[str] | None:
        """touching(linear_range(fork, head), paths), reusing the answer for an earlier head
        of the same range."""
        walked = self.linear_range(fork, head)
        if walked is None:
            return None
        earlier_head, earlier = self._touched.get((fork, paths), (fork, []))
        try:
            new = walked[: walked.index(earlier_head)] if earlier_head != fork else walked
        except ValueError:  # the earlier head is not below this one
            new, earlier = walked, []
        found = self.touching(new, paths) + earlier
        self._touched[(fork, paths)] = (head, found)
        return list(found)
