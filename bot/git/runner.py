"""The one place carry runs git. Every call is logged and every failure carries git's output.

subprocess is used rather than GitPython's `repo.git.*` because the engine feeds and reads raw
bytes (patches with CRLF, binary hunks, non-UTF-8 text) and needs per-call environments
(temporary index files, pinned identities). GitPython reads where a repository object helps
(bot.git.reader: the downstream series, the importer's walk of a commit range).
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

log = logging.getLogger("carry.git")

# Isolate every call from the operator's ~/.gitconfig and /etc/gitconfig: hooks, aliases,
# diff.noprefix, format.* and friends would otherwise change what patches look like.
_ISOLATED_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_ASKPASS": "true",
    "LC_ALL": "C",
    "LANGUAGE": "C",
}


def isolated_env() -> dict[str, str]:
    """The environment every git of carry runs with (bot.git.reader's too)."""
    return dict(_ISOLATED_ENV)


_ISOLATED_CONFIG = ("-c", "safe.directory=*", "-c", "core.quotePath=false", "-c", "gc.auto=0")
# The largest file carry reads from an upstream (CARRY_MAX_BLOB_BYTES). git gets it as
# core.bigFileThreshold: a larger blob is stored without deltas and diffed as binary, so git
# does not inflate it to look for deltas or lines either.
DEFAULT_MAX_BLOB_BYTES = 16 * 1024 * 1024


class GitError(RuntimeError):
    """git exited non-zero. Carries the command line and both output streams."""

    def __init__(
        self,
        args: Sequence[str],
        returncode: int,
        stdout: bytes,
        stderr: bytes,
        what: str | None = None,
    ):
        self.args_list = list(args)
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        tail = stderr.decode("utf-8", "replace").strip()[-2000:]
        what = what or f"exited {returncode}"
        super().__init__(f"git {' '.join(self.args_list)} {what}: {tail}")

    @property
    def stderr_text(self) -> str:
        return self.stderr.decode("utf-8", "replace")


class GitTimeout(GitError):
    """A network command (fetch, ls-remote, push) got no answer in time and was stopped."""

    def __init__(self, args: Sequence[str], timeout_s: float, stdout: bytes, stderr: bytes):
        self.timeout_s = timeout_s
        said = f"git {args[0]} got no answer in {timeout_s:g} s and was stopped"
        super().__init__(args, -1, stdout, stderr + f"\n{said} (CARRY_GIT_TIMEOUT_S)".encode())


class GitOutOfMemory(GitError):
    """git could not get the memory it needed: it said so (xmalloc's "Out of memory", a failed
    mmap), or it was killed as the kernel's out-of-memory killer does. Under a worker that is
    the task's limit, CARRY_TASK_MEMORY_MB; running it again would end the same way."""

    def __init__(self, args: Sequence[str], returncode: int, stdout: bytes, stderr: bytes):
        import resource  # here: only a failure needs it

        how = "was killed (SIGKILL)" if returncode == -signal.SIGKILL else "ran out of memory"
        limit, _hard = resource.getrlimit(resource.RLIMIT_AS)
        where = f"this task's limit: {limit // 2**20} MiB, " if limit > 0 else ""
        super().__init__(
            args,
            returncode,
            stdout,
            stderr,
            f"{how} ({where}CARRY_TASK_MEMORY_MB; exit {returncode})",
        )


_OUT_OF_MEMORY = (b"out of memory", b"cannot allocate memory")


def out_of_memory(returncode: int, stderr: bytes) -> bool:
    """Whether a failed git ended for want of memory (see GitOutOfMemory)."""
    if returncode == -signal.SIGKILL:
        return True
    said = stderr[-4000:].lower()
    return returncode != 0 and any(words in said for words in _OUT_OF_MEMORY)


# The commands that wait on another machine: a hung remote must not hold a worker forever.
NETWORK_COMMANDS = frozenset({"fetch", "ls-remote", "push", "clone"})
DEFAULT_NETWORK_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class GitResult:
    returncode: int
    stdout: bytes
    stderr: bytes

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def text(self) -> str:
        return self.stdout.decode("utf-8", "replace").strip()

    @property
    def stderr_text(self) -> str:
        return self.stderr.decode("utf-8", "replace").strip()


@dataclass(frozen=True)
class Git:
    """Runs git against one repository: `git_dir` for a bare repository, else `cwd`."""

    git_dir: Path | None = None
    cwd: Path | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    network_timeout_s: float = DEFAULT_NETWORK_TIMEOUT_S  # for NETWORK_COMMANDS
    max_blob_bytes: int = DEFAULT_MAX_BLOB_BYTES  # core.bigFileThreshold
    # With git_dir: the work tree, given on every command line (a repository whose git
    # directory lives apart from its tree; nothing in the tree is read to find it).
    work_tree: Path | None = None

    def with_env(self, **extra: str) -> Git:
        return replace(self, env={**self.env, **extra})

    def run(
        self,
        *args: str,
        input: bytes | None = None,
        env: Mapping[str, str] | None = None,
        check: bool = True,
        timeout: float | None = None,
    ) -> GitResult:
        argv = self._argv(args)
        full_env = self._env(env)
        if timeout is None and args and args[0] in NETWORK_COMMANDS:
            timeout = self.network_timeout_s
        started = time.perf_counter()
        try:
            proc = subprocess.run(
                argv,
                input=input,
                capture_output=True,
                # Never whatever directory carry was started from: a conflicted `apply
                # --3way` writes files into its working directory even in a bare repository
                # (TreeApplier gives it a scratch directory for that reason).
                cwd=self.cwd or self.git_dir,
                env=full_env,
                timeout=timeout,
                check=False,
            )
        except OSError as err:
            if err.errno != errno.ENOMEM:
                raise
            raise GitOutOfMemory(args, -1, b"", f"cannot start git: {err}".encode()) from err
        except subprocess.TimeoutExpired as err:
            assert timeout is not None
            log.warning(
                "git %s stopped after %g s without an answer", " ".join(args)[:300], timeout
            )
            raise GitTimeout(args, timeout, err.stdout or b"", err.stderr or b"") from err
        elapsed_ms = (time.perf_counter() - started) * 1000
        log.debug(
            "git %s -> %d (%.1f ms)",
            " ".join(args)[:300],
            proc.returncode,
            elapsed_ms,
            extra={"fields": {"git_dir": str(self.git_dir or self.cwd)}},
        )
        if proc.returncode != 0 and out_of_memory(proc.returncode, proc.stderr):
            log.warning("git %s ran out of memory (exit %d)", " ".join(args)[:300], proc.returncode)
            raise GitOutOfMemory(args, proc.returncode, proc.stdout, proc.stderr)
        if check and proc.returncode != 0:
            raise GitError(args, proc.returncode, proc.stdout, proc.stderr)
        return GitResult(proc.returncode, proc.stdout, proc.stderr)

    def spawn(self, *args: str) -> subprocess.Popen[bytes]:
        """A long-lived git process with pipes (e.g. `cat-file --batch-command`); the caller
        owns it and must close it."""
        argv = self._argv(args)
        log.debug("git %s (long-lived)", " ".join(args)[:300])
        return subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=self.cwd or self.git_dir,
            env=self._env(None),
        )

    def _argv(self, args: Sequence[str]) -> list[str]:
        argv = ["git", *_ISOLATED_CONFIG, "-c", f"core.bigFileThreshold={self.max_blob_bytes}"]
        if self.git_dir is not None:
            argv += ["--git-dir", str(self.git_dir)]
        if self.work_tree is not None:
            argv += ["--work-tree", str(self.work_tree)]
        return argv + list(args)

    def _env(self, extra: Mapping[str, str] | None) -> dict[str, str]:
        return {**os.environ, **_ISOLATED_ENV, **self.env, **(extra or {})}

    def out(self, *args: str, **kwargs: object) -> str:
        """stdout of a successful call, decoded and stripped."""
        return self.run(*args, **kwargs).text  # type: ignore[arg-type]

    def rev_parse(self, rev: str) -> str | None:
        result = self.run("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False)
        return result.text or None if result.ok else None

    def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        return self.run("merge-base", "--is-ancestor", ancestor, descendant, check=False).ok
