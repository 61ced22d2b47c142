"""The first process of a step's PID namespace (see sandbox.py); standard library only, run as
`python -I -S sandbox_init.py [--loopback] [--user=UID:GID] [--read-only=PATH]...
[--writable=PATH]... -- ARGV...`.

In the step's own mount namespace it makes each --read-only path a read-only bind mount of
itself (the runner's Python and code: a step must not leave code there for the next job or
the runner), keeping each --writable path below one writable. A mount that fails stops the
step before it starts (status 126): it never runs with less protection than it was given.
It brings the loopback device up when the step has its own network namespace, starts the step,
passes on the signals the runner sends (an init process ignores those it has no handler for),
reaps every orphan the step leaves (they are re-parented to it), and exits with the step's
status: its exit code, or 128 + the signal that killed it.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import signal
import socket
import struct
import sys
import warnings  # noqa: F401  os.execvp imports it; a step user may not read the stdlib

_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1)
_MS_RDONLY, _MS_REMOUNT, _MS_BIND, _MS_REC = 0x1, 0x20, 0x1000, 0x4000
# statvfs flag -> the mount flag a remount must keep (in a user namespace these are locked)
_KEPT = {0x2: 0x2, 0x4: 0x4, 0x8: 0x8, 0x400: 0x400, 0x800: 0x800, 0x1000: 0x200000}


def loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(sock, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sh", b"lo", flags | _IFF_UP))


def _mount(source: str, target: str, flags: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(source.encode(), target.encode(), None, flags, None) != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"mount {target}: {os.strerror(number)}")


def protect(read_only: list[str], writable: list[str]) -> None:
    """Each read-only path becomes a read-only bind mount; a writable path below one is bound
    first, so it stays a writable mount of its own inside the read-only one."""
    for path in writable:
        if any(path.startswith(guarded.rstrip("/") + "/") for guarded in read_only):
            _mount(path, path, _MS_BIND | _MS_REC)
    for path in read_only:
        kept = sum(mount for st, mount in _KEPT.items() if os.statvfs(path).f_flag & st)
        _mount(path, path, _MS_BIND | _MS_REC)
        _mount(path, path, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | kept)


def main(args: list[str]) -> int:
    loopback = bool(args) and args[0] == "--loopback"
    if loopback:
        args = args[1:]
    user = None
    if args and args[0].startswith("--user="):
        uid, _, gid = args[0].removeprefix("--user=").partition(":")
        user, args = (int(uid), int(gid)), args[1:]
    paths: dict[str, list[str]] = {"--read-only": [], "--writable": []}
    while args and args[0].partition("=")[0] in paths:
        option, _, path = args.pop(0).partition("=")
        paths[option].append(path)
    if not args or args[0] != "--" or len(args) < 2:
        print(
            "usage: sandbox_init.py [--loopback] [--user=UID:GID] [--read-only=PATH]... "
            "[--writable=PATH]... -- ARGV...",
            file=sys.stderr,
        )
        return 126
    argv = args[1:]
    try:
        protect(paths["--read-only"], paths["--writable"])
    except OSError as err:
        print(f"cannot make the runner's files read-only for the step: {err}", file=sys.stderr)
        return 126
    if loopback:
        loopback_up()
    child = os.fork()
    if child == 0:
        for sig in _FORWARDED:
            signal.signal(sig, signal.SIG_DFL)
        try:
            if user is not None:  # groups first: setuid gives up the right to change them
                os.setgroups([])
                os.setgid(user[1])
                os.setuid(user[0])
            os.execvp(argv[0], argv)
        except OSError as err:
            print(f"cannot start {argv[0]!r}: {err.strerror or err}", file=sys.stderr)
            os._exit(127 if isinstance(err, FileNotFoundError) else 126)
    for sig in _FORWARDED:
        signal.signal(sig, lambda number, _frame: _pass_on(child, number))
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            return 0
        except InterruptedError:
            continue
        if pid == child:
            return _exit_code(status)


def _pass_on(child: int, number: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(child, number)


def _exit_code(status: int) -> int:
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
