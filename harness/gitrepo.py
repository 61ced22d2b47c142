"""Real git repositories for tests, built with a pinned environment so SHAs are stable."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

PINNED_ENV = {
    "GIT_AUTHOR_NAME": "Ada Upstream",
    "GIT_AUTHOR_EMAIL": "ada@upstream.example",
    "GIT_COMMITTER_NAME": "Ada Upstream",
    "GIT_COMMITTER_EMAIL": "ada@upstream.example",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "TZ": "UTC",
    "LC_ALL": "C",
}
EPOCH = 1_767_225_600  # 2026-01-01T00:00:00Z


def git(
    cwd: Path, *args: str, input: bytes | None = None, env: Mapping[str, str] | None = None
) -> str:
    """Runs git in cwd with the pinned env; returns stripped stdout, raises with stderr on failure."""
    proc = subprocess.run(
        ["git", "-c", "init.defaultBranch=main", *args],
        cwd=cwd,
        input=input,
        capture_output=True,
        env={**os.environ, **PINNED_ENV, **(env or {})},
        check=False,
    )
    if proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {proc.stderr.decode(errors='replace')}")
    return proc.stdout.decode("utf-8", "replace").strip()


class RepoBuilder:
    """A non-bare repository with a work tree, and helpers that keep commits deterministic."""

    def __init__(self, path: Path, *, clock: int = EPOCH):
        self.path = path
        self.clock = clock
        path.mkdir(parents=True, exist_ok=True)
        git(path, "init", "-q")
        git(path, "config", "core.autocrlf", "false")

    def git(self, *args: str, input: bytes | None = None) -> str:
        return git(self.path, *args, input=input, env=self._dates())

    def _dates(self) -> dict[str, str]:
        stamp = f"@{self.clock} +0000"
        return {"GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp}

    def write(self, name: str, content: str | bytes, *, mode: int | None = None) -> None:
        target = self.path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content.encode() if isinstance(content, str) else content)
        if mode is not None:
            target.chmod(mode)

    def read(self, name: str) -> bytes:
        return (self.path / name).read_bytes()

    def delete(self, name: str) -> None:
        self.git("rm", "-q", name)

    def commit(
        self,
        message: str,
        files: Mapping[str, str | bytes | None] | None = None,
        *,
        author: str | None = None,
    ) -> str:
        """Writes files (None deletes), stages everything and commits; returns the new SHA."""
        for name, content in (files or {}).items():
            if content is None:
                self.delete(name)
            else:
                self.write(name, content)
        self.git("add", "-A")
        self.clock += 60
        args = ["commit", "-q", "--allow-empty", "-m", message]
        if author:
            args += ["--author", author]
        self.git(*args)
        return self.head()

    def head(self, rev: str = "HEAD") -> str:
        return self.git("rev-parse", rev)

    def checkout(self, rev: str, *, new_branch: str | None = None) -> None:
        if new_branch:
            self.git("checkout", "-q", "-b", new_branch, rev)
        else:
            self.git("checkout", "-q", rev)

    def format_patch(self, rev_range: str, outdir: Path) -> list[Path]:
        """`git format-patch` into outdir, returning the files in series order."""
        outdir.mkdir(parents=True, exist_ok=True)
        names = self.git("format-patch", "-o", str(outdir), rev_range)
        return [Path(line) for line in names.splitlines() if line]
