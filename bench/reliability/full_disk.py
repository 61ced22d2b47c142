"""6. full disk: the mirror's file system fills up mid-fetch."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

from bench.reliability.common import FIX, Row, Scale, _fsck, run_engine
from bot.git.engine import PatchInput
from bot.git.mirror import Mirror, MirrorError
from bot.git.runner import GitError
from harness.carry_env import BODY
from harness.gitrepo import RepoBuilder


def scenario_full_disk(root: Path, _scale: Scale) -> Row:
    cache = root / "small-cache"
    cache.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(cache)], capture_output=True
    )
    if mounted.returncode != 0:
        return Row(
            "full disk in the cache directory",
            "skipped: a 3 MB tmpfs cannot be mounted here (needs root / CAP_SYS_ADMIN): "
            + mounted.stderr.decode(errors="replace").strip()[:80],
            "-",
            "-",
            "-",
            ok=True,
        )
    try:
        return _full_disk(root, cache)
    finally:
        subprocess.run(["umount", "-l", str(cache)], capture_output=True)


def _full_disk(root: Path, cache: Path) -> Row:
    up = RepoBuilder(root / "big-upstream")
    up.commit("base", {"mod.py": BODY})
    rng = random.Random(3)
    blobs = {f"blob{n}.bin": rng.randbytes(512 * 1024) for n in range(10)}  # 5 MB, no gain
    up.checkout("main", new_branch="fix")
    up.commit("Carried fix", FIX)
    patch = [PatchInput("0001-fix.patch", up.git("format-patch", "--stdout", "main..fix").encode())]
    up.checkout("main")
    head = up.commit("big files", blobs)
    mirror = Mirror(str(up.path), cache)
    error = _engine_error(mirror, head, patch)
    fsck_full = _fsck(mirror.path)
    subprocess.run(["mount", "-o", "remount,size=64m", str(cache)], check=True)
    after = _engine_error(Mirror(str(up.path), cache), head, patch)
    fsck_after = _fsck(mirror.path)
    clear = error is not None and "No space left on device" in error
    return Row(
        "full disk in the cache directory",
        "the mirror cache on a 3 MB tmpfs, an upstream head with 5 MB of incompressible files; "
        "then the filesystem grown to 64 MB and the same rebase run again",
        "0 (nothing is stored when a fetch fails)",
        "0",
        f"clear error: {'yes' if clear else 'NO'} ({_around(error, 'No space left')}); "
        f"mirror while full: {fsck_full}; after space came back: "
        f"{'rebased OK' if after is None else 'failed: ' + after[:60]}, {fsck_after}",
        ok=clear and after is None and "fsck clean" in fsck_after,
    )


def _around(text: str | None, phrase: str) -> str:
    if not text:
        return "no error"
    at = text.find(phrase)
    return text[:100] if at < 0 else "..." + text[max(0, at - 60) : at + 40]


def _engine_error(mirror: Mirror, head: str, patches: list[PatchInput]) -> str | None:
    try:
        run_engine(mirror, head, patches)
    except (MirrorError, GitError, OSError) as err:
        return " ".join(str(err).split())
    return None
