"""5. mirrors: a git mirror damaged in several ways; carry must recover or say why not."""

from __future__ import annotations

import contextlib
import logging
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

from bench.reliability.common import FIX, Row, Scale, _fsck, run_engine
from bot.git.engine import PatchInput
from bot.git.mirror import Mirror, MirrorError
from bot.git.runner import GitError
from harness.carry_env import BODY
from harness.gitrepo import RepoBuilder

CORRUPTIONS: dict[str, Callable[[Path], None]] = {}


def corruption(name: str) -> Callable[[Callable[[Path], None]], Callable[[Path], None]]:
    def register(fn: Callable[[Path], None]) -> Callable[[Path], None]:
        CORRUPTIONS[name] = fn
        return fn

    return register


@corruption("mirror deleted")
def _delete_mirror(path: Path) -> None:
    shutil.rmtree(path)


@corruption("objects deleted")
def _delete_objects(path: Path) -> None:
    for child in (path / "objects").iterdir():
        if child.name not in ("info",):
            shutil.rmtree(child) if child.is_dir() else child.unlink()
    (path / "objects" / "pack").mkdir(exist_ok=True)


@corruption("pack truncated")
def _truncate_pack(path: Path) -> None:
    packs = sorted((path / "objects" / "pack").glob("*.pack"))
    if not packs:
        subprocess.run(["git", "--git-dir", str(path), "repack", "-adq"], check=True)
        packs = sorted((path / "objects" / "pack").glob("*.pack"))
    for pack in packs:
        pack.chmod(0o644)
        with open(pack, "r+b") as handle:
            handle.truncate(pack.stat().st_size // 2)


@corruption("HEAD and config garbage")
def _garbage_head(path: Path) -> None:
    (path / "HEAD").write_bytes(b"\x00garbage")
    (path / "config").write_bytes(b"[core\n bare = maybe\n")


def _upstream(root: Path) -> tuple[RepoBuilder, list[PatchInput], str]:
    up = RepoBuilder(root / "upstream")
    up.commit("base", {"mod.py": BODY})
    for n in range(30):
        up.commit(f"change {n}", {f"f{n}.py": f"v = {n}\n" * 50})
    up.checkout("main", new_branch="fix")
    up.commit("Carried fix", FIX)
    patch = up.git("format-patch", "--stdout", "main..fix").encode() + b"\n"
    up.checkout("main")
    head = up.commit("upstream moves", {"late.py": "x = 1\n"})
    return up, [PatchInput("0001-fix.patch", patch)], head


def scenario_mirror(root: Path, _scale: Scale) -> Row:
    up, patches, head = _upstream(root)
    outcomes: list[tuple[str, str, str, str]] = []
    for name, damage in CORRUPTIONS.items():
        cache = root / f"cache-{len(outcomes)}"
        mirror = Mirror(str(up.path), cache)
        baseline = run_engine(mirror, head, patches)
        damage(mirror.path)
        outcomes.append((name, baseline, *_after_damage(up, cache, head, patches)))
    failed = [o for o in outcomes if o[2] != o[1]]
    return Row(
        "corrupted or deleted mirror",
        f"{len(outcomes)} kinds of damage to a warm bare mirror ("
        + ", ".join(o[0] for o in outcomes)
        + "), then the engine run again as a rebase does",
        "0 (no state is kept in the mirror)",
        "0",
        "; ".join(
            f"{name}: " + (f"OK, {how}" if result == baseline else f"NOT fully recovered: {how}")
            for name, baseline, result, how in outcomes
        ),
        ok=not failed,
    )


def _after_damage(
    up: RepoBuilder, cache: Path, head: str, patches: list[PatchInput]
) -> tuple[str, str]:
    """(engine result after the damage, how it got there): a first run as the rebase task
    does it and, when that fails, the task's retry on the same cache."""
    path = Mirror(str(up.path), cache).path
    existed = path.exists()
    attempts: list[str] = []
    with _mirror_warnings() as warnings:
        for _attempt in range(2):
            try:
                result = run_engine(Mirror(str(up.path), cache), head, patches)
                break
            except (MirrorError, GitError) as err:
                attempts.append(_short(err))
        else:
            return "error", f"every attempt failed: {attempts[0]}"
    if not existed:
        how = "ensure() re-created it"
    elif warnings:
        how = "ensure() saw it corrupt and re-created it"
    else:
        how = "fetched into the damaged mirror"
    if attempts:
        how = f"1st attempt failed ({attempts[0][:70]}), the task's retry worked, {how}"
    fsck = _fsck(path)
    return (result, f"{how}; {fsck}") if "clean" in fsck else ("damaged", f"{how}; {fsck}")


def _short(err: Exception) -> str:
    """git's own words, without the 'cannot fetch from <path>:' carry puts in front."""
    text = " ".join(str(err).split())
    text = re.sub(r"^cannot (fetch from|read repository) \S+: ", "", text)
    return re.sub(r"(?<!\S)/(?:[^\s/]+/)+", ".../", text)[:90]  # absolute paths: last part


@contextlib.contextmanager
def _mirror_warnings() -> Iterator[list[str]]:
    seen: list[str] = []

    class Catch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    logger = logging.getLogger("carry.mirror")
    handler = Catch(logging.WARNING)
    logger.addHandler(handler)
    try:
        yield seen
    finally:
        logger.removeHandler(handler)
