"""Real Redis for tests: the machine's server on 127.0.0.1:6379, or a private redis-server."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def answers(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=0.5).ping())
    except redis.RedisError:
        return False


@dataclass
class PrivateRedis:
    """A redis-server process of our own, optionally with AOF, that tests may stop and restart."""

    workdir: Path
    appendonly: bool = True
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> PrivateRedis:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        self.workdir.mkdir(parents=True, exist_ok=True)
        argv = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.workdir)]
        argv += ["--save", "", "--daemonize", "no", "--logfile", str(self.workdir / "redis.log")]
        if self.appendonly:
            argv += ["--appendonly", "yes", "--appendfsync", "always"]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not answers(self.url):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                log = (self.workdir / "redis.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"private redis-server did not start: {log}")
            time.sleep(0.05)
        return self

    def stop(self, *, kill: bool = False) -> None:
        if self.proc is None:
            return
        if kill:
            self.proc.kill()
        else:
            self.proc.terminate()
        self.proc.wait(timeout=10)
        self.proc = None
