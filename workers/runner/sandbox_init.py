"""The first process of a step's PID namespace (see sandbox.py); standard library only, run as
`python -I -S sandbox_init.py [--loopback] [--user=UID:GID] -- ARGV...`.

It brings the loopback device up when the step has its own network namespace, starts the step,
passes on the signals the runner sends (an init process ignores those it has no handler for),
reaps every orphan the step leaves (they are re-parented to it), and exits with the step's
status: its exit code, or 128 + the signal that killed it.
"""

from __future__ import annotations

import contextlib
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


def loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(sock, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sh", b"lo", flags | _IFF_UP))


def main(args: list[str]) -> int:
    loopback = bool(args) and args[0] == "--loopback"
    if loopback:
        args = args[1:]
    user = None
    if args and args[0].startswith("--user="):
        uid, _, gid = args[0].removeprefix("--user=").partition(":")
        user, args = (int(uid), int(gid)), args[1:]
    if not args or args[0] != "--" or len(args) < 2:
        print("usage: sandbox_init.py [--loopback] [--user=UID:GID] -- ARGV...", file=sys.stderr)
        return 126
    argv = args[1:]
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
