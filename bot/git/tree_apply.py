"""Apply patches to trees in a temporary index: the object database is the only thing touched."""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
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
    """Owns one temporary index file and an empty scratch directory; every operation starts by
    loading the given tree. They are made on first use: most checks apply in memory and never
    need them (nor tempfile, which is slow to import).

    git runs in the scratch directory because a conflicted `apply --cached --3way` writes the
    files it could not merge into its working directory even without a work tree; in the
    mirror's directory those files would change the answer for the next patch touching them."""

    def __init__(self, git: Git, workdir: Path | None = None):
        self._base_git = git
        self._workdir = workdir
        self._scratch: Path | None = None
        self.index: Path | None = None
        self.loaded: str | None = None

    @functools.cached_property
    def git(self) -> Git:
        import tempfile

        root = Path(tempfile.mkdtemp(prefix="carry-apply-", dir=self._workdir))
        self._scratch = root / "scratch"
        self._scratch.mkdir()
        self.index = root / "index"  # git creates it; an empty file is not a valid index
        return replace(self._base_git, cwd=self._scratch).with_env(GIT_INDEX_FILE=str(self.index))

    def close(self) -> None:
        if self.index is not None:
            import shutil

            shutil.rmtree(self.index.parent, ignore_errors=True)
        self.loaded = None

    def _sweep(self) -> None:
        """Empties the scratch directory after a conflicted 3-way apply wrote into it."""
        if self._scratch is not None and any(self._scratch.iterdir()):
            import shutil

            shutil.rmtree(self._scratch)
            self._scratch.mkdir()

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
            self._sweep()
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
