"""Reading and writing git objects without a process per question.

`ObjectReader` keeps one `git cat-file --batch-command` process per repository, so reading a
blob, a tree entry or resolving a revision costs a pipe round trip instead of a git start.
`tree_with` writes a tree that differs from a base tree in a few files.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import subprocess
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from bot.git.runner import Git

log = logging.getLogger("carry.git")


@dataclass(frozen=True)
class Blob:
    oid: str
    kind: str  # blob | tree | commit | tag
    content: bytes


@dataclass(frozen=True)
class ObjectInfo:
    oid: str
    kind: str
    size: int


# Questions written to `git cat-file` at once: at most a pipe's smallest buffer (one page), so
# that the write never blocks while git blocks on answers not yet read.
BATCH_BYTES = 4096
BATCH_NAMES = 48
_FOUND = re.compile(rb"^[0-9a-f]{40} (blob|tree|commit|tag) [0-9]+\n$")


class ObjectReader:
    """Answers `<oid>`, `<rev>`, `<rev>:<path>` questions through one long-lived git process.
    Thread-safe; a process that died is started again on the next question."""

    def __init__(self, git: Git):
        self.git = git
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self.round_trips = 0  # batches of questions written and answered

    def close(self) -> None:
        with self._lock:
            self._stop()

    def _stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    stream.close()
            proc.wait(timeout=10)

    def read(self, name: str) -> Blob | None:
        """The object `name` names, or None when it is missing or ambiguous."""
        answer = self._ask("contents", name)
        return None if answer is None else Blob(answer[0].oid, answer[0].kind, answer[1])

    def info(self, name: str) -> ObjectInfo | None:
        answer = self._ask("info", name)
        return None if answer is None else answer[0]

    def commit(self, rev: str) -> str | None:
        """The commit `rev` names (tags peeled), or None."""
        found = self.info(f"{rev}^{{commit}}")
        return found.oid if found else None

    def read_many(self, names: list[str]) -> list[Blob | None]:
        """read() for several names in one round trip (a batch of questions written at once)."""
        return [
            None if answer is None else Blob(answer[0].oid, answer[0].kind, answer[1])
            for answer in self._ask_many("contents", names)
        ]

    def info_many(self, names: list[str]) -> list[ObjectInfo | None]:
        """info() for several names in one round trip."""
        return [None if answer is None else answer[0] for answer in self._ask_many("info", names)]

    def _ask(self, command: str, name: str) -> tuple[ObjectInfo, bytes] | None:
        return self._ask_many(command, [name])[0]

    def _ask_many(self, command: str, names: list[str]) -> list[tuple[ObjectInfo, bytes] | None]:
        answers: list[tuple[ObjectInfo, bytes] | None] = [None] * len(names)
        # A name with a newline cannot be asked over the line protocol: callers fall back to git.
        asked = [i for i, name in enumerate(names) if name and "\n" not in name]
        with self._lock:
            for start in range(0, len(asked), BATCH_NAMES):
                batch = asked[start : start + BATCH_NAMES]
                for attempt in (1, 2):
                    try:
                        found = self._exchange(command, [names[i] for i in batch])
                        break
                    except (BrokenPipeError, OSError, EOFError) as err:
                        log.warning(
                            "cat-file process for %s failed (%s); restarting", self.git, err
                        )
                        self._stop()
                        if attempt == 2:
                            raise
                for i, answer in zip(batch, found, strict=True):
                    answers[i] = answer
        return answers

    def _exchange(self, command: str, names: list[str]) -> list[tuple[ObjectInfo, bytes] | None]:
        """Writes the questions at once, then reads the answers in order. The questions of one
        batch fit in a pipe's smallest buffer, so writing them never waits for git, which may be
        waiting for its answers to be read."""
        if self._proc is not None and self._proc.poll() is not None:
            self._stop()  # it died: close its pipes before starting another
        if self._proc is None:
            self._proc = self.git.spawn("cat-file", "--batch-command")
        proc = self._proc
        assert proc.stdin is not None and proc.stdout is not None
        questions = "".join(f"{command} {name}\n" for name in names)
        data = questions.encode("utf-8", "surrogateescape")
        if len(data) > BATCH_BYTES and len(names) > 1:  # long names: one at a time
            return [answer for name in names for answer in self._exchange(command, [name])]
        proc.stdin.write(data)
        proc.stdin.flush()
        self.round_trips += 1
        return [self._answer(command) for _ in names]

    def _answer(self, command: str) -> tuple[ObjectInfo, bytes] | None:
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        header = proc.stdout.readline()
        if not header.endswith(b"\n"):
            raise EOFError("git cat-file ended")
        parts = header.decode("utf-8", "surrogateescape").split()
        if header.endswith((b" missing\n", b" ambiguous\n")) or not _FOUND.match(header):
            return None  # "<name> missing" / "<name> ambiguous" (a name may hold spaces)
        found = ObjectInfo(parts[0], parts[1], int(parts[2]))
        if command == "info":
            return found, b""
        content = proc.stdout.read(found.size + 1)
        if len(content) != found.size + 1:
            raise EOFError("git cat-file ended mid-object")
        return found, content[:-1]


def tree_with(git: Git, base: str, changes: Mapping[str, bytes | None]) -> str:
    """`base` with files replaced or removed (see TreeWriter.write)."""
    assert git.git_dir is not None, "objects are written into a bare repository"
    writer = TreeWriter(git, git.git_dir)
    try:
        return writer.write(base, changes)
    finally:
        writer.close()


def _index_modes(git: Git, paths: list[str]) -> dict[str, str]:
    if not paths:
        return {}
    out = git.run("ls-files", "-s", "-z", "--", *paths).stdout
    modes = {}
    for record in out.split(b"\0"):
        meta, _, path = record.partition(b"\t")
        if meta:
            modes[path.decode("utf-8", "surrogateescape")] = meta.split()[0].decode()
    return modes


def write_blob(git_dir: Path, data: bytes) -> str:
    """Stores `data` as a loose blob (what `git hash-object -w` does) and returns its id."""
    return write_object(git_dir, "blob", data)


def write_object(git_dir: Path | None, kind: str, data: bytes) -> str:
    """The object's id; stored as a loose object in `git_dir` unless that is None."""
    raw = b"%s %d\0" % (kind.encode(), len(data)) + data
    oid = hashlib.sha1(raw).hexdigest()
    if git_dir is None:
        return oid
    target = git_dir / "objects" / oid[:2] / oid[2:]
    if not target.exists():
        import tempfile  # here, with zlib and shutil: `carry check` often stores nothing
        import zlib

        target.parent.mkdir(parents=True, exist_ok=True)
        handle, temp = tempfile.mkstemp(prefix="tmp_obj_", dir=target.parent)
        with os.fdopen(handle, "wb") as out:
            out.write(zlib.compress(raw, 1))  # the id does not depend on the level
        os.chmod(temp, 0o444)
        os.replace(temp, target)
    return oid


# A tree object is a run of "<mode> <name>\0<20-byte id>" entries.
_TREE_ENTRY = re.compile(rb"([0-7]+) ([^\0]+)\0(.{20})", re.S)


class TreeShapeChanged(Exception):
    """An edit needs an entry added, removed or retyped: a job for git's index."""


FILE_MODES = (b"100644", b"100755")
DIR_MODE = b"40000"


class Trees:
    """Tree objects read once and kept parsed: a tree id always names the same entries.
    Entries are name -> (mode, 20-byte id), in the tree's order."""

    def __init__(self, reader: ObjectReader, limit: int = 256):
        self.reader = reader
        self.limit = limit
        self._parsed: dict[str, dict[bytes, tuple[bytes, bytes]]] = {}

    def entries(self, tree: str) -> dict[bytes, tuple[bytes, bytes]]:
        """TreeShapeChanged when `tree` is not a readable tree."""
        if tree not in self._parsed:
            self._keep(tree, self.reader.read(tree))
        return self._parsed[tree]

    def _keep(self, tree: str, found: Blob | None) -> None:
        if found is None or found.kind != "tree":
            raise TreeShapeChanged(f"{tree} is not a tree")
        if len(self._parsed) >= self.limit:
            self._parsed.pop(next(iter(self._parsed)))
        self._parsed[tree] = _parse_tree(tree, found.content)

    def prefetch(self, tree: str, paths: list[str]) -> None:
        """Reads the trees on the way to `paths` a level at a time, one round trip per level
        for the trees not read yet, so that lookups of these paths find them parsed. What
        cannot be read is left for lookup to find (and say)."""
        level: dict[str, list[list[str]]] = {tree: [path.split("/") for path in paths]}
        while level:
            missing = [name for name in level if name not in self._parsed]
            try:
                found = self.reader.read_many(missing) if missing else []
            except OSError:
                return
            for name, blob in zip(missing, found, strict=True):
                try:
                    self._keep(name, blob)
                except TreeShapeChanged:
                    continue
            below: dict[str, list[list[str]]] = {}
            for name, wanted in level.items():
                entries = self._parsed.get(name)
                if entries is None:
                    continue
                for first, *rest in wanted:
                    entry = entries.get(first.encode("utf-8", "surrogateescape"))
                    if rest and entry is not None and entry[0] == DIR_MODE:
                        below.setdefault(entry[1].hex(), []).append(rest)
            level = below

    def lookup(self, tree: str, path: str) -> tuple[bytes, str] | None:
        """(mode, id) of the entry at `path`, None when there is none."""
        entry: tuple[bytes, bytes] | None = None
        for part in path.split("/"):
            if entry is not None:
                if entry[0] != DIR_MODE:
                    return None
                tree = entry[1].hex()
            entry = self.entries(tree).get(part.encode("utf-8", "surrogateescape"))
            if entry is None:
                return None
        return None if entry is None else (entry[0], entry[1].hex())


def _parse_tree(tree: str, raw: bytes) -> dict[bytes, tuple[bytes, bytes]]:
    found = _TREE_ENTRY.findall(raw)
    # Matches never overlap, so they cover the object exactly when their sizes add up.
    if sum(len(mode) + len(name) + 22 for mode, name, _ in found) != len(raw):
        raise TreeShapeChanged(f"cannot read tree {tree}")
    return {name: (mode, oid) for mode, name, oid in found}


def edit_tree(trees: Trees, git_dir: Path | None, tree: str, edits: Mapping[str, bytes]) -> str:
    """`tree` with the content of existing regular files replaced. Entries keep their names,
    modes and order, so only object ids change and no sorting rule is involved. With `git_dir`
    None only the id is computed and nothing is stored."""
    groups: dict[bytes, dict[str, bytes]] = {}
    for path, data in edits.items():
        first, _, rest = path.partition("/")
        groups.setdefault(first.encode("utf-8", "surrogateescape"), {})[rest] = data
    entries = trees.entries(tree)
    if any(name not in entries for name in groups):
        raise TreeShapeChanged(f"an edited path is missing from {tree}")
    out = []
    for name, (mode, oid) in entries.items():
        wanted = groups.get(name)
        if wanted is not None:
            if mode == DIR_MODE and "" not in wanted:
                oid = bytes.fromhex(edit_tree(trees, git_dir, oid.hex(), wanted))
            elif mode in FILE_MODES and list(wanted) == [""]:
                oid = bytes.fromhex(write_object(git_dir, "blob", wanted[""]))
            else:
                raise TreeShapeChanged(f"{name!r} in {tree} is not what the edit expects")
        out.append(b"%s %s\0%s" % (mode, name, oid))
    return write_object(git_dir, "tree", b"".join(out))


class TreeWriter:
    """Writes trees that are a few files away from a base tree, through one temporary index:
    a base is read once, and consecutive writes build on each other."""

    def __init__(self, git: Git, git_dir: Path):
        import tempfile

        self._dir = Path(tempfile.mkdtemp(prefix="carry-tree-"))
        self.git = git.with_env(GIT_INDEX_FILE=str(self._dir / "index"))
        self.git_dir = git_dir
        self._loaded: str | None = None

    def close(self) -> None:
        import shutil

        shutil.rmtree(self._dir, ignore_errors=True)

    def write(self, base: str, changes: Mapping[str, bytes | None]) -> str:
        """`base` (a tree or commit) with files replaced (bytes) or removed (None). A file keeps
        its mode; a new file is 100644."""
        if self._loaded != base:
            self.git.run("read-tree", base)
        kept = _index_modes(self.git, [p for p, data in changes.items() if data is not None])
        records = []
        for path, data in sorted(changes.items()):
            if data is None:
                records.append(f"0 {'0' * 40}\t{path}")  # mode 0 removes the entry
            else:
                oid = write_blob(self.git_dir, data)
                records.append(f"{kept.get(path, '100644')} {oid}\t{path}")
        if records:
            lines = ("\n".join(records) + "\n").encode("utf-8", "surrogateescape")
            self.git.run("update-index", "--index-info", input=lines)
        self._loaded = self.git.run("write-tree").text
        return self._loaded
