"""The patch engine: re-apply a carried series on an upstream head and classify every patch.

Patch N is tried on head + the patches before it that are kept. Nothing is checked out: trees
are built in a temporary index and only the mirror's object database is written. Each patch
gets a status, a decision and the evidence both rest on (the rules live in bot.core.classify).
"""

from __future__ import annotations

import functools
import logging
import re
import time
import weakref
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from bot.core import classify, dropwhen, edits, landing, locate
from bot.core.classify import (
    Decision,
    HeadFile,
    HunkPresence,
    HunkState,
    Signals,
    Status,
    Verdict,
)
from bot.core.dropwhen import DeclaredPr, FirstParentCommit, PrMerge
from bot.core.hunkapply import FileApply, apply_hunks
from bot.core.landing import CommitLines, How, Landing
from bot.core.linetrack import CommitHunks, touching_commits
from bot.core.patchfile import FileDiff, Hunk, PatchFile, PatchFileError, PatchMeta, parse_patch
from bot.core.presence import HeadsEvidence
from bot.core.refresh import RefreshClass, classify_refresh
from bot.core.renumber import FileMove, blob_id, renumber
from bot.core.repath import repath
from bot.core.report import PatchReport, SeriesReport, interdiff, reproduce_commands, same_hunks
from bot.git import history
from bot.git.mirror import Mirror, MirrorError, ResolvedHead
from bot.git.objects import (
    DIR_MODE,
    FILE_MODES,
    Blob,
    ObjectReader,
    Trees,
    TreeShapeChanged,
    TreeWriter,
    edit_tree,
)
from bot.git.runner import Git
from bot.git.touchindex import TouchIndex
from bot.git.tree_apply import (
    ApplyResult,
    TreeApplier,
    entries,
    moved_hunks,
    read_objects,
    tree_of,
)

# `carry check` runs as a short process: bot.git.formatpatch (and the email module it uses) is
# imported where commits are written, and typing.TYPE_CHECKING is had without importing typing
# (mypy and ruff treat the name the same way).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

log = logging.getLogger("carry.engine")
_COMMIT_ID = re.compile(r"^[0-9a-f]{40}(\^[0-9]*)*$")
_DELETES_FILE = re.compile(rb"^deleted file mode ", re.MULTILINE)


@dataclass(frozen=True)
class PatchInput:
    name: str  # as the user gave it (path or series entry)
    data: bytes


class BlobTooLarge(Exception):
    """A file carry would read is larger than CARRY_MAX_BLOB_BYTES: it was not read."""

    def __init__(self, path: str, size: int, limit: int, where: str = "the head"):
        self.path, self.size, self.limit, self.where = path, size, limit, where
        super().__init__(
            f"{path} is {size:,} bytes in {where}, over the limit of {limit:,} bytes "
            "(CARRY_MAX_BLOB_BYTES); carry did not read it"
        )


@dataclass(frozen=True)
class LinkedPr:
    ref: str  # owner/repo#N
    state: str  # open | merged | closed | ...
    merge_commit: str | None = None


@dataclass(frozen=True)
class _RangeEvidence:
    """What upstream history says about one patch: its range, the commits in it that touch
    the series' files (newest first, at most history.MAX_CANDIDATES), and the matches.

    Without an anchor (no base, no known From commit) the "range" is the head's own history
    and only patch-id matches count: a title alone proves nothing when no base bounds it."""

    range: str
    matches: list[history.Match]
    commits: list[history.UpstreamCommit]
    anchored: bool = True


@dataclass
class _Step:
    name: str
    meta: PatchMeta
    changes: dict[str, bytes | None]  # files the patch changed, held in memory, or
    tree: str | None = None  # the tree git wrote for it (written lazily for in-memory steps)
    commit: str | None = None


class _Chain:
    """The series as built so far. Patches applied in memory only record their files; trees
    and commits are written when someone needs them (a git apply, a result commit)."""

    def __init__(self, engine: Engine, tree: str, commit: str):
        self.engine = engine
        self.head_tree = tree
        self.head_commit = commit
        self.steps: list[_Step] = []
        self._real_tree = tree  # the newest tree that exists in git
        self._files: dict[str, bytes | None] = {}  # in-memory changes on top of _real_tree
        self._writer: TreeWriter | None = None

    @property
    def applied(self) -> list[str]:
        return [step.name for step in self.steps]

    def read(self, path: str) -> bytes | None:
        """The current content of a regular file, None when it is not one (absent, a
        directory, a link, a submodule): git then decides."""
        if path in self._files:
            return self._files[path]
        try:
            entry = self.engine.trees.lookup(self._real_tree, path)
        except (TreeShapeChanged, OSError):
            return None
        if not entry or entry[0] not in FILE_MODES:
            return None
        blob = self.engine.read_blob(entry[1], path)
        return blob.content if blob is not None and blob.kind == "blob" else None

    def size(self, path: str) -> int | None:
        """The size of what is at `path` (from the object's header: nothing is read), None
        when nothing is there."""
        if path in self._files:
            data = self._files[path]
            return None if data is None else len(data)
        try:
            entry = self.engine.trees.lookup(self._real_tree, path)
        except (TreeShapeChanged, OSError):
            return None
        return self.engine.size_of(entry[1]) if entry and entry[0] != DIR_MODE else None

    def has(self, path: str) -> bool:
        """Whether anything (a file, a link, a directory) is at `path`, without reading it."""
        if path in self._files:
            return self._files[path] is not None
        try:
            return self.engine.trees.lookup(self._real_tree, path) is not None
        except (TreeShapeChanged, OSError):
            return True  # git decides

    def push_files(self, name: str, meta: PatchMeta, changes: dict[str, bytes | None]) -> None:
        self.steps.append(_Step(name, meta, changes))
        self._files.update(changes)

    def push_tree(self, name: str, meta: PatchMeta, tree: str) -> None:
        self.steps.append(_Step(name, meta, {}, tree))
        self._real_tree, self._files = tree, {}

    @property
    def tree(self) -> str:
        if self._files:
            self._real_tree = self._write(self._real_tree, self._files)
            self._files = {}
            self.steps[-1].tree = self._real_tree  # only push_files leaves files pending
        return self._real_tree

    def tree_id(self) -> str:
        """The current tree's id, computed without storing anything when only in-memory edits
        are pending (nothing reads the objects of a result tree; `tree` stores them)."""
        if not self._files:
            return self._real_tree
        return self._edit(self._real_tree, self._files, store=False) or self.tree

    def tip(self) -> str:
        """The commit of the last step, writing the trees and commits still missing."""
        tree, commit = self.head_tree, self.head_commit
        for step in self.steps:
            if step.tree is None:
                step.tree = self._write(tree, step.changes)
            if step.commit is None:
                from bot.git.formatpatch import make_commit

                step.commit = make_commit(self.engine.git, step.tree, commit, step.meta)
            tree, commit = step.tree, step.commit
        return commit

    def _write(self, base: str, changes: dict[str, bytes | None]) -> str:
        written = self._edit(base, changes, store=True)
        if written is not None:
            return written
        if self._writer is None:
            self._writer = TreeWriter(self.engine.git, self.engine.mirror.path)
        return self._writer.write(base, changes)

    def _edit(self, base: str, changes: dict[str, bytes | None], store: bool) -> str | None:
        """`base` with file contents replaced by editing tree objects, or None when the change
        needs git's index (a file added or removed, a link, a submodule)."""
        edits = {path: data for path, data in changes.items() if data is not None}
        if len(edits) != len(changes):
            return None
        try:
            git_dir = self.engine.mirror.path if store else None
            return edit_tree(self.engine.trees, git_dir, base, edits)
        except TreeShapeChanged as err:
            log.debug("writing the tree through git: %s", err)
            return None

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


RECENT_CACHE_ENTRIES = 4096  # (head, path) answers kept for conflict reports
SIZE_CACHE_ENTRIES = 65536  # object id -> size
PURE_CACHE_ENTRIES = 4096  # in-memory applies, line counts and interdiffs kept between checks
PURE_CACHE_BYTES = 64 << 20  # the bytes they hold (patches, file contents), in all
PURE_CACHE_ENTRY_BYTES = 4 << 20  # the most one of them may hold
BLOB_CACHE_BYTES = 32 << 20  # small blobs kept between checks, in all
BLOB_CACHE_ENTRY_BYTES = 1 << 20  # the largest blob kept
# Commits of an anchor's ancestry walked through the object reader to find where it meets
# the head's history (Engine._indexed_fork); a longer walk asks `git merge-base`.
MAX_FORK_WALK = 1000


class Engine:
    """Checks series against one mirror. Keep one per mirror: it holds a `git cat-file`
    process and caches keyed by content (commit ids, diff digests), which stay valid."""

    def __init__(self, mirror: Mirror, *, in_process: bool = True):
        self.mirror = mirror
        self.git: Git = mirror.git
        self.in_process = in_process  # False: every patch goes through `git apply`
        # No file larger than this is read (CARRY_MAX_BLOB_BYTES): an upstream head could hold
        # a file of gigabytes that its pack compresses to kilobytes.
        self.max_blob_bytes = mirror.git.max_blob_bytes
        self.reader = ObjectReader(self.git)
        self.trees = Trees(self.reader)
        weakref.finalize(self, self.reader.close)
        self.touches = TouchIndex(mirror.path, when_missing=mirror.index)
        self._known: dict[str, str] = {}
        self._present: set[str] = set()
        self._upstream: dict[tuple[str, tuple[str, ...]], history.UpstreamCommit] = {}
        self._patch_ids: dict[bytes, str] = {}
        self._recent: dict[tuple[str, str], list[CommitHunks]] = {}
        self._commit_lines: dict[tuple[str, tuple[str, ...]], CommitLines] = {}
        self._prs: dict[tuple[str, str], int | None] = {}
        self._naming: dict[tuple[str, tuple[int, ...]], list[FirstParentCommit]] = {}
        self._forks: dict[tuple[str, str], str] = {}  # (anchor, head) -> their merge base
        # Object id -> its size, and small blobs read (an id always names the same bytes): the
        # patched files are mostly the same objects on every new head.
        self._sizes: dict[str, int] = {}
        self._blobs: dict[str, Blob] = {}
        self._blob_bytes = 0
        # Sizes of other names (abbreviated ids in a patch's index lines), for one check: an
        # abbreviation can become ambiguous as the mirror grows.
        self._named_sizes: dict[str, int | None] = {}
        # Results of pure functions of a patch's bytes and a file's content, which come back on
        # every new head while the series' files are unchanged.
        self._applied: dict[tuple[bytes, str, int, bool, bytes], FileApply] = {}
        self._counts: dict[tuple[object, bytes, str, int, bytes], tuple[int, int]] = {}
        self._interdiffs: dict[tuple[bytes, int, bytes, int], str] = {}
        self._pure_bytes = 0  # what the three hold
        self._mirror_identity: tuple[int, int] | None = None

    def _follow_mirror(self) -> None:
        """Forgets what the mirror held when it was re-created since the last check (by this
        process or another): its objects may be gone. Diff-keyed caches stay."""
        try:
            stat = self.mirror.path.stat()
        except FileNotFoundError:
            return
        identity = (stat.st_dev, stat.st_ino)
        if self._mirror_identity not in (None, identity):
            self.reader.close()
            self.trees = Trees(self.reader)
            self._known.clear()
            self._present.clear()
            self._recent.clear()
            self._forks.clear()
            self._sizes.clear()
            self._blobs.clear()
            self._blob_bytes = 0
        self._mirror_identity = identity

    def close(self) -> None:
        self.reader.close()
        self.touches.close()

    def read_object(self, name: str) -> Blob | None:
        cached = self._blobs.get(name)
        if cached is not None:
            return cached
        try:
            found = self.reader.read(name)
        except OSError as err:  # the process cannot run: answer through plain git calls
            log.warning("object reader failed (%s); using git", err)
            return read_objects(self.git, [name]).get(name)
        if found is not None:
            self._remember(found)
        return found

    def _remember(self, found: Blob) -> None:
        """Keeps a small blob and the size of any object read, by its id."""
        size = len(found.content)
        self._remember_size(found.oid, size)
        if found.kind != "blob" or size > BLOB_CACHE_ENTRY_BYTES or found.oid in self._blobs:
            return
        if self._blob_bytes + size > BLOB_CACHE_BYTES:
            self._blobs.clear()
            self._blob_bytes = 0
        self._blobs[found.oid] = found
        self._blob_bytes += size

    def _remember_size(self, oid: str, size: int) -> None:
        if len(self._sizes) >= SIZE_CACHE_ENTRIES:
            self._sizes.clear()
        self._sizes[oid] = size

    def size_of(self, name: str) -> int | None:
        """The size of the object `name` names, from its header (`cat-file --batch-check`
        reads no content), or None when there is none."""
        if name in self._sizes:
            return self._sizes[name]
        if name in self._named_sizes:
            return self._named_sizes[name]
        try:
            found = self.reader.info(name)
        except OSError:
            result = self.git.run("cat-file", "-s", name, check=False)
            return int(result.text) if result.ok and result.text.isdigit() else None
        if found is not None:
            self._remember_size(found.oid, found.size)
        return found.size if found is not None else None

    def _prefetch(self, tree: str, paths: list[str], names: list[str]) -> None:
        """Reads, in a few round trips, what the checks of a series ask one by one: the trees
        on the way to `paths` in `tree` (a level at a time) and the sizes of their files and of
        the objects `names` (a patch's pre-images). Anything not answered is asked later."""
        if paths:
            self.trees.prefetch(tree, paths)
        files = []
        for path in paths:
            try:
                entry = self.trees.lookup(tree, path)
            except (TreeShapeChanged, OSError):
                continue
            if entry is not None and entry[0] in FILE_MODES:
                files.append(entry[1])
        wanted = list(dict.fromkeys(n for n in [*files, *names] if n not in self._sizes))
        try:
            found = self.reader.info_many(wanted) if wanted else []
        except OSError:
            return
        for name, info in zip(wanted, found, strict=True):
            if info is not None:
                self._remember_size(info.oid, info.size)
            if info is None or info.oid != name:
                self._named_sizes[name] = None if info is None else info.size
        # The files' contents, as the checks read them: those under the limits, not kept yet.
        limit = min(self.max_blob_bytes, BLOB_CACHE_ENTRY_BYTES)
        unread = [
            oid
            for oid in dict.fromkeys(files)
            if oid not in self._blobs and self._sizes.get(oid, limit + 1) <= limit
        ]
        try:
            blobs = self.reader.read_many(unread) if unread else []
        except OSError:
            return
        for blob in blobs:
            if blob is not None:
                self._remember(blob)

    def read_blob(self, name: str, path: str, where: str = "the head") -> Blob | None:
        """read_object for a file's content: BlobTooLarge, with nothing read, when the object
        is larger than the limit."""
        size = self.size_of(name)
        if size is not None and size > self.max_blob_bytes:
            raise BlobTooLarge(path, size, self.max_blob_bytes, where)
        return self.read_object(name)

    def oversized(self, tree: str, paths: list[str]) -> dict[str, int]:
        """The paths whose file in `tree` is over the limit, with their sizes."""
        found = {}
        for path in paths:
            try:
                entry = self.trees.lookup(tree, path)
            except (TreeShapeChanged, OSError):
                continue
            size = self.size_of(entry[1]) if entry and entry[0] != DIR_MODE else None
            if size is not None and size > self.max_blob_bytes:
                found[path] = size
        return found

    def _exists(self, oid: str) -> bool:
        if oid not in self._present:
            try:
                found = self.reader.info(oid) is not None
            except OSError:
                found = self.mirror.has_objects(oid)
            if found:
                self._present.add(oid)  # until the mirror is re-created (_follow_mirror)
            return found
        return True

    def tree_of(self, rev: str) -> str:
        try:
            found = self.reader.info(f"{rev}^{{tree}}")
        except OSError:
            found = None
        return found.oid if found is not None else tree_of(self.git, rev)  # git says why not

    def commit_of(self, rev: str | None) -> str | None:
        """The commit `rev` names in the mirror, or None. Answers for commit ids (which never
        change) are remembered; names like branches are asked every time."""
        if not rev:
            return None
        if rev in self._known:
            return self._known[rev]
        found = self.read_object(f"{rev}^{{commit}}")
        oid = found.oid if found is not None else None
        if oid is not None and _COMMIT_ID.match(rev):
            self._known[rev] = oid
        return oid

    def has_commit(self, sha: str | None) -> bool:
        return self.commit_of(sha) is not None

    def check(
        self,
        head_rev: str,
        patches: list[PatchInput],
        *,
        base: str | None = None,
        links: dict[str, list[LinkedPr]] | None = None,
        patch_paths: dict[str, str] | None = None,
        downstream: tuple[str, str] | None = None,
        commit_result: bool = False,
        declared: dict[str, list[DeclaredPr]] | None = None,
    ) -> SeriesReport:
        """Classifies `patches` on `head_rev`. `commit_result` also writes the resulting commit
        chain (for pushing); `patch_paths` maps names to paths for the reproduce commands,
        paths in the `downstream` repository (clone URL, branch) when it is given; `declared`
        names, per patch, the upstream PRs whose merge should make it unnecessary."""
        self._follow_mirror()
        head = self._resolve(head_rev)
        base = self._resolve_base(base)
        parsed = [_parse(item) for item in patches]
        return self._check_resolved(
            head, patches, parsed, base, links, patch_paths, downstream, commit_result, declared
        )

    def check_heads(
        self,
        head_revs: list[str],
        patches: list[PatchInput],
        *,
        base: str | None = None,
        patch_paths: dict[str, str] | None = None,
        declared: dict[str, list[DeclaredPr]] | None = None,
    ) -> HeadsEvidence:
        """Classifies `patches` on each of `head_revs` (release lines) in one pass: the heads
        are resolved together (one ls-remote, one fetch, one rev-parse), the series is parsed
        and its objects fetched once, and the caches carry from one head to the next. Also
        says, per head, which of the patches' own commits (their `From` lines) its history
        holds, for the presence table (bot.core.presence)."""
        self._follow_mirror()
        heads = self._resolve_all(head_revs)
        base = self._resolve_base(base)
        parsed = [_parse(item) for item in patches]
        own = tuple(
            p.meta.commit if isinstance(p, PatchFile) and p.meta.commit else None for p in parsed
        )
        reports = []
        contains = {}
        for head in heads:
            report = self._check_resolved(
                head, patches, parsed, base, None, patch_paths, None, False, declared
            )
            reports.append(report)
            contains[head.sha] = self._own_commits_in(head.sha, own, report)
        return HeadsEvidence(tuple(reports), own, contains)

    def _own_commits_in(
        self, head: str, own: tuple[str | None, ...], report: SeriesReport
    ) -> frozenset[str]:
        """The patches' own commits that are in `head`'s history, by id: a commit the engine
        already named as a landing in the head needs no git call, one the mirror lacks is in
        no head, and the rest are asked of git in one call."""
        landed = {
            c["sha"] for p in report.patches for c in p.upstream_commits or () if c.get("sha")
        }
        found: set[str] = set()
        asked: dict[str, str] = {}  # full id -> the id the patch gave
        for sha in dict.fromkeys(c for c in own if c is not None):
            full = self.commit_of(sha)
            if full is None:
                continue
            if full in landed or full == head:
                found.add(sha)
                continue
            # The check read the merge base of the commit's parent and the head: when that is
            # not the parent itself, the parent is not in the head, so neither is the commit.
            parent = self.commit_of(f"{full}^")
            fork = self._forks.get((parent, head)) if parent is not None else None
            if fork is None or fork == parent:
                asked[full] = sha
        if asked:
            # Reachable from the commits and not from the head: those of them it lacks.
            listed = self.git.run("rev-list", *asked, f"^{head}", "--", check=False)
            if listed.ok:
                lacking = set(listed.text.split())
                found.update(sha for full, sha in asked.items() if full not in lacking)
            else:  # a commit git cannot walk: each is asked alone
                found.update(s for full, s in asked.items() if self.git.is_ancestor(full, head))
        return frozenset(found)

    def _check_resolved(
        self,
        head: ResolvedHead,
        patches: list[PatchInput],
        parsed: list[PatchFile | PatchFileError],
        base: str | None,
        links: dict[str, list[LinkedPr]] | None,
        patch_paths: dict[str, str] | None,
        downstream: tuple[str, str] | None,
        commit_result: bool,
        declared: dict[str, list[DeclaredPr]] | None = None,
    ) -> SeriesReport:
        started = time.perf_counter()
        head_tree = self.tree_of(head.sha)
        # Files over the limit in the head are never read, nor diffed by the history reads: a
        # patch touching one is invalid (_Context.check says which file, how big).
        touched = [path for p in parsed if isinstance(p, PatchFile) for path in p.touched_paths]
        self._named_sizes.clear()
        self._prefetch(head_tree, list(dict.fromkeys(touched)), [])
        too_big = self.oversized(head_tree, list(dict.fromkeys(touched)))
        readable = [
            p
            if not isinstance(p, PatchFile) or too_big.keys().isdisjoint(p.touched_paths)
            else None
            for p in parsed
        ]
        self._ensure_preimages([p for p in readable if isinstance(p, PatchFile)])
        # Once the mirror holds what it can (it may have fetched pre-images just now).
        pre_images = [f.old_oid for p in parsed if isinstance(p, PatchFile) for f in p.files]
        self._prefetch(head_tree, [], [oid for oid in pre_images if oid])
        histories = self._histories(head.sha, base, patches, readable)
        chain = _Chain(self, head_tree, head.sha)
        applier = TreeApplier(self.git)
        context = _Context(
            self,
            applier,
            head.sha,
            head.ref,
            links or {},
            patch_paths or {},
            downstream,
            declared or {},
        )
        try:
            reports = [
                context.check(item, result, chain, histories.get(i))
                for i, (item, result) in enumerate(zip(patches, parsed, strict=True))
            ]
            result_commit = chain.tip() if commit_result else None
            result_tree = chain.tree_id()
        finally:
            applier.close()
            chain.close()
        log.info(
            "checked %d patches on %s in %.0f ms",
            len(patches),
            head.sha[:12],
            (time.perf_counter() - started) * 1000,
        )
        return SeriesReport(
            self.mirror.source, head.sha, head.ref, base, reports, result_tree, result_commit
        )

    def _resolve(self, rev: str) -> ResolvedHead:
        if self._is_held_commit(rev):
            return ResolvedHead(rev, None)  # a commit the mirror has: nothing to fetch
        return self.mirror.resolve(rev)

    def _resolve_all(self, revs: list[str]) -> list[ResolvedHead]:
        """`_resolve` for several revisions: commits the mirror has are answered here, the
        rest by one Mirror.resolve_all."""
        held = {rev: ResolvedHead(rev, None) for rev in revs if self._is_held_commit(rev)}
        rest = [rev for rev in dict.fromkeys(revs) if rev not in held]
        resolved = dict(zip(rest, self.mirror.resolve_all(rest), strict=True)) if rest else {}
        return [held.get(rev) or resolved[rev] for rev in revs]

    def _is_held_commit(self, rev: str) -> bool:
        return (
            len(rev) == 40 and (self.mirror.path / "HEAD").exists() and self.commit_of(rev) == rev
        )

    def _resolve_base(self, base: str | None) -> str | None:
        """The commit a given base names (any revision: SHA, tag, branch, `rev~n`), fetched when
        the mirror lacks it. A base that names nothing is refused: checking as if none was
        given would answer a different question than the one asked."""
        if not base:
            return None
        found = self.commit_of(base)
        if found is not None:
            return found
        try:
            return self.mirror.resolve(base).sha
        except MirrorError as err:
            raise MirrorError(
                f"base {base!r} does not name a commit in {self.mirror.source} ({err})"
            ) from err

    def _ensure_preimages(self, parsed: list[PatchFile]) -> None:
        """Fetches every branch and tag once when pre-image blobs or From commits are missing:
        a 3-way apply and the history evidence need them."""
        if self.mirror.widened:
            return
        oids = [f.old_oid for p in parsed for f in p.files if f.old_oid and not f.binary]
        commits = [p.meta.commit for p in parsed if p.meta.commit]
        if all(self._exists(o) for o in dict.fromkeys(oids)) and all(
            self.has_commit(c) for c in commits
        ):
            return
        try:
            self.mirror.widen()
        except MirrorError as err:
            log.warning("could not widen mirror %s: %s", self.mirror.path, err)

    def _histories(
        self,
        head: str,
        base: str | None,
        patches: list[PatchInput],
        parsed: list[PatchFile | PatchFileError | None],
    ) -> dict[int, _RangeEvidence]:
        """Per patch index: (range, matches), grouped so each distinct range is read once.
        None: a patch whose history is not read."""
        if self.in_process:
            self.touches.refresh()
        ranges: dict[str, list[int]] = {}
        forks: dict[str, tuple[str, bool]] = {}
        unanchored: list[int] = []
        for i, p in enumerate(parsed):
            if not isinstance(p, PatchFile) or p.is_empty:
                continue
            # The patch's own base: the series base, else the parent of the commit it was made
            # from (the commit itself already holds the change, and upstream may merge it as is).
            anchor = self.commit_of(base)
            if anchor is None and self.has_commit(p.meta.commit):
                anchor = self.commit_of(f"{p.meta.commit}^")
            if anchor is None:
                unanchored.append(i)
                continue
            if anchor not in forks:
                forks[anchor] = self._fork(anchor, head)
            fork, _ = forks[anchor]
            if fork:
                ranges.setdefault(fork, []).append(i)
        found: dict[int, _RangeEvidence] = {}
        for fork, indexes in ranges.items():
            rev_range = f"{fork}..{head}"
            group = [(p, patches[i].data) for i in indexes if isinstance(p := parsed[i], PatchFile)]
            union = tuple(dict.fromkeys(path for p, _ in group for path in p.touched_paths))
            indexed = forks.get(fork, (fork, False))[1]
            own = tuple(tuple(p.touched_paths) for p, _ in group)
            commits = self._range_commits(fork, head, union, own) if indexed else None
            series_history = history.SeriesHistory(
                self.git, rev_range, group, commits, self._patch_ids
            )
            for position, i in enumerate(indexes):
                found[i] = _RangeEvidence(
                    rev_range, series_history.matches[position], series_history.commits
                )
        if unanchored:
            found.update(self._head_history(head, unanchored, patches, parsed))
        return found

    def _head_history(
        self,
        head: str,
        indexes: list[int],
        patches: list[PatchInput],
        parsed: list[PatchFile | PatchFileError | None],
    ) -> dict[int, _RangeEvidence]:
        """Patch-id matches among the head's newest commits touching the patches' files (from
        the touch index when it places the head's history; git walks it otherwise)."""
        group = [(p, patches[i].data) for i in indexes if isinstance(p := parsed[i], PatchFile)]
        union = tuple(dict.fromkeys(path for p, _ in group for path in p.touched_paths))
        commits = None
        if self.in_process and union:
            found = self.touches.head_history(head, frozenset(union), history.MAX_CANDIDATES)
            commits = self._read_commits(found, union) if found is not None else None
        series_history = history.SeriesHistory(self.git, head, group, commits, self._patch_ids)
        return {
            i: _RangeEvidence(
                head,
                [m for m in series_history.matches[position] if m.how in history.SAME_DIFF],
                series_history.commits,
                anchored=False,
            )
            for position, i in enumerate(indexes)
        }

    def _fork(self, anchor: str, head: str) -> tuple[str, bool]:
        """The range base for an anchor, and whether the touch index knows the range (linear,
        every commit indexed); otherwise git answers. The answer is remembered (commit ids:
        it never changes) for _own_commits_in."""
        known = self._indexed_fork(anchor, head) if self.in_process else None
        if known is not None:
            fork, indexed = known, True
        else:
            fork, indexed = self.git.run("merge-base", anchor, head, check=False).text, False
        if len(self._forks) >= RECENT_CACHE_ENTRIES:
            self._forks.clear()
        self._forks[(anchor, head)] = fork
        return fork, indexed

    def _indexed_fork(self, anchor: str, head: str) -> str | None:
        """The merge base of `anchor` and `head` without a git process, when the touch index
        places head's history and the range from it to head is linear; None otherwise (git
        answers). The anchor's ancestry is walked through the object reader (one long-lived
        `cat-file`) until every path reaches head's history: a patch's own parent is usually
        a downstream commit the index does not hold, a few commits above upstream. When all
        paths stop at one commit, that commit is the merge base: any common ancestor lies
        below the first commit of head's history on its path from the anchor."""
        boundary: set[str] = set()
        seen: set[str] = set()
        todo = [anchor]
        while todo:
            sha = todo.pop()
            if sha in seen:
                continue
            seen.add(sha)
            placed = self.touches.reaches(head, sha)
            if placed is None:  # head's history is not placed (a merge below it, unindexed)
                return None
            if placed:
                boundary.add(sha)
                continue
            parents = self._parents(sha) if len(seen) <= MAX_FORK_WALK else None
            if not parents:  # unreadable, a root or a walk too long: git answers
                return None
            todo.extend(parents)
        if len(boundary) != 1:
            return None
        (fork,) = boundary
        return fork if self.touches.linear_range(fork, head) is not None else None

    def _parents(self, sha: str) -> tuple[str, ...] | None:
        """A commit's parents, read from its object; None when it cannot be read."""
        try:
            found = self.reader.read(sha)
        except OSError:
            return None
        if found is None or found.kind != "commit":
            return None
        parents = []
        for line in found.content.split(b"\n"):
            if not line:
                break  # the headers end at the first empty line
            if line.startswith(b"parent "):
                parents.append(line[7:].decode("ascii"))
        return tuple(parents)

    def apply_file(
        self, item: PatchInput, index: int, fdiff: FileDiff, content: bytes, reverse: bool
    ) -> FileApply:
        """apply_hunks of the `index`th file of the patch `item` on `content` (a pure function
        of those: the file diff is parsed from the patch's bytes), kept between checks."""
        key = (item.data, item.name, index, reverse, content)
        found = self._applied.get(key)
        if found is None:
            found = apply_hunks(content, fdiff.hunks, reverse=reverse)
            held = len(item.data) + len(content) + len(found.content or b"")
            if self._room_for(len(self._applied), held):
                self._applied[key] = found
        return found

    def line_count(
        self,
        count: Callable[[FileDiff, HeadFile], tuple[int, int]],
        item: PatchInput,
        index: int,
        fdiff: FileDiff,
        head: HeadFile,
    ) -> tuple[int, int]:
        """count(fdiff, head) for the `index`th file of the patch `item`, kept between checks
        when the head has the file (the counts read its content only)."""
        if head.content is None:
            return count(fdiff, head)
        key = (count, item.data, item.name, index, head.content)
        found = self._counts.get(key)
        if found is None:
            found = count(fdiff, head)
            if self._room_for(len(self._counts), len(item.data) + len(head.content)):
                self._counts[key] = found
        return found

    def interdiff(
        self, old: bytes, old_parsed: PatchFile, new: bytes, new_parsed: PatchFile
    ) -> str:
        """report.interdiff, kept between checks: it reads the two patches' bytes from where
        their diffs start, nothing else of the parsed patches."""
        key = (old, old_parsed.diff_offset, new, new_parsed.diff_offset)
        found = self._interdiffs.get(key)
        if found is None:
            found = interdiff(old, old_parsed, new, new_parsed)
            if self._room_for(len(self._interdiffs), len(old) + len(new) + len(found)):
                self._interdiffs[key] = found
        return found

    def _room_for(self, entries: int, size: int) -> bool:
        """Whether a result holding `size` bytes is kept: never one over the entry limit; the
        kept results are forgotten when their table is full or all of them would hold more
        than PURE_CACHE_BYTES (a series on large files, changing on every head)."""
        if size > PURE_CACHE_ENTRY_BYTES:
            return False
        if entries >= PURE_CACHE_ENTRIES or self._pure_bytes + size > PURE_CACHE_BYTES:
            self._applied.clear()
            self._counts.clear()
            self._interdiffs.clear()
            self._pure_bytes = 0
        self._pure_bytes += size
        return True

    def recent_history(self, head: str, path: str) -> list[CommitHunks]:
        """The newest commits touching `path` at commit `head`, oldest first, with their
        zero-context hunks: asked once per file and head, not once per conflicting hunk (a big
        series conflicts in the same files again and again, and `head` is a commit id, so the
        answer never changes)."""
        key = (head, path)
        if key not in self._recent:
            if len(self._recent) >= RECENT_CACHE_ENTRIES:
                self._recent.clear()
            # the touch index names them without git walking the whole history for a file
            # upstream seldom changes (0.35 s a file over 40,000 commits)
            limit = history.RECENT_LINE_HISTORY
            newest = self.touches.head_history(head, {path}, limit) if self.in_process else None
            self._recent[key] = (
                history.file_commits(self.git, newest, path)
                if newest is not None
                else history.recent_file_history(self.git, head, path, limit)
            )
        return self._recent[key]

    def commit_lines(self, commit: history.UpstreamCommit) -> CommitLines:
        """A range commit's substantive added and removed lines, over the files it was read
        with (kept per commit and file set: series come back on every head)."""
        key = (commit.sha, tuple(commit.sections))
        if key not in self._commit_lines:
            if len(self._commit_lines) >= RECENT_CACHE_ENTRIES:
                self._commit_lines.clear()
            sections = commit.sections.values()
            self._commit_lines[key] = CommitLines(
                commit.sha,
                commit.subject,
                Counter(n for section in sections for n in history.added_lines(section)),
                Counter(n for section in sections for n in history.removed_lines(section)),
            )
        return self._commit_lines[key]

    def pr_of(self, sha: str, subject: str, head: str, *, look_for_merge: bool) -> int | None:
        """The PR a commit came in by: named in its subject, else (when asked) in the subject of
        the merge that brought it into `head`."""
        number = landing.pr_number(subject)
        if number is not None or not look_for_merge:
            return number
        key = (sha, head)
        if key not in self._prs:
            merge = history.merged_by(self.git, sha, head)
            self._prs[key] = landing.pr_number(merge[1]) if merge else None
        return self._prs[key]

    def naming_prs(self, head: str, numbers: list[int]) -> list[FirstParentCommit]:
        """The commits of `head`'s first-parent history (newest first) whose subjects name one
        of the PR `numbers`: where a declared PR merged, and what reverted it. Asked once per
        head and set of PRs (a commit id's history never changes)."""
        key = (head, tuple(sorted(set(numbers))))
        if key not in self._naming:
            if len(self._naming) >= RECENT_CACHE_ENTRIES:
                self._naming.clear()
            found = history.naming_prs(self.git, head, list(key[1]))
            self._naming[key] = [FirstParentCommit(sha, subject) for sha, subject in found]
        return self._naming[key]

    def touching(self, rev_range: str, paths: list[str]) -> list[str] | None:
        """Every commit of a linear `fork..head` range touching `paths`, newest first, from the
        touch index; None when the index does not know the range."""
        if not self.in_process:
            return None
        fork, _, head = rev_range.partition("..")
        return self.touches.touching_range(fork, head, frozenset(paths))

    def _range_commits(
        self,
        fork: str,
        head: str,
        paths: tuple[str, ...],
        path_sets: tuple[tuple[str, ...], ...] = (),
    ) -> list[history.UpstreamCommit] | None:
        """What history.read_range gives for a linear range (each patch's own window of
        commits, `path_sets`), from the touch index and a cache of commits read before."""
        touching = self.touches.touching_range(fork, head, frozenset(paths))
        if touching is None:
            return None
        wanted = touching[: history.MAX_CANDIDATES]
        if len(touching) > history.MAX_CANDIDATES and len(set(path_sets)) > 1:
            per_patch = [self.touches.touching_range(fork, head, frozenset(s)) for s in path_sets]
            if all(found is not None for found in per_patch):
                wanted = history.window(touching, [found or [] for found in per_patch])
        return self._read_commits(wanted, paths)

    def _read_commits(
        self, wanted: list[str], paths: tuple[str, ...]
    ) -> list[history.UpstreamCommit]:
        """The given commits with their diffs limited to `paths`, read once per process."""
        missing = [sha for sha in wanted if (sha, paths) not in self._upstream]
        for commit in history.read_commits(self.git, missing, paths):
            self._upstream[(commit.sha, paths)] = commit
        return [self._upstream[(sha, paths)] for sha in wanted if (sha, paths) in self._upstream]


def _parse(item: PatchInput) -> PatchFile | PatchFileError:
    return _parse_bytes(item.data, item.name)


@functools.lru_cache(maxsize=256)
def _parse_bytes(data: bytes, name: str) -> PatchFile | PatchFileError:
    """Parsing is a pure function of the bytes (mail headers are slow to parse), and series
    come back on every head, so the values are reused."""
    try:
        return parse_patch(data, name=name)
    except PatchFileError as err:
        return err


@dataclass
class _Context:
    engine: Engine
    applier: TreeApplier
    head: str
    head_ref: str | None
    links: dict[str, list[LinkedPr]]
    patch_paths: dict[str, str]
    downstream: tuple[str, str] | None = None
    declared: dict[str, list[DeclaredPr]] = field(default_factory=dict)

    def declared_for(self, name: str) -> list[DeclaredPr]:
        return self.declared.get(Path(name).name) or self.declared.get(name) or []

    def check(
        self,
        item: PatchInput,
        parsed: PatchFile | PatchFileError,
        chain: _Chain,
        found: _RangeEvidence | None,
    ) -> PatchReport:
        if isinstance(parsed, PatchFileError):
            return _invalid(item, parsed)
        links = self.links.get(Path(item.name).name) or self.links.get(item.name) or []
        earlier = list(chain.applied)
        patch_check = _PatchCheck(self, item, parsed, links, found)
        try:
            patch_check.follow(self._renames(parsed, chain))
            self._within_limit(patch_check.parsed, chain)
            report = patch_check.run(chain)
        except BlobTooLarge as err:
            return _too_large(item, parsed, err)
        if report.status in (Status.CONFLICT, Status.PARTIAL, Status.UPSTREAM_VERSION):
            names = [*earlier, item.name]
            report.conflict = {
                **(report.conflict or {}),
                "reproduce": reproduce_commands(
                    self.engine.mirror.source,
                    self.head,
                    self.head_ref,
                    [self.patch_paths.get(n, n) for n in names],
                    self.downstream,
                ),
            }
        return report

    def _within_limit(self, parsed: PatchFile, chain: _Chain) -> None:
        """BlobTooLarge for the first file the patch touches that is over the limit, where the
        patch applies or in its pre-image: checked from object headers before anything (carry
        or git) reads the files."""
        limit = self.engine.max_blob_bytes
        where = "the head with the patches before it" if chain.steps else "the head"
        for path in parsed.touched_paths:
            size = chain.size(path)
            if size is not None and size > limit:
                raise BlobTooLarge(path, size, limit, where)
        for fdiff in parsed.files:
            size = self.engine.size_of(fdiff.old_oid) if fdiff.old_oid else None
            if size is not None and size > limit:
                where = f"the patch's pre-image {fdiff.old_oid}"
                raise BlobTooLarge(fdiff.old_path or fdiff.path, size, limit, where)

    def _renames(self, parsed: PatchFile, chain: _Chain) -> list[history.Rename]:
        """Files the patch edits that the head lacks but upstream moved elsewhere."""
        trees = self.engine.trees
        head_tree = chain.head_tree

        def exists(path: str) -> bool:
            try:
                return trees.lookup(head_tree, path) is not None
            except (TreeShapeChanged, OSError):
                return False

        edited = [f.old_path for f in parsed.files if f.old_path and f.hunks and not f.binary]
        missing = [path for path in edited if not chain.has(path) and not exists(path)]
        found = (history.renamed_to(self.engine.git, self.head, path, exists) for path in missing)
        return [rename for rename in found if rename is not None]


def _too_large(item: PatchInput, parsed: PatchFile, err: BlobTooLarge) -> PatchReport:
    evidence = [
        {
            "signal": "blob-size",
            "result": "over-limit",
            "path": err.path,
            "size": err.size,
            "limit": err.limit,
            "where": err.where,
        }
    ]
    reason = f"{item.name}: {err}"
    report = PatchReport(item.name, Status.INVALID, Decision.REVIEW, reason, evidence)
    report.subject = parsed.meta.subject
    return report


def _invalid(item: PatchInput, err: PatchFileError) -> PatchReport:
    evidence = [{"signal": "parse", "result": "failed", "line": err.line, "detail": err.message}]
    reason = f"{item.name}: {err}"
    return PatchReport(item.name, Status.INVALID, Decision.REVIEW, reason, evidence)


class _PatchCheck:
    def __init__(
        self,
        context: _Context,
        item: PatchInput,
        parsed: PatchFile,
        links: list[LinkedPr],
        found: _RangeEvidence | None,
    ):
        self.ctx = context
        self.git = context.engine.git
        self.item = item
        self.parsed = parsed
        self.links = links
        self.range: str | None = found.range if found and found.anchored else None
        self.searched_head = found is not None and not found.anchored
        self.matches: list[history.Match] = found.matches if found else []
        self.range_commits = found.commits if found else []
        self.evidence: list[dict[str, Any]] = []
        self.original, self.original_parsed = item, parsed  # as given, before any rename
        self.head_files: dict[str, HeadFile] = {}  # the tree the patch was tried on
        self.presence: tuple[HunkPresence, ...] = ()  # each hunk's state there, when read
        self._versions: dict[str, locate.FileLines | None] = {}  # "rev:path" -> its lines
        self.declared_merge: PrMerge | None = None  # a declared PR merged into the head

    def follow(self, renames: list[history.Rename]) -> None:
        """Checks the patch on the paths upstream moved its files to."""
        if not renames:
            return
        moved = repath(self.item.data, self.parsed, {r.old: r.new for r in renames})
        parsed = _parse_bytes(moved, self.item.name) if moved is not None else None
        if moved is None or not isinstance(parsed, PatchFile):
            return
        self.item, self.parsed = PatchInput(self.item.name, moved), parsed
        for rename in renames:
            self.evidence.append(
                {
                    "signal": "renamed-upstream",
                    "from": rename.old,
                    "to": rename.new,
                    "commit": rename.commit,
                }
            )

    def run(self, chain: _Chain) -> PatchReport:
        if self.parsed.is_empty:
            self.evidence.append({"signal": "empty-patch", "detail": "no file is changed"})
            return self._report(classify.decide(Signals(empty=True)), None)
        if self.ctx.engine.in_process and _plain_edits(self.parsed):
            report = self._run_in_memory(chain)
            if report is not None:
                return report
        before = chain.tree
        applier = self.ctx.applier
        reverse = applier.check_reverse(before, self.item.data)
        self.evidence.append(_apply_evidence("reverse-apply", reverse))
        forward = applier.apply(before, self.item.data)
        self.evidence.append(_apply_evidence("forward-apply", forward))
        merged = None if forward.ok else self._three_way(before)
        head_files = self._head_files(before)
        hunks = () if forward.ok else self._hunk_presence(head_files)
        self.head_files, self.presence = head_files, hunks
        if hunks:
            self.evidence.append({"signal": "hunks", "hunks": [h.as_dict() for h in hunks]})
        after = forward.tree if forward.ok else (merged.tree if merged and merged.ok else None)
        signals = Signals(
            forward=forward.ok,
            moved=not forward.ok or moved_hunks(forward.output),
            reverse=reverse.ok,
            three_way=_three_way_state(merged),
            three_way_unchanged=after == before,
            hunks=hunks,
            duplicate=after is not None and self._duplicate(head_files),
            removals_remain=reverse.ok and not forward.ok and self._removals_remain(head_files),
            linked_merged_in_head=self._linked_prs(),
            **self._match_signals(),
        )
        if signals.landed_same_diff:
            signals = self._same_diff_facts(signals, head_files)
        all_present = bool(hunks) and all(h.state == HunkState.APPLIED for h in hunks)
        if (reverse.ok and not forward.ok) or after == before or all_present:
            signals = replace(signals, state_predates_range=self._state_predates_range())
        self._history_evidence()
        if after == before:
            self.evidence.append({"signal": "tree-unchanged", "result": True})
        verdict = classify.decide(signals)
        if verdict.status in (Status.PARTIAL, Status.UPSTREAM_VERSION) and self._hunks_predate():
            signals = replace(signals, present_predates_range=True)
            verdict = classify.decide(signals)
        verdict = self._declared(verdict, signals.state_predates_range)
        return self._finish(chain, verdict, after, signals.moved)

    def _run_in_memory(self, chain: _Chain) -> PatchReport | None:
        """The common case without git: every file is an edit of an existing text file and the
        patch applies forward. None (nothing recorded) when git must decide: the patch does not
        apply, or would change nothing, or a file is not a regular file."""
        files = self.parsed.files
        before: dict[str, bytes] = {}
        for fdiff in files:
            content = chain.read(fdiff.path)
            if content is None:
                return None
            before[fdiff.path] = content
        engine, item = self.ctx.engine, self.item
        forward = {
            f.path: engine.apply_file(item, i, f, before[f.path], False)
            for i, f in enumerate(files)
        }
        if not all(result.ok for result in forward.values()):
            return None
        after = {path: result.content for path, result in forward.items()}
        if after == before:
            return None
        reverse = {
            f.path: engine.apply_file(item, i, f, before[f.path], True) for i, f in enumerate(files)
        }
        self.evidence.append(_in_memory_evidence("reverse-apply", files, reverse))
        self.evidence.append(_in_memory_evidence("forward-apply", files, forward))
        head_files = {path: HeadFile(data, blob_id(data)) for path, data in before.items()}
        self.head_files = head_files
        moved = any(result.moved for result in forward.values())
        signals = Signals(
            forward=True,
            moved=moved,
            reverse=all(result.ok for result in reverse.values()),
            duplicate=self._duplicate(head_files),
            linked_merged_in_head=self._linked_prs(),
            **self._match_signals(),
        )
        self._history_evidence()
        verdict = self._declared(classify.decide(signals), False)
        refreshed = self.item.data
        if moved:
            moves = {
                path: FileMove(result.offsets, before[path], after[path] or b"")
                for path, result in forward.items()
                if result.moved
            }
            refreshed = renumber(self.item.data, self.parsed, moves)
        chain.push_files(self.item.name, self.parsed.meta, dict(after))
        return self._kept(verdict, refreshed, renumbered=moved)

    def _kept(self, verdict: Verdict, refreshed: bytes, renumbered: bool = False) -> PatchReport:
        """The report of a patch that stays in the series as `refreshed`."""
        report = self._report(verdict, refreshed)
        report.changed = refreshed != self.original.data
        if report.changed:
            # Renumbering keeps every line where it was, so the diff starts where it did.
            written = self.parsed if renumbered else _parse_bytes(refreshed, self.item.name)
            if isinstance(written, PatchFileError):
                raise written  # carry wrote this file: a bug, never the user's input
            report.interdiff = self.ctx.engine.interdiff(
                self.original.data, self.original_parsed, refreshed, written
            )
            report.refresh = self._refresh_class(written, renumbered)
        elif verdict.status == Status.APPLIES_MOVED:
            report.status = Status.APPLIES
            report.reason = "applies as is"
        if verdict.status in (Status.CONFLICT, Status.PARTIAL, Status.UPSTREAM_VERSION):
            report.conflict = self._conflict_details(self._work_hunks(verdict))
        return report

    def _finish(
        self, chain: _Chain, verdict: Verdict, after: str | None, moved: bool
    ) -> PatchReport:
        keeps = verdict.decision in (Decision.KEEP, Decision.REVIEW)
        if keeps and after is not None and after != chain.tree:
            refreshed = self.item.data
            if moved:
                from bot.git.formatpatch import format_patch, make_commit

                regenerated = format_patch(
                    self.git, make_commit(self.git, after, chain.tip(), self.parsed.meta)
                )
                if not same_hunks(self.parsed, parse_patch(regenerated)):
                    refreshed = regenerated
            chain.push_tree(self.item.name, self.parsed.meta, after)
            return self._kept(verdict, refreshed)
        report = self._report(verdict, None)  # dropped or not applicable: never written
        if verdict.status in (Status.CONFLICT, Status.PARTIAL, Status.UPSTREAM_VERSION):
            report.conflict = self._conflict_details(self._work_hunks(verdict))
        return report

    def _report(self, verdict: Verdict, refreshed: bytes | None) -> PatchReport:
        report = PatchReport(
            self.item.name,
            verdict.status,
            verdict.decision,
            verdict.reason,
            self.evidence,
            self.parsed.meta.subject,
            refreshed,
        )
        if verdict.status in POINTER_STATUSES:
            report.upstream_commits = [found.as_dict() for found in self._landings()]
        return report

    def _refresh_class(self, written: PatchFile, renumbered: bool) -> dict[str, Any]:
        """Whether the refresh moved the patch's context only or changed its `+`/`-` lines
        (bot.core.refresh), and for a content change, per changed hunk, the upstream commit
        that last touched its lines: what forced it."""
        if renumbered:  # renumbering keeps every line as it was
            return {"class": RefreshClass.CONTEXT_ONLY.value}
        found = classify_refresh(self.original_parsed, written)
        out: dict[str, Any] = {"class": found.kind.value}
        if found.kind == RefreshClass.CONTENT_CHANGED:
            timelines: dict[str, list[CommitHunks]] = {}
            if self.range and found.changed:  # one history read for every changed file
                paths = list(dict.fromkeys(f.old_path or f.path for f, _ in found.changed))
                touching = self.ctx.engine.touching(self.range, paths)
                timelines = history.file_histories(self.git, self.range, paths, touching)
            out["forced_by"] = [
                self._forced_by(fdiff, hunk, timelines) for fdiff, hunk in found.changed
            ]
        return out

    def _forced_by(
        self, fdiff: FileDiff, hunk: Hunk, timelines: dict[str, list[CommitHunks]]
    ) -> dict[str, Any]:
        """The newest upstream commit (of the range, else of the file's recent history) that
        touched the lines of a carried hunk the refresh changed."""
        path = fdiff.old_path or fdiff.path
        entry: dict[str, Any] = {"file": fdiff.path, "hunk": hunk.header}
        if self.range:
            fork = self.range.split("..", 1)[0]
            touched = self._lines_touched(hunk, path, fork, timelines.get(path, []))
            newest_first = touched[::-1]
        else:
            found = self._recent_touches(hunk, path).get("upstream_commits", [])
            newest_first = [(c["sha"], c["subject"]) for c in found]
        if newest_first:
            sha, subject = newest_first[0]
            entry.update(sha=sha, subject=subject, pr=landing.pr_number(subject))
        return entry

    def _three_way(self, tree: str) -> ApplyResult:
        merged = self.ctx.applier.apply(tree, self.item.data, three_way=True)
        entry: dict[str, Any] = {"signal": "3way-apply", "result": _three_way_state(merged)}
        if merged.ok:
            entry["unchanged"] = merged.tree == tree
        else:
            entry["detail"] = _tail(merged.output)
        self.evidence.append(entry)
        return merged

    def _head_files(self, tree: str, patch: PatchFile | None = None) -> dict[str, HeadFile]:
        paths = list((patch or self.parsed).touched_paths)
        where = "the head" if patch is None else f"tree {tree}"
        blobs = {p: self.ctx.engine.read_blob(f"{tree}:{p}", p, where) for p in paths}
        modes = {}
        if any(f.old_mode != f.new_mode or f.binary for f in self.parsed.files):
            modes = {p: e.mode for p, e in entries(self.git, tree, paths).items()}
        files = {}
        for path in paths:
            blob = blobs[path]
            if blob is None or blob.kind != "blob":
                files[path] = HeadFile(None)
            else:
                files[path] = HeadFile(blob.content, blob.oid, modes.get(path, "100644"))
        return files

    def _hunk_presence(self, files: dict[str, HeadFile]) -> tuple[HunkPresence, ...]:
        out: list[HunkPresence] = []
        for fdiff in self.parsed.files:
            old = files.get(fdiff.old_path or "", HeadFile(None))
            new = files.get(fdiff.new_path or "", HeadFile(None))
            out.extend(classify.file_presence(fdiff, old, new))
        return tuple(out)

    def _line_counts(
        self,
        files: dict[str, HeadFile],
        count: Callable[[FileDiff, HeadFile], tuple[int, int]],
        skip: Callable[[FileDiff], bool],
    ) -> tuple[int, int]:
        """(hits, total) of a per-file line count, summed over the patch's files."""
        hits = total = 0
        engine, item = self.ctx.engine, self.item
        for index, fdiff in enumerate(self.parsed.files):
            if not skip(fdiff):
                head = files.get(fdiff.path, HeadFile(None))
                h, t = engine.line_count(count, item, index, fdiff, head)
                hits, total = hits + h, total + t
        return hits, total

    def _duplicate(self, files: dict[str, HeadFile]) -> bool:
        hits, total = self._line_counts(files, classify.duplicated_additions, lambda f: f.is_new)
        duplicate = (
            total >= classify.DUPLICATE_MIN_LINES and hits >= total * classify.DUPLICATE_RATIO
        )
        if hits:
            self.evidence.append(
                {
                    "signal": "added-lines-already-in-head",
                    "present": hits,
                    "added": total,
                    "duplicate": duplicate,
                }
            )
        return duplicate

    def _state_predates_range(self) -> bool:
        """True when the base of the history range already held the patch's post-image: the
        head then never had what the patch changes, which is not evidence that upstream took it.
        Without a range, a patch that (almost) only removes code cannot tell "upstream removed
        it" from "the head never had it", so it counts as the latter."""
        if self.range is None and self._taken_by_patch_id():
            return False
        if self.range is None:
            added = sum(
                1
                for f in self.parsed.files
                for h in f.hunks
                for line in h.added
                if classify.normalize(line)
            )
            mostly_removal = added < classify.DUPLICATE_MIN_LINES and any(
                h.removed for f in self.parsed.files for h in f.hunks
            )
            if mostly_removal:
                self.evidence.append(
                    {
                        "signal": "removal-without-history",
                        "added_lines": added,
                        "detail": "no base known to tell taken from never had, and too few "
                        "added lines to show the change itself",
                    }
                )
            return mostly_removal
        fork = self.range.split("..", 1)[0]
        fork_tree = self.ctx.engine.tree_of(fork)
        if self.ctx.applier.check_reverse(fork_tree, self.original.data).ok:
            self.evidence.append(
                {"signal": "post-image-at-range-base", "base": fork, "result": True}
            )
            return True
        return self._removed_code_never_in_range(fork, fork_tree)

    def _removed_code_never_in_range(self, fork: str, fork_tree: str) -> bool:
        """The head never had most of the code the patch removes: those blocks of removed
        lines are neither in the range base nor added as a block by a commit in the range. A
        removal of code that was never there was not taken by anyone. (The context may have
        moved since the base, which is why the exact reverse-apply failed there.) Blocks, not
        single lines: a closing `fi` or a cleanup call turns up anywhere."""
        blocks = [b for f in self.parsed.files for h in f.hunks for b in classify.removed_blocks(h)]
        removed = sum(len(block) for block in blocks)
        if not removed:
            return False
        seen_in = [
            [n for n in map(classify.normalize, file.lines) if n]
            for file in self._head_files(fork_tree, self.original_parsed).values()
        ]
        seen_in += [
            run
            for commit in self.range_commits
            for section in commit.sections.values()
            for run in classify.added_runs(section)
        ]
        unseen = sum(
            len(block) for block in blocks if not any(classify.contains(s, block) for s in seen_in)
        )
        complete = len(self.range_commits) < history.MAX_CANDIDATES
        if complete and unseen * 2 < removed:
            return False
        self.evidence.append(
            {
                "signal": "removed-code-never-in-range",
                "base": fork,
                "removed_lines": removed,
                "never_seen": unseen,
                "history_complete": complete,
            }
        )
        return True

    def _hunks_predate(self) -> bool:
        """Every hunk the head has (as is or in another version) was already so at the range
        base: the range's history was read whole, and no commit in it added (at least half of)
        the lines upstream has where the hunk belongs (for a hunk that only removes, took out
        the lines it removes). A hunk without a substantive line to look for, or history read only in
        part, leaves the answer False: nothing then shows the head was that way all along."""
        if self.range is None or len(self.range_commits) >= history.MAX_CANDIDATES:
            return False
        present = [h for h in self.presence if h.state in (HunkState.APPLIED, HunkState.SIMILAR)]
        if not present:
            return False
        hunks = {(f.path, h.header): (f, h) for f in self.parsed.files for h in f.hunks}
        commits = [self.ctx.engine.commit_lines(c) for c in self.range_commits]
        for item in present:
            if (item.path, item.header) not in hunks:  # a whole-file state (a new or deleted
                # file, a rename, a mode): brought in range if a commit of the range touched it
                if any(item.path in c.sections for c in self.range_commits):
                    return False
                continue
            theirs, added, removed, _ = self._upstream_lines(item, hunks)
            normalized = [n for line in theirs if (n := classify.normalize(line))]
            if not normalized and not removed:
                return False
            taken = landing.counterparts(normalized, added, classify.FUZZY_LINE_CUTOFF)
            best = landing.landing_for(taken or normalized, removed, commits)
            if best is not None and landing.brought(taken or normalized, removed, best):
                return False
        self.evidence.append(
            {
                "signal": "present-hunks-predate-range",
                "range": self.range,
                "hunks": len(present),
                "detail": "no commit in range brought any hunk the head has",
            }
        )
        return True

    def _removals_remain(self, files: dict[str, HeadFile]) -> bool:
        hits, total = self._line_counts(files, classify.lingering_removals, lambda f: f.is_deleted)
        remain = hits >= 2 and hits * 2 >= total
        if hits:
            self.evidence.append(
                {
                    "signal": "removed-lines-still-in-head",
                    "present": hits,
                    "removed": total,
                    "suspicious": remain,
                }
            )
        return remain

    def _match_signals(self) -> dict[str, Any]:
        reverts = tuple((m.commit.sha, m.reverted_by) for m in self.matches if m.reverted_by)
        return {
            "no_base": self.range is None,
            "matched_commit": any(m.reverted_by is None for m in self.matches),
            "matched_reverted": bool(self.matches) and len(reverts) == len(self.matches),
            "landed_same_diff": bool(self._same_diff_landings()),
            "landed_other_context": not any(
                m.how == "patch-id" and not m.reverted_by for m in self.matches
            ),
            "reverts": reverts,
        }

    def _same_diff_landings(self) -> list[str]:
        """Upstream commits with the patch's very diff (patch id, or the same changed lines in
        the same functions with other context) that nothing undid."""
        return [
            m.commit.sha for m in self.matches if m.how in history.SAME_DIFF and not m.reverted_by
        ]

    def _same_diff_facts(self, signals: Signals, files: dict[str, HeadFile]) -> Signals:
        """What the head kept of a same-diff landing: every line the patch adds, and none of
        the lines it removes added back later."""
        added, total = self._line_counts(files, classify.duplicated_additions, lambda f: f.is_new)
        self.evidence.append({"signal": "added-lines-kept", "present": added, "added": total})
        signals = replace(
            signals,
            added_all_in_head=total > 0 and added == total,
            removals_readded=self._removals_readded(),
        )
        whole = all(h.state in (HunkState.APPLIED, HunkState.SIMILAR) for h in signals.hunks)
        if signals.removals_readded or (signals.added_all_in_head and whole):
            return signals
        later = self._added_edited_later(files)
        if later is None:
            return signals
        edited_by, deleted = later
        return replace(
            signals, added_kept_or_edited=True, edited_by=edited_by, deleted_later=deleted
        )

    def _added_edited_later(
        self, files: dict[str, HeadFile]
    ) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]] | None:
        """The commits after the same-diff landing that edited, in place, lines the patch adds
        (edits.edited_later), oldest first, and the files a later commit deleted whole
        ((path, commit) pairs, see _deleted_whole); None when some added line is not
        accounted for (taken out with no edited form put in its place, or its last form not
        in the head). A line the patch removes that the head still has is upstream's own copy:
        the caller has checked that no commit after the landing added one back."""
        order = [c.sha for c in self.range_commits]  # newest first
        landed = [order.index(sha) for sha in self._same_diff_landings() if sha in order]
        if not landed:
            return None
        newer = self.range_commits[: max(landed)][::-1]  # oldest first
        found: list[edits.LaterEdits] = []
        deleted: list[tuple[str, str]] = []
        for fdiff in self.parsed.files:
            content = files.get(fdiff.path, HeadFile(None)).content
            if fdiff.binary:
                return None
            if content is None:
                deleter = self._deleted_whole(fdiff.path, newer)
                if deleter is None:
                    return None
                deleted.append((fdiff.path, deleter))
                continue
            head = Counter(n for line in content.splitlines() if (n := classify.normalize(line)))
            added = [n for h in fdiff.hunks for line in h.added if (n := classify.normalize(line))]
            later = [
                edits.FileChange(
                    c.sha,
                    Counter(history.removed_lines(c.sections[fdiff.path])),
                    tuple(history.added_lines(c.sections[fdiff.path])),
                    history.says_revert(c),
                )
                for c in newer
                if fdiff.path in c.sections
            ]
            edited = edits.edited_later(added, head, later, classify.FUZZY_LINE_CUTOFF)
            if edited is None:
                return None
            found.append(edited)
        commits = tuple(dict.fromkeys(sha for e in found for sha in e.commits))
        self.evidence.append(
            {
                "signal": "added-lines-edited-later",
                "lines": sum(e.lines for e in found),
                "commits": list(commits),
                "deleted_files": [{"path": path, "commit": sha} for path, sha in deleted],
                "detail": "every line the patch adds is where the landing put it, or each later "
                "upstream commit that took it out put an edited form in its place, and the head "
                "has the last form"
                + (
                    "; a file upstream deleted whole after the landing, in a commit made on top "
                    "of it that does not say it reverts, has nothing left for the patch"
                    if deleted
                    else ""
                ),
            }
        )
        return commits, tuple(deleted)

    def _deleted_whole(self, path: str, newer: list[history.UpstreamCommit]) -> str | None:
        """The commit after the landing that deleted `path` whole, when the head lacks it:
        the last commit of the range touching it deletes it, does not say it reverts anything,
        and descends from a same-diff landing, so the file it deleted had the patch's change
        (not a side branch, forked before the landing, whose merge dropped the file).
        None otherwise."""
        touching = [c for c in newer if path in c.sections]
        if not touching:
            return None
        last = touching[-1]
        if not _DELETES_FILE.search(last.sections[path]) or history.says_revert(last):
            return None
        if not any(self.git.is_ancestor(sha, last.sha) for sha in self._same_diff_landings()):
            return None
        return last.sha

    def _removals_readded(self) -> bool:
        """A commit newer than the oldest same-diff landing adds back a line the patch removes
        (in the files the history was read for): upstream then undid the removal, maybe in
        another place, so a copy the head still has is not necessarily upstream's own."""
        order = [c.sha for c in self.range_commits]  # newest first
        landed = [order.index(sha) for sha in self._same_diff_landings() if sha in order]
        removed = {
            n
            for f in self.parsed.files
            for h in f.hunks
            for b in classify.removed_blocks(h)
            for n in b
        }
        newer = self.range_commits[: max(landed)] if landed else []
        readded = [
            c.sha
            for c in newer
            if any(n in removed for s in c.sections.values() for n in history.added_lines(s))
        ]
        self.evidence.append(
            {
                "signal": "removed-lines-added-back",
                "result": bool(readded) or not landed,
                "commits": readded,
                "detail": "after upstream took the same diff"
                if landed
                else "the landing is not in the history read",
            }
        )
        return bool(readded) or not landed

    def _taken_by_patch_id(self) -> bool:
        """Without a base: a commit in the head's history has the patch's very diff."""
        return any(m.reverted_by is None for m in self.matches)

    def _history_evidence(self) -> None:
        if self.range is None:
            self.evidence.append(self._unanchored_history())
            if not self.searched_head:
                return
        elif len(self.range_commits) >= history.MAX_CANDIDATES:
            self.evidence.append(
                {
                    "signal": "history",
                    "result": "stopped-early",
                    "detail": f"searched the newest {len(self.range_commits)} commits of "
                    f"{self.range} touching the series' files; older ones were not searched",
                }
            )
        for match in self.matches:
            self.evidence.append(
                {
                    "signal": f"{match.how}-match",
                    "commit": match.commit.sha,
                    "subject": match.commit.subject,
                    "reverted_by": match.reverted_by,
                    "reverted_how": match.reverted_how,
                    "range": self.range or f"history of {self.ctx.head}",
                }
            )

    def _unanchored_history(self) -> dict[str, Any]:
        unknown = "the patch's base is unknown (no series base, no known From commit)"
        if not self.searched_head:
            return {"signal": "history", "result": "skipped", "detail": unknown}
        searched = (
            f"searched the head's newest {len(self.range_commits)} commits touching its files"
        )
        if self.matches:
            detail = f"{unknown}; {searched}: matched by patch id or changed lines"
        else:
            detail = f"{unknown}; {searched}: no patch-id or changed-lines match"
        return {"signal": "history", "result": "head-history", "detail": detail}

    def _declared(self, verdict: Verdict, predates_range: bool) -> Verdict:
        """The verdict once the PRs declared for the patch (its fix page's, the series'
        drop_when) are looked for in the head's first-parent history (bot.core.dropwhen)."""
        declared = self.ctx.declared_for(self.original.name)
        if not declared:
            return verdict
        commits = self.ctx.engine.naming_prs(self.ctx.head, [pr.number for pr in declared])
        diffs: list[str] | None = None
        for pr in declared:
            merge = dropwhen.find_merge(pr, commits)
            entry: dict[str, Any] = {
                "signal": "declared-pr",
                "pr": pr.ref,
                "declared_in": pr.declared_in.value,
                "merged": merge is not None and merge.merged,
            }
            if merge is not None:
                entry.update(merge_commit=merge.sha, subject=merge.subject)
                if merge.reverted_by:
                    entry["reverted_by"] = merge.reverted_by
            if merge is not None and merge.merged and self.declared_merge is None:
                self.declared_merge = merge
                diffs = self._hunk_differences()
                entry["detail"] = dropwhen.evidence_text(merge, diffs)
            self.evidence.append(entry)
        if self.declared_merge is None:
            return verdict
        return dropwhen.judge(
            verdict,
            self.declared_merge,
            self.presence,
            diffs or [],
            predates_range=predates_range,
        )

    def _hunk_differences(self) -> list[str]:
        """Upstream's text against the patch's, for each hunk the head has in another version."""
        hunks = {(f.path, h.header): (f, h) for f in self.parsed.files for h in f.hunks}
        out = []
        for presence in self.presence:
            found = hunks.get((presence.path, presence.header))
            if found is not None:
                diff = self._upstream_text(presence, *found).get("upstream_diff")
                if diff:
                    out.append(f"{presence.path} {presence.header}\n{diff}")
        return out

    def _linked_prs(self) -> bool:
        in_head = False
        for pr in self.links:
            entry: dict[str, Any] = {"signal": "linked-pr", "pr": pr.ref, "state": pr.state}
            if pr.state == "merged" and pr.merge_commit:
                known = self.ctx.engine.has_commit(pr.merge_commit)
                ancestor = known and self.git.is_ancestor(pr.merge_commit, self.ctx.head)
                entry.update(merge_commit=pr.merge_commit, ancestor_of_head=ancestor)
                if not known:
                    entry["detail"] = "the merge commit is not in the watched history"
                in_head = in_head or ancestor
            self.evidence.append(entry)
        return in_head

    def _work_hunks(self, verdict: Verdict) -> tuple[HunkPresence, ...]:
        """The hunks a human decides on: the verdict's problem hunks and, for a patch upstream
        took in some form, the hunks the head has in a different version (in patch order)."""
        problem = verdict.problem_hunks
        if verdict.status not in (Status.UPSTREAM_VERSION, Status.PARTIAL):
            return problem
        keys = {(h.path, h.header) for h in problem}
        ordered = [
            h for h in self.presence if (h.path, h.header) in keys or h.state == HunkState.SIMILAR
        ]
        seen = {(h.path, h.header) for h in ordered}
        return (*ordered, *(h for h in problem if (h.path, h.header) not in seen))

    def _conflict_details(self, problem: tuple[HunkPresence, ...]) -> dict[str, Any]:
        hunks = {(f.path, h.header): (f, h) for f in self.parsed.files for h in f.hunks}
        renamed = {e["to"] for e in self.evidence if e["signal"] == "renamed-upstream"}
        traced = [
            found
            for presence in problem
            if (found := hunks.get((presence.path, presence.header)))
            and found[0].path not in renamed
        ]
        timelines = {}
        if self.range and traced:
            paths = list(dict.fromkeys(f.old_path or f.path for f, _ in traced))
            timelines = history.file_histories(
                self.git, self.range, paths, self.ctx.engine.touching(self.range, paths)
            )
        details = []
        for presence in problem:
            entry: dict[str, Any] = presence.as_dict()
            found = hunks.get((presence.path, presence.header))
            if found:
                entry["diff"] = _hunk_text(found[1])
                entry.update(self._upstream_text(presence, *found))
            if found and self.range and found[0].path not in renamed:
                fdiff, hunk = found
                timeline = timelines.get(fdiff.old_path or fdiff.path, [])
                fork = self.range.split("..", 1)[0]
                touched = self._lines_touched(hunk, fdiff.old_path or fdiff.path, fork, timeline)
                entry["upstream_commits"] = [{"sha": s, "subject": t} for s, t in touched]
                entry["searched"] = self.range
            else:
                entry.update(self._recent_touches(found[1] if found else None, presence.path))
            details.append(entry)
        forward = next((e for e in self.evidence if e["signal"] == "forward-apply"), {})
        return {"hunks": details, "apply_output": forward.get("detail", "")}

    def _upstream_text(self, presence: HunkPresence, fdiff: FileDiff, hunk: Hunk) -> dict[str, str]:
        """Upstream's text where the hunk belongs against the patch's, for a hunk the head has
        in another version or lacks."""
        if presence.state not in (HunkState.SIMILAR, HunkState.ABSENT):
            return {}
        head = self._head_lines(fdiff.path)
        if head is None:
            return {}
        diff = locate.upstream_diff(hunk, head)
        return {"upstream_diff": diff} if diff else {}

    def _head_lines(self, path: str) -> locate.FileLines | None:
        """The lines of the head's file (the tree the patch was tried on), read once."""
        key = f"\0head:{path}"
        if key not in self._versions:
            head = self.head_files.get(path)
            found = head is not None and head.content is not None
            self._versions[key] = locate.FileLines(head.lines) if head and found else None
        return self._versions[key]

    def _version(self, rev: str, path: str) -> locate.FileLines | None:
        """The lines of `path` at `rev`, read once per check of a patch; None without one."""
        key = f"{rev}:{path}"
        if key not in self._versions:
            try:
                blob = self.ctx.engine.read_blob(key, path, rev)
            except BlobTooLarge as err:  # history evidence only: it goes without this version
                log.warning("%s", err)
                blob = None
            found = blob is not None and blob.kind == "blob"
            self._versions[key] = (
                locate.FileLines(HeadFile(blob.content).lines) if blob and found else None
            )
        return self._versions[key]

    def _lines_touched(
        self, hunk: Hunk, path: str, start_rev: str, timeline: list[CommitHunks]
    ) -> list[tuple[str, str]]:
        """The commits of `timeline` (oldest first, starting after `start_rev`) that touched
        the hunk's lines, found in `start_rev`'s version of the file by content (the patch's
        line numbers are those of the file it was made on, which may not be that one)."""
        start, length = hunk.old_start, hunk.old_len
        span = self._find_in(start_rev, path, hunk)
        if span is not None:
            start, length = span.start + 1, span.length
        return touching_commits(start, length, timeline)

    def _find_in(self, rev: str, path: str, hunk: Hunk) -> locate.Span | None:
        lines = self._version(rev, path)
        if lines is None:
            return None
        return locate.find_block(
            lines, [_bare(line) for line in hunk.side("-")], hunk.old_start - 1
        )

    def _recent_touches(self, hunk: Hunk | None, path: str) -> dict[str, Any]:
        """Without a range: the newest commits on the file that touched the hunk's lines, or,
        when the hunk cannot be placed in their history, the file's newest commits."""
        timeline = self.ctx.engine.recent_history(self.ctx.head, path)
        recent = [{"sha": c.sha, "subject": c.subject} for c in reversed(timeline[-5:])]
        if hunk is None or not timeline:
            return {"recent_commits": recent}
        oldest, rest = timeline[0], timeline[1:]
        span = self._find_in(f"{oldest.sha}^", path, hunk)
        created = span is None and self._version(f"{oldest.sha}^", path) is None
        if created:  # the oldest commit made the file: the lines are followed from there
            span = self._find_in(oldest.sha, path, hunk)
        if span is None:
            return {"recent_commits": recent}
        touched = touching_commits(span.start + 1, span.length, rest if created else timeline)
        return {
            "upstream_commits": [{"sha": s, "subject": t} for s, t in reversed(touched)],
            "searched": f"the newest {len(timeline)} commits on {path}",
        }

    def _landings(self) -> list[Landing]:
        """The upstream commits that brought upstream's version of the patch into the head:
        matching commits, a linked PR's merge, and the commits that added the lines."""
        found: dict[str, Landing] = {}
        merge = self.declared_merge
        if merge is not None:
            found[merge.sha] = Landing(merge.sha, merge.subject, How.DECLARED_PR, merge.pr.number)
        for match in self.matches:
            if match.reverted_by is None:
                commit = match.commit
                found.setdefault(commit.sha, Landing(commit.sha, commit.subject, How(match.how)))
        for pr in self.links:
            merged = [e for e in self.evidence if e.get("merge_commit") == pr.merge_commit]
            if pr.merge_commit and any(e.get("ancestor_of_head") for e in merged):
                subject = self.git.run("log", "-n1", "--format=%s", pr.merge_commit).text
                number = pr.ref.rpartition("#")[2]
                found.setdefault(
                    pr.merge_commit,
                    Landing(
                        pr.merge_commit,
                        subject,
                        How.LINKED_PR,
                        int(number) if number.isdigit() else None,
                    ),
                )
        for sha, subject in self._content_landings():
            found.setdefault(sha, Landing(sha, subject, How.CONTENT))
        out = []
        for position, item in enumerate(list(found.values())[: landing.MAX_LANDINGS]):
            if item.pr is None:
                look = position < MAX_MERGE_LOOKUPS
                pr_found = self.ctx.engine.pr_of(
                    item.sha, item.subject, self.ctx.head, look_for_merge=look
                )
                item = replace(item, pr=pr_found)
            out.append(item)
        return out

    def _content_landings(self) -> list[tuple[str, str]]:
        """Per hunk the head has (as is or in another version): the commit of the range that
        added upstream's lines there, by the range's commits already read, else `git log -S`
        for a bounded number of hunks when that history is incomplete."""
        presence = self.presence or self._hunk_presence(self.head_files)
        hunks = {(f.path, h.header): (f, h) for f in self.parsed.files for h in f.hunks}
        commits = [self.ctx.engine.commit_lines(c) for c in self.range_commits]
        read = self.range is not None or self.searched_head
        complete = read and len(self.range_commits) < history.MAX_CANDIDATES
        rev = self.range or self.ctx.head
        subjects: dict[str, str] = {}
        shas: list[str] = []
        searches = 0
        for item in presence:
            if item.state not in (HunkState.APPLIED, HunkState.SIMILAR):
                continue
            theirs, added, removed, path = self._upstream_lines(item, hunks)
            normalized = [n for line in theirs if (n := classify.normalize(line))]
            taken = landing.counterparts(normalized, added, classify.FUZZY_LINE_CUTOFF)
            best = landing.landing_for(taken or normalized, removed, commits)
            if best is not None:
                shas.append(best.sha)
                subjects[best.sha] = best.subject
                continue
            specific = [line for line in theirs if classify.normalize(line)]
            if complete or searches >= MAX_PICKAXE or not specific:
                continue
            searches += 1
            text = max((line.decode("utf-8", "replace").strip() for line in specific), key=len)
            hit = history.added_by(self.git, text, rev, path)
            if hit is not None:
                shas.append(hit[0])
                subjects[hit[0]] = hit[1]
        return [(sha, subjects[sha]) for sha in landing.ranked(shas)]

    def _upstream_lines(
        self, item: HunkPresence, hunks: dict[tuple[str, str], tuple[FileDiff, Hunk]]
    ) -> tuple[list[bytes], list[str], list[str], str]:
        """(the head's lines where the hunk belongs that its pre-image lacks, the normalized
        lines the patch adds and removes there, the path): what upstream's change there added
        and took out, and what the patch's did."""
        found = hunks.get((item.path, item.header))
        fdiffs = [found[0]] if found else [f for f in self.parsed.files if f.path == item.path]
        chosen = [found[1]] if found else [h for f in fdiffs for h in f.hunks]
        added = [n for h in chosen for line in h.added if (n := classify.normalize(line))]
        removed = [n for h in chosen for line in h.removed if (n := classify.normalize(line))]
        lines = self._head_lines(item.path)
        if lines is None or not chosen:
            return [], added, removed, item.path
        before = Counter(_bare(line) for h in chosen for line in h.side("-"))
        theirs = []
        for hunk in chosen:
            place = locate.upstream_lines(hunk, lines) if found else [_bare(x) for x in hunk.added]
            for line in place:
                if before[line] > 0:
                    before[line] -= 1
                else:
                    theirs.append(line)
        return theirs, added, removed, item.path


POINTER_STATUSES = (Status.UPSTREAM_VERSION, Status.PARTIAL, Status.CONTAINED)
MAX_PICKAXE = 2  # `git log -S` searches per patch for where upstream's lines came from
MAX_MERGE_LOOKUPS = 2  # landings per patch whose merge commit is looked for a PR number


def _bare(line: bytes) -> bytes:
    return line.rstrip(b"\r\n")


MAX_HUNK_LINES = 80  # a problem hunk's text kept in the report, for people to read


def _hunk_text(hunk: Hunk) -> str:
    """The hunk as the patch has it (header and lines), cut after MAX_HUNK_LINES lines."""
    lines = [line.decode("utf-8", "replace").rstrip("\r\n") for line in hunk.lines]
    kept = lines[:MAX_HUNK_LINES]
    if len(lines) > len(kept):
        kept.append(f"… {len(lines) - len(kept)} more lines")
    return "\n".join([hunk.header, *kept])


def _plain_edits(parsed: PatchFile) -> bool:
    """Every file is a text edit of an existing file (no new, deleted, renamed, binary or
    mode-changing file), each named once: what the in-memory applier handles."""
    paths = [f.path for f in parsed.files]
    return len(set(paths)) == len(paths) and all(
        f.hunks
        and not f.binary
        and not f.is_new
        and not f.is_deleted
        and f.old_path == f.new_path
        and f.old_mode == f.new_mode
        for f in parsed.files
    )


def _in_memory_evidence(
    signal: str, files: tuple[FileDiff, ...], results: dict[str, FileApply]
) -> dict[str, Any]:
    """The evidence entry git's apply would give, in git's words for a failure."""
    for fdiff in files:
        failed = results[fdiff.path].failed_hunk
        if failed is not None:
            hunk = fdiff.hunks[failed]
            line = hunk.new_start if signal == "reverse-apply" else hunk.old_start
            detail = f"error: patch failed: {fdiff.path}:{line}\nerror: {fdiff.path}: patch does not apply"
            return {"signal": signal, "result": "failed", "detail": detail}
    return {"signal": signal, "result": "ok"}


def _three_way_state(merged: ApplyResult | None) -> str:
    if merged is None:
        return "not-tried"
    if merged.ok:
        return "clean"
    missing = "lacks the necessary blob" in merged.output or "cannot fall back" in merged.output
    return "unavailable" if missing else "conflict"


def _apply_evidence(signal: str, result: ApplyResult) -> dict[str, Any]:
    entry: dict[str, Any] = {"signal": signal, "result": "ok" if result.ok else "failed"}
    if not result.ok and result.output:
        entry["detail"] = _tail(result.output)
    return entry


def _tail(text: str, limit: int = 1500) -> str:
    lines = [
        line
        for line in text.strip().splitlines()
        if not line.startswith(("Checking", "Applied", "Hunk #"))
    ]
    text = "\n".join(lines)
    return text if len(text) <= limit else "…" + text[-limit:]
