"""A file upstream moved after the patch was made: the patch follows it to its new path."""

from __future__ import annotations

import pytest

from bot.core.classify import Decision, Status
from harness.gitrepo import RepoBuilder
from tests.support.engine import BODY
from tests.support.engine_checks import check, only, patches_of, signals

FIXED = BODY.replace("compute(12)", "compute(12, retries=3)")


@pytest.fixture
def up(make_repo) -> RepoBuilder:
    repo = make_repo("upstream")
    repo.commit("base", {"tests/test_basic.py": BODY, "README": "hello\n"})
    return repo


def carried(up: RepoBuilder, tmp_path) -> list:
    up.checkout("main", new_branch="fix")
    up.commit("Retry value 12", {"tests/test_basic.py": FIXED})
    patches = patches_of(up, "main..fix", tmp_path / "patches")
    up.checkout("main")
    return patches


def move(up: RepoBuilder) -> str:
    (up.path / "tests" / "v1" / "e2e" / "general").mkdir(parents=True)
    up.git("mv", "tests/test_basic.py", "tests/v1/e2e/general/test_basic.py")
    return up.commit("Reorganize the tests (#900)")


def test_a_change_upstream_holds_under_the_new_path_is_contained(up, tmp_path):
    patches = carried(up, tmp_path)
    moved = move(up)
    up.commit("upstream takes the fix", {"tests/v1/e2e/general/test_basic.py": FIXED})
    p = only(check(up, "main", patches, tmp_path))
    assert (p.status, p.decision) == (Status.CONTAINED, Decision.DROP)
    rename = signals(p)["renamed-upstream"]
    assert rename == {
        "signal": "renamed-upstream",
        "from": "tests/test_basic.py",
        "to": "tests/v1/e2e/general/test_basic.py",
        "commit": moved,
    }


def test_a_change_upstream_lacks_is_kept_and_refreshed_onto_the_new_path(up, tmp_path):
    patches = carried(up, tmp_path)
    move(up)
    p = only(check(up, "main", patches, tmp_path))
    assert p.decision == Decision.KEEP
    assert p.status in (Status.APPLIES, Status.APPLIES_MOVED)
    assert p.changed and p.refreshed is not None
    assert b"diff --git a/tests/v1/e2e/general/test_basic.py b/tests/v1/e2e/general/" in p.refreshed
    assert b"tests/test_basic.py" not in p.refreshed.split(b"diff --git", 1)[1]
