"""Replacing a directory that other processes read, so that a reader never finds it missing or
half-written: the new copy is made beside it, then the two are exchanged in one step.

Linux's renameat2(RENAME_EXCHANGE) swaps two paths atomically; where the kernel, the C library
or the file system lacks it, the old directory is renamed aside and the new one into place (two
renames: a reader can find the path missing only between them, never half-deleted)."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import tempfile
from pathlib import Path

AT_FDCWD = -100
RENAME_EXCHANGE = 2


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name, use_errno=True) if name else None
    except OSError:
        return None


_LIBC = _libc()


def exchange(a: Path, b: Path) -> bool:
    """Swaps paths `a` and `b` atomically; False where the system cannot."""
    call = getattr(_LIBC, "renameat2", None)
    if call is None:
        return False
    done = call(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE)
    return done == 0


def replace_dir(new: Path, target: Path) -> None:
    """Puts directory `new` at `target` (which may not exist yet) and removes the old one."""
    if not target.exists():
        new.rename(target)
        return
    if exchange(new, target):
        shutil.rmtree(new)  # the old copy, now at `new`
        return
    aside = Path(tempfile.mkdtemp(prefix=".replaced-", dir=target.parent))
    target.rename(aside / target.name)
    new.rename(target)
    shutil.rmtree(aside)
