"""Finding a hunk's lines in another version of its file, and naming where upstream's came from."""

from __future__ import annotations

from collections import Counter

from bot.core.landing import CommitLines, brought, counterparts, landing_for, pr_number, ranked
from bot.core.locate import FileLines, find_block, upstream_diff
from bot.core.patchfile import parse_patch

LINES = [f"value_{i} = compute({i})".encode() for i in range(1, 41)]


def test_an_exact_block_is_found_nearest_to_the_hint():
    block = LINES[4:7]
    twice = LINES + LINES
    assert find_block(FileLines(twice), block, 3).start == 4
    assert find_block(FileLines(twice), block, 60).start == 44
    assert find_block(FileLines(twice), block, 60).exact


def test_a_moved_and_edited_block_is_found_by_its_lines():
    """Ten lines put above it and one line of it edited: the block is where most lines agree."""
    moved = [b"import os"] * 10 + LINES[:24] + [b"value_25 = other(25)"] + LINES[25:]
    block = LINES[21:28]  # value_22..value_28 as the patch saw them
    span = find_block(FileLines(moved), block, 21)
    assert span is not None and not span.exact
    assert (span.start, span.length) == (31, 7)


def test_nothing_alike_is_not_found():
    assert find_block(FileLines([b"alpha_beta_gamma()"] * 5), LINES[:3], 0) is None


PATCH = b"""diff --git a/mod.py b/mod.py
--- a/mod.py
+++ b/mod.py
@@ -22,7 +22,7 @@
 value_22 = compute(22)
 value_23 = compute(23)
 value_24 = compute(24)
-value_25 = compute(25)
+value_25 = compute(25, mine=True)
 value_26 = compute(26)
 value_27 = compute(27)
 value_28 = compute(28)
"""


def test_upstream_diff_shows_upstreams_text_against_the_patchs():
    hunk = parse_patch(PATCH).files[0].hunks[0]
    head = [b"import os", *LINES[:24], b"value_25 = compute(25, mine=False)", *LINES[25:]]
    diff = upstream_diff(hunk, FileLines(head))
    assert diff is not None
    lines = diff.splitlines()
    assert lines[:2] == ["--- patch", "+++ upstream (head)"]
    assert lines[2].startswith("@@ -22,7 +23,7 @@")
    assert "-value_25 = compute(25, mine=True)" in lines
    assert "+value_25 = compute(25, mine=False)" in lines
    # the head has it as the patch does: nothing to show
    same = [*LINES[:24], b"value_25 = compute(25, mine=True)", *LINES[25:]]
    assert upstream_diff(hunk, FileLines(same)) is None


def test_pr_numbers_from_squash_and_merge_subjects():
    assert pr_number("Add INT8 loader (#1659)") == 1659
    assert pr_number("Merge pull request #77 from dev/branch") == 77
    assert pr_number("Fix #12 in the middle") is None


def commit(sha: str, added: list[str], removed: list[str] = ()) -> CommitLines:
    return CommitLines(sha, sha, Counter(added), Counter(removed))


def test_the_commit_adding_most_of_upstreams_lines_is_the_landing():
    commits = [commit("newer", ["x=1"]), commit("landing", ["x=1", "y=2", "z=3"])]
    assert landing_for(["x=1", "y=2"], [], commits).sha == "landing"
    # a tie goes to the newest (commits come newest first): a re-landing after a revert
    assert landing_for(["x=1"], [], commits).sha == "newer"
    # a hunk that only removes: the commit that took the lines out
    remover = commit("remover", [], ["old=1"])
    assert landing_for([], ["old=1"], [*commits, remover]).sha == "remover"
    assert landing_for(["nowhere=1"], [], commits) is None


def test_a_commit_brought_a_hunk_when_it_adds_at_least_half_of_its_lines():
    """vllm-gaudi dd47274258 on releases/v0.13.0: a release commit adding 1 of the 27 lines a
    hunk has there is where that line came from, not the hunk."""
    nearby = commit("nearby", ["a=1"])
    assert not brought(["a=1", "b=2", "c=3"], [], nearby)
    assert brought(["a=1", "b=2"], [], nearby)
    assert brought([], ["old=1"], commit("remover", [], ["old=1"]))
    assert not brought(["nowhere=1"], [], nearby)


def test_landings_found_for_more_hunks_come_first():
    assert ranked(["b", "a", "a", "c"]) == ["a", "b", "c"]


def test_upstreams_counterparts_of_the_patchs_lines_leave_out_other_commits_lines():
    """Upstream's text where a hunk belongs also holds lines other commits put there; the
    landing is looked for by the lines that are the patch's, as they are or edited."""
    theirs = ["scaled=checked.scale(level*3)", "unrelated_feature_flag=True", "x=validate(w)"]
    added = ["scaled=checked.scale(level*2)", "x=validate(w)"]
    assert counterparts(theirs, added, 0.8) == [theirs[0], theirs[2]]
    assert counterparts(theirs, [], 0.8) == []
