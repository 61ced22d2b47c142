"""Loaded series directories, kept while their files are unchanged.

The dashboard's overview shows every series' patches and fix pages; loading a directory parses
each of its patch files and pages, so at 200 series of 30 patches the overview parsed 12,000
patch files a request (seconds). A directory's load is kept with the name, size and mtime of
each of its entries, and used again while a listing finds them all the same: a request then
stats the files instead of parsing them.

The same holds for what the overview makes of each series' stored document (its summary and
its row's patches cell): kept with the document's digest and the directory's load, and made
again only when either changed; an unchanged document is not even parsed."""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

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


def identity(directory: Path) -> Fingerprint | None:
    """For a directory that is only ever replaced whole, never edited in place (carry's copy of
    the downstream repository's series, exported from GitHub: a new tree renamed into place,
    bot.git.downstream.Downstream.export): the directory's own inode and change time, which
    every replacement changes, without a look at its entries (at 200 series of 30 patches,
    statting every file was half of the overview's time). None when it cannot be read."""
    try:
        stat = directory.stat()
    except OSError:
        return None
    return (("", stat.st_ino, stat.st_ctime_ns),)


@dataclass
class DirectoryCache(Generic[T]):
    """directory -> what `load` made of it, for as long as its fingerprint holds (`version`:
    fingerprint, or identity for directories that are only ever replaced whole)."""

    version: Callable[[Path], Fingerprint | None] = fingerprint
    _kept: dict[Path, tuple[Fingerprint, T]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self, directory: Path, load: Callable[[Path], T]) -> T:
        now = self.version(directory)
        if now is None:  # gone or unreadable: nothing to keep, the loader says why
            return load(directory)
        with self._lock:
            kept = self._kept.get(directory)
        if kept is not None and kept[0] == now:
            return kept[1]
        value = load(directory)
        if self.version(directory) == now:  # not changed while it was read
            with self._lock:
                self._kept[directory] = (now, value)
        return value


# --------------------------------------------------------------------------- stored series


def document_digest(raw: bytes) -> str:
    """A document's version: its sha1, as the store's commit script computes it."""
    return hashlib.sha1(raw, usedforsecurity=False).hexdigest()


@dataclass
class Kept(Generic[T]):
    """What was made of one series: its summary, and what pages made of that (`derived`:
    name -> value, e.g. a row's rendered cell), kept together and dropped together."""

    digest: str
    source: object  # the directory's load it was made with (compared by identity)
    value: T
    derived: dict[str, Any] = field(default_factory=dict)


@dataclass
class SeriesCache(Generic[T]):
    """series id -> what was made of its stored document and its directory's load, for as long
    as both are the same: the document by its digest, the load by identity (DirectoryCache
    hands out the same object while the directory's files are unchanged; an error message,
    a string, by equality)."""

    _kept: dict[str, Kept[T]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self, series_id: str, digest: str, source: object) -> Kept[T] | None:
        with self._lock:
            kept = self._kept.get(series_id)
        if kept is None or kept.digest != digest:
            return None
        same = kept.source is source or (isinstance(source, str) and kept.source == source)
        return kept if same else None

    def put(self, series_id: str, digest: str, source: object, value: T) -> Kept[T]:
        kept = Kept(digest, source, value)
        with self._lock:
            self._kept[series_id] = kept
        return kept

    def keep_only(self, series_ids: set[str]) -> None:
        """Forget series no longer stored."""
        with self._lock:
            for gone in set(self._kept) - series_ids:
                del self._kept[gone]
