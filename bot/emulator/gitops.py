"""Git plumbing on a bare repository: refs, commit data, diffs and server-side merges.

Everything runs through `git` subprocesses with a neutral environment (no user or system
config), so the emulator behaves the same on every machine.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

ZERO_SHA = "0" * 40
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"

_BASE_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_TERMINAL_PROMPT": "0",
    "LC_ALL": "C",
    "TZ": "UTC",
}
_DROPPED = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_NAMESPACE")


def git_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """os.environ without repository-pointing GIT_* variables, plus the neutral settings."""
    env = {k: v for k, v in os.environ.items() if k not in _DROPPED}
    return {**env, **_BASE_ENV, **(extra or {})}


class GitError(RuntimeError):
    pass


@dataclass(frozen=True)
class Person:
    name: str
    email: str
    epoch: int


@dataclass(frozen=True)
class CommitInfo:
    sha: str
    tree: str
    parents: tuple[str, ...]
    author: Person
    committer: Person
    message: str


@dataclass(frozen=True)
class FileChange:
    filename: str
    status: str  # added / removed / modified / renamed / copied / changed
    old_sha: str | None
    new_sha: str | None
    additions: int
    deletions: int
    previous_filename: str | None = None
    patch: str | None = None


_STATUS = {"A": "added", "D": "removed", "M": "modified", "R": "renamed", "C": "copied"}


def valid_rev(rev: str) -> bool:
    """Rejects anything git could read as an option or a range, so user input stays a name."""
    return bool(rev) and not rev.startswith("-") and ".." not in rev and "\x00" not in rev


class BareRepo:
    """A bare repository on disk, driven only with plumbing commands."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def init(cls, path: Path, default_branch: str) -> BareRepo:
        path.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["git", "init", "-q", "--bare", f"--initial-branch={default_branch}", str(path)],
            check=True,
            env=git_env(),
            capture_output=True,
        )
        repo = cls(path)
        repo.run("config", "http.receivepack", "true")
        repo.run("config", "uploadpack.allowReachableSHA1InWant", "true")
        return repo

    # -- running git -------------------------------------------------------------------------

    def run(
        self,
        *args: str,
        input: bytes | None = None,
        env: Mapping[str, str] | None = None,
        ok: Iterable[int] = (0,),
    ) -> subprocess.CompletedProcess[bytes]:
        proc = subprocess.run(
            ["git", "--git-dir", str(self.path), *args],
            input=input,
            capture_output=True,
            env=git_env(env),
            check=False,
        )
        if proc.returncode not in tuple(ok):
            raise GitError(f"git {' '.join(args)}: {proc.stderr.decode(errors='replace').strip()}")
        return proc

    def out(self, *args: str) -> str:
        return self.run(*args).stdout.decode("utf-8", "replace").strip()

    # -- objects and refs --------------------------------------------------------------------

    def resolve(self, rev: str) -> str | None:
        """The commit a name points at (sha, abbreviated sha, branch, tag, ref), or None."""
        if not valid_rev(rev):
            return None
        proc = self.run("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", ok=(0, 1, 128))
        if proc.returncode != 0:
            return None
        return proc.stdout.decode().strip() or None

    def object_type(self, sha: str) -> str | None:
        proc = self.run("cat-file", "-t", sha, ok=(0, 1, 128))
        return proc.stdout.decode().strip() if proc.returncode == 0 else None

    def refs(self, *prefixes: str) -> dict[str, str]:
        """ref name -> object sha for refs under the given prefixes (all refs when none)."""
        text = self.out("for-each-ref", "--format=%(objectname) %(refname)", *prefixes)
        pairs = (line.split(" ", 1) for line in text.splitlines() if line)
        return {ref: sha for sha, ref in pairs}

    def ref_sha(self, ref: str) -> str | None:
        return self.refs(ref).get(ref)

    def update_ref(self, ref: str, new: str, old: str | None = None) -> None:
        args = ["update-ref", ref, new] + ([old] if old else [])
        self.run(*args)

    def delete_ref(self, ref: str) -> None:
        self.run("update-ref", "-d", ref)

    def set_head(self, branch: str) -> None:
        self.run("symbolic-ref", "HEAD", f"refs/heads/{branch}")

    def import_from(self, source: Path) -> None:
        """Copies every branch and tag of another repository (a path) into this one."""
        self.run(
            "fetch", "-q", str(source), "+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"
        )

    # -- history -----------------------------------------------------------------------------

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        return (
            self.run("merge-base", "--is-ancestor", ancestor, descendant, ok=(0, 1)).returncode == 0
        )

    def merge_base(self, a: str, b: str) -> str | None:
        proc = self.run("merge-base", a, b, ok=(0, 1))
        return proc.stdout.decode().strip() or None

    def rev_list(
        self, include: str, exclude: Iterable[str] = (), limit: int | None = None
    ) -> list[str]:
        """Commits reachable from include but not from exclude, oldest first."""
        args = ["rev-list", "--topo-order", "--reverse", include]
        args += [f"^{sha}" for sha in exclude]
        shas = self.out(*args).split()
        return shas[-limit:] if limit is not None else shas

    def commit_infos(self, shas: Iterable[str]) -> list[CommitInfo]:
        """Commit data for each sha, in the order asked (duplicates allowed)."""
        wanted = list(shas)
        unique = list(dict.fromkeys(wanted))
        if not unique:
            return []
        fmt = "%H%x00%T%x00%P%x00%an%x00%ae%x00%at%x00%cn%x00%ce%x00%ct%x00%B%x00%x01"
        proc = self.run("log", "--no-walk=unsorted", f"--format={fmt}", *unique)
        found: dict[str, CommitInfo] = {}
        for record in proc.stdout.decode("utf-8", "replace").split("\x00\x01"):
            f = record.lstrip("\n").split("\x00")
            if len(f) < 10:
                continue
            found[f[0]] = CommitInfo(
                sha=f[0],
                tree=f[1],
                parents=tuple(f[2].split()),
                author=Person(f[3], f[4], int(f[5])),
                committer=Person(f[6], f[7], int(f[8])),
                message=f[9].rstrip("\n"),
            )
        return [found[sha] for sha in wanted]

    def commit_info(self, sha: str) -> CommitInfo:
        return self.commit_infos([sha])[0]

    # -- diffs ---------------------------------------------------------------------------------

    def changes(self, old: str, new: str, *, with_patch: bool = True) -> list[FileChange]:
        """File-level diff between two commits (or trees), as GitHub's `files` lists it."""
        raw = self.run("diff", "--raw", "-z", "-M", "--no-abbrev", old, new).stdout.decode(
            "utf-8", "replace"
        )
        numstat = self.run("diff", "--numstat", "-z", "-M", old, new).stdout.decode(
            "utf-8", "replace"
        )
        patches = self._patches(old, new) if with_patch else []
        counts = _parse_numstat(numstat)
        result = []
        for index, (status, old_sha, new_sha, path, previous) in enumerate(_parse_raw(raw)):
            added, deleted = counts[index] if index < len(counts) else (0, 0)
            result.append(
                FileChange(
                    filename=path,
                    status=status,
                    old_sha=old_sha,
                    new_sha=new_sha,
                    additions=added,
                    deletions=deleted,
                    previous_filename=previous,
                    patch=patches[index] if index < len(patches) else None,
                )
            )
        return result

    def commit_changes(self, sha: str) -> list[FileChange]:
        info = self.commit_info(sha)
        return self.changes(info.parents[0] if info.parents else EMPTY_TREE, sha)

    def _patches(self, old: str, new: str) -> list[str | None]:
        text = self.run("diff", "-M", "--no-color", "--no-ext-diff", old, new).stdout.decode(
            "utf-8", "replace"
        )
        chunks: list[str | None] = []
        for block in text.split("\ndiff --git "):
            if not block.strip():
                continue
            lines = block.split("\n")
            hunk_start = next((i for i, line in enumerate(lines) if line.startswith("@@")), None)
            chunks.append(
                "\n".join(lines[hunk_start:]).rstrip("\n") if hunk_start is not None else None
            )
        return chunks

    # -- writing commits -------------------------------------------------------------------------

    def merge_tree(self, ours: str, theirs: str) -> tuple[str | None, bool]:
        """Three-way merges two commits in memory: (tree sha or None, clean?)."""
        proc = self.run(
            "merge-tree",
            "--write-tree",
            "--no-messages",
            "--allow-unrelated-histories",
            ours,
            theirs,
            ok=(0, 1),
        )
        tree = proc.stdout.decode().split("\n", 1)[0].strip() or None
        return tree, proc.returncode == 0

    def commit_tree(
        self, tree: str, parents: Iterable[str], message: str, author: Person, committer: Person
    ) -> str:
        args = ["commit-tree", tree]
        for parent in parents:
            args += ["-p", parent]
        env = {
            "GIT_AUTHOR_NAME": author.name,
            "GIT_AUTHOR_EMAIL": author.email,
            "GIT_AUTHOR_DATE": f"@{author.epoch} +0000",
            "GIT_COMMITTER_NAME": committer.name,
            "GIT_COMMITTER_EMAIL": committer.email,
            "GIT_COMMITTER_DATE": f"@{committer.epoch} +0000",
        }
        return self.run(*args, input=message.encode(), env=env).stdout.decode().strip()

    def cherry_pick(self, commit: str, onto: str, committer: Person) -> str | None:
        """Replays one commit onto another without a work tree; None on conflict.

        git 2.39's merge-tree has no --merge-base, so a throwaway commit with onto's tree and
        the picked commit's parent as its parent makes that parent the merge base.
        """
        info = self.commit_info(commit)
        if not info.parents:
            return None
        onto_tree = self.commit_info(onto).tree
        probe = self.commit_tree(onto_tree, [info.parents[0]], "probe", committer, committer)
        tree, clean = self.merge_tree(probe, commit)
        if not clean or tree is None:
            return None
        return self.commit_tree(tree, [onto], info.message + "\n", info.author, committer)


def _parse_raw(text: str) -> list[tuple[str, str | None, str | None, str, str | None]]:
    """`git diff --raw -z` -> (status, old blob, new blob, path, previous path)."""
    fields = text.split("\x00")
    out = []
    i = 0
    while i < len(fields) and fields[i].startswith(":"):
        meta = fields[i][1:].split(" ")
        old_sha, new_sha, letter = meta[2], meta[3], meta[4][:1]
        status = _STATUS.get(letter, "changed")
        if letter in "RC":
            previous, path = fields[i + 1], fields[i + 2]
            i += 3
        else:
            previous, path = None, fields[i + 1]
            i += 2
        out.append(
            (
                status,
                None if old_sha == ZERO_SHA else old_sha,
                None if new_sha == ZERO_SHA else new_sha,
                path,
                previous,
            )
        )
    return out


def _parse_numstat(text: str) -> list[tuple[int, int]]:
    """`git diff --numstat -z` -> (additions, deletions) per file; binary files count 0."""
    fields = text.split("\x00")
    out = []
    i = 0
    while i < len(fields) and fields[i]:
        added, deleted, path = fields[i].split("\t", 2)
        i += 1 if path else 3  # renames put the two paths in their own fields
        out.append((int(added) if added != "-" else 0, int(deleted) if deleted != "-" else 0))
    return out
