"""The decision table: signals in, status and decision out. Plain rows, no git."""

from __future__ import annotations

import pytest

from bot.core.classify import (
    Decision,
    HunkPresence,
    HunkState,
    Signals,
    Status,
    added_runs,
    contains,
    decide,
    hunk_state,
    removed_blocks,
)
from bot.core.patchfile import parse_patch


def hunks(*states: HunkState) -> tuple[HunkPresence, ...]:
    return tuple(HunkPresence("f.py", f"@@ -{n},3 +{n},3 @@", s, "") for n, s in enumerate(states))


APPLIED, PENDING, SIMILAR, ABSENT = (
    HunkState.APPLIED,
    HunkState.PENDING,
    HunkState.SIMILAR,
    HunkState.ABSENT,
)
KEEP, DROP, REVIEW = Decision.KEEP, Decision.DROP, Decision.REVIEW
# Upstream took the patch's very diff and the head shows it every way (the INT8 loader of issue 35)
LANDED = {
    "three_way": "clean",
    "three_way_unchanged": True,
    "landed_same_diff": True,
    "added_all_in_head": True,
}

ROWS = [
    # (case, signals, status, decision)
    ("empty patch", Signals(empty=True), Status.CONTAINED, REVIEW),
    ("applies in place", Signals(forward=True), Status.APPLIES, KEEP),
    ("applies moved", Signals(forward=True, moved=True), Status.APPLIES_MOVED, KEEP),
    ("both images present", Signals(forward=True, reverse=True), Status.UPSTREAM_VERSION, REVIEW),
    ("reverse applies", Signals(reverse=True), Status.CONTAINED, DROP),
    (
        "reverse applies, removed code lingers elsewhere",
        Signals(reverse=True, removals_remain=True),
        Status.UPSTREAM_VERSION,
        REVIEW,
    ),
    (
        "same-diff landing, reverse applies, 3-way unchanged, every added line in the head: "
        "code it removes lingering elsewhere is upstream's own copy",
        Signals(reverse=True, removals_remain=True, **LANDED),
        Status.CONTAINED,
        DROP,
    ),
    (
        "same-diff landing, but a later commit added removed lines back",
        Signals(reverse=True, removals_remain=True, **{**LANDED, "removals_readded": True}),
        Status.UPSTREAM_VERSION,
        REVIEW,
    ),
    (
        "same-diff landing, but not every added line is in the head",
        Signals(reverse=True, removals_remain=True, **{**LANDED, "added_all_in_head": False}),
        Status.UPSTREAM_VERSION,
        REVIEW,
    ),
    (
        "same-diff landing, but a 3-way apply would change the tree",
        Signals(reverse=True, removals_remain=True, **{**LANDED, "three_way_unchanged": False}),
        Status.UPSTREAM_VERSION,
        REVIEW,
    ),
    (
        "lingering removals, every other fact holds but no same-diff landing",
        Signals(reverse=True, removals_remain=True, **{**LANDED, "landed_same_diff": False}),
        Status.UPSTREAM_VERSION,
        REVIEW,
    ),
    (
        "same-diff landing with lingering removals, the range base already looked like that: "
        "the landing in range shows upstream took it",
        Signals(reverse=True, removals_remain=True, state_predates_range=True, **LANDED),
        Status.CONTAINED,
        DROP,
    ),
    (
        "reverse applies, the range base already looked like that, but the range took the "
        "same diff and nothing added its removed lines back",
        Signals(reverse=True, state_predates_range=True, landed_same_diff=True),
        Status.CONTAINED,
        DROP,
    ),
    (
        "the range base looked like that and the range took the same diff, but a later "
        "commit added removed lines back",
        Signals(
            reverse=True, state_predates_range=True, landed_same_diff=True, removals_readded=True
        ),
        Status.CONTAINED,
        REVIEW,
    ),
    (
        "same-diff landing edited later: every hunk in some version, every added line kept",
        Signals(hunks=hunks(APPLIED, SIMILAR), landed_same_diff=True, added_all_in_head=True),
        Status.CONTAINED,
        DROP,
    ),
    (
        "same-diff landing edited later, but an added line is gone",
        Signals(hunks=hunks(APPLIED, SIMILAR), landed_same_diff=True),
        Status.UPSTREAM_VERSION,
        REVIEW,
    ),
    (
        "same-diff landing edited later, but a removed line came back",
        Signals(
            hunks=hunks(APPLIED, SIMILAR),
            landed_same_diff=True,
            added_all_in_head=True,
            removals_readded=True,
        ),
        Status.UPSTREAM_VERSION,
        REVIEW,
    ),
    (
        "same-diff landing edited later, but a hunk is missing: never a drop",
        Signals(hunks=hunks(APPLIED, ABSENT), landed_same_diff=True, added_all_in_head=True),
        Status.PARTIAL,
        REVIEW,
    ),
    (
        "reverse applies, but the range base already looked like that",
        Signals(reverse=True, state_predates_range=True),
        Status.CONTAINED,
        REVIEW,
    ),
    (
        "3-way leaves the tree unchanged",
        Signals(three_way="clean", three_way_unchanged=True),
        Status.CONTAINED,
        DROP,
    ),
    (
        "3-way unchanged, state predates the range",
        Signals(three_way="clean", three_way_unchanged=True, state_predates_range=True),
        Status.CONTAINED,
        REVIEW,
    ),
    ("every hunk present", Signals(hunks=hunks(APPLIED, APPLIED)), Status.CONTAINED, DROP),
    (
        "every hunk present, never had what it removes",
        Signals(hunks=hunks(APPLIED, APPLIED), state_predates_range=True),
        Status.CONTAINED,
        REVIEW,
    ),
    (
        "applies but duplicates code the head has",
        Signals(forward=True, duplicate=True),
        Status.UPSTREAM_VERSION,
        REVIEW,
    ),
    (
        "applies, linked PR merged with other content",
        Signals(forward=True, linked_merged_in_head=True),
        Status.UPSTREAM_VERSION,
        REVIEW,
    ),
    (
        "applies, matching upstream commit",
        Signals(forward=True, matched_commit=True),
        Status.UPSTREAM_VERSION,
        REVIEW,
    ),
    (
        "applies, the match was reverted",
        Signals(forward=True, matched_commit=False, matched_reverted=True),
        Status.APPLIES,
        KEEP,
    ),
    (
        "some hunks present, rest applies by 3-way",
        Signals(three_way="clean", hunks=hunks(APPLIED, PENDING)),
        Status.PARTIAL,
        REVIEW,
    ),
    (
        "all hunks present, some differ",
        Signals(three_way="conflict", hunks=hunks(APPLIED, SIMILAR)),
        Status.UPSTREAM_VERSION,
        REVIEW,
    ),
    (
        "some hunks present, others missing",
        Signals(three_way="conflict", hunks=hunks(APPLIED, ABSENT)),
        Status.PARTIAL,
        REVIEW,
    ),
    (
        "conflict, upstream merged a matching change",
        Signals(three_way="conflict", hunks=hunks(ABSENT), matched_commit=True),
        Status.UPSTREAM_VERSION,
        REVIEW,
    ),
    ("plain conflict", Signals(three_way="conflict", hunks=hunks(ABSENT)), Status.CONFLICT, KEEP),
    (
        "some hunks present, none brought in range: a conflict to rebase",
        Signals(three_way="conflict", hunks=hunks(APPLIED, ABSENT), present_predates_range=True),
        Status.CONFLICT,
        KEEP,
    ),
    (
        "all hunks present in another version, none brought in range",
        Signals(three_way="conflict", hunks=hunks(SIMILAR), present_predates_range=True),
        Status.CONFLICT,
        KEEP,
    ),
    (
        "some hunks present, none brought in range, the rest applies by 3-way",
        Signals(three_way="clean", hunks=hunks(APPLIED, PENDING), present_predates_range=True),
        Status.APPLIES_MOVED,
        KEEP,
    ),
    (
        "none brought in range, but a commit of the range matches: still a review",
        Signals(
            three_way="conflict",
            hunks=hunks(APPLIED, ABSENT),
            present_predates_range=True,
            matched_commit=True,
        ),
        Status.PARTIAL,
        REVIEW,
    ),
    (
        "none brought in range, but the code it adds is already elsewhere: still a review",
        Signals(
            three_way="clean",
            hunks=hunks(APPLIED, PENDING),
            present_predates_range=True,
            duplicate=True,
        ),
        Status.PARTIAL,
        REVIEW,
    ),
]


@pytest.mark.parametrize(("case", "signals", "status", "decision"), ROWS, ids=[r[0] for r in ROWS])
def test_decision_table(case: str, signals: Signals, status: Status, decision: Decision) -> None:
    verdict = decide(signals)
    assert (verdict.status, verdict.decision) == (status, decision), case
    assert verdict.reason


def test_no_row_drops_without_content_evidence() -> None:
    """A drop always rests on reverse-apply, an unchanged 3-way tree, every hunk present, or
    upstream's same diff with every hunk in some version and every added line kept."""
    for _, signals, _, decision in ROWS:
        if decision == DROP:
            all_present = bool(signals.hunks) and all(h.state == APPLIED for h in signals.hunks)
            kept = (
                signals.landed_same_diff
                and signals.added_all_in_head
                and bool(signals.hunks)
                and all(h.state in (APPLIED, SIMILAR) for h in signals.hunks)
            )
            assert signals.reverse or signals.three_way_unchanged or all_present or kept


HUNK = (
    b"--- a/run.sh\n+++ b/run.sh\n@@ -1,8 +1,4 @@\n"
    b" setup_things\n"
    b"-run_vision_test() {\n"
    b"-    calibrate --model vision\n"
    b"-}\n"
    b" cleanup_output\n"
    b"-legacy_flag = enabled\n"
    b"+modern_flag = enabled\n"
    b"-fi\n"
    b" done_here\n"
)


def test_removed_blocks_are_runs_of_substantive_removed_lines() -> None:
    hunk = parse_patch(HUNK).files[0].hunks[0]
    assert removed_blocks(hunk) == [
        ["run_vision_test(){", "calibrate--modelvision"],  # "}" is too generic to count
        ["legacy_flag=enabled"],
    ]  # the lone "fi" is generic too


def test_added_runs_split_at_other_lines() -> None:
    diff = b"+++ b/x\n+alpha_one()\n+beta_two()\n context_line\n+gamma_three()\n-old_line_here\n"
    assert added_runs(diff) == [["alpha_one()", "beta_two()"], ["gamma_three()"]]


@pytest.mark.parametrize(
    ("lines", "block", "found"),
    [
        (["a1x", "b2y", "c3z"], ["b2y", "c3z"], True),
        (["a1x", "b2y", "c3z"], ["a1x", "c3z"], False),  # not consecutive
        (["a1x"], ["a1x", "b2y"], False),
        (["b2y", "a1x", "b2y", "c3z"], ["b2y", "c3z"], True),
    ],
)
def test_contains_needs_consecutive_lines(lines, block, found) -> None:
    assert contains(lines, block) is found


def test_a_clean_3way_with_every_hunk_present_does_not_claim_a_rest_applies():
    """A 3-way apply that succeeds although the head has a version of every hunk only adds
    them again: the reason names the choice, it does not say "the rest applies"."""
    verdict = decide(Signals(three_way="clean", hunks=hunks(APPLIED, SIMILAR)))
    assert (verdict.status, verdict.decision) == (Status.UPSTREAM_VERSION, REVIEW)
    assert "the rest applies" not in verdict.reason
    assert "1 of them differs" in verdict.reason and "drop" in verdict.reason


def test_a_different_version_of_some_hunks_says_how_many_the_head_has_as_is():
    """Issue 35: "a different version of all 11 hunks (1 differ)" contradicted the work sheet
    ("1 of 11 hunks need work; the head already has the other 10"). The reason says both."""
    verdict = decide(Signals(hunks=hunks(*[APPLIED] * 10, SIMILAR)))
    assert (verdict.status, verdict.decision) == (Status.UPSTREAM_VERSION, REVIEW)
    assert "all 11 hunks" in verdict.reason
    assert "1 of them in a different version from the patch's and the other 10 as the patch" in (
        verdict.reason
    )
    assert "a different version of all" not in verdict.reason
    every = decide(Signals(hunks=hunks(SIMILAR, SIMILAR)))
    assert "all of them in a different version" in every.reason


@pytest.mark.parametrize(("missing", "words"), [(1, "1 is not there"), (2, "2 are not there")])
def test_a_partial_counts_its_missing_hunks_in_words(missing, words):
    verdict = decide(Signals(hunks=hunks(APPLIED, *[ABSENT] * missing)))
    assert verdict.status == Status.PARTIAL and words in verdict.reason


REVIEWS = [row for row in ROWS if row[3] == REVIEW] + [
    (
        "3-way over every hunk",
        Signals(three_way="clean", hunks=hunks(APPLIED, SIMILAR)),
        None,
        REVIEW,
    ),
    ("3-way partial", Signals(three_way="clean", hunks=hunks(APPLIED, PENDING)), None, REVIEW),
    ("partial", Signals(hunks=hunks(APPLIED, ABSENT)), None, REVIEW),
]


@pytest.mark.parametrize(
    ("case", "signals", "status", "decision"), REVIEWS, ids=[r[0] for r in REVIEWS]
)
def test_every_review_names_the_choice_it_leaves(case, signals, status, decision):
    """A review hands a human a decision: its reason says what drop and what keep would mean."""
    verdict = decide(signals)
    assert verdict.decision == REVIEW
    assert "drop" in verdict.reason and "keep" in verdict.reason, verdict.reason


END_OF_FILE_ADDITION = b"""\
diff --git a/pkg/models.py b/pkg/models.py
--- a/pkg/models.py
+++ b/pkg/models.py
@@ -3,3 +3,4 @@ def register():
     import pkg.models.alpha  # noqa: F401
     import pkg.models.beta  # noqa: F401
     import pkg.models.gamma  # noqa: F401
+    import pkg.models.delta  # noqa: F401
"""

LINES = [
    b"def register():",
    b"    import pkg.models.alpha  # noqa: F401",
    b"    import pkg.models.beta  # noqa: F401",
    b"    import pkg.models.gamma  # noqa: F401",
]
DELTA = b"    import pkg.models.delta  # noqa: F401"


def end_of_file_hunk():
    return parse_patch(END_OF_FILE_ADDITION).files[0].hunks[0]


@pytest.mark.parametrize(
    ("head", "state"),
    [
        # vllm-gaudi a45a0368a1 on main: the line added at the end of the file is there, and the
        # hunk's pre-image (its context alone) is found only as the start of its post-image.
        ([*LINES, DELTA], HunkState.APPLIED),
        ([*LINES, DELTA, b"    import pkg.models.epsilon  # noqa: F401"], HunkState.APPLIED),
        (LINES, HunkState.PENDING),
        # the context is there with other lines after it and the added line is not: the
        # change was not made at the end, and the end has moved on (git apply: no match)
        ([*LINES, b"    import pkg.models.epsilon  # noqa: F401"], HunkState.ABSENT),
        # a second copy of the context without the line: duplicated code, still pending
        ([*LINES, DELTA, b"", *LINES[1:]], HunkState.PENDING),
    ],
)
def test_an_end_of_file_addition_is_applied_when_its_context_is_only_part_of_it(head, state):
    assert hunk_state(end_of_file_hunk(), head)[0] is state


def test_a_start_of_file_addition_is_pending_only_at_the_start():
    start = parse_patch(
        b"""\
diff --git a/pkg/models.py b/pkg/models.py
--- a/pkg/models.py
+++ b/pkg/models.py
@@ -1,3 +1,4 @@
+# Copyright the pkg authors: the header every module starts with
 def register():
     import pkg.models.alpha  # noqa: F401
     import pkg.models.beta  # noqa: F401
"""
    )
    hunk = start.files[0].hunks[0]
    assert hunk_state(hunk, LINES)[0] is HunkState.PENDING
    header = b"# Copyright the pkg authors: the header every module starts with"
    assert hunk_state(hunk, [header, *LINES])[0] is HunkState.APPLIED
    moved = [b"import os", header, *LINES]
    assert hunk_state(hunk, moved)[0] is HunkState.APPLIED
    assert hunk_state(hunk, [b"import os", *LINES])[0] is not HunkState.PENDING
