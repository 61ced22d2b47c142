"""The client half of carry's resident check engine (`carry check --serve`).

A resident engine is a long-lived process of the user's that keeps carry's modules imported and
its mirrors' engines (object reader, touch index) open, like git's fsmonitor daemon. It listens
on a Unix socket in carry's cache dir. `carry check` looks for that socket before importing
anything of carry's: this module imports nothing beyond what Python has loaded at start
(`os`, `sys`) and the C module `_socket`. It sends the command line, the working directory,
the umask and the environment, with its own stdin, stdout and stderr (SCM_RIGHTS): the server
runs the same `carry check` on them and answers with the exit status, so the output is written
by the same code to the same files as in-process.

Nothing is used silently when it is wrong: a socket that is not the user's, or can be reached
by others, is refused with a message; a socket no server listens on (stale) is removed; a
server of another carry (its files changed since it started, or another install) answers so,
and the client says so. In every one of these cases, and when there is no socket,
`carry check` runs in-process as before.

Requests are data: lists of byte strings with their lengths, never code or pickles.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    import _socket

PROTOCOL = b"carry-resident/1"
SOCKET_NAME = "check.sock"
# Set (to anything but empty) to run `carry check` in-process even where a server listens.
OPT_OUT_VARIABLE = "CARRY_NO_RESIDENT"
CACHE_DIR_VARIABLE = "CARRY_CACHE_DIR"  # bot.git.mirror's, without importing it
DEFAULT_CACHE_DIR = "~/.cache/carry"
MAX_REQUEST_BYTES = 16 * 1024 * 1024
# Replies: the first field.
# Replies, by their first field: the server runs the check (then answers OK or SIGPIPE), or
# refuses the request (REFUSED, why) and the client checks in-process.
RUNNING, OK, SIGPIPE, REFUSED = b"running", b"ok", b"sigpipe", b"refused"
# The exit status when the server went away during a check (as an uncaught error's).
SERVER_LOST = 1


def cache_dir_of(argv: list[str], environ: dict[str, str] | os._Environ[str]) -> str:
    """The cache dir `carry check argv` uses (its last --cache-dir, else $CARRY_CACHE_DIR,
    else ~/.cache/carry), as an absolute path."""
    value = None
    for n, word in enumerate(argv):
        if word == "--":
            break
        if word == "--cache-dir" and n + 1 < len(argv):
            value = argv[n + 1]
        elif word.startswith("--cache-dir="):
            value = word.partition("=")[2]
    if not value:
        value = os.path.expanduser(environ.get(CACHE_DIR_VARIABLE) or DEFAULT_CACHE_DIR)
    return os.path.abspath(value)


def fingerprint() -> bytes:
    """Which carry this is: the package's directory and the size and modification time of each
    of its modules. A server compares its own, taken when it started, with the client's: a
    server started from an older carry (or another install) is not used."""
    here = os.path.dirname(os.path.abspath(__file__))
    parts = [here]
    for directory, dirs, files in os.walk(here):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py"):
                stat = os.stat(os.path.join(directory, name))
                parts.append(f"{directory[len(here) :]}/{name}:{stat.st_size}:{stat.st_mtime_ns}")
    return "\n".join(parts).encode()


def unsafe(stat: os.stat_result) -> str | None:
    """Why a socket file may not be used (not a socket, another user's, reachable by others),
    or None."""
    if (stat.st_mode & 0o170000) != 0o140000:
        return "it is not a socket"
    if stat.st_uid != os.getuid():
        return f"it is owned by uid {stat.st_uid}, not by this user ({os.getuid()})"
    if stat.st_mode & 0o077:
        return f"its mode is {stat.st_mode & 0o777:04o}: others can reach it (0600 expected)"
    return None


def pack(fields: list[bytes]) -> bytes:
    """Fields as data: a count, then each field's length and bytes."""
    out = [len(fields).to_bytes(4, "big")]
    for field in fields:
        out += [len(field).to_bytes(4, "big"), field]
    return b"".join(out)


def unpack(data: bytes, at: int = 0) -> tuple[list[bytes], int]:
    """The fields pack wrote at `at`, and where they end; ValueError on a malformed list."""
    if at + 4 > len(data):
        raise ValueError("truncated field count")
    count = int.from_bytes(data[at : at + 4], "big")
    at += 4
    fields = []
    for _ in range(count):
        if at + 4 > len(data):
            raise ValueError("truncated field length")
        size = int.from_bytes(data[at : at + 4], "big")
        at += 4
        if at + size > len(data):
            raise ValueError("truncated field")
        fields.append(data[at : at + size])
        at += size
    return fields, at


def _say(text: str) -> None:
    sys.stderr.write(f"carry: {text}\n")
    sys.stderr.flush()


def _reply(sock: _socket.socket) -> list[bytes]:
    closed = "the resident engine closed the connection"
    size = int.from_bytes(receive(sock, 4, closed), "big")
    return unpack(receive(sock, size, closed))[0]


def receive(sock: _socket.socket, size: int, closed: str, start: bytes = b"") -> bytes:
    """Exactly `size` bytes from `sock` (`start`: those already read), or ConnectionError
    saying `closed` when the other side closes first. Client and server read so."""
    chunks, left = [start], size - len(start)
    while left > 0:
        chunk = sock.recv(min(left, 65536))
        if not chunk:
            raise ConnectionError(closed)
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def request(argv: list[str]) -> list[bytes]:
    """The request for `carry check argv` from this process: protocol, fingerprint, working
    directory, umask, stdout's and stderr's encodings; the arguments; the environment."""
    umask = os.umask(0o077)
    os.umask(umask)
    streams = [
        f"{getattr(s, 'encoding', None) or 'utf-8'}:{getattr(s, 'errors', None) or 'strict'}"
        for s in (sys.stdout, sys.stderr)
    ]
    head = [PROTOCOL, fingerprint(), os.fsencode(os.getcwd()), b"%o" % umask]
    head += [text.encode() for text in streams]
    argv_fields = [os.fsencode(arg) for arg in argv]
    env = [os.fsencode(k) + b"=" + os.fsencode(v) for k, v in os.environ.items()]
    return [pack(head), pack(argv_fields), pack(env)]


def run(argv: list[str]) -> int | None:
    """`carry check argv` through the resident engine: its exit status, or None where there is
    none to use (run the check in-process then)."""
    if argv[:1] != ["check"] or "--serve" in argv or os.environ.get(OPT_OUT_VARIABLE):
        return None
    path = os.path.join(cache_dir_of(argv, os.environ), SOCKET_NAME)
    try:
        stat = os.lstat(path)
    except OSError:
        return None  # no resident engine: the usual case
    problem = unsafe(stat)
    if problem is not None:
        _say(f"not using the resident engine's socket {path}: {problem}")
        return None
    import _socket

    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        try:
            sock.connect(path)
        except (ConnectionRefusedError, FileNotFoundError):
            # Nobody listens: a server that was killed left it. Removed, if it is still that file.
            try:
                if os.lstat(path).st_ino == stat.st_ino:
                    os.unlink(path)
            except OSError:
                pass
            return None
        except OSError as err:
            _say(f"not using the resident engine at {path}: {err.strerror or err}")
            return None
        creds = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)
        peer_uid = int.from_bytes(creds[4:8], sys.byteorder)
        if peer_uid != os.getuid():
            _say(f"not using the resident engine at {path}: it runs as uid {peer_uid}")
            return None
        body = pack(request(argv))
        if len(body) > MAX_REQUEST_BYTES:
            return None
        message = len(body).to_bytes(4, "big") + body
        fds = (0, 1, 2)
        sent = sock.sendmsg(
            [message],
            [
                (
                    _socket.SOL_SOCKET,
                    _socket.SCM_RIGHTS,
                    b"".join(fd.to_bytes(4, sys.byteorder) for fd in fds),
                )
            ],
        )
        if sent < len(message):
            sock.sendall(message[sent:])
        reply = _reply(sock)
        if reply[:1] != [RUNNING]:
            detail = reply[1].decode(errors="replace") if len(reply) > 1 else "no reason given"
            _say(f"not using the resident engine at {path}: {detail}")
            return None
        try:
            reply = _reply(sock)
        except (OSError, ValueError) as err:
            # It may have written part of the output: running the check again would repeat it.
            _say(f"the resident engine at {path} stopped during the check: {err}")
            return SERVER_LOST
    except (OSError, ValueError) as err:
        _say(f"not using the resident engine at {path}: {err}")
        return None
    except KeyboardInterrupt:  # Ctrl-C, as in-process: 128 + SIGINT (the server ends its check)
        return 130
    finally:
        sock.close()
    if reply[:1] == [SIGPIPE]:
        _die_of_sigpipe()
    if reply[:1] == [OK] and len(reply) == 2 and reply[1].isdigit():
        return int(reply[1])
    _say(f"the resident engine at {path} gave no exit status: {reply[:1]!r}")
    return SERVER_LOST


def _die_of_sigpipe() -> None:
    """As bot.cli does when stdout's reader went away (the server wrote into the closed pipe)."""
    import signal

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGPIPE)


def main() -> int:
    """The `carry` console script: `carry check` through a resident engine where one listens,
    everything else (and the check without one) through bot.cli."""
    argv = sys.argv[1:]
    code = run(argv)
    if code is not None:
        return code
    from bot.cli import main as cli_main

    return cli_main(argv)
