"""Heads only move forward (issue 34, item 1): the planner's decision on a head move, given
what the adapter found about the head (behind the series' own or not)."""

from __future__ import annotations

from bot.core import events as ev
from bot.core.planner import Facts, SeriesFacts, plan, plan_duplicate

A, B, C = "a" * 40, "b" * 40, "c" * 40
MAIN = "refs/heads/main"


def facts(**series: object) -> Facts:
    defaults: dict[str, object] = {
        "id": "s1",
        "upstream_repo": "up/stream",
        "watched_ref": MAIN,
        "head_sha": C,
        "newest_head": C,
        "head_ref": MAIN,
    }
    return Facts("acme/carry", series=(SeriesFacts(**{**defaults, **series}),))  # type: ignore[arg-type]


def moved(before: str, after: str, source: ev.Source = "webhook") -> ev.HeadMoved:
    return ev.HeadMoved(
        repo="up/stream", ref=MAIN, before=before, after=after, actor=None, source=source
    )


def test_a_head_behind_the_series_is_recorded_not_checked() -> None:
    (action,) = plan(moved(A, B), facts(behind=frozenset({B})))
    assert action.kind == "record_stale_head" and action.args["head_sha"] == B
    assert "behind cccccccccccc" in action.reason and "a redelivery" in action.reason


def test_a_head_that_is_not_behind_is_checked_and_replaces_the_heads_before_it() -> None:
    (action,) = plan(moved(B, A), facts(head_sha=B, newest_head=C))
    assert action.kind == "rebase" and action.args["head_sha"] == A
    assert action.args["replaces"] == (B, C)


def test_a_move_from_the_series_own_head_is_followed_even_backwards() -> None:
    """A force push from the head carry is on back to an older commit is a real move."""
    (action,) = plan(moved(C, B), facts(behind=frozenset({B})))
    assert action.kind == "rebase" and action.args["head_sha"] == B


def test_a_stale_poll_is_behind_too() -> None:
    (action,) = plan(moved(A, B, "poll"), facts(behind=frozenset({B})))
    assert action.kind == "record_stale_head" and "a poll" in action.reason


def test_tag_patterns_move_by_version_not_by_ancestry() -> None:
    series = facts(watched_ref=None, tag_pattern="v*", current_tag="v1.0", behind=frozenset({B}))
    event = ev.HeadMoved(
        repo="up/stream", ref="refs/tags/v2.0", before=ev.ZERO_SHA, after=B, actor=None
    )
    (action,) = plan(event, series)
    assert action.kind == "rebase"


def test_an_event_key_never_hides_a_head_the_series_is_not_on() -> None:
    (again,) = plan_duplicate(moved(B, C, "poll"), facts(head_sha=B, newest_head=B))
    assert again.kind == "rebase" and again.args["head_sha"] == C
    assert again.key == f"rebase:s1:{C}:again:{B}"
    assert plan_duplicate(moved(B, C, "poll"), facts()) == []  # on it: a true duplicate
    assert plan_duplicate(moved(A, B), facts(behind=frozenset({B}))) == []  # behind
