"""A mirror whose refs name objects it no longer has (deleted objects, a truncated pack) is
re-created and fetched again, not trusted because its ref file still holds the right SHA
(the fast path that skips a fetch for a head the mirror holds read only the ref)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from bot.git.mirror import Mirror, MirrorError
from harness.gitrepo import RepoBuilder, git


def delete_objects(mirror: Path) -> None:
    for entry in (mirror / "objects").iterdir():
        if entry.name not in ("info", "pack"):
            shutil.rmtree(entry)
    for pack in (mirror / "objects" / "pack").iterdir():
        pack.unlink()


def truncate_packs(mirror: Path) -> None:
    git(mirror, "repack", "-a", "-d", "-q")
    for pack in (mirror / "objects" / "pack").glob("*.pack"):
        data = pack.read_bytes()
        pack.chmod(0o644)
        pack.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize("damage", [delete_objects, truncate_packs])
def test_a_mirror_missing_the_objects_its_refs_name_is_repaired(
    make_repo: Callable[[str], RepoBuilder], tmp_path: Path, damage: Callable[[Path], None]
) -> None:
    up = make_repo("upstream")
    for n in range(3):
        up.commit(f"commit {n}", {"mod.py": f"value = {n}\n"})
    mirror = Mirror(str(up.path), tmp_path / "cache")
    head = mirror.resolve("main").sha
    damage(mirror.path)
    assert Mirror(str(up.path), tmp_path / "cache").resolve("main").sha == head
    git(mirror.path, "fsck", "--no-progress")  # raises on a broken object store
    assert mirror.has_commit(head)


@pytest.mark.parametrize("source", ["-uabc@x:", "--upload-pack=touch pwned", "-"])
def test_a_repository_that_git_would_read_as_an_option_is_refused(
    tmp_path: Path, source: str
) -> None:
    """An upstream named like an option never reaches git (scp-like `-u…@host:` did: git said
    "unknown switch `u'")."""
    with pytest.raises(MirrorError, match="starts with '-': git would read it as an option"):
        Mirror(source, cache_dir=tmp_path)
    assert not (tmp_path / "mirrors").exists()
