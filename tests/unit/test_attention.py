"""bot.core.attention: what needs a human is told once per change, and a long wait once."""

from __future__ import annotations

import json

from bot.core.attention import Attention, StuckLimits, note_check
from bot.core.classify import Decision, Status
from bot.core.notify import body
from bot.core.state import PatchState, SeriesState

A, B = "0001-a.patch", "0002-b.patch"
T0 = "2026-12-01T00:00:00Z"


def patch(name: str, status: Status, decision: Decision) -> PatchState:
    return PatchState(name=name, status=status, decision=decision, reason=f"{name} {status}")


KEEP = (Status.APPLIES, Decision.KEEP)
CONFLICT = (Status.CONFLICT, Decision.KEEP)
REVIEW = (Status.UPSTREAM_VERSION, Decision.REVIEW)


def step(state: SeriesState, head: str, now: str, limits: StuckLimits, **patches: tuple) -> list:
    before = list(state.patches)
    state.checked_head = head
    state.patches = [patch(name, *found) for name, found in patches.items()]
    return note_check(before, state, now, limits)


def test_a_new_review_and_a_new_conflict_are_separate_messages_naming_their_patches() -> None:
    state = SeriesState(id="s")
    limits = StuckLimits(heads=None, hours=None)
    assert step(state, "1" * 40, T0, limits, a=KEEP, b=KEEP) == []
    notices = step(state, "2" * 40, T0, limits, a=CONFLICT, b=REVIEW)
    assert [(n.change, dict(n.patches)) for n in notices] == [
        (Attention.NEW_CONFLICT, {"a": "a conflict"}),
        (Attention.NEW_REVIEW, {"b": "b upstream-version"}),
    ]
    assert notices[1].summary() == "s: b needs a review on 222222222222"
    assert notices[0].key == f"s:new-conflict:{'2' * 40}"
    # the review turns into a conflict: that is news; the conflict that stays is not
    (again,) = step(state, "3" * 40, T0, limits, a=CONFLICT, b=CONFLICT)
    assert (again.change, dict(again.patches)) == (Attention.NEW_CONFLICT, {"b": "b conflict"})


def test_stuck_by_hours_is_said_once_per_stretch_and_a_resolved_series_starts_over() -> None:
    state = SeriesState(id="s")
    limits = StuckLimits(heads=None, hours=48)
    step(state, "1" * 40, T0, limits, a=REVIEW)
    assert step(state, "2" * 40, "2026-12-02T23:00:00Z", limits, a=REVIEW) == []
    (stuck,) = step(state, "3" * 40, "2026-12-03T00:00:00Z", limits, a=REVIEW)
    assert stuck.change is Attention.STUCK and stuck.since == T0 and stuck.heads == 3
    assert step(state, "4" * 40, "2026-12-09T00:00:00Z", limits, a=REVIEW) == []
    assert step(state, "5" * 40, "2026-12-09T00:00:00Z", limits, a=KEEP) == []
    assert state.human_wait is None


def test_a_head_checked_again_is_not_counted_twice() -> None:
    state = SeriesState(id="s")
    limits = StuckLimits(heads=2, hours=None)
    step(state, "1" * 40, T0, limits, a=CONFLICT)
    assert step(state, "1" * 40, T0, limits, a=CONFLICT) == []  # a retry of the same head
    assert state.human_wait is not None and state.human_wait.heads == 1


def test_slack_messages_say_which_kind_of_change_it_is() -> None:
    state = SeriesState(id="s")
    (notice,) = step(state, "2" * 40, T0, StuckLimits(None, None), a=REVIEW)
    text = json.loads(body(notice.to_dict(), "slack", "https://carry.example"))["text"]
    assert text.startswith(":eyes: carry: s: a needs a review")
    assert text.endswith("<https://carry.example/series/s|dashboard>")
