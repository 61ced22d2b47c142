"""No check leaves anything behind: the mirror's directory (outside its object database) is the
same after any kind of patch, and an answer never depends on which patches were checked before."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from bot.core.classify import Status
from bot.git.engine import Engine, PatchInput
from bot.git.mirror import Mirror
from bot.git.touchindex import FILE_NAME as TOUCH_INDEX
from harness.gitrepo import RepoBuilder
from tests.support.engine import BODY
from tests.support.engine_checks import check, only, patches_of


@pytest.fixture
def up(make_repo) -> RepoBuilder:
    repo = make_repo("upstream")
    repo.commit("base", {"mod.py": BODY, "other.py": "alpha = first_value()\nbeta = 2\n"})
    return repo


def outside_objects(git_dir: Path) -> dict[str, str]:
    """Every file of a bare repository but its objects and the touch index, by content."""
    found = {}
    for path in sorted(git_dir.rglob("*")):
        relative = path.relative_to(git_dir)
        if relative.parts[0] == "objects" or relative.name.startswith(TOUCH_INDEX):
            continue
        found[str(relative)] = hashlib.sha1(path.read_bytes()).hexdigest() if path.is_file() else ""
    return found


def branch_patch(up: RepoBuilder, out: Path, files: dict, message: str) -> list[PatchInput]:
    up.checkout("main", new_branch=out.name)
    up.commit(message, files)
    patches = patches_of(up, "main..HEAD", out)
    up.checkout("main")
    return patches


def every_kind(up: RepoBuilder, tmp_path: Path) -> list[PatchInput]:
    """Patches that apply, conflict, create files (also where upstream created the same path),
    delete, rename, change a mode and carry binary content."""
    kinds = {
        "applies": {"mod.py": BODY.replace("compute(3)", "compute(3, fast=True)")},
        "conflicts": {"mod.py": BODY.replace("compute(8)", "compute(8, a=1)")},
        "creates": {"created.py": "made = True\n"},
        "creates-clash": {"clash.py": "ours = 1\n"},
        "deletes": {"other.py": None},
        "binary": {"blob.bin": bytes(range(256)) * 4},
    }
    patches = [
        p
        for name, files in kinds.items()
        for p in branch_patch(up, tmp_path / name, files, f"Carry {name}")
    ]
    up.checkout("main", new_branch="renames")
    up.git("mv", "other.py", "renamed.py")
    up.commit("Carry a rename")
    up.git("update-index", "--chmod=+x", "mod.py")
    up.commit("Carry a mode change")
    patches += patches_of(up, "main..HEAD", tmp_path / "renames")
    up.checkout("main")
    up.commit(
        "upstream moves on",
        {"mod.py": BODY.replace("compute(8)", "c8()"), "clash.py": "theirs = 2\n"},
    )
    return patches


def test_the_mirror_directory_is_unchanged_by_every_kind_of_patch(up, tmp_path):
    patches = every_kind(up, tmp_path)
    mirror = Mirror(str(up.path), tmp_path / "cache")
    head = mirror.resolve("main").sha
    before = outside_objects(mirror.path)
    engine = Engine(mirror)
    for patch in patches:  # one at a time: each on the head alone
        engine.check(head, [patch])
    engine.check(head, patches)  # and as one series
    Engine(mirror, in_process=False).check(head, patches)
    assert outside_objects(mirror.path) == before


def test_an_answer_does_not_depend_on_the_patches_checked_before(up, tmp_path):
    """A conflicted 3-way apply of a new file once left that file in the mirror's directory,
    and the next patch creating the same path failed with "does not match index"."""
    ours = branch_patch(up, tmp_path / "ours", {"clash.py": "ours = 1\n"}, "Add clash ours")
    same = branch_patch(up, tmp_path / "same", {"clash.py": "theirs = 2\n"}, "Add clash same")
    up.commit("upstream adds the file", {"clash.py": "theirs = 2\n"})
    fresh = only(check(up, "main", same, tmp_path / "fresh"))
    warm = Engine(Mirror(str(up.path), tmp_path / "warm"))
    assert only(warm.check("main", ours)).status == Status.CONFLICT
    again = only(warm.check("main", same))
    assert (again.status, again.decision, again.reason) == (
        fresh.status,
        fresh.decision,
        fresh.reason,
    )
    assert again.evidence == fresh.evidence
