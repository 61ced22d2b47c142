"""Primary rate limit bookkeeping and the x-ratelimit-* headers."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from .util import Clock

WINDOW = 3600


@dataclass
class Window:
    limit: int
    used: int
    reset: int

    @property
    def remaining(self) -> int:
        return max(self.limit - self.used, 0)

    def headers(self, resource: str = "core") -> dict[str, str]:
        return {
            "X-RateLimit-Limit": str(self.limit),
            "X-RateLimit-Remaining": str(self.remaining),
            "X-RateLimit-Used": str(self.used),
            "X-RateLimit-Reset": str(self.reset),
            "X-RateLimit-Resource": resource,
        }

    def as_dict(self) -> dict[str, int]:
        return {
            "limit": self.limit,
            "remaining": self.remaining,
            "reset": self.reset,
            "used": self.used,
        }


class RateLimiter:
    """One hourly window per identity (token user, installation, app, anonymous address)."""

    def __init__(self, clock: Clock, limit: int = 5000, anonymous_limit: int = 60) -> None:
        self.clock = clock
        self.limit = limit
        self.anonymous_limit = anonymous_limit
        self._windows: dict[str, Window] = {}
        self._lock = threading.Lock()

    def window(self, key: str) -> Window:
        with self._lock:
            return self._current(key)

    def _current(self, key: str) -> Window:
        now = int(self.clock.now())
        found = self._windows.get(key)
        if found is None or found.reset <= now:
            limit = self.anonymous_limit if key.startswith("anonymous") else self.limit
            found = Window(limit=limit, used=0, reset=now + WINDOW)
            self._windows[key] = found
        return found

    def consume(self, key: str) -> tuple[Window, bool]:
        """Counts one call; (window, allowed). A refused call does not count."""
        with self._lock:
            window = self._current(key)
            if window.remaining <= 0:
                return window, False
            window.used += 1
            return window, True

    def refund(self, key: str) -> Window:
        """Takes back one counted call (a 304 answer to an authorized conditional request)."""
        with self._lock:
            window = self._current(key)
            window.used = max(window.used - 1, 0)
            return window

    def set(self, key: str, *, remaining: int | None = None, limit: int | None = None) -> Window:
        with self._lock:
            window = self._current(key)
            if limit is not None:
                window.limit = limit
            if remaining is not None:
                window.used = window.limit - remaining
            return window
