"""One bare mirror per upstream repository, in carry's cache directory.

Only the refs carry needs are fetched. A file lock serialises fetches of the same mirror
across processes. The source repository is only ever read: carry never writes to it.

From a local repository on the same file system, a fetch hard-links the source's pack files
and loose objects (immutable files, named by their content) and sets the refs, as `git clone`
does for a local path: no pack is built, sent, indexed or walked again.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bot.git import touchindex
from bot.git.host_lock import host_lock
from bot.git.runner import DEFAULT_MAX_BLOB_BYTES, DEFAULT_NETWORK_TIMEOUT_S, Git, GitError

log = logging.getLogger("carry.mirror")

_HEX = re.compile(r"^[0-9a-f]{4,40}$")
_FANOUT = re.compile(r"^[0-9a-f]{2}$")
_LOOSE = re.compile(r"^[0-9a-f]{38}$")
_SUFFIX = re.compile(r"^(?P<name>.+?)(?P<suffix>(?:[~^][0-9]*)+)$")
# What git says when the mirror's own object store is damaged (not the source's).
_DAMAGE = re.compile(
    r"bad object|packfile .* cannot be accessed|did not send all necessary objects|"
    r"unable to read|corrupt|loose object .* is corrupt|invalid object|index file .* is too small",
    re.I,
)


def _local_damage(stderr: str) -> bool:
    """True when git's complaint is about the mirror itself, not about the source."""
    own = [
        line
        for line in stderr.splitlines()
        if not line.startswith("remote:") and "remote side" not in line
    ]
    return bool(_DAMAGE.search("\n".join(own)))


WIDE_REFSPECS = ("+refs/heads/*:refs/carry/heads/*", "+refs/tags/*:refs/carry/tags/*")


class MirrorError(RuntimeError):
    """The upstream cannot be read, or a revision does not exist in it."""


CACHE_DIR_VARIABLE = "CARRY_CACHE_DIR"
DEFAULT_CACHE_DIR = "~/.cache/carry"


def default_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """CARRY_CACHE_DIR as the settings read it (bot.config.Settings.cache_dir: empty is unset,
    ~ expanded), without them: `carry check` needs no other setting, and importing the
    settings' validation costs a short command more than its check."""
    value = (os.environ if environ is None else environ).get(CACHE_DIR_VARIABLE)
    return Path(value or DEFAULT_CACHE_DIR).expanduser()


def normalize_source(source: str) -> str:
    """Absolute path for a local repository, the URL unchanged otherwise. A source that
    starts with `-` is refused: git would read it as an option."""
    if source.startswith("-"):
        raise MirrorError(f"repository {source!r} starts with '-': git would read it as an option")
    if re.match(r"^[a-z][a-z0-9+.-]*://", source) or re.match(r"^[\w.-]+@[\w.-]+:", source):
        return source
    path = Path(source).expanduser()
    if not path.exists():
        raise MirrorError(f"repository {source!r} does not exist")
    return str(path.resolve())


@dataclass(frozen=True)
class ResolvedHead:
    sha: str
    ref: str | None  # the upstream ref the revision named, when it named one


class Mirror:
    def __init__(
        self,
        source: str,
        cache_dir: Path | None = None,
        env: dict[str, str] | None = None,
        *,
        network_timeout_s: float = DEFAULT_NETWORK_TIMEOUT_S,
        max_blob_bytes: int = DEFAULT_MAX_BLOB_BYTES,
        indexed: bool = True,
    ):
        """`indexed`: every fetch extends the touch index (which commits touched which paths),
        which the engine reads to decide patches. A mirror no engine reads (the downstream
        repository's) is not indexed: its refs grow with the series (three branches each), and
        indexing them after every fetch made each head's cost grow with the number of series
        (issue 37)."""
        self.source = normalize_source(source)
        self.indexed = indexed
        root = (cache_dir or default_cache_dir()) / "mirrors"
        digest = hashlib.sha256(self.source.encode()).hexdigest()[:12]
        slug = re.sub(r"[^A-Za-z0-9._-]+", "-", self.source.rstrip("/").split("/")[-1])[:40]
        self.path = root / f"{slug.removesuffix('.git')}-{digest}.git"
        self.git = Git(
            git_dir=self.path,
            env=env or {},
            network_timeout_s=network_timeout_s,
            max_blob_bytes=max_blob_bytes,
        )
        self.widened = False

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with host_lock(self.path.with_suffix(".lock")):
            yield

    def ensure(self) -> Mirror:
        """Creates the bare mirror, or re-creates it when it is missing or corrupt."""
        with self.locked():
            if not self._healthy():
                self._recreate("missing or corrupt")
        return self

    def _recreate(self, why: str) -> None:
        """Replaces the mirror by an empty one (the caller holds the lock); objects are fetched
        again as they are needed."""
        import shutil  # here, with tempfile: `carry check` on a warm mirror never needs them
        import tempfile

        if self.path.exists():
            log.warning("mirror %s is %s; re-creating it", self.path, why)
            shutil.rmtree(self.path)
        staging = Path(tempfile.mkdtemp(prefix=".init-", dir=self.path.parent))
        Git(git_dir=staging).run("init", "--bare", "--quiet")
        Git(git_dir=staging).run("config", "carry.source", self.source)
        staging.rename(self.path)
        self.widened = False

    def _healthy(self) -> bool:
        if not (self.path / "HEAD").exists():
            return False
        return self.git.run("rev-parse", "--git-dir", check=False).ok

    def fetch(self, *refspecs: str) -> None:
        with self.locked():
            try:
                self._fetch(*refspecs)
            except GitError as err:
                if not _local_damage(err.stderr_text):
                    raise MirrorError(
                        f"cannot fetch from {self.source}: {err.stderr_text.strip()}"
                    ) from err
                self._recreate("damaged")  # a damaged object store: start over, once
                try:
                    self._fetch(*refspecs)
                except GitError as again:
                    raise MirrorError(
                        f"cannot fetch from {self.source}: {again.stderr_text.strip()}"
                    ) from again

    def _fetch(self, *refspecs: str) -> None:
        linked = self._fetch_by_links(refspecs)
        if linked is None:
            return  # every ref is where the source has it: nothing to fetch or index
        if not linked:
            self.git.run("fetch", "--quiet", "--no-tags", "--force", "--", self.source, *refspecs)
        if self.indexed:
            touchindex.update(self.git, self.path)

    def index(self) -> None:
        """Builds or extends the touch index (every fetch also does): for a mirror indexed by
        an earlier version, or whose index was removed."""
        if self.indexed and (self.path / "HEAD").exists():
            with self.locked():
                touchindex.update(self.git, self.path)

    def _fetch_by_links(self, refspecs: tuple[str, ...]) -> bool | None:
        """The local fetch (see the module doc); False when it does not apply or did not
        complete, and `git fetch` does the work; None when the mirror already holds every
        ref where the source has it (a repeated widening, as `carry check` asks for patches
        whose commits upstream lacks): nothing is linked, written or indexed."""
        objects = _local_objects(self.source)
        if objects is None:
            return False
        try:
            advertised = self.git.run("ls-remote", "--", self.source).text
        except GitError:
            return False
        updates = _ref_updates(refspecs, advertised)
        if updates is not None and all(self.holds(ref, sha) for ref, sha in updates.items()):
            return None
        if updates is None or not _link_objects(objects, self.path / "objects"):
            return False
        if not self.has_objects(*updates.values()):
            return False
        lines = "".join(f"update {ref} {sha}\n" for ref, sha in updates.items())
        self.git.run("update-ref", "--stdin", input=lines.encode())
        return True

    def remote_refs(self, *patterns: str) -> dict[str, str]:
        """ref -> sha as the upstream advertises them (tags peeled to their commit); one
        ls-remote call, limited to `patterns` when given. Costs no API rate limit."""
        self.ensure()  # git runs inside the mirror, so it must exist even for ls-remote
        return self._advertised(*patterns)

    def _advertised(self, *patterns: str) -> dict[str, str]:
        """remote_refs on a mirror that exists."""
        try:
            out = self.git.run("ls-remote", "--", self.source, *patterns).text
        except GitError as err:
            raise MirrorError(
                f"cannot read repository {self.source}: {err.stderr_text.strip()}"
            ) from err
        refs: dict[str, str] = {}
        for line in out.splitlines():
            sha, _, ref = line.partition("\t")
            if ref.endswith("^{}"):
                refs[ref[:-3]] = sha
            else:
                refs.setdefault(ref, sha)
        return refs

    def has_commit(self, sha: str) -> bool:
        return self.git.rev_parse(sha) is not None

    def has_objects(self, *oids: str) -> bool:
        if not oids:
            return True
        query = "".join(f"{oid}\n" for oid in oids).encode()
        out = self.git.run("cat-file", "--batch-check", input=query).text
        return "missing" not in out and "ambiguous" not in out

    def ancestor_of_any(self, sha: str, heads: Iterable[str], ref: str | None = None) -> bool:
        """Whether commit `sha` is an ancestor of one of `heads` (a head is not its own
        ancestor). When the mirror lacks one of them, `ref` (the upstream ref they came from)
        is fetched first; a commit still missing is an ancestor of nothing."""
        others = sorted({h for h in heads if h != sha})
        if not others:
            return False
        self.ensure()
        if ref is not None and not self.has_objects(sha, *others):
            with contextlib.suppress(MirrorError):
                self.resolve(ref)
        return any(self.git.is_ancestor(sha, other) for other in others)

    def first_parent_range(self, good: str, bad: str) -> list[tuple[str, str]]:
        """The first-parent commits after `good` up to `bad`, oldest first, as (sha, subject);
        [] when `good` is not an ancestor of `bad`."""
        if not self.git.is_ancestor(good, bad):
            return []
        out = self.git.run(
            "log", "--first-parent", "--reverse", "--format=%H%x09%s", f"{good}..{bad}", "--"
        ).text
        return [tuple(line.split("\t", 1)) for line in out.splitlines() if "\t" in line]  # type: ignore[misc]

    def widen(self) -> None:
        """Fetches every branch and tag: used when evidence needs objects outside the head."""
        self.widened = True
        self.fetch(*WIDE_REFSPECS)

    def resolve(self, rev: str) -> ResolvedHead:
        """Fetches what `rev` needs and returns the commit it names."""
        self.ensure()
        if _HEX.match(rev) and len(rev) == 40 and self.has_commit(rev):
            return ResolvedHead(rev, None)
        base, suffix = _split_suffix(rev)
        refs = self._advertised() if not _HEX.match(base) else {}
        ref = self._remote_ref_for(base, refs)
        if ref is not None:
            local = f"refs/carry/{ref.removeprefix('refs/')}"
            held = self.holds(local, refs[ref])
            if not held:
                self.fetch(f"+{ref}:{local}")
            sha = self.git.rev_parse(local + suffix)
            if sha is None and held:  # its ref is there, its commit is not: a damaged store
                with self.locked():
                    self._recreate("missing objects its refs name")
                self.fetch(f"+{ref}:{local}")
                sha = self.git.rev_parse(local + suffix)
            if sha is None:
                raise MirrorError(f"revision {rev!r} does not name a commit in {self.source}")
            return ResolvedHead(sha, ref if not suffix else None)
        return ResolvedHead(self._resolve_object(rev, base, suffix), None)

    def resolve_all(self, revs: Sequence[str]) -> list[ResolvedHead]:
        """`resolve` for several revisions at once, in their order: one ls-remote and one
        fetch for all the upstream refs they name, one rev-parse for all of them. Revisions
        that name no ref (abbreviated ids, missing commits) go through `resolve`."""
        self.ensure()
        found: dict[int, ResolvedHead] = {}
        named: dict[int, tuple[str, str, str]] = {}  # index -> (upstream ref, local ref, suffix)
        refs: dict[str, str] | None = None
        for i, rev in enumerate(revs):
            base, suffix = _split_suffix(rev)
            if _HEX.match(base):
                continue
            if refs is None:
                refs = self._advertised()
            ref = self._remote_ref_for(base, refs)
            if ref is not None:
                named[i] = (ref, f"refs/carry/{ref.removeprefix('refs/')}", suffix)
        wanted = {ref: local for ref, local, _ in named.values()}
        held = refs or {}
        stale = [
            f"+{ref}:{local}" for ref, local in wanted.items() if not self.holds(local, held[ref])
        ]
        if stale:
            self.fetch(*stale)
        if named:
            # Local refs under refs/carry/: none starts with "-", so no option is mistaken.
            names = [f"{local}{suffix}^{{commit}}" for _, local, suffix in named.values()]
            result = self.git.run("rev-parse", *names, check=False)
            shas = result.text.split() if result.ok else []
            if len(shas) == len(named):
                for (i, (ref, _, suffix)), sha in zip(named.items(), shas, strict=True):
                    found[i] = ResolvedHead(sha, ref if not suffix else None)
        return [found[i] if i in found else self.resolve(rev) for i, rev in enumerate(revs)]

    def holds(self, ref: str, sha: str) -> bool:
        """True when a fetch of `ref` would find it at `sha` already and the touch index in
        place: the mirror's loose ref file holds that id (read without running git). Anything
        else (absent, packed, symbolic, a tag object, no index file where the mirror is
        indexed) is False: fetch."""
        if self.indexed and not (self.path / touchindex.FILE_NAME).exists():
            return False
        try:
            return (self.path / ref).read_text().strip() == sha
        except (OSError, UnicodeDecodeError):
            return False

    def _remote_ref_for(self, name: str, refs: dict[str, str]) -> str | None:
        """The full upstream ref `name` stands for in `refs` (ls-remote's answer), or None."""
        if _HEX.match(name):
            return None
        for candidate in (name, f"refs/heads/{name}", f"refs/tags/{name}", f"refs/{name}"):
            if candidate.startswith("refs/") and candidate in refs:
                return candidate
        if name.startswith("refs/"):
            raise MirrorError(f"ref {name!r} does not exist in {self.source}")
        return None

    def _resolve_object(self, rev: str, base: str, suffix: str) -> str:
        if not _HEX.match(base):
            raise MirrorError(f"revision {rev!r} not found in {self.source}")
        sha = self.git.rev_parse(rev)
        if sha is None and len(base) == 40:
            with contextlib.suppress(MirrorError):
                self.fetch(f"+{base}:refs/carry/objects/{base}")
            sha = self.git.rev_parse(rev)
        if sha is None:
            self.widen()
            sha = self.git.rev_parse(rev)
        if sha is None:
            raise MirrorError(f"revision {rev!r} not found in {self.source}")
        return sha


def _local_objects(source: str) -> Path | None:
    """The object directory of a local source whose objects are all its own (no alternates,
    not shallow, not a partial clone), or None."""
    if "://" in source or not source.startswith("/"):
        return None
    root = Path(source)
    git_dir = root / ".git" if (root / ".git").is_dir() else root
    objects = git_dir / "objects"
    if not (git_dir / "HEAD").is_file() or not (objects / "pack").is_dir():
        return None
    if (objects / "info" / "alternates").exists() or (git_dir / "shallow").exists():
        return None
    if any((objects / "pack").glob("*.promisor")):
        return None
    return objects


def _ref_updates(refspecs: tuple[str, ...], advertised: str) -> dict[str, str] | None:
    """local ref -> sha for each `+src:dst` refspec (src a full ref, a `*` pattern or a commit
    id) from `git ls-remote` output; None when one cannot be mapped (git fetch says why)."""
    refs = {}
    for line in advertised.splitlines():
        sha, _, ref = line.partition("\t")
        if ref.startswith("refs/") and not ref.endswith("^{}"):
            refs[ref] = sha
    updates: dict[str, str] = {}
    for spec in refspecs:
        src, colon, dst = spec.removeprefix("+").partition(":")
        if not colon or not dst.startswith("refs/"):
            return None
        if "*" in src:
            head, _, tail = src.partition("*")
            for ref, sha in refs.items():
                if ref.startswith(head) and ref.endswith(tail) and len(ref) >= len(src) - 1:
                    updates[dst.replace("*", ref[len(head) : len(ref) - len(tail)], 1)] = sha
        elif re.fullmatch(r"[0-9a-f]{40}", src):
            updates[dst] = src
        elif src in refs:
            updates[dst] = refs[src]
        else:
            return None
    return updates


def _link_objects(source: Path, target: Path) -> bool:
    """Hard-links every pack and loose object of `source` that `target` lacks. False when a
    link fails (another file system, a file gone) or the source's packs changed meanwhile
    (a repack may have moved loose objects into a pack not linked)."""
    packs = sorted(source.glob("pack/pack-*.pack"))
    try:
        for pack in packs:
            index = pack.with_suffix(".idx")
            if index.exists():  # without it the pack is still being written
                for part in (pack, pack.with_suffix(".rev"), index):  # git finds packs by .idx
                    if part.exists():
                        _link(part, target / "pack" / part.name)
        for fanout in source.iterdir():
            if _FANOUT.match(fanout.name) and fanout.is_dir():
                for loose in fanout.iterdir():
                    if _LOOSE.match(loose.name):  # not a tmp_obj_* being written
                        _link(loose, target / fanout.name / loose.name)
    except OSError as err:
        log.info("cannot link objects of %s (%s): fetching", source, err)
        return False
    return sorted(source.glob("pack/pack-*.pack")) == packs


def _link(source: Path, target: Path) -> None:
    if target.exists():
        return
    target.parent.mkdir(exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.link(source, target)


def _split_suffix(rev: str) -> tuple[str, str]:
    match = _SUFFIX.match(rev)
    if match:
        return match.group("name"), match.group("suffix")
    return rev, ""
