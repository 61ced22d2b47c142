"""The downstream repository (the one holding patches/): read its series, write carry's branch.

A bare mirror in the cache, like upstreams. Credentials go to git through environment
config (http.extraHeader), never on a command line, so they cannot reach a log.
"""

from __future__ import annotations

import base64
import io
import os
import shutil
import tarfile
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import NamedTuple

from bot.core.push_refusal import PushRefusal, classify
from bot.git.host_lock import host_lock
from bot.git.mirror import Mirror
from bot.git.objects import tree_with
from bot.git.reader import Reader
from bot.git.runner import DEFAULT_NETWORK_TIMEOUT_S, Git, GitError
from bot.git.swap import replace_dir

CARRY_IDENTITY = {
    "GIT_AUTHOR_NAME": "carry",
    "GIT_AUTHOR_EMAIL": "carry@carry.invalid",
    "GIT_COMMITTER_NAME": "carry",
    "GIT_COMMITTER_EMAIL": "carry@carry.invalid",
}


class PushRefused(GitError):
    """GitHub refused the push because of a setting (a ruleset, a branch protection): the
    same push is refused until someone changes it, so it is not retried."""

    def __init__(self, refusal: PushRefusal, err: GitError) -> None:
        super().__init__(err.args_list, err.returncode, err.stdout, err.stderr)
        self.refusal = refusal


def _pushed(run: Callable[[], object]) -> None:
    """Runs a push; a refusal by a GitHub setting becomes PushRefused."""
    try:
        run()
    except GitError as err:
        refusal = classify(err.stderr_text)
        if refusal is None:
            raise
        raise PushRefused(refusal, err) from err


class BranchCommit(NamedTuple):
    sha: str
    author: str
    subject: str


def auth_env(token: str | None) -> dict[str, str]:
    if not token:
        return {}
    basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
    return {
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "http.extraHeader",
        "GIT_CONFIG_VALUE_0": f"Authorization: Basic {basic}",
    }


class Downstream:
    def __init__(
        self,
        url: str,
        cache_dir: Path,
        token: str | None = None,
        *,
        network_timeout_s: float = DEFAULT_NETWORK_TIMEOUT_S,
    ):
        self.url = url
        self.mirror = Mirror(
            url,
            cache_dir / "downstream",
            env=auth_env(token),
            network_timeout_s=network_timeout_s,
            indexed=False,  # no engine reads it
        )
        self.git: Git = self.mirror.git

    def fetch(self, *branches: str) -> dict[str, str]:
        """Fetches the branches that exist and have moved; returns branch -> sha."""
        self.mirror.ensure()
        remote = self.mirror.remote_refs(*(f"refs/heads/{b}" for b in branches))
        local = {ref: f"refs/carry/{ref.removeprefix('refs/')}" for ref in remote}
        held = [ref for ref, sha in remote.items() if self.mirror.holds(local[ref], sha)]
        if held and not self.mirror.has_objects(*(remote[ref] for ref in held)):
            held = []  # a ref whose commit is gone (a damaged copy): fetch it again
        wanted = [f"+{ref}:{local[ref]}" for ref in remote if ref not in held]
        if wanted:
            self.mirror.fetch(*wanted)
        return {ref.removeprefix("refs/heads/"): sha for ref, sha in remote.items()}

    def export(self, commit: str, subdir: str, target: Path) -> Path:
        """Writes `subdir` of `commit` into `target` (replacing it) and returns target. A
        target already exported from the same commit is left as it is: every rebase refreshes
        the copy, and writing every series' directory again made each head's cost grow with
        the number of series (issue 37). Exports of one target take turns (a lock file beside
        it): the stamp that says which commit is in place is written after the swap, and two
        workers exporting two commits at once could leave the older tree in place under the
        newer commit's stamp, which every later export of that commit would then keep."""
        stamp = target.parent / f".{target.name}.exported"
        said = f"{commit} {subdir}\n"
        with host_lock(target.parent / f".{target.name}.lock"):
            if target.is_dir() and stamp.is_file() and stamp.read_text() == said:
                return target
            archive = self.git.run("archive", "--format=tar", commit, "--", subdir).stdout
            staging = Path(tempfile.mkdtemp(prefix=".export-", dir=target.parent))
            with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
                tar.extractall(staging, filter="data")
            exported = staging / subdir
            if not exported.is_dir():
                exported.mkdir(parents=True)
            # Other processes on this host read target while this one replaces it (every
            # rebase refreshes it): swapped in one step, never removed first.
            replace_dir(exported, target)
            shutil.rmtree(staging)
            written = stamp.with_name(f"{stamp.name}.{os.getpid()}")
            written.write_text(said)
            written.replace(stamp)
        return target

    def read_dir(self, commit: str, subdir: str) -> dict[str, bytes]:
        """The files directly in `subdir` of `commit` ({} when there are none)."""
        with Reader(self.git) as reader:
            return reader.read_dir(commit, subdir)

    def tree_with(self, base_commit: str, changes: Mapping[str, bytes | None]) -> str:
        """base_commit's tree with files replaced (bytes) or removed (None)."""
        return tree_with(self.git, base_commit, changes)

    def tree_of(self, commit: str) -> str:
        return self.git.out("rev-parse", f"{commit}^{{tree}}")

    def commit(self, tree: str, parent: str, message: str, *more_parents: str) -> str:
        parents = [arg for p in (parent, *more_parents) for arg in ("-p", p)]
        return self.git.run(
            "commit-tree", tree, *parents, input=message.encode(), env=CARRY_IDENTITY
        ).text

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        found = self.git.run("merge-base", "--is-ancestor", ancestor, descendant, check=False)
        return found.ok

    def push(self, commit: str, branch: str, expected: str | None) -> None:
        """Pushes `branch` (a force push unless `commit` descends from it), but only over the
        sha carry last saw there. PushRefused: a GitHub setting refuses it."""
        lease = f"--force-with-lease=refs/heads/{branch}:{expected or ''}"
        _pushed(
            lambda: self.git.run(
                "push", "--quiet", lease, "--", self.mirror.source, f"{commit}:refs/heads/{branch}"
            )
        )

    def push_from(self, source: Git, commit: str, branch: str, expected: str | None) -> None:
        """Pushes `commit` of another repository (`source`: the upstream mirror that holds
        carry's tree commits) to `branch`, over the sha carry last saw there. The objects go
        from that repository; the credentials are this repository's. PushRefused: a GitHub
        setting refuses it."""
        lease = f"--force-with-lease=refs/heads/{branch}:{expected or ''}"
        pusher = source.with_env(**self.git.env)
        _pushed(
            lambda: pusher.run(
                "push", "--quiet", lease, "--", self.mirror.source, f"{commit}:refs/heads/{branch}"
            )
        )

    def commits_by_others(self, base: str, tip: str) -> list[BranchCommit]:
        """Commits on `tip` but not on `base` that carry did not commit (another committer:
        a person's push, GitHub's web editor, a merge of main into the branch), oldest first."""
        with Reader(self.git) as reader:
            commits = reader.commits(f"{base}..{tip}")
        return [
            BranchCommit(c.sha, c.author, c.subject)
            for c in commits
            if c.committer_email != CARRY_IDENTITY["GIT_COMMITTER_EMAIL"]
        ]

    def keep(self, commit: str, branch: str) -> None:
        """Pushes `commit` to a new `branch`; one that already holds it is left as it is."""
        ref = f"refs/heads/{branch}"
        if self.mirror.remote_refs(ref).get(ref) == commit:
            return
        lease = f"--force-with-lease={ref}:"  # never over a branch of that name someone made
        _pushed(
            lambda: self.git.run(
                "push", "--quiet", lease, "--", self.mirror.source, f"{commit}:{ref}"
            )
        )
