"""A carry process started as an unprivileged user by a root test or bench, as a deployment
starts one (compose's runners run as the unprivileged `carry`): the user's own uid and gid, no
supplementary groups, no capability.

What it must read (the repository and its .venv, the Python that venv names, a test's
tmp_path) may sit under a directory the user cannot enter: root's 0700 home (pyenv), pytest's
0700 `pytest-of-root`, a CI checkout in `mktemp -d`. Nothing on the host is opened up for it:
the process starts in a mount namespace of its own (util-linux `unshare --mount`, as root),
where each such directory is covered by an empty tmpfs into which only the paths it needs are
bind-mounted back, at the same paths (the editable install, the config and the venv's
interpreter link name them), and then drops to the user with util-linux `setpriv`. The
permissions of what it reaches are the host's own: it reads what the user may read, and writes
only what the user owns.

Run as `python -m harness.unprivileged --user NAME --reach PATH ... -- ARGV` (as root);
`unprivileged_argv` builds that line. Standard library only: it runs before any of carry's
imports."""

from __future__ import annotations

import argparse
import ctypes
import os
import pwd
import shutil
import stat
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

# The dedicated user the hostile-check scenario starts runners as (created on first use).
RUNNER_USER = "carry-hostile"
# How user_namespaces_unavailable's reason starts: the one reason a mode of a runner that is
# not root may go unrun (a kernel setting, a container's seccomp or AppArmor profile).
NO_USER_NAMESPACES = "user namespaces are not allowed to an unprivileged user here"


def ensure_user(name: str = RUNNER_USER) -> pwd.struct_passwd:
    """The unprivileged system user `name`, created (no home, no login shell) if missing."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    useradd = shutil.which("useradd")
    if useradd is None:
        raise RuntimeError(f"no user {name} and no `useradd` to create it")
    shell = "/usr/sbin/nologin" if os.path.exists("/usr/sbin/nologin") else "/bin/false"
    subprocess.run(
        [
            useradd,
            "--system",
            "--no-create-home",
            "--home-dir",
            "/nonexistent",
            "--shell",
            shell,
            "--user-group",
            name,
        ],
        check=True,
        capture_output=True,
    )
    return pwd.getpwnam(name)


def unavailable(name: str = RUNNER_USER) -> str | None:
    """Why a process cannot be started as the unprivileged `name` here (None when it can)."""
    if os.geteuid() != 0:
        return "starting a process as another user needs root"
    for tool in ("unshare", "setpriv"):
        if shutil.which(tool) is None:
            return f"util-linux `{tool}` is not installed"
    try:
        ensure_user(name)
    except (RuntimeError, subprocess.CalledProcessError) as err:
        return f"no unprivileged user {name}: {err}"
    return None


def user_namespaces_unavailable(name: str = RUNNER_USER) -> str | None:
    """Why the unprivileged `name` cannot make a user namespace here (None when it can): the
    sandbox of a runner that is not root needs one (a kernel or a container's seccomp or
    AppArmor profile may forbid it)."""
    user = ensure_user(name)
    done = subprocess.run(
        [*_drop(user), "unshare", "--map-root-user", "--pid", "--fork", "--mount-proc", "true"],
        capture_output=True,
        cwd="/",
        check=False,
    )
    if done.returncode != 0:
        said = (done.stderr or done.stdout).decode(errors="replace").strip()[-200:]
        return f"{NO_USER_NAMESPACES}: {said}"
    return None


def unprivileged_argv(
    argv: Sequence[str], reach: Sequence[Path], name: str = RUNNER_USER
) -> list[str]:
    """`argv` run as the unprivileged `name`, in a mount namespace where every path in `reach`
    can be entered (see the module's docstring)."""
    line = [shutil.which("unshare") or "unshare", "--mount", "--propagation", "private", "--"]
    line += [sys.executable, "-m", "harness.unprivileged", "--user", name]
    line += [f"--reach={path}" for path in reach]
    return [*line, "--", *argv]


def _drop(user: pwd.struct_passwd) -> list[str]:
    return [
        shutil.which("setpriv") or "setpriv",
        f"--reuid={user.pw_uid}",
        f"--regid={user.pw_gid}",
        "--clear-groups",
        "--",
    ]


def _closed_to(user: pwd.struct_passwd, directory: Path) -> bool:
    """Whether `user` (no supplementary groups) cannot enter `directory`."""
    st = directory.stat()
    if st.st_uid == user.pw_uid:
        return not st.st_mode & 0o100
    if st.st_gid == user.pw_gid:
        return not st.st_mode & 0o010
    return not st.st_mode & 0o001


def _first_closed(user: pwd.struct_passwd, path: Path) -> Path | None:
    """The outermost directory above `path` (a directory or a file; not `path` itself) that `user` cannot enter."""
    for parent in reversed(path.parents):
        if parent != Path("/") and _closed_to(user, parent):
            return parent
    return None


_MS_BIND, _MS_REC = 0x1000, 0x4000


def _mount(source: str, target: Path, fstype: str | None, flags: int, data: str | None) -> None:
    """mount(2) itself: mount(8) would resolve a /proc/self/fd source to a path, which the
    cover has hidden by then."""
    libc = ctypes.CDLL(None, use_errno=True)
    done = libc.mount(
        source.encode(),
        str(target).encode(),
        fstype.encode() if fstype else None,
        flags,
        data.encode() if data else None,
    )
    if done != 0:
        raise OSError(ctypes.get_errno(), f"mount {source} on {target}")


def open_view(user: pwd.struct_passwd, reach: Sequence[Path]) -> None:
    """In this (private) mount namespace: cover each directory above a path of `reach` that
    `user` cannot enter with a tmpfs holding only the paths of `reach` below it."""
    wanted = [Path(os.path.realpath(path)) for path in reach]
    for _ in range(64):  # one covered directory per round; a deeper one may show after it
        closed = {path: _first_closed(user, path) for path in wanted}
        covers = sorted({c for c in closed.values() if c is not None}, key=lambda p: len(p.parts))
        if not covers:
            return
        cover = covers[0]
        below = [path for path in wanted if cover in path.parents]
        outermost = [p for p in below if not any(q in p.parents for q in below)]
        fds = {path: os.open(path, os.O_PATH) for path in outermost}  # before the cover hides them
        try:
            _mount("carry-view", cover, "tmpfs", 0, "mode=0755,size=1m")
            for path, fd in fds.items():
                path.parent.mkdir(parents=True, exist_ok=True)
                if stat.S_ISDIR(os.fstat(fd).st_mode):
                    path.mkdir(exist_ok=True)
                else:  # a file (a public key): bound onto an empty one
                    path.touch()
                _mount(f"/proc/self/fd/{fd}", path, None, _MS_BIND | _MS_REC, None)
        finally:
            for fd in fds.values():
                os.close(fd)
    raise RuntimeError(f"could not make {wanted} reachable to {user.pw_name}")


def main(args: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m harness.unprivileged")
    parser.add_argument("--user", required=True)
    parser.add_argument("--reach", action="append", type=Path, default=[])
    parser.add_argument("argv", nargs=argparse.REMAINDER)
    parsed = parser.parse_args(args)
    argv = parsed.argv[1:] if parsed.argv[:1] == ["--"] else parsed.argv
    if not argv:
        parser.error("no command to run")
    if os.geteuid() != 0:
        parser.error("must start as root (in a mount namespace of its own)")
    user = pwd.getpwnam(parsed.user)
    open_view(user, parsed.reach)
    os.execv(_drop(user)[0], [*_drop(user), *argv])


if __name__ == "__main__":
    main()
