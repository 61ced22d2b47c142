"""Loaded series directories, kept while their files are unchanged.

The dashboard's overview shows every series' patches and fix pages; loading a directory parses
each of its patch files and pages, so at 200 series of 30 patches the overview parsed 12,000
patch files a request (seconds). A directory's load is kept with the name, size and mtime of
each of its entries, and used again while a listing finds them all the same: a request then
stats the files instead of parsing them."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

T = TypeVar("T")

Fingerprint = tuple[tuple[str, int, int], ...]


def fingerprint(directory: Path) -> Fingerprint | None:
    """Each entry's name, size and mtime (ns), sorted; None when the directory cannot be read."""
    try:
        with os.scandir(directory) as entries:
            found = []
            for entry in entries:
                stat = entry.stat()
                found.append((entry.name, stat.st_size, stat.st_mtime_ns))
    except OSError:
        return None
    return tuple(sorted(found))


@dataclass
class DirectoryCache(Generic[T]):
    """directory -> what `load` made of it, for as long as its fingerprint holds."""

    _kept: dict[Path, tuple[Fingerprint, T]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self, directory: Path, load: Callable[[Path], T]) -> T:
        now = fingerprint(directory)
        if now is None:  # gone or unreadable: nothing to keep, the loader says why
            return load(directory)
        with self._lock:
            kept = self._kept.get(directory)
        if kept is not None and kept[0] == now:
            return kept[1]
        value = load(directory)
        if fingerprint(directory) == now:  # not changed while it was read
            with self._lock:
                self._kept[directory] = (now, value)
        return value
