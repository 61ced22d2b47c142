"""Issue 35, more safe automatic drops, all resting on a patch upstream took as its very diff
(same patch id, nothing undid it) with no later commit adding back a line the patch removes:

- dropped although lines it removes still exist elsewhere in the head, when everything else
  shows the head has it (reverse-apply, a 3-way apply that changes nothing, every added line).
  Shaped like the INT8 loader of vllm-gaudi (88eab1e9, #1659): the FP8 loader beside it keeps
  the wrapper the fix removes;
- dropped although the range base was already in the patch's state, when the range added the
  code and then took the patch (vllm-gaudi 90b9ce51ee on releases/v0.24.0: an OOM workaround
  the branch ported and then removed with the same diff);
- dropped when later upstream edits changed its hunks but left every line it adds in the head
  (vllm-gaudi 22dc879b67 "Separate conv1d for Granite 4.0" on releases/v0.19.0), also where
  they moved its lines so that a 3-way apply succeeds by adding them again (bd6fcf4b9a).

Each has its counter-case that stays a review."""

from __future__ import annotations

import pytest

from bot.core.classify import Decision, Status
from bot.git.engine import PatchInput
from harness.gitrepo import RepoBuilder
from tests.support.engine import check
from tests.support.int8_loader import FIXED, LOADER, READDED, TITLE

TEST = "def test_int8_loader():\n    assert load_int8(Layer(), int8_weights()) is not None\n"


def signals(report) -> dict[str, dict]:
    return {e["signal"]: e for e in report.evidence}


@pytest.fixture
def landed(make_repo, tmp_path) -> tuple[RepoBuilder, list[PatchInput], str, str]:
    """Upstream with the loaders; a downstream fix of the INT8 one; upstream takes the very same
    diff as its PR. Returns the repository, the patch, the base and the landing commit."""
    up = make_repo("upstream")
    up.commit("Add loaders", {"loader.py": LOADER, "test_loader.py": "import loader\n"})
    base = up.head("main")
    up.checkout("main", new_branch="down")
    up.commit(TITLE, {"loader.py": FIXED, "test_loader.py": "import loader\n\n\n" + TEST})
    out = tmp_path / "patches"
    patches = [PatchInput(str(p), p.read_bytes()) for p in up.format_patch("main..down", out)]
    up.checkout("main")
    landing = up.commit(
        f"{TITLE} (#1659)", {"loader.py": FIXED, "test_loader.py": "import loader\n\n\n" + TEST}
    )
    up.commit("Unrelated upstream work", {"other.py": "alpha = first_value()\n"})
    return up, patches, base, landing


def without_from(patches: list[PatchInput]) -> list[PatchInput]:
    """The patch with no `From <sha>` line: nothing anchors its history."""
    return [PatchInput(p.name, p.data.split(b"\n", 1)[1]) for p in patches]


@pytest.mark.parametrize("anchor", ["base", "from-line", "none"])
def test_a_same_diff_landing_is_dropped_although_its_removed_lines_remain_elsewhere(
    landed, tmp_path, anchor
):
    up, patches, base, landing = landed
    kw = {"base": base} if anchor == "base" else {}
    p = check(up, without_from(patches) if anchor == "none" else patches, tmp_path, **kw)
    found = signals(p)
    assert found["removed-lines-still-in-head"]["suspicious"] is True  # the old review's cause
    assert found["patch-id-match"]["commit"] == landing
    assert found["removed-lines-added-back"]["result"] is False
    assert (p.status, p.decision) == (Status.CONTAINED, Decision.DROP)
    assert "same patch id" in p.reason
    assert p.upstream_commits is not None and p.upstream_commits[0]["sha"] == landing


@pytest.mark.parametrize("anchor", ["base", "none"])
def test_removed_lines_added_back_after_the_landing_keep_it_a_review(landed, tmp_path, anchor):
    """Upstream took the same diff, then a later commit put the removed wrapper back in another
    place (a revert of the touched lines in another form): the copy the head has may be the
    patch's own code moved, so carry never drops it on its own."""
    up, patches, base, landing = landed
    again = up.commit("Wrap INT8 weights again (#1700)", {"loader.py": FIXED + READDED})
    kw = {"base": base} if anchor == "base" else {}
    p = check(up, without_from(patches) if anchor == "none" else patches, tmp_path, **kw)
    found = signals(p)
    assert found["patch-id-match"]["commit"] == landing
    assert found["removed-lines-added-back"]["commits"] == [again]
    assert (p.status, p.decision) == (Status.UPSTREAM_VERSION, Decision.REVIEW)
    assert "still exists elsewhere" in p.reason


def test_without_a_same_diff_landing_lingering_removals_stay_a_review(make_repo, tmp_path):
    """Upstream reached the patch's state with a different commit (another diff, no patch-id
    match): the lingering copy still sends the patch to review."""
    up = make_repo("upstream")
    up.commit("Add loaders", {"loader.py": LOADER})
    base = up.head("main")
    up.checkout("main", new_branch="down")
    up.commit(TITLE, {"loader.py": FIXED})
    out = tmp_path / "patches"
    patches = [PatchInput(str(p), p.read_bytes()) for p in up.format_patch("main..down", out)]
    up.checkout("main")
    up.commit("Rework the loaders (#1800)", {"loader.py": FIXED + "\n# loaders reworked here\n"})
    p = check(up, patches, tmp_path, base=base)
    assert "patch-id-match" not in signals(p)
    assert signals(p)["removed-lines-still-in-head"]["suspicious"] is True
    assert (p.status, p.decision) == (Status.UPSTREAM_VERSION, Decision.REVIEW)


WORKAROUND = (
    "    if blocks > warmup_cap_blocks:\n"
    "        logger.warning_once('capping warmup context to %s blocks', warmup_cap_blocks)\n"
    "        blocks = warmup_cap_blocks\n"
)
RUNNER = "def warmup(self, blocks):\n    prepared = self.prepare(blocks)\n    return prepared\n"
WITH_WORKAROUND = RUNNER.replace("    prepared", WORKAROUND + "    prepared")


@pytest.mark.parametrize("ported", [True, False])
def test_a_removal_the_branch_ported_after_porting_the_code_is_dropped(make_repo, tmp_path, ported):
    """main adds a workaround and then removes it; the patch is the removal, checked on a
    release branch forked before both (its range base never had the workaround). A branch that
    ported both has taken the patch: drop. A branch that ported neither never had what the
    patch removes: review, as before."""
    up = make_repo("upstream")
    up.commit("Add the runner", {"runner.py": RUNNER})
    up.checkout("main", new_branch="release")
    up.checkout("main")
    up.commit("Cap the warmup context (#1500)", {"runner.py": WITH_WORKAROUND})
    up.commit("Remove the warmup OOM workaround (#1575)", {"runner.py": RUNNER})
    patches = [
        PatchInput(str(p), p.read_bytes())
        for p in up.format_patch("HEAD~1..HEAD", tmp_path / "patches")
    ]
    up.checkout("release")
    if ported:
        up.commit("Cap the warmup context (#1500) (#1510)", {"runner.py": WITH_WORKAROUND})
        landing = up.commit("Remove the warmup OOM workaround (#1576)", {"runner.py": RUNNER})
    up.commit("Release notes", {"NOTES.md": "release\n"})
    p = check(up, patches, tmp_path, head="release")
    assert "post-image-at-range-base" in signals(p)
    if ported:
        assert signals(p)["patch-id-match"]["commit"] == landing
        assert (p.status, p.decision) == (Status.CONTAINED, Decision.DROP)
    else:
        assert "patch-id-match" not in signals(p)
        assert (p.status, p.decision) == (Status.CONTAINED, Decision.REVIEW)


CONV = (
    "def build(layer, config):\n"
    "    width = config.width\n"
    "    layer.conv = make_conv(width)\n"
    "    return layer\n\n\n"
    "def forward(layer, hidden):\n"
    "    mixed = layer.conv(hidden)\n"
    "    return mixed\n"
)
SPLIT = CONV.replace(
    "    layer.conv = make_conv(width)\n",
    "    layer.conv_x = make_conv(width)\n    layer.conv_bc = make_conv(width * 2)\n",
).replace(
    "    mixed = layer.conv(hidden)\n",
    "    mixed = layer.conv_x(hidden) + layer.conv_bc(hidden)\n",
)


def land_same_diff(
    up: RepoBuilder, tmp_path, path: str, before: str, after: str, title: str, pr: int
) -> tuple[list[PatchInput], str, str]:
    """`before` upstream; a downstream patch making it `after`; upstream takes the very same
    diff as PR `pr`. Returns the patch, the base and the landing commit."""
    up.commit("Add " + path, {path: before})
    base = up.head("main")
    up.checkout("main", new_branch="down")
    up.commit(title, {path: after})
    out = tmp_path / "patches"
    patches = [PatchInput(str(p), p.read_bytes()) for p in up.format_patch("main..down", out)]
    up.checkout("main")
    landing = up.commit(f"{title} (#{pr})", {path: after})
    return patches, base, landing


@pytest.fixture
def split_landed(make_repo, tmp_path) -> tuple[RepoBuilder, list[PatchInput], str, str]:
    """A downstream patch splits a convolution in two; upstream takes the very same diff."""
    up = make_repo("upstream")
    patches, base, landing = land_same_diff(
        up, tmp_path, "layer.py", CONV, SPLIT, "Separate conv1d", 1322
    )
    return up, patches, base, landing


@pytest.mark.parametrize(
    ("later", "verdict"),
    [
        # upstream renames the context lines around the split: every added line stays
        (
            lambda text: (
                text.replace("    width = config.width\n", "    width = config.dim\n")
                .replace("    return layer\n", "    return layer.finalize()\n")
                .replace("    return mixed\n", "    return mixed.contiguous()\n")
            ),
            (Status.CONTAINED, Decision.DROP),
        ),
        # ... and also rewrites one of the lines the patch adds beyond an edit: a human looks
        (
            lambda text: (
                text.replace("    width = config.width\n", "    width = config.dim\n")
                .replace("    return layer\n", "    return layer.finalize()\n")
                .replace("make_conv(width * 2)", "make_grouped_conv(width, groups=2)")
            ),
            (Status.UPSTREAM_VERSION, Decision.REVIEW),
        ),
        # ... or edits one in place (an argument added): upstream's own evolution of its copy
        (
            lambda text: text.replace(
                "    width = config.width\n", "    width = config.dim\n"
            ).replace("make_conv(width * 2)", "make_conv(width * 2, bias=False)"),
            (Status.CONTAINED, Decision.DROP),
        ),
        # ... or deletes one: upstream may have dropped part of the fix, a human looks
        (
            lambda text: text.replace("    layer.conv_bc = make_conv(width * 2)\n", ""),
            (Status.UPSTREAM_VERSION, Decision.REVIEW),
        ),
        # ... or brings back a line the patch removes, beside the split: a human looks
        (
            lambda text: (
                text.replace("    width = config.width\n", "    width = config.dim\n")
                .replace("    return layer\n", "    return layer.finalize()\n")
                .replace(
                    "    return mixed\n",
                    "    return mixed\n\n\ndef legacy(layer, width):\n"
                    "    layer.conv = make_conv(width)\n",
                )
            ),
            (Status.UPSTREAM_VERSION, Decision.REVIEW),
        ),
    ],
    ids=[
        "context-edited",
        "added-line-rewritten",
        "added-line-edited",
        "added-line-deleted",
        "removed-line-back",
    ],
)
def test_a_same_diff_landing_edited_later_is_dropped_while_every_added_line_stays(
    split_landed, tmp_path, later, verdict
):
    up, patches, base, landing = split_landed
    up.commit("Rework the layer (#1400)", {"layer.py": later(SPLIT)})
    p = check(up, patches, tmp_path, base=base)
    found = signals(p)
    assert found["reverse-apply"]["result"] == "failed"  # upstream's later edits
    assert found["patch-id-match"]["commit"] == landing
    assert (p.status, p.decision) == verdict, p.reason
    edited = "added-lines-edited-later" in found
    assert edited == (verdict[1] == Decision.DROP and found["added-lines-kept"]["present"] < 3)
    if edited:  # the drop names the commit that edited the landed line
        assert found["added-lines-edited-later"]["commits"] == [up.head("main")]
        assert up.head("main")[:12] in p.reason


def test_an_added_line_edited_by_a_commit_that_says_it_reverts_stays_a_review(
    split_landed, tmp_path
):
    """An edit made by a commit that reverts something (in part) may be part of undoing the
    fix: the landing-then-edited drop does not count it."""
    up, patches, base, _ = split_landed
    edited = SPLIT.replace("make_conv(width * 2)", "make_conv(width * 2, bias=False)")
    up.commit('Partially revert "Faster conv setup" (#1401)', {"layer.py": edited})
    p = check(up, patches, tmp_path, base=base)
    assert "added-lines-edited-later" not in signals(p)
    assert (p.status, p.decision) == (Status.UPSTREAM_VERSION, Decision.REVIEW), p.reason


BUILD = "".join(
    [
        "def build(config):\n",
        *(f"    {n} = config.{n}_value()\n" for n in ("first", "second", "third")),
        *(f"    {n} = config.{n}_value()\n" for n in ("fourth", "fifth", "sixth")),
        "    return combine(first, second, third, fourth, fifth, sixth)\n",
    ]
)
GUARD = "    guard = config.guard_value(third)\n    check_guard(guard, third)\n"
GUARDED = BUILD.replace("    fourth =", GUARD + "    fourth =")
# upstream later moves the two lines into a helper and tightens the first context line
MOVED = (
    BUILD.replace("first_value()", "first_value(strict=True)")
    + "\n\ndef _guard(config, third):\n"
    + GUARD
)


@pytest.mark.parametrize(
    ("later", "verdict"),
    [
        (MOVED, (Status.CONTAINED, Decision.DROP)),
        # ... and rewrites one of the lines the patch adds: a human looks
        (
            MOVED.replace("check_guard(guard, third)", "check_guard(guard, third, loose=True)"),
            (Status.UPSTREAM_VERSION, Decision.REVIEW),
        ),
    ],
    ids=["moved", "moved-and-rewritten"],
)
def test_a_same_diff_landing_moved_later_is_dropped_where_a_3way_apply_would_add_it_again(
    make_repo, tmp_path, later, verdict
):
    """Upstream took the very diff, then moved its lines elsewhere in the file: the 3-way apply
    succeeds only by adding them a second time (vllm-gaudi bd6fcf4b9a checked on main). The
    landing-then-edited rule holds there as where the 3-way apply conflicts."""
    up = make_repo("upstream")
    patches, base, landing = land_same_diff(
        up, tmp_path, "build.py", BUILD, GUARDED, "Guard the third value", 1500
    )
    up.commit("Move the guard into a helper (#1510)", {"build.py": later})
    p = check(up, patches, tmp_path, base=base)
    found = signals(p)
    assert found["3way-apply"]["result"] == "clean"
    assert "tree-unchanged" not in found  # the 3-way apply adds the guard a second time
    assert found["patch-id-match"]["commit"] == landing
    assert (p.status, p.decision) == verdict, p.reason


TWICE = (
    "def encode(batch):\n"
    "    batch = batch.pad(block_size)\n"
    "    return run_encoder(batch)\n\n\n"
    "def decode(batch):\n"
    "    batch = batch.pad(block_size)\n"
    "    return run_decoder(batch)\n"
)
SELECTED = TWICE.replace(
    "    batch = batch.pad(block_size)\n    return run_decoder",
    "    rows = block_rows_of(batch)\n    batch = batch.index_select(rows)\n"
    "    batch.mark_selected(rows)\n    return run_decoder",
)


@pytest.mark.parametrize("readded", [False, True], ids=["copy-before", "added-back-later"])
def test_an_edited_landing_drops_although_a_removed_line_has_an_older_copy_elsewhere(
    make_repo, tmp_path, readded
):
    """The patch replaces one of two copies of a line; upstream takes the very diff and later
    edits the new line. The hunk is no longer found as a whole (its added line is edited, its
    removed line is still in the file), yet the copy predates the landing: drop. A copy a
    later commit added back keeps it a review (vllm-gaudi f52f8d9d71, 975df30850 on main)."""
    up = make_repo("upstream")
    patches, base, landing = land_same_diff(
        up, tmp_path, "runner.py", TWICE, SELECTED, "Select rows instead of padding", 1600
    )
    edited = SELECTED.replace("index_select(rows)", "index_select(rows, dim=0)")
    if readded:
        edited += "\n\ndef prefill(batch):\n    batch = batch.pad(block_size)\n"
    up.commit("Select along the batch dimension (#1610)", {"runner.py": edited})
    p = check(up, patches, tmp_path, base=base)
    found = signals(p)
    assert found["patch-id-match"]["commit"] == landing
    assert found["hunks"]["hunks"][0]["state"] == "absent"
    if readded:
        assert p.decision == Decision.REVIEW, p.reason
        assert found["removed-lines-added-back"]["result"] is True
    else:
        assert (p.status, p.decision) == (Status.CONTAINED, Decision.DROP), p.reason
        assert found["added-lines-edited-later"]["commits"] == [up.head("main")]
