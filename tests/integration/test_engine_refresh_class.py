"""Issue 35: each refreshed patch is `context-only` (the same `+`/`-` lines, moved or with new
context) or `content-changed` (its `+`/`-` lines changed), the latter with the upstream commit
that forced it."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.core.classify import Status
from bot.git.engine import Engine, PatchInput
from bot.git.mirror import Mirror
from harness.gitrepo import RepoBuilder
from tests.support.engine import check

BODY = "".join(f"value_{i} = compute({i})\n" for i in range(1, 61))
FUNC = "def frobnicate(widget):\n    return widget.scale(level=2, mode='strict')\n"
HELPER = "def helper_for_frobnicate(widget):\n    return widget.prepare(strict=True, timeout=30)\n"


def mine() -> str:
    text = BODY.replace("value_10 = compute(10)\n", "value_10 = compute(10)\n" + FUNC)
    return text.replace("value_50 = compute(50)\n", "value_50 = compute(50)\n" + HELPER)


@pytest.fixture
def up(make_repo) -> RepoBuilder:
    repo = make_repo("upstream")
    repo.commit("base", {"mod.py": BODY})
    return repo


def carried(up: RepoBuilder, tmp_path: Path) -> tuple[list[PatchInput], str]:
    up.checkout("main", new_branch="down")
    up.commit("Add frobnicate and its helper", {"mod.py": mine()})
    (made,) = up.format_patch("main..down", tmp_path / "patches")
    up.checkout("main")
    return [PatchInput(str(made), made.read_bytes())], up.head("main")


@pytest.mark.parametrize("in_process", [True, False])
def test_a_patch_whose_context_moved_is_context_only(up, tmp_path, in_process):
    patches, base = carried(up, tmp_path)
    up.commit("Import os", {"mod.py": "import os\n" + BODY})
    engine = Engine(Mirror(str(up.path), tmp_path / "cache"), in_process=in_process)
    try:
        (p,) = engine.check("main", patches, base=base).patches
    finally:
        engine.close()
    assert p.changed and p.status == Status.APPLIES_MOVED
    assert p.refresh == {"class": "context-only"}
    assert p.as_dict()["refresh"] == {"class": "context-only"}


def test_a_patch_with_new_context_lines_is_context_only(up, tmp_path):
    """Upstream edits a context line of the first hunk: the 3-way refresh gives the patch new
    context, its own lines stay."""
    patches, base = carried(up, tmp_path)
    up.commit("Tune value 9", {"mod.py": BODY.replace("compute(9)", "compute(9, fast=True)")})
    p = check(up, patches, tmp_path, base=base)
    assert p.changed, p.reason
    assert p.refresh == {"class": "context-only"}


@pytest.mark.parametrize("with_base", [True, False])
def test_a_patch_whose_lines_upstream_took_in_part_is_content_changed_and_names_the_commit(
    up, tmp_path, with_base
):
    patches, base = carried(up, tmp_path)
    took = up.commit(
        "Add the frobnicate helper (#88)",
        {"mod.py": BODY.replace("value_50 = compute(50)\n", "value_50 = compute(50)\n" + HELPER)},
    )
    up.commit("Unrelated", {"other.py": "x = 1\n"})
    p = check(up, patches, tmp_path, **({"base": base} if with_base else {}))
    assert p.status == Status.PARTIAL and p.changed
    assert p.refresh["class"] == "content-changed"
    (forced,) = p.refresh["forced_by"]
    assert forced["file"] == "mod.py" and forced["hunk"].startswith("@@ -48,")
    assert (forced["sha"], forced["subject"], forced["pr"]) == (
        took,
        "Add the frobnicate helper (#88)",
        88,
    )
