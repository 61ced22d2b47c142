"""edits.edited_later: a landed patch's added lines that upstream's later commits edited in place."""

from __future__ import annotations

from collections import Counter

from bot.core.edits import FileChange, LaterEdit, edited_later

CUTOFF = 0.8
ADDED = ["guard=config.guard_value(third)", "check_guard(guard,third)"]


def change(sha: str, removed: list[str], added: list[str], undoing: bool = False) -> FileChange:
    return FileChange(sha, Counter(removed), tuple(added), undoing)


def test_lines_the_head_still_has_need_no_history():
    assert edited_later(ADDED, Counter(ADDED), [], CUTOFF) == []


def test_an_edit_in_place_is_followed_through_every_later_commit_to_the_head():
    first = "check_guard(guard,third,strict=True)"
    second = "check_guard(guard,third,strict=True,tag=x)"
    later = [
        change("a1", [ADDED[1]], [first]),
        change("b2", ["unrelated=1"], ["unrelated=2"]),
        change("c3", [first], [second]),
    ]
    head = Counter([ADDED[0], second])
    assert edited_later(ADDED, head, later, CUTOFF) == [LaterEdit(ADDED[1], ("a1", "c3"))]


def test_a_line_taken_out_with_nothing_like_it_in_its_place_is_not_accounted_for():
    later = [change("a1", [ADDED[1]], ["validate(guard)"])]
    assert edited_later(ADDED, Counter([ADDED[0], "validate(guard)"]), later, CUTOFF) is None


def test_a_missing_line_no_later_commit_took_out_is_not_accounted_for():
    # the head lacks it, yet no commit after the landing removed it: not upstream's edit
    edited = "check_guard(guard,third,strict=True)"
    assert edited_later(ADDED, Counter([ADDED[0], edited]), [], CUTOFF) is None


def test_an_edit_made_by_a_commit_that_says_it_reverts_is_not_counted():
    edited = "check_guard(guard,third,strict=True)"
    later = [change("a1", [ADDED[1]], [edited], undoing=True)]
    assert edited_later(ADDED, Counter([ADDED[0], edited]), later, CUTOFF) is None


def test_an_edited_form_the_head_no_longer_has_is_not_accounted_for():
    edited = "check_guard(guard,third,strict=True)"
    later = [change("a1", [ADDED[1]], [edited]), change("b2", [edited], [])]
    assert edited_later(ADDED, Counter([ADDED[0]]), later, CUTOFF) is None


def test_a_line_a_later_commit_deleted_does_not_count_for_a_copy_elsewhere_in_the_head():
    # the head still has the text (another copy), but the landing's own line was taken out
    later = [change("a1", [ADDED[1]], ["log(guard)"])]
    assert edited_later(ADDED, Counter(ADDED), later, CUTOFF) is None


def test_a_line_moved_within_the_file_is_its_own_edited_form():
    later = [change("a1", [ADDED[1]], ["other=1", ADDED[1]])]
    assert edited_later(ADDED, Counter(ADDED), later, CUTOFF) == []
