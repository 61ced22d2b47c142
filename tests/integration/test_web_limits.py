"""The web process serves at most CARRY_WEB_MAX_CONNECTIONS connections at once: slow clients
cannot grow its memory without bound (bench/reliability.py --scenario intake-abuse measures
what each costs), and a request beyond the cap gets 503 at once."""

from __future__ import annotations

import contextlib
import secrets
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from harness.carry_env import CarryEnv, wait_for

CAP = 8


@pytest.fixture
def web(tmp_path: Path, redis_url: str) -> Iterator[str]:
    carry = CarryEnv(tmp_path, redis_url)
    carry.carry_patches([])
    carry.write_config()
    carry.extra_env["CARRY_WEB_MAX_CONNECTIONS"] = str(CAP)
    try:
        yield carry.start_web()
    finally:
        carry.stop()


def slow_body(url: str, n: int) -> socket.socket:
    """A signed-looking webhook POST (its own delivery id) whose body stops after one byte."""
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=5)
    head = (
        "POST /webhooks/github HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"X-GitHub-Event: push\r\nX-GitHub-Delivery: slow-{n}\r\n"
        f"X-Hub-Signature-256: sha256={secrets.token_hex(32)}\r\nContent-Length: 2048\r\n\r\n{{"
    )
    sock.sendall(head.encode())
    return sock


def answer(sock: socket.socket, wait_s: float) -> bytes:
    sock.settimeout(wait_s)
    try:
        return sock.recv(64)
    except TimeoutError:
        return b""


def test_connections_beyond_the_cap_get_503_at_once(web: str) -> None:
    with contextlib.ExitStack() as held:
        slow = [held.enter_context(slow_body(web, n)) for n in range(4 * CAP)]
        time.sleep(1)
        answers = [answer(sock, 0.2) for sock in slow]
    refused = [a for a in answers if a.startswith(b"HTTP/1.1 503")]
    # Without a cap every one of them waits for its body, then gets 408 after 10 s.
    assert len(refused) >= 2 * CAP, answers
    assert all(a == b"" or a.startswith(b"HTTP/1.1 503") for a in answers), answers
    # The slow clients gone, the web process answers again.
    assert wait_for(
        lambda: httpx.get(f"{web}/healthz", timeout=5).status_code == 200, 15, "an answer again"
    )
