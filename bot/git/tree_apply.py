"""Apply patches to trees in a temporary index: the object database is the only thing touched."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

from bot.git.objects import Blob
from bot.git.runner import Git

EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"


@dataclass(frozen=True)
class ApplyResult:
    ok: bool
    tree: str | None  # the resulting tree when ok
    output: str  # git's stderr, the evidence of a failure


@dataclass(frozen=True)
class TreeEntry:
    mode: str
    oid: str


class TreeApplier:
    """Owns one temporary index file; every operation starts by loading the given tree. The
    file is named on first use: most checks apply in memory and never need it (nor tempfile,
    which is slow to import)."""

    def __init__(self, git: Git, workdir: Path | None = None):
        self._base_git = git
        self._workdir = workdir
        self.index: Path | None = None
        self.loaded: str | None = None

    @functools.cached_property
    def git(self) -> Git:
        import tempfile

        handle, name = tempfile.mkstemp(prefix="carry-index-", dir=self._workdir)
        os.close(handle)
        os.unlink(name)  # git creates it; an empty file is not a valid index
        self.index = Path(name)
        return self._base_git.with_env(GIT_INDEX_FILE=name)

    def close(self) -> None:
        if self.index is not None:
            self.index.unlink(missing_ok=True)
        self.loaded = None

    def _load(self, tree: str) -> None:
        if self.loaded != tree:
            self.git.run("read-tree", tree)
            self.loaded = tree

    def apply(self, tree: str, patch: bytes, *, three_way: bool = False) -> ApplyResult:
        """Applies onto `tree`; --verbose makes git report hunks that landed at an offset."""
        self._load(tree)
        args = ["apply", "--cached", "--verbose", "--whitespace=nowarn"]
        if three_way:
            args.append("--3way")
        result = self.git.run(*args, "-", input=patch, check=False)
        if not result.ok:
            self.loaded = None  # a failed 3-way leaves unmerged entries behind
            return ApplyResult(False, None, result.stderr_text)
        written = self.git.run("write-tree", check=False)
        if not written.ok:
            self.loaded = None
            return ApplyResult(False, None, result.stderr_text + written.stderr_text)
        self.loaded = written.text
        return ApplyResult(True, written.text, result.stderr_text)

    def check_reverse(self, tree: str, patch: bytes) -> ApplyResult:
        self._load(tree)
        args = ["apply", "--cached", "--check", "--reverse", "--whitespace=nowarn"]
        result = self.git.run(*args, "-", input=patch, check=False)
        return ApplyResult(result.ok, None, result.stderr_text)


def tree_of(git: Git, rev: str) -> str:
    return git.out("rev-parse", f"{rev}^{{tree}}")


def moved_hunks(apply_output: str) -> bool:
    """True when `git apply --verbose` placed a hunk at an offset from its header's position."""
    return "(offset " in apply_output or "with fuzz" in apply_output


def entries(git: Git, tree: str, paths: list[str]) -> dict[str, TreeEntry]:
    """Mode and object id of each path that exists in the tree."""
    if not paths:
        return {}
    out = git.run("ls-tree", "-z", "--full-tree", tree, "--", *paths).stdout
    found: dict[str, TreeEntry] = {}
    for record in out.split(b"\0"):
        if not record:
            continue
        meta, _, path = record.partition(b"\t")
        mode, _kind, oid = meta.decode().split()
        found[path.decode("utf-8", "surrogateescape")] = TreeEntry(mode, oid)
    return found


def read_objects(git: Git, names: list[str]) -> dict[str, Blob]:
    """Objects by name (`<oid>` or `<tree>:<path>`) in one `cat-file --batch` call; absent
    names are left out."""
    unique = list(dict.fromkeys(names))
    if not unique:
        return {}
    query = "".join(f"{name}\n" for name in unique).encode("utf-8", "surrogateescape")
    out = git.run("cat-file", "--batch", input=query).stdout
    found: dict[str, Blob] = {}
    pos = 0
    for name in unique:
        end = out.index(b"\n", pos)
        header = out[pos:end].decode("utf-8", "surrogateescape").split()
        pos = end + 1
        if len(header) != 3 or header[1] not in ("blob", "tree", "commit", "tag"):
            continue  # "<name> missing" or "<name> ambiguous"
        size = int(header[2])
        found[name] = Blob(header[0], header[1], out[pos : pos + size])
        pos += size + 1
    return found
