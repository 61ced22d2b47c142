"""Reading a repository's commits and files through GitPython.

The engine runs git as subprocesses (bot.git.runner says why). Where carry only reads many
objects of one repository, GitPython's repository object reads better and costs less: one
`git cat-file --batch` process answers every blob and commit of a `Reader`, instead of one git
process per file, and a commit range is a list of commit objects instead of hand-split `git log`
output. A Reader runs git as bot.git.runner.Git does (same isolation from the operator's git
configuration, same repository, same extra environment) and is closed with its `with` block.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from types import TracebackType

import git as gitpython
from gitdb.exc import BadName, BadObject

from bot.git.runner import Git, GitError, isolated_env

log = logging.getLogger("carry.git")


@dataclass(frozen=True)
class CommitInfo:
    sha: str
    parents: tuple[str, ...]
    subject: str
    author: str
    committer_email: str


class Reader:
    """Read-only access to the repository of `git` (its git_dir or cwd)."""

    def __init__(self, git: Git) -> None:
        where = git.git_dir or git.cwd
        if where is None:
            raise ValueError("a Reader needs a Git with a git_dir or a cwd")
        self.where = str(where)
        self.repo = gitpython.Repo(self.where)
        self.repo.git.update_environment(**isolated_env(), **git.env)

    def __enter__(self) -> Reader:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.repo.close()  # ends the cat-file processes

    def read_dir(self, commit: str, subdir: str) -> dict[str, bytes]:
        """The files directly in `subdir` of `commit`, by name; {} when either is missing."""
        log.debug(
            "git: reading %s:%s", commit[:12], subdir, extra={"fields": {"git_dir": self.where}}
        )
        try:
            tree = self.repo.commit(commit).tree / subdir
        except (KeyError, ValueError, BadName, BadObject):
            return {}
        if tree.type != "tree":
            return {}
        return {blob.name: blob.data_stream.read() for blob in tree.blobs}

    def commits(self, rev_range: str, *, topo_order: bool = False) -> list[CommitInfo]:
        """The commits of `rev_range` (`base..tip`), oldest first. GitError when git refuses
        the range (an unknown revision), with git's own words."""
        log.debug("git: walking %s", rev_range, extra={"fields": {"git_dir": self.where}})
        try:
            if topo_order:
                walked = list(self.repo.iter_commits(rev_range, reverse=True, topo_order=True))
            else:
                walked = list(self.repo.iter_commits(rev_range, reverse=True))
        except gitpython.GitCommandError as err:
            stderr = err.stderr if isinstance(err.stderr, str) else str(err.stderr or "")
            status = err.status if isinstance(err.status, int) else 128
            raise GitError(["rev-list", rev_range], status, b"", stderr.encode()) from err
        return [
            CommitInfo(
                sha=c.hexsha,
                parents=tuple(p.hexsha for p in c.parents),
                subject=_subject(c.message),
                author=str(c.author.name or ""),
                committer_email=str(c.committer.email or ""),
            )
            for c in walked
        ]


def _subject(message: str | bytes) -> str:
    text = message.decode("utf-8", "replace") if isinstance(message, bytes) else message
    paragraph = text.strip().split("\n\n", 1)[0]
    return " ".join(paragraph.split())  # git's %s: the first paragraph on one line
