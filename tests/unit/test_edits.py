"""edits.edited_later: a landed patch's added lines that upstream's later commits edited in place."""

from __future__ import annotations

from collections import Counter

from bot.core.edits import FileChange, LaterEdits, edited_later

CUTOFF = 0.8
ADDED = ["guard=config.guard_value(third)", "check_guard(guard,third)"]
EDITED = "check_guard(guard,third,strict=True)"


def change(sha: str, removed: list[str], added: list[str], undoing: bool = False) -> FileChange:
    return FileChange(sha, Counter(removed), tuple(added), undoing)


def test_lines_no_later_commit_took_out_need_nothing_more_than_the_head():
    assert edited_later(ADDED, Counter(ADDED), [], CUTOFF) == LaterEdits(0, ())


def test_an_edit_in_place_is_followed_through_every_later_commit_to_the_head():
    again = "check_guard(guard,third,strict=True,tag=x)"
    later = [
        change("a1", [ADDED[1]], [EDITED]),
        change("b2", ["unrelated=1"], ["unrelated=2"]),
        change("c3", [EDITED], [again]),
    ]
    # one copy, edited twice: the head has one line only in an edited form
    assert edited_later(ADDED, Counter([ADDED[0], again]), later, CUTOFF) == LaterEdits(
        1, ("a1", "c3")
    )


def test_a_line_taken_out_with_nothing_like_it_in_its_place_is_not_accounted_for():
    later = [change("a1", [ADDED[1]], ["validate(guard)"])]
    assert edited_later(ADDED, Counter([ADDED[0], "validate(guard)"]), later, CUTOFF) is None


def test_a_line_the_head_lacks_that_no_later_commit_took_out_is_not_accounted_for():
    assert edited_later(ADDED, Counter([ADDED[0], EDITED]), [], CUTOFF) is None


def test_an_edit_made_by_a_commit_that_says_it_reverts_is_not_counted():
    later = [change("a1", [ADDED[1]], [EDITED], undoing=True)]
    assert edited_later(ADDED, Counter([ADDED[0], EDITED]), later, CUTOFF) is None


def test_an_edited_form_the_head_no_longer_has_is_not_accounted_for():
    later = [change("a1", [ADDED[1]], [EDITED]), change("b2", [EDITED], [])]
    assert edited_later(ADDED, Counter([ADDED[0]]), later, CUTOFF) is None


def test_a_line_a_later_commit_deleted_does_not_count_for_a_copy_elsewhere_in_the_head():
    # the head still has the text (another copy), but the landing's own line was taken out
    later = [change("a1", [ADDED[1]], ["log(guard)"])]
    assert edited_later(ADDED, Counter(ADDED), later, CUTOFF) is None


def test_a_line_moved_within_the_file_is_its_own_edited_form():
    later = [change("a1", [ADDED[1]], ["other=1", ADDED[1]])]
    assert edited_later(ADDED, Counter(ADDED), later, CUTOFF) == LaterEdits(0, ())


def test_every_copy_of_a_line_the_patch_adds_several_times_must_be_in_the_head():
    flags = ["fullgraph=false"] * 3
    # one copy edited, and the head has it; the other two must still be there as they were
    later = [change("a1", ["fullgraph=false"], ["fullgraph=false;lazy"])]
    head = Counter({"fullgraph=false": 2, "fullgraph=false;lazy": 1})
    assert edited_later(flags, head, later, CUTOFF) == LaterEdits(1, ("a1",))
    assert edited_later(flags, head - Counter({"fullgraph=false": 1}), later, CUTOFF) is None


def test_a_revert_may_only_put_a_line_back_into_a_form_it_already_had():
    """A big rebase edits the line, is reverted, and is redone: the revert undid upstream's own
    edit, not the fix. A revert that turns the line into a form it never had is not followed."""
    later = [
        change("a1", [ADDED[1]], [EDITED]),
        change("r2", [EDITED], [ADDED[1]], undoing=True),
        change("c3", [ADDED[1]], [EDITED]),
    ]
    assert edited_later(ADDED, Counter([ADDED[0], EDITED]), later, CUTOFF) == LaterEdits(
        1, ("a1", "r2", "c3")
    )
    other = "check_guard(guard,third,strict=False)"
    undone = [change("a1", [ADDED[1]], [EDITED]), change("r2", [EDITED], [other], undoing=True)]
    assert edited_later(ADDED, Counter([ADDED[0], other]), undone, CUTOFF) is None
