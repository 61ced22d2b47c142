"""Where a runner's setup and check commands run: in their own namespaces where the host allows it.

Steps run code nobody here wrote. With isolation `namespaces` (util-linux `unshare`), a step gets
its own PID namespace with a private /proc: it cannot see, signal or read the environment of the
runner or of any other process on the host (the runner's broker URL is in its environment). It
gets its own IPC and UTS namespaces too and, unless its config says `network: true`, its own
network namespace with nothing but a loopback device: no route to the broker, to GitHub or to
anything else. A runner that is not root maps itself to root in a user namespace to do this (no
privilege on the host). The file system is the host's: what the step may read or write there is
what the runner's user may.

`auto` uses namespaces when a trial `unshare` works and otherwise runs steps as the runner's own
child processes, saying so in every run log. `namespaces` refuses to run a step without them.

With a step user (`runners.<kind>.step_user`), a root runner starts each step as that user
(`sandbox_init.py --user`, with or without namespaces): what the step may read and write on the
host is then what that user may, not what root may. The user must be able to reach the tree
(the runner's workdir) and the tools the steps run.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from pathlib import Path

INIT = Path(__file__).with_name("sandbox_init.py")
PROBE_TIMEOUT_S = 15


class Isolation(StrEnum):
    AUTO = "auto"
    NAMESPACES = "namespaces"
    NONE = "none"


class SandboxError(Exception):
    """The runner's config asks for isolation this host cannot give."""


@dataclass(frozen=True)
class StepUser:
    """Who a step runs as when it is not the runner's own user."""

    name: str
    uid: int
    gid: int


@dataclass(frozen=True)
class Sandbox:
    """How this runner starts steps: `namespaces`, or `none` with the reason; as `user`."""

    isolation: Isolation
    why_none: str = ""
    unshare: str = "unshare"  # its path, found when the sandbox was resolved
    user: StepUser | None = None

    def wrap(self, argv: Sequence[str], *, network: bool) -> list[str]:
        if self.isolation is Isolation.NAMESPACES:
            return _unshare_argv(self.unshare, argv, network=network, user=self.user)
        if self.user is not None:  # no namespaces: the same init, only to change the user
            return [*_init(self.user, loopback=False), "--", *argv]
        return list(argv)

    def describe(self, *, network: bool) -> str:
        who = f", as {self.user.name} (uid {self.user.uid})" if self.user else ""
        if self.isolation is not Isolation.NAMESPACES:
            return f"runs without a sandbox ({self.why_none}){who}"
        reach = "the host's network" if network else "no network (loopback only)"
        return f"runs in its own PID, mount, IPC and UTS namespaces, with {reach}{who}"


def resolve(wanted: Isolation | str, step_user: str | None = None) -> Sandbox:
    """The sandbox the runner's config asks for, as this host can give it."""
    wanted = Isolation(wanted)
    user = resolve_user(step_user) if step_user is not None else None
    if wanted is Isolation.NONE:
        return Sandbox(Isolation.NONE, "the runner's config says sandbox: none", user=user)
    failure = namespaces_unavailable()
    if failure is None:
        unshare = shutil.which("unshare") or "unshare"
        return Sandbox(Isolation.NAMESPACES, unshare=unshare, user=user)
    if wanted is Isolation.NAMESPACES:
        raise SandboxError(f"the runner's config says sandbox: namespaces, but {failure}")
    return Sandbox(Isolation.NONE, f"sandbox: auto, and {failure}", user=user)


def resolve_user(step_user: str) -> StepUser:
    """The configured step user, or SandboxError saying why steps cannot run as it."""
    try:
        entry = pwd.getpwuid(int(step_user)) if step_user.isdigit() else pwd.getpwnam(step_user)
    except (KeyError, OverflowError):
        raise SandboxError(f"step_user {step_user!r} is not a user on this host") from None
    if entry.pw_uid == 0:
        raise SandboxError(f"step_user {step_user!r} is root: name an unprivileged user")
    if os.geteuid() != 0:
        raise SandboxError(
            f"step_user {step_user!r} needs a runner started as root (this one runs as uid "
            f"{os.geteuid()})"
        )
    return StepUser(entry.pw_name, entry.pw_uid, entry.pw_gid)


def unreachable(path: Path, user: StepUser) -> Path | None:
    """The first directory above `path` that `user` may not enter (None when it may reach it):
    a runner's workdir under root's 0700 home is one."""
    for directory in reversed(path.resolve().parents):
        info = directory.stat()
        if info.st_uid == user.uid:
            allowed = info.st_mode & 0o100
        elif info.st_gid == user.gid:
            allowed = info.st_mode & 0o010
        else:
            allowed = info.st_mode & 0o001
        if not allowed:
            return directory
    return None


def _init(user: StepUser | None, *, loopback: bool) -> list[str]:
    init = [sys.executable, "-I", "-S", str(INIT)]
    if loopback:
        init.append("--loopback")
    if user is not None:  # the init stays who it is; the step runs as the user
        init.append(f"--user={user.uid}:{user.gid}")
    return init


@cache
def namespaces_unavailable() -> str | None:
    """Why steps cannot run in namespaces here (None when they can): one trial run per process."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return "util-linux `unshare` is not installed"
    try:
        done = subprocess.run(
            _unshare_argv(unshare, ["true"], network=False),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"a trial `unshare` failed: {err}"
    if done.returncode != 0:
        said = (done.stderr or done.stdout).decode(errors="replace").strip()[-300:]
        return f"a trial `unshare` failed (exit {done.returncode}): {said or 'no output'}"
    return None


def _unshare_argv(
    unshare: str, argv: Sequence[str], *, network: bool, user: StepUser | None = None
) -> list[str]:
    flags = ["--pid", "--fork", "--kill-child", "--mount-proc", "--ipc", "--uts"]
    if os.geteuid() != 0:
        flags.insert(0, "--map-root-user")
    if not network:
        flags.append("--net")
    return [unshare, *flags, "--", *_init(user, loopback=not network), "--", *argv]
