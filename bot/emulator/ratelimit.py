"""Primary rate limit bookkeeping and the x-ratelimit-* headers."""

from __future__ import annotations

import math
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


# GitHub's docs ("Rate limits for the REST API", About secondary rate limits): "In general, no
# more than 80 content-generating requests per minute and no more than 500 content-generating
# requests per hour are allowed." Over them, GitHub answers 403 (or 429) saying a secondary
# rate limit was exceeded, with a Retry-After header when it says how long to wait.
CONTENT_LIMITS: tuple[tuple[int, int], ...] = ((60, 80), (3600, 500))


class ContentLimiter:
    """The secondary limit on content creation: each identity's REST writes (POST, PATCH, PUT,
    DELETE) in the last minute and hour. A refused write does not count."""

    def __init__(self, clock: Clock, limits: tuple[tuple[int, int], ...] = CONTENT_LIMITS):
        self.clock = clock
        self.limits = limits
        self._writes: dict[str, list[float]] = {}
        self._lock = threading.Lock()

    def take(self, key: str) -> int | None:
        """Counts one write of `key`; None when allowed, else the Retry-After in seconds."""
        with self._lock:
            now = self.clock.now()
            longest = max((window for window, _ in self.limits), default=0)
            recent = [t for t in self._writes.get(key, []) if t > now - longest]
            wait = 0.0
            for window, limit in self.limits:
                inside = [t for t in recent if t > now - window]
                if len(inside) >= limit:
                    wait = max(wait, inside[len(inside) - limit] + window - now)
            self._writes[key] = recent
            if wait > 0:
                return max(1, math.ceil(wait))
            recent.append(now)
            return None

    def writes(self, key: str) -> int:
        """The writes of `key` counted in the longest window."""
        with self._lock:
            now = self.clock.now()
            longest = max((window for window, _ in self.limits), default=0)
            return len([t for t in self._writes.get(key, []) if t > now - longest])
