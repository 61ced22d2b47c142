"""Small shared helpers: the emulator clock, timestamps, node ids and tokens."""

from __future__ import annotations

import base64
import threading
import time
from datetime import UTC, datetime

DOCS = "https://docs.github.com/rest"


class Clock:
    """Wall-clock time plus an adjustable offset, so tests can age tokens without sleeping."""

    def __init__(self) -> None:
        self._offset = 0.0
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return time.time() + self._offset

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._offset += seconds


def iso(ts: float | None) -> str | None:
    """Epoch seconds -> GitHub's ISO-8601 form (`2026-01-01T00:00:00Z`); None stays None."""
    if ts is None:
        return None
    return datetime.fromtimestamp(int(ts), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_id(kind: str, number: int) -> str:
    """A stable GraphQL-style node id, e.g. node_id("PR", 7) -> "PR_kwDOAAAAAAc"."""
    raw = number.to_bytes(8, "big")
    return f"{kind}_kwDO{base64.urlsafe_b64encode(raw).decode().rstrip('=')}"


def legacy_node_id(kind: str, number: int) -> str:
    """The older base64 node id form used in webhook examples (`MDQ6VXNlcjE=`)."""
    return base64.b64encode(f"0{len(kind)}:{kind}{number}".encode()).decode()


class Counter:
    """A thread-safe monotonically increasing id source."""

    def __init__(self, start: int) -> None:
        self._next = start
        self._lock = threading.Lock()

    def __call__(self) -> int:
        with self._lock:
            value = self._next
            self._next += 1
            return value
