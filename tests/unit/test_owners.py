"""The owners of a fix are told after a red streak (issue 32): which logins, when, once per
streak (bot.core.owners); the streak's growth as the CI rows record it (bot.core.verified)."""

from __future__ import annotations

from bot.core import owners as own
from bot.core.fixpage import FixPage
from bot.core.state import CiState, CiStatus, RedStreak, SeriesState
from bot.core.verified import note_rows


def page(name: str, *owners: str) -> FixPage:
    return FixPage(name=name, file=f"{name}.md", owners=owners)


def test_the_owners_of_the_page_named_like_the_failing_check_else_of_every_page() -> None:
    pages = [page("async-inputs", "alice"), page("ple", "bob", "Alice"), page("other")]
    assert own.owners_of(pages, ["ple"]) == ("bob", "Alice")
    assert own.owners_of(pages, ["unnamed"]) == ("alice", "bob")  # every page, each login once
    assert own.owners_of([page("x")], ["x"]) == ()


def test_only_failed_checks_count_and_ab_variants_do_not() -> None:
    checks = {"gaudi/ple": "failure", "gaudi/ple@upstream": "failure", "gb10/ok": "success"}
    assert own.failing_checks(checks) == ["ple"]


def test_a_mention_is_due_from_the_configured_streak_on() -> None:
    assert not own.mention_due(2, 3) and own.mention_due(3, 3) and own.mention_due(4, 3)
    assert not own.mention_due(99, None)  # null: never


def row(head: str, state: CiStatus) -> CiState:
    return CiState(runner="gaudi/ple", state=state, run_id=f"r-{head}", tree_key=f"t-{head}",
                   head_sha=head)  # fmt: skip


def test_the_streak_grows_by_one_per_new_red_head_only() -> None:
    state = SeriesState(id="s")
    grown = []
    for head, verdict in [("h1", CiStatus.SUCCESS), ("h2", CiStatus.FAILURE),
                          ("h3", CiStatus.FAILURE), ("h3", CiStatus.FAILURE),
                          ("h4", CiStatus.FAILURE)]:  # fmt: skip
        before = RedStreak(**vars(state.red_streak)) if state.red_streak else None
        state.ci = {"gaudi/ple": row(head, verdict)}
        note_rows(state, f"t-{head}", "now")
        grew = own.streak_grew(state, before, {"gaudi/ple": "failure"})
        if grew is not None:
            grown.append((grew.head, grew.heads, grew.streak_head))
    assert grown == [("h3", 2, "h2"), ("h4", 3, "h2")]  # the same head twice counts once


def test_the_text_mentions_each_owner_and_says_since_when() -> None:
    grew = own.StreakGrew(
        "s", "c" * 40, "b" * 40, 3, "2026-01-01T00:00:00", (("gaudi/ple", "failure"),)
    )
    text = own.mention_text(grew, ["alice", "bob"], "https://carry.example/series/s")
    assert text.startswith("@alice @bob: carry's series `s` is red since bbbbbbbbbbbb (3 heads")
    assert "failing: gaudi/ple" in text and "https://carry.example/series/s" in text
    notice = own.mention_notice(grew, ["alice"], None)
    assert notice["change"] == "red-streak" and notice["key"] == f"mention:s:{'b' * 40}"
    assert "nobody" in own.mention_text(grew, [], None)
