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
"""

from __future__ import annotations

import os
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
class Sandbox:
    """How this runner starts steps: `namespaces`, or `none` with the reason."""

    isolation: Isolation
    why_none: str = ""
    unshare: str = "unshare"  # its path, found when the sandbox was resolved

    def wrap(self, argv: Sequence[str], *, network: bool) -> list[str]:
        if self.isolation is not Isolation.NAMESPACES:
            return list(argv)
        return _unshare_argv(self.unshare, argv, network=network)

    def describe(self, *, network: bool) -> str:
        if self.isolation is not Isolation.NAMESPACES:
            return f"runs without a sandbox ({self.why_none})"
        reach = "the host's network" if network else "no network (loopback only)"
        return f"runs in its own PID, mount, IPC and UTS namespaces, with {reach}"


def resolve(wanted: Isolation | str) -> Sandbox:
    """The sandbox the runner's config asks for, as this host can give it."""
    wanted = Isolation(wanted)
    if wanted is Isolation.NONE:
        return Sandbox(Isolation.NONE, "the runner's config says sandbox: none")
    failure = namespaces_unavailable()
    if failure is None:
        return Sandbox(Isolation.NAMESPACES, unshare=shutil.which("unshare") or "unshare")
    if wanted is Isolation.NAMESPACES:
        raise SandboxError(f"the runner's config says sandbox: namespaces, but {failure}")
    return Sandbox(Isolation.NONE, f"sandbox: auto, and {failure}")


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


def _unshare_argv(unshare: str, argv: Sequence[str], *, network: bool) -> list[str]:
    flags = ["--pid", "--fork", "--kill-child", "--mount-proc", "--ipc", "--uts"]
    if os.geteuid() != 0:
        flags.insert(0, "--map-root-user")
    if not network:
        flags.append("--net")
    init = [sys.executable, "-I", "-S", str(INIT)]
    if not network:
        init.append("--loopback")
    return [unshare, *flags, "--", *init, "--", *argv]
