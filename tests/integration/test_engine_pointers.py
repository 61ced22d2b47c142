"""Issue 35: every human decision comes with a pointer. A conflict's hunks name the upstream
commits that touched their lines; a patch upstream took in some form names the commit (and PR)
that brought upstream's version, and shows upstream's text against the patch's per hunk."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.core.classify import Decision, Status
from bot.git.engine import PatchInput
from harness.gitrepo import RepoBuilder
from tests.support.engine import BODY, FUNC, check
from tests.support.int8_loader import FIXED, LOADER, READDED, TITLE

PINS = "".join(f"release_{i} = pinned({i})\n" for i in range(10))


def patches_of(repo: RepoBuilder, rev_range: str, out: Path) -> list[PatchInput]:
    return [PatchInput(str(p), p.read_bytes()) for p in repo.format_patch(rev_range, out)]


@pytest.fixture
def up(make_repo) -> RepoBuilder:
    repo = make_repo("upstream")
    repo.commit("base", {"mod.py": BODY, "other.py": "alpha = first_value()\nbeta = 2\n"})
    return repo


def release_patch(up: RepoBuilder, tmp_path: Path) -> list[PatchInput]:
    """A fix made on a release branch whose own commits moved the file's lines by ten."""
    up.checkout("main", new_branch="release")
    up.commit("Pin release values", {"mod.py": PINS + BODY})
    up.commit(
        "Fix value 25", {"mod.py": PINS + BODY.replace("compute(25)", "compute(25, mine=True)")}
    )
    patches = patches_of(up, "HEAD~1..HEAD", tmp_path / "patches")
    up.checkout("main")
    return patches


@pytest.mark.parametrize("with_base", [True, False])
def test_a_conflict_names_the_commits_that_touched_its_lines_on_a_release_branch_patch(
    up, tmp_path, with_base
):
    """Fails on af85829 (`"upstream_commits": []`): the patch's line numbers are the release
    branch's, ten lines below main's, and the lines were followed from the wrong place."""
    patches = release_patch(up, tmp_path)
    rework = up.commit(
        "Rework value 25 (#42)", {"mod.py": BODY.replace("compute(25)", "other(25)")}
    )
    up.commit("Touch the end", {"mod.py": BODY.replace("compute(25)", "other(25)") + "tail = 1\n"})
    base = {"base": up.head("release~1")} if with_base else {}
    p = check(up, patches, tmp_path, **base)
    assert (p.status, p.decision) == (Status.CONFLICT, Decision.KEEP)
    (hunk,) = p.conflict["hunks"]
    assert [c["sha"] for c in hunk["upstream_commits"]] == [rework]
    # upstream's text where the patch's lines belong, against the patch's
    assert "+value_25 = other(25)" in hunk["upstream_diff"].splitlines()
    assert "-value_25 = compute(25, mine=True)" in hunk["upstream_diff"].splitlines()


def test_without_a_base_a_conflict_names_the_recent_commits_that_touched_its_lines(up, tmp_path):
    """A patch from a downstream upstream never saw: no range, so the file's newest commits are
    searched; only the one that touched the hunk's lines is named, not every recent one."""
    up.checkout("main", new_branch="down")
    up.commit("Fix value 25", {"mod.py": BODY.replace("compute(25)", "compute(25, mine=True)")})
    (made,) = patches_of(up, "main..down", tmp_path / "patches")
    up.checkout("main")
    sha = made.data.split(b" ", 2)[1]
    patches = [PatchInput(made.name, made.data.replace(sha, b"f" * 40, 1))]
    rework = up.commit("Rework value 25", {"mod.py": BODY.replace("compute(25)", "other(25)")})
    up.commit("Touch the end", {"mod.py": BODY.replace("compute(25)", "other(25)") + "tail = 1\n"})
    p = check(up, patches, tmp_path)
    assert p.status == Status.CONFLICT
    (hunk,) = p.conflict["hunks"]
    assert [c["sha"] for c in hunk["upstream_commits"]] == [rework]
    assert "newest" in hunk["searched"]


def test_a_patch_upstream_took_in_another_form_names_the_commit_its_pr_and_the_difference(
    up, tmp_path
):
    mine = BODY.replace("value_10 = compute(10)\n", "value_10 = compute(10)\n" + FUNC)
    theirs = BODY.replace(
        "value_10 = compute(10)\n",
        "value_10 = compute(10)\n" + FUNC.replace("level * 2", "level * 3"),
    )
    up.checkout("main", new_branch="down")
    up.commit("Add frobnicate", {"mod.py": mine})
    patches = patches_of(up, "main..down", tmp_path / "patches")
    up.checkout("main")
    base = up.head("main")
    landed = up.commit("Add frobnicate with a bigger scale (#123)", {"mod.py": theirs})
    up.commit("Unrelated", {"other.py": "alpha = 1\n"})
    p = check(up, patches, tmp_path, base=base)
    assert (p.status, p.decision) == (Status.UPSTREAM_VERSION, Decision.REVIEW)
    assert p.upstream_commits == [
        {
            "sha": landed,
            "subject": "Add frobnicate with a bigger scale (#123)",
            "pr": 123,
            "how": "content",
        }
    ]
    assert p.as_dict()["upstream_commits"] == p.upstream_commits
    (hunk,) = p.conflict["hunks"]
    assert hunk["state"] == "similar"
    diff = hunk["upstream_diff"].splitlines()
    assert "-    scaled = checked.scale(level * 2)" in diff
    assert "+    scaled = checked.scale(level * 3)" in diff


def test_a_partial_names_the_commit_that_took_its_part_and_a_merge_names_the_pr(up, tmp_path):
    up.checkout("main", new_branch="down")
    up.commit(
        "Make value 12 strict",
        {
            "mod.py": BODY.replace("compute(12)", "compute(12, strict=True)"),
            "other.py": "alpha = first_value(strict=True)\nbeta = 2\n",
        },
    )
    patches = patches_of(up, "main..down", tmp_path / "patches")
    up.checkout("main")
    base = up.head("main")
    up.checkout("main", new_branch="feature")
    took = up.commit(
        "Strict value 12", {"mod.py": BODY.replace("compute(12)", "compute(12, strict=True)")}
    )
    up.checkout("main")
    up.git("merge", "-q", "--no-ff", "-m", "Merge pull request #88 from dev/strict", "feature")
    up.commit("Touch other.py", {"other.py": "alpha = first_value()\nbeta = 3\n"})
    p = check(up, patches, tmp_path, base=base)
    assert (p.status, p.decision) == (Status.PARTIAL, Decision.REVIEW)
    assert p.upstream_commits == [
        {"sha": took, "subject": "Strict value 12", "pr": 88, "how": "content"}
    ]


def test_a_contained_patch_names_the_commit_with_its_patch_id(up, tmp_path):
    change = {"mod.py": BODY.replace("compute(30)", "compute(30, fast=True)")}
    up.checkout("main", new_branch="down")
    up.commit("Speed up value 30", change)
    patches = patches_of(up, "main..down", tmp_path / "patches")
    up.checkout("main")
    base = up.head("main")
    landed = up.commit("Speed up value 30 (#5)", change)
    p = check(up, patches, tmp_path, base=base)
    assert (p.status, p.decision) == (Status.CONTAINED, Decision.DROP)
    assert p.upstream_commits == [
        {"sha": landed, "subject": "Speed up value 30 (#5)", "pr": 5, "how": "patch-id"}
    ]


def test_a_patch_that_applies_names_no_upstream_commits(up, tmp_path):
    up.checkout("main", new_branch="down")
    up.commit("Own change", {"mod.py": BODY.replace("compute(3)", "compute(3, own=True)")})
    patches = patches_of(up, "main..down", tmp_path / "patches")
    up.checkout("main")
    p = check(up, patches, tmp_path)
    assert p.status == Status.APPLIES
    assert p.upstream_commits is None and "upstream_commits" not in p.as_dict()


@pytest.mark.parametrize(
    ("readded", "verdict"),
    [
        (False, (Status.CONTAINED, Decision.DROP)),
        (True, (Status.UPSTREAM_VERSION, Decision.REVIEW)),
    ],
)
def test_a_patch_upstream_took_by_patch_id_names_the_commit_and_pr(up, tmp_path, readded, verdict):
    """Shaped like the INT8 loader of issue 35 (vllm-gaudi 88eab1e9, #1659): upstream has the
    patch's very diff, and the lines it removes still exist elsewhere in the head. Dropped (the
    copy was upstream's own before it took the diff), or, once a later commit adds those lines
    back, a review; either way the decision names the commit and its PR."""
    up.commit("Add loaders", {"loader.py": LOADER})
    base = up.head("main")
    up.checkout("main", new_branch="down")
    up.commit(TITLE, {"loader.py": FIXED})
    patches = patches_of(up, "main..down", tmp_path / "patches")
    up.checkout("main")
    landed = up.commit(f"{TITLE} (#1659)", {"loader.py": FIXED})
    if readded:
        up.commit("Wrap INT8 weights again", {"loader.py": FIXED + READDED})
    p = check(up, patches, tmp_path, base=base)
    assert (p.status, p.decision) == verdict
    assert p.upstream_commits == [
        {
            "sha": landed,
            "subject": f"{TITLE} (#1659)",
            "pr": 1659,
            "how": "patch-id",
        }
    ]
