"""The server half of carry's resident check engine: `carry check --serve` (see bot.resident).

One request at a time, each the `carry check` command line a client process of the same user
was given, run by bot.cli as that process would run it: in the client's working directory,
with its umask and environment, writing to its stdin, stdout and stderr (received as file
descriptors). What stays from one check to the next is carry's imported modules and, per
mirror, its Engine (object reader, touch index, caches keyed by content), as in the service's
worker; the mirror's per-process state (whether it fetched every branch and tag) starts afresh
on every request, as in a new process.

Safety: the socket is created 0600 in the user's cache dir; a peer of another uid is refused
(SO_PEERCRED); requests are lists of byte strings, parsed as data; only `carry check` command
lines are run; a client of another carry (see bot.resident.fingerprint) is refused.
"""

from __future__ import annotations

import array
import codecs
import collections
import contextlib
import logging
import os
import signal
import socket
import stat
import struct
import sys
import time
import traceback
from pathlib import Path

from bot import cli, resident
from bot.git.engine import Engine
from bot.git.mirror import Mirror, default_cache_dir

log = logging.getLogger("carry.resident")
MAX_ENGINES = 8  # mirrors kept open; the least recently used is closed past this
# The longest path a Unix socket address holds (sun_path, with its terminating NUL).
MAX_SOCKET_PATH = 107


class ServeError(Exception):
    """The resident engine cannot start: said in one line."""


class Engines:
    """Engines by (source, cache dir, largest blob), the most recently used last."""

    def __init__(self, limit: int = MAX_ENGINES):
        self.limit = limit
        self._engines: collections.OrderedDict[tuple[str, Path | None, int], Engine] = (
            collections.OrderedDict()
        )

    def __call__(self, source: str, cache: Path | None, max_blob: int) -> Engine:
        """The Engine for this mirror, kept open from one check to the next."""
        # Where the mirror is, as Mirror would say with the client's environment.
        cache = cache or default_cache_dir().absolute()
        key = (source, cache, max_blob)
        engine = self._engines.pop(key, None)
        if engine is None:
            engine = Engine(Mirror(source, cache, max_blob_bytes=max_blob))
        engine.mirror.widened = False  # fetches every branch and tag again, as a new process
        self._engines[key] = engine
        while len(self._engines) > self.limit:
            _, oldest = self._engines.popitem(last=False)
            oldest.close()
        return engine

    def close(self) -> None:
        for engine in self._engines.values():
            engine.close()
        self._engines.clear()


def _live(path: Path) -> bool:
    """Whether a server answers on the socket at `path`."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except OSError:
        return False
    finally:
        probe.close()
    return True


def _listen(path: Path) -> socket.socket:
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        raise ServeError(
            f"socket path {path} is longer than {MAX_SOCKET_PATH} bytes: use a shorter --cache-dir"
        )
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    found = path.parent.stat()
    if found.st_uid != os.getuid():
        raise ServeError(f"cache dir {path.parent} is owned by uid {found.st_uid}, not this user")
    if found.st_mode & 0o022:
        raise ServeError(
            f"cache dir {path.parent} is writable by others (mode "
            f"{found.st_mode & 0o777:04o}): another user could replace the socket"
        )
    try:
        there = path.lstat()
    except FileNotFoundError:
        there = None
    if there is not None:
        if not stat.S_ISSOCK(there.st_mode) or there.st_uid != os.getuid():
            raise ServeError(f"{path} exists and is not this user's socket: not replaced")
        if _live(path):
            raise ServeError(f"a resident engine already serves {path}")
        path.unlink()  # stale: its server is gone
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    umask = os.umask(0o177)
    try:
        server.bind(str(path))
    finally:
        os.umask(umask)
    os.chmod(path, 0o600)
    server.listen(16)
    return server


def serve(cache: Path) -> int:
    """Serves `carry check` requests on `cache`/check.sock until SIGINT or SIGTERM."""
    path = cache / resident.SOCKET_NAME
    server = _listen(path)
    identity = path.lstat().st_ino
    mine = resident.fingerprint()
    engines = Engines()
    cli.RESIDENT_ENGINES = engines
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    own = _Own()
    print(f"carry: resident engine serving {path} (pid {os.getpid()})", file=sys.stderr)
    try:
        while not _STOPPING:
            connection, _ = server.accept()
            with connection:
                try:
                    _handle(connection, mine, own)
                except Exception:  # a bug of the server's own: said, and the next one served
                    log.exception("the resident engine failed on a request")
        return 0
    except KeyboardInterrupt:
        return 0
    finally:
        cli.RESIDENT_ENGINES = None
        engines.close()
        server.close()
        with contextlib.suppress(OSError):
            if path.lstat().st_ino == identity:  # not a socket another server made since
                path.unlink()
        print(f"carry: resident engine at {path} stopped", file=sys.stderr)


# Set by SIGINT or SIGTERM. A check it interrupts ends as a Ctrl-C'd one would (exit status
# 130 to its client); the server stops after it.
_STOPPING: list[int] = []


def _stop(signum: int, frame: object) -> None:
    _STOPPING.append(signum)
    raise KeyboardInterrupt


class _Own:
    """The server's own process state, put back after each request."""

    def __init__(self) -> None:
        self.fds = [os.dup(fd) for fd in (0, 1, 2)]
        for fd in self.fds:
            os.set_inheritable(fd, False)
        self.stdout, self.stderr = sys.stdout, sys.stderr
        self.cwd = os.getcwd()
        self.environ = dict(os.environ)
        self.argv = list(sys.argv)


def _send(connection: socket.socket, fields: list[bytes]) -> None:
    body = resident.pack(fields)
    connection.sendall(len(body).to_bytes(4, "big") + body)


def _receive(connection: socket.socket) -> tuple[list[list[bytes]], list[int]]:
    """The request's three field lists and the file descriptors that came with it."""
    fds = array.array("i")
    data, ancillary, _, _ = connection.recvmsg(4, socket.CMSG_SPACE(3 * fds.itemsize))
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    received = list(fds)
    try:
        try:
            size = int.from_bytes(resident.receive(connection, 4, "", start=data), "big")
            if size > resident.MAX_REQUEST_BYTES:
                raise ValueError(f"request of {size} bytes")
            body = resident.receive(connection, size, "")
        except ConnectionError:
            raise ValueError("truncated request") from None
        fields, _ = resident.unpack(body)
        if len(fields) != 3:
            raise ValueError("a request has three parts")
        parts = [resident.unpack(field)[0] for field in fields]
    except BaseException:
        for fd in received:
            os.close(fd)
        raise
    return parts, received


def _handle(connection: socket.socket, mine: bytes, own: _Own) -> None:
    creds = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _ = struct.unpack("3i", creds)
    if uid != os.getuid():
        log.warning("refused a connection from uid %d (pid %d)", uid, pid)
        return
    try:
        (head, argv, env), fds = _receive(connection)
    except (OSError, ValueError) as err:
        log.warning("refused a malformed request from pid %d: %s", pid, err)
        return
    try:
        why = _refusal(head, argv, fds, mine)
        if why is not None:
            _send(connection, [resident.REFUSED, why.encode()])
            return
        _send(connection, [resident.RUNNING])
        started = time.perf_counter()
        outcome = _run(head, [os.fsdecode(a) for a in argv], env, fds, own)
        took = (time.perf_counter() - started) * 1000
        said = outcome[-1].decode(errors="replace")
        print(f"carry: served pid {pid}: {said} in {took:.1f} ms", file=sys.stderr, flush=True)
        _send(connection, outcome)
    except OSError as err:  # the client went away
        log.warning("lost the client pid %d: %s", pid, err)
    finally:
        for fd in fds:
            os.close(fd)


def _refusal(head: list[bytes], argv: list[bytes], fds: list[int], mine: bytes) -> str | None:
    if len(head) != 6 or head[0] != resident.PROTOCOL:
        return "it speaks another protocol"
    if head[1] != mine:
        return "it runs another carry (its files changed since it started): restart it"
    if len(fds) != 3:
        return "the request came without stdin, stdout and stderr"
    if argv[:1] != [b"check"] or b"--serve" in argv:
        return "it runs `carry check` alone"
    if not os.path.isdir(head[2]):
        return "the working directory is gone"
    try:
        int(head[3], 8)
        for stream in head[4:6]:
            encoding, errors = stream.decode().split(":", 1)
            codecs.lookup(encoding)
            codecs.lookup_error(errors)
    except (ValueError, LookupError):
        return "the request's umask or encodings are not valid"
    return None


def _run(
    head: list[bytes], argv: list[str], env: list[bytes], fds: list[int], own: _Own
) -> list[bytes]:
    """Runs `carry check argv` as the client's process would, and puts the server back."""
    out_encoding, out_errors = head[4].decode().split(":", 1)
    err_encoding, err_errors = head[5].decode().split(":", 1)
    try:
        os.chdir(os.fsdecode(head[2]))
    except OSError as err:
        return [resident.REFUSED, f"cannot enter the working directory: {err.strerror}".encode()]
    umask = os.umask(int(head[3], 8))
    outcome = [resident.OK]
    try:
        os.environ.clear()
        for item in env:
            key, _, value = item.partition(b"=")
            os.environ[os.fsdecode(key)] = os.fsdecode(value)
        for fd, target in zip(fds, (0, 1, 2), strict=True):
            os.dup2(fd, target)
        # As Python opens them: stdout buffered, stderr line-buffered.
        sys.stdout = open(1, "w", encoding=out_encoding, errors=out_errors, closefd=False)  # noqa: SIM115
        sys.stderr = open(  # noqa: SIM115
            2, "w", encoding=err_encoding, errors=err_errors, closefd=False, buffering=1
        )
        sys.argv = ["carry", *argv]
        _forget_secrets()
        try:
            code = cli.run_command(argv)
        except SystemExit as stop:  # argparse: --help, bad arguments
            code = _exit_status(stop)
        except BrokenPipeError:
            outcome, code = [resident.SIGPIPE], 0
        except KeyboardInterrupt:  # SIGTERM or SIGINT outside the command's own handler
            code = 130
        except Exception:
            traceback.print_exc()
            code = 1
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            outcome = [resident.SIGPIPE]
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.flush()
    finally:
        _put_back(own, umask)
    return [*outcome, str(code).encode()] if outcome == [resident.OK] else outcome


def _exit_status(stop: SystemExit) -> int:
    if stop.code is None:
        return 0
    if isinstance(stop.code, int):
        return stop.code
    print(stop.code, file=sys.stderr)
    return 1


def _put_back(own: _Own, umask: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        if stream not in (own.stdout, own.stderr):  # the request's (closefd=False: not its fd)
            with contextlib.suppress(OSError, ValueError):
                stream.close()
    sys.stdout, sys.stderr = own.stdout, own.stderr
    for fd, target in zip(own.fds, (0, 1, 2), strict=True):
        os.dup2(fd, target)
    os.umask(umask)
    os.chdir(own.cwd)
    os.environ.clear()
    os.environ.update(own.environ)
    sys.argv = list(own.argv)
    _forget_secrets()
    logging.getLogger().handlers[:] = []  # the request's handler wrote to its stderr


def _forget_secrets() -> None:
    """bot.log keeps the secrets installed by a command, or those of the process's environment
    once read: the environment is the client's during a request."""
    carry_log = sys.modules.get("bot.log")
    if carry_log is not None:
        carry_log.forget_secrets()
