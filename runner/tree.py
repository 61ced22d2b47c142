"""Materialize the exact tree on a runner: upstream SHA + the carried series, verified.

One persistent clone per upstream under the runner's workdir keeps objects (and fetches cheap)
between jobs. Its git directory is `clones/<name>.git`, beside the tree `clones/<name>` and
never in it: the tree is the steps' (a step user's, top directory included), and every command
of carry's git names the git directory and the tree, so nothing a step leaves in the tree (a
`.git` directory, file or link, a commondir) is read. The clean-up between jobs never follows
a link, and leaves a submodule's directory empty. For each job: fetch the upstream SHA and carry's PR branch into that clone, read
`<patches_dir>/series` and its patches from the PR head commit, detach HEAD at the upstream
SHA, `git am -3` the patches, and compare `HEAD^{tree}` with the tree the engine computed: the
tree, not a digest of the patch files, is what must be exact (refreshed patches differ in bytes
from the series the digest was taken of, and still build the same tree). A mismatch is an
infrastructure error that names both trees. A failed `am` is aborted and the work tree reset,
so no conflict marker is ever left for a check to test.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from bot.ci.spec import TreeSpec
from bot.core.ci_plan import short
from bot.core.policy import series_digest
from bot.core.seriesfile import parse_series
from bot.git.runner import Git, GitError

Note = Callable[[str], None]
FETCH_TIMEOUT_S = 1800
DOWNSTREAM_REF = "refs/carry/downstream"
UPSTREAM_REF = "refs/carry/upstream"
# `git am` records commits; who made them does not matter, only the resulting tree does.
_IDENTITY = {
    "GIT_AUTHOR_NAME": "carry runner",
    "GIT_AUTHOR_EMAIL": "runner@carry.invalid",
    "GIT_COMMITTER_NAME": "carry runner",
    "GIT_COMMITTER_EMAIL": "runner@carry.invalid",
}
# The clone is shared by jobs, and each job ran code nobody here wrote. Its git directory lives
# beside the tree (git_dir_of), where steps cannot write, and every command of carry's git
# names it and the tree on its command line: nothing a step leaves in the tree (a `.git` file
# or directory, a symlink, a commondir or gitdir file) is read to find the repository. Hooks
# and the file system monitor are off on every command line too, whatever a config says, and
# every job starts from a repository config of its own.
_NO_HOOKS = {
    "GIT_CONFIG_COUNT": "2",
    "GIT_CONFIG_KEY_0": "core.hooksPath",
    "GIT_CONFIG_VALUE_0": "/dev/null",
    "GIT_CONFIG_KEY_1": "core.fsmonitor",
    "GIT_CONFIG_VALUE_1": "false",
    # A replace ref makes git read another object for a commit or a tree: the tree a job
    # builds would differ from the one it verified.
    "GIT_NO_REPLACE_OBJECTS": "1",
}
GIT_DIR = ".git"  # in the tree: only a `gitdir:` file for the steps' own git, never read here
# What in the git directory could make carry's git read objects, refs or config other than
# the clone's own: replace refs, grafts (another history), alternates (another object store),
# a commondir (another repository) and linked work trees.
_FOREIGN_OBJECTS = (
    "refs/replace",
    "info/grafts",
    "objects/info/alternates",
    "objects/info/http-alternates",
    "commondir",
    "gitdir",
    "worktrees",
)


class TreeError(RuntimeError):
    """The exact tree could not be built: an infrastructure error, with the details."""


@dataclass(frozen=True)
class Materialized:
    path: Path
    head: str
    tree: str
    patches: tuple[str, ...]


def clone_path(workdir: Path, upstream_url: str) -> Path:
    """workdir/clones/<name>-<hash of the url>: one persistent clone per upstream."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", upstream_url.rstrip("/").rsplit("/", 1)[-1])
    name = name.removesuffix(".git") or "upstream"
    digest = hashlib.sha256(upstream_url.encode()).hexdigest()[:12]
    return workdir / "clones" / f"{name}-{digest}"


def workdir_problem(workdir: Path) -> str | None:
    """Why another user could reach into `workdir` through a directory on its path (None when
    none can): a directory every user may write lets any of them (a step user, another job's
    step) rename or make what lies below it, a `.git` in another upstream's clone included.
    One with the sticky bit keeps others from renaming what is not theirs, so a world-writable
    sticky directory (/tmp, /var/tmp) is allowed only above a directory that already exists
    and is the runner's user's or root's; the workdir itself must not be world-writable."""
    path = Path(os.path.abspath(workdir.expanduser()))
    chain = [*reversed(path.parents), path]
    for index, directory in enumerate(chain):
        try:
            info = os.stat(directory)
        except FileNotFoundError:
            return None  # the runner makes the rest, below directories checked here
        if not info.st_mode & stat.S_IWOTH:
            continue
        mode = f"mode {stat.S_IMODE(info.st_mode):o}"
        if directory == path or not info.st_mode & stat.S_ISVTX:
            where = "" if directory == path else f" is under {directory}"
            return (
                f"the runner's workdir {path}{where} ({mode}): every user may write it, and "
                f"any of them could rename or plant files in the clones; use a directory "
                f"only the runner's user may write"
            )
        below = chain[index + 1]
        try:
            owner = os.lstat(below)
        except FileNotFoundError:
            owner = None
        if (
            owner is None
            or not stat.S_ISDIR(owner.st_mode)
            or owner.st_uid not in (0, os.geteuid())
        ):
            return (
                f"the runner's workdir {path} is under {directory} ({mode}, sticky), and {below} "
                f"is not a directory of the runner's user that exists already: another user "
                f"could make it first; create {below} as the runner's user (mode 700 or 711)"
            )
    return None


def git_dir_of(tree: Path) -> Path:
    """The clone's git directory: `<tree>.git` beside the tree, the runner's, never the steps'."""
    return tree.with_name(tree.name + ".git")


def remove_entry(path: Path) -> None:
    """Removes `path` whatever it is, never following a symbolic link: a link is unlinked
    itself, a directory is emptied and removed (those a step made unwritable included), and
    nothing outside `path` is read, changed or deleted."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(info.st_mode):
        path.unlink()
        return
    _writable_dirs(path)
    shutil.rmtree(path)  # fd-based on Linux: it does not follow links either


def _writable_dirs(top: Path) -> None:
    """Gives the owner every right on `top` and each real directory below it (never a link's
    target), so that their entries can be removed."""
    for root, dirs, _files in os.walk(top):  # os.walk does not descend into links
        for where in (root, *(os.path.join(root, name) for name in dirs)):
            with suppress(OSError):
                handle = os.open(where, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
                try:
                    os.fchmod(handle, 0o700)
                finally:
                    os.close(handle)


def empty_directory(path: Path) -> None:
    """Leaves `path` an empty real directory of the runner's: its entries are removed (links
    themselves), and what is there in its place (a link, a file) is replaced."""
    info = None
    with suppress(FileNotFoundError):
        info = os.lstat(path)
    if info is None or not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        remove_entry(path)
        path.mkdir(parents=True, exist_ok=True)
        return
    for entry in os.scandir(path):
        remove_entry(Path(entry.path))


@contextmanager
def clone_lock(
    path: Path, cancelled: Callable[[], str | None], poll_s: float = 0.5
) -> Iterator[None]:
    """Holds an exclusive flock on the clone for the whole job (runners sharing a workdir take
    turns); the kernel drops it when the holder dies. Raises TreeError when cancelled first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    _closed_to_others(path.parent)
    with open(path.with_name(path.name + ".lock"), "w") as handle:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                reason = cancelled()
                if reason is not None:
                    raise TreeError(f"cancelled while waiting for the clone: {reason}") from None
                time.sleep(poll_s)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def materialize(
    spec: TreeSpec, path: Path, note: Note, *, plain_upstream: bool = False
) -> Materialized:
    """Builds the tree in `path` (the clone); with plain_upstream, upstream alone (A/B)."""
    git = _open_clone(path, note)
    _fetch_upstream(git, spec, note)
    if plain_upstream:
        _checkout_clean(git, spec.upstream_sha)
        return _verified(git, path, git.out("rev-parse", f"{spec.upstream_sha}^{{tree}}"), ())
    carried = spec.series()
    if carried is None:  # a job that names the series only by its commit: read it there
        _fetch_downstream(git, spec, note)
        carried = _read_series(git, spec)
    else:
        note(
            f"[carry] the job carries the series ({len(carried[0])} patch(es)) of {spec.downstream_ref} at {short(spec.downstream_sha)}"
        )
    names, patches = carried
    _checkout_clean(git, spec.upstream_sha)
    _apply(git, path, names, patches, note)
    return _verified(git, path, spec.expected_tree, tuple(names))


def clone_git(path: Path) -> Git:
    """carry's git for the clone at `path`: its own git directory and the tree, both named on
    every command line, hooks and the file system monitor off."""
    return Git(git_dir=git_dir_of(path), cwd=path, work_tree=path).with_env(
        **_IDENTITY, **_NO_HOOKS
    )


def _open_clone(path: Path, note: Note) -> Git:
    git = clone_git(path)
    git_dir = git_dir_of(path)
    if not path.is_dir() or path.is_symlink():
        remove_entry(path)
        path.mkdir(parents=True)
    # Whatever a step left where a git directory is looked for (a `.git` directory, file or
    # link; from before carry kept the git directory apart too): carry's git never reads it.
    remove_entry(path / GIT_DIR)
    if not _runners_directory(git_dir):
        note(f"[carry] creating persistent clone {path} (git directory {git_dir})")
        remove_entry(git_dir)
        git_dir.mkdir(mode=0o755)
    else:
        _forget_job_state(git_dir)
    git.run("init", "-q")  # on an existing clone: writes a fresh default config
    _recover(git, git_dir)
    return git


def _closed_to_others(directory: Path) -> None:
    """The clones directory holds each clone's git directory beside its tree: no one but the
    runner's user may rename or make entries in it (whatever the umask made it)."""
    info = os.lstat(directory)
    if info.st_uid == os.geteuid() and info.st_mode & 0o022:
        os.chmod(directory, stat.S_IMODE(info.st_mode) & ~0o022)


def _runners_directory(path: Path) -> bool:
    """Whether `path` is a real directory (not a link) of the runner's that no one else may
    write: only then is what it holds the clone's."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid() and not info.st_mode & 0o022


def _forget_job_state(git_dir: Path) -> None:
    """Removes what an earlier job could have planted in the git directory for carry's own git
    to run or read (steps cannot write it where the sandbox or a step user keeps them out; a
    runner with neither cannot stop a step, as the runner's own user, writing it)."""
    for planted in ("config", "hooks", "info/attributes", *_FOREIGN_OBJECTS):
        remove_entry(git_dir / planted)


def write_git_file(path: Path) -> None:
    """A `.git` file in the tree naming the clone's git directory, for the steps' own git (a
    build that asks git for its version): carry's git never reads it, and a new one is
    written for every job."""
    remove_entry(path / GIT_DIR)
    (path / GIT_DIR).write_text(f"gitdir: {git_dir_of(path)}\n")


def step_git_env() -> dict[str, str]:
    """Environment that lets a step's git use the clone although its git directory belongs to
    the runner's user, not the step's (git's safe.directory, as command-line configuration:
    it guards the step's git only, never carry's)."""
    return {
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "safe.directory",
        "GIT_CONFIG_VALUE_0": "*",
    }


def _recover(git: Git, git_dir: Path) -> None:
    """Undoes what a killed job may have left: a stale index lock, an `am` in progress."""
    remove_entry(git_dir / "index.lock")
    if (git_dir / "rebase-apply").exists():
        git.run("am", "--abort", check=False)
        remove_entry(git_dir / "rebase-apply")


def _fetch_upstream(git: Git, spec: TreeSpec, note: Note) -> None:
    sha = spec.upstream_sha
    if _has_commit(git, sha):
        return
    note(f"[carry] fetching upstream {short(sha)} from {spec.upstream_url}")
    by_sha = git.run(
        "fetch",
        "-q",
        "--no-tags",
        "--",
        spec.upstream_url,
        sha,
        check=False,
        timeout=FETCH_TIMEOUT_S,
    )
    if not _has_commit(git, sha) and spec.upstream_ref:
        refspec = f"+{spec.upstream_ref}:{UPSTREAM_REF}"
        _fetch(git, spec.upstream_url, refspec)
    if not _has_commit(git, sha):
        raise TreeError(
            f"upstream commit {sha} could not be fetched from {spec.upstream_url}: "
            f"{by_sha.stderr_text[-500:] or 'not reachable from ' + str(spec.upstream_ref)}"
        )


def _fetch_downstream(git: Git, spec: TreeSpec, note: Note) -> None:
    sha = spec.downstream_sha
    if _has_commit(git, sha):
        return
    note(f"[carry] fetching {spec.downstream_ref} ({short(sha)}) from {spec.downstream_url}")
    _fetch(git, spec.downstream_url, f"+{spec.downstream_ref}:{DOWNSTREAM_REF}")
    if not _has_commit(git, sha):  # the branch moved on: ask for the commit itself
        git.run(
            "fetch",
            "-q",
            "--no-tags",
            "--",
            spec.downstream_url,
            sha,
            check=False,
            timeout=FETCH_TIMEOUT_S,
        )
    if not _has_commit(git, sha):
        raise TreeError(
            f"PR head {sha} is not on {spec.downstream_ref} of {spec.downstream_url} any more"
        )


def _fetch(git: Git, url: str, refspec: str) -> None:
    try:
        git.run("fetch", "-q", "--no-tags", "--", url, refspec, timeout=FETCH_TIMEOUT_S)
    except GitError as err:
        raise TreeError(f"git fetch {url} {refspec} failed: {err.stderr_text[-800:]}") from err


def _has_commit(git: Git, sha: str) -> bool:
    return git.run("cat-file", "-e", f"{sha}^{{commit}}", check=False).ok


def _read_series(git: Git, spec: TreeSpec) -> tuple[list[str], list[bytes]]:
    base = f"{spec.downstream_sha}:{spec.patches_dir.strip('/')}"
    listing = git.run("show", f"{base}/series", check=False)
    if not listing.ok:
        raise TreeError(f"no {spec.patches_dir}/series at {short(spec.downstream_sha)}")
    parsed, problems = parse_series(listing.stdout.decode("utf-8", "replace"))
    if problems or parsed.is_awaiting_import:
        why = "; ".join(str(p) for p in problems) or f"awaiting import: {parsed.awaiting_import}"
        raise TreeError(f"series file {spec.patches_dir}/series is not usable: {why}")
    patches = [_read_blob(git, f"{base}/{name}") for name in parsed.patches]
    return list(parsed.patches), patches


def _read_blob(git: Git, rev: str) -> bytes:
    result = git.run("show", rev, check=False)
    if not result.ok:
        raise TreeError(f"cannot read {rev}: {result.stderr_text[-300:]}")
    return result.stdout


def _checkout_clean(git: Git, sha: str) -> None:
    try:
        git.run("checkout", "-q", "--detach", "--force", sha)
        git.run("reset", "-q", "--hard", sha)
        git.run("clean", "-q", "-ffdx")
    except GitError as err:
        raise TreeError(f"cannot check out {sha}: {err.stderr_text[-800:]}") from err
    _empty_submodules(git)


def _empty_submodules(git: Git) -> None:
    """A submodule's directory is left as carry never fills it: empty. `git clean` does not
    look inside one, so what an earlier job left there would otherwise stay for the next."""
    assert git.work_tree is not None
    listing = git.run("ls-files", "-s", "-z").stdout.split(b"\0")
    for entry in listing:
        mode, _, rest = entry.partition(b" ")
        if mode == b"160000":
            name = rest.partition(b"\t")[2].decode("utf-8", "surrogateescape")
            empty_directory(git.work_tree / name)


def _apply(git: Git, path: Path, names: list[str], patches: list[bytes], note: Note) -> None:
    if not names:
        return
    spool = git_dir_of(path) / "carry-patches"
    remove_entry(spool)
    spool.mkdir(parents=True)
    files = []
    for index, (name, body) in enumerate(zip(names, patches, strict=True)):
        target = spool / f"{index:04d}-{os.path.basename(name)}"
        target.write_bytes(body)
        files.append(str(target))
    digest = series_digest(zip(names, patches, strict=True))
    note(f"[carry] git am -3 {len(files)} patch(es) (bytes digest {digest}): {', '.join(names)}")
    result = git.run("am", "-q", "-3", "--keep-cr", *files, check=False)
    shutil.rmtree(spool, ignore_errors=True)
    if result.ok:
        return
    failed = _failed_patch(path, names)
    git.run("am", "--abort", check=False)
    head = git.out("rev-parse", "HEAD")
    _checkout_clean(git, head)  # never leave conflict markers behind
    output = (result.stderr_text or result.text)[-1500:]
    raise TreeError(f"git am -3 failed on {failed}: {output}")


def _failed_patch(path: Path, names: list[str]) -> str:
    with suppress(OSError, ValueError, IndexError):
        current = int((git_dir_of(path) / "rebase-apply" / "next").read_text().strip())
        return names[current - 1]
    return "the series"


def _verified(git: Git, path: Path, expected: str, names: tuple[str, ...]) -> Materialized:
    tree = git.out("rev-parse", "HEAD^{tree}")
    if tree != expected:
        raise TreeError(
            f"tree mismatch: the engine computed {expected}, the runner built {tree} "
            f"(upstream + {len(names)} patch(es))"
        )
    dirty = git.out("status", "--porcelain", "--untracked-files=all")
    if dirty:
        raise TreeError(f"work tree is not clean after building it: {dirty[:500]}")
    return Materialized(path, git.out("rev-parse", "HEAD"), tree, names)
