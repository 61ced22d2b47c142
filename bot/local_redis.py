"""A private redis-server process on a free local port: `carry run`'s Redis (durable, with a
password), the demo's own, and the benchmarks'. Nobody else's data lives in it, so emptying or
stopping it is always safe."""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import redis


class LocalRedisError(RuntimeError):
    """redis-server is missing or did not start; the message says which."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def answers(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=0.5).ping())
    except redis.RedisError:
        return False


def stored_password(path: Path) -> str:
    """The password kept in `path` (owner-only), made on first use: a private Redis keeps
    its password across restarts, and `redis-cli` users find it there."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        password = path.read_text().strip()
        if not password:
            raise LocalRedisError(
                f"{path} is empty: delete it, and a new password is made"
            ) from None
        return password
    with os.fdopen(fd, "w") as out:
        out.write(secrets.token_urlsafe(32) + "\n")
    return path.read_text().strip()


@dataclass
class LocalRedis:
    """redis-server bound to 127.0.0.1, its files (and log) in `workdir`. Without `persist`
    it writes nothing to disk (no RDB snapshots, no AOF); with it every write is fsynced to
    an append-only file, as a durable production setup would. With a `password` the
    `default` user needs it (`requirepass`); the password goes to redis-server in an
    owner-only config file in `workdir`, never on its command line (which `ps` shows to
    every user of the host). With `unix_socket` it also listens on `socket_path`, which only
    its owner may open, and `url` names that socket (`tcp_url` its port)."""

    workdir: Path
    persist: bool = False
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    password: str | None = None
    unix_socket: bool = False

    @property
    def url(self) -> str:
        if self.unix_socket:
            return f"unix://{self._auth}{self.socket_path}"
        return self.tcp_url

    @property
    def tcp_url(self) -> str:
        return f"redis://{self._auth}127.0.0.1:{self.port}/0"

    @property
    def _auth(self) -> str:
        return f":{quote(self.password, safe='')}@" if self.password else ""

    @property
    def socket_path(self) -> Path:
        return self.workdir / "redis.sock"

    @property
    def conf(self) -> Path:
        return self.workdir / "redis.conf"

    def argv(self, binary: str) -> list[str]:
        argv = [binary, *([str(self.conf)] if self.password else [])]
        argv += ["--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.workdir)]
        argv += ["--save", "", "--daemonize", "no", "--logfile", str(self.workdir / "redis.log")]
        if self.unix_socket:
            argv += ["--unixsocket", str(self.socket_path), "--unixsocketperm", "700"]
        if self.persist:
            return [*argv, "--appendonly", "yes", "--appendfsync", "always"]
        return [*argv, "--appendonly", "no"]

    def _write_conf(self) -> None:
        if self.password is None:
            return
        if any(c.isspace() or c in "\"'\\" for c in self.password):
            raise LocalRedisError("a private Redis password may not hold spaces or quotes")
        self.conf.unlink(missing_ok=True)
        fd = os.open(self.conf, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write("# written by carry for this redis-server: the default user's password\n")
            out.write(f"requirepass {self.password}\n")

    def start(self, timeout_s: float = 10) -> LocalRedis:
        binary = shutil.which("redis-server")
        if binary is None:
            raise LocalRedisError("redis-server is not installed (apt-get install redis-server)")
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.password is not None:  # its data and password are for this user only
            self.workdir.chmod(0o700)
        self._write_conf()
        # A session of its own: Ctrl-C in the terminal reaches the whole foreground group, and
        # this server must outlive carry's processes there, which write on their way out;
        # its owner stops it last. It still ends with its owner (_end_with_parent).
        self.proc = subprocess.Popen(
            self.argv(binary),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_end_with_parent,
        )
        deadline = time.monotonic() + timeout_s
        while not answers(self.url):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise LocalRedisError(f"redis-server did not start: {self._last_log_line()}")
            time.sleep(0.05)
        return self

    def _last_log_line(self) -> str:
        log = self.workdir / "redis.log"
        lines = log.read_text(errors="replace").splitlines() if log.exists() else []
        return lines[-1].strip() if lines else f"no log in {log}"

    def stop(self, *, kill: bool = False) -> None:
        """Stops the server; `kill` is a crash (SIGKILL), for tests of what survives one."""
        if self.proc is None:
            return
        if kill:
            self.proc.kill()
        elif self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


def _end_with_parent() -> None:
    """In the child before exec: SIGTERM when the process that started it dies (Linux's
    PR_SET_PDEATHSIG), so a server in a session of its own is not left behind by an owner
    that was killed. Elsewhere nothing."""
    import ctypes
    import signal

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
