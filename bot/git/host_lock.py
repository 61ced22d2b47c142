"""A lock the processes of one host take in turn on a file beside what they change (a mirror,
the downstream copy): git and carry's exports are not safe to run twice at once on one path."""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def host_lock(path: Path) -> Iterator[None]:
    """Holds an exclusive flock on `path` (created if missing) until the block ends."""
    with open(path, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
