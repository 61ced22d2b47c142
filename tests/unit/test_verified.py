"""Every head verified (issue 32), the pure part: a head's verdict from its CI rows, the last
known good head, the red streak, and one notice per change of verdict."""

from __future__ import annotations

import hashlib
import hmac
import json

import pytest

from bot.core import notify
from bot.core.ci_plan import reused_detail
from bot.core.state import CiState, CiStatus, SeriesState, Verdict
from bot.core.verified import Change, Notice, note_rows, row_passed, verdict_of

KEYS = ("gaudi/fixed", "gb10/fixed")


def rows(head: str, *states: CiStatus, tree: str | None = None) -> list[CiState]:
    tree = tree or f"tree-{head}"
    return [
        CiState(runner=key, state=state, run_id=f"run-{head}", tree_key=tree, head_sha=head)
        for key, state in zip(KEYS, states, strict=False)
    ]


def test_a_head_is_green_only_when_every_check_passed() -> None:
    S, F, Q, I = CiStatus.SUCCESS, CiStatus.FAILURE, CiStatus.QUEUED, CiStatus.INFRA_ERROR  # noqa: E741
    assert verdict_of(rows("h", S, S)) is Verdict.GREEN
    assert verdict_of(rows("h", S, F)) is Verdict.RED
    assert verdict_of(rows("h", Q, F)) is Verdict.RED  # one failure is enough
    assert verdict_of(rows("h", S, Q)) is Verdict.PENDING
    assert verdict_of(rows("h", S, I)) is Verdict.UNKNOWN  # no verdict is not a pass
    assert verdict_of([]) is Verdict.PENDING


def test_an_inconclusive_check_is_neither_a_pass_nor_a_bug() -> None:
    """Issue 32: a check that could not observe its condition is amber; by default it does not
    keep the head from being good (and never makes it red); ci.inconclusive_blocks makes it
    keep the head from being good, still without red."""
    S, N, F = CiStatus.SUCCESS, CiStatus.INCONCLUSIVE, CiStatus.FAILURE
    assert verdict_of(rows("h", S, N)) is Verdict.GREEN
    assert verdict_of(rows("h", S, N), inconclusive_blocks=True) is Verdict.UNKNOWN
    assert verdict_of(rows("h", N, F), inconclusive_blocks=True) is Verdict.RED
    assert verdict_of(rows("h", N, CiStatus.QUEUED), inconclusive_blocks=True) is Verdict.PENDING
    reused = rows("h", CiStatus.REUSED)[0]
    reused.detail = reused_detail("inconclusive", "run-1")
    assert verdict_of([reused], inconclusive_blocks=True) is Verdict.UNKNOWN
    assert row_passed(reused) is None  # a bisection probe learns nothing from it

    amber, strict = SeriesState(id="s"), SeriesState(id="s")
    amber.ci = strict.ci = {row.runner: row for row in rows("h1", S, N)}
    assert note_rows(amber, "tree-h1", "t1") is None
    assert amber.last_good is not None and amber.last_good.head == "h1"
    assert amber.heads[-1].checks == {"gaudi/fixed": "success", "gb10/fixed": "inconclusive"}
    assert note_rows(strict, "tree-h1", "t1", inconclusive_blocks=True) is None
    assert strict.last_good is None and strict.red_streak is None
    assert strict.heads[-1].verdict is Verdict.UNKNOWN


def test_a_reused_result_counts_as_the_verdict_it_reused() -> None:
    reused = rows("h", CiStatus.REUSED)[0]
    reused.detail = reused_detail("failure", "run-1")
    assert verdict_of([reused]) is Verdict.RED
    reused.detail = reused_detail("success", "run-1")
    assert verdict_of([reused]) is Verdict.GREEN


def check(state: SeriesState, head: str, *states: CiStatus, at: str = "t") -> Notice | None:
    state.ci = {row.runner: row for row in rows(head, *states)}
    return note_rows(state, f"tree-{head}", at)


def test_green_red_red_green_tells_once_per_change_and_keeps_the_last_good_head() -> None:
    state = SeriesState(id="s")
    S, F = CiStatus.SUCCESS, CiStatus.FAILURE
    assert check(state, "h1", CiStatus.QUEUED, CiStatus.QUEUED) is None
    assert check(state, "h1", S, S, at="t1") is None  # green from the start: nothing to tell
    assert state.last_good is not None and state.last_good.head == "h1"

    red = check(state, "h2", S, F, at="t2")
    assert red is not None and red.change is Change.WENT_RED
    assert (red.head, red.last_good, red.streak_heads) == ("h2", "h1", 1)
    assert "went red on h2" in red.summary() and "last good head h1" in red.summary()
    assert check(state, "h3", F, F, at="t3") is None  # still red: no second message
    assert check(state, "h3", F, F, at="t3") is None  # the same head again counts once
    assert state.red_streak is not None and (state.red_streak.head, state.red_streak.heads) == (
        "h2",
        2,
    )
    assert state.last_good.head == "h1"

    green = check(state, "h4", S, S, at="t4")
    assert green is not None and green.change is Change.WENT_GREEN
    assert (green.streak_heads, green.since) == (2, "t2")
    assert state.red_streak is None and state.last_good.head == "h4"
    assert [(h.head, h.verdict) for h in state.heads] == [
        ("h1", Verdict.GREEN),
        ("h2", Verdict.RED),
        ("h3", Verdict.RED),
        ("h4", Verdict.GREEN),
    ]
    assert len({red.key, green.key}) == 2


def test_a_late_result_of_an_older_head_does_not_move_the_series_back() -> None:
    state = SeriesState(id="s")
    S, F, Q = CiStatus.SUCCESS, CiStatus.FAILURE, CiStatus.QUEUED
    check(state, "old", Q, Q)
    assert check(state, "new", S, S) is None
    old = rows("old", F, F)
    state.ci = {row.runner: row for row in old}
    assert note_rows(state, "tree-old", "t") is None
    assert state.red_streak is None and state.last_good.head == "new"  # type: ignore[union-attr]
    assert next(h for h in state.heads if h.head == "old").verdict is Verdict.RED


def test_a_series_red_from_its_first_head_says_it_has_no_good_head_yet() -> None:
    state = SeriesState(id="s")
    red = check(state, "h1", CiStatus.FAILURE)
    assert red is not None and red.last_good is None
    assert "no good head yet" in red.summary()


@pytest.mark.parametrize("fmt", ["json", "slack"])
def test_a_notice_is_signed_as_github_signs_its_deliveries(fmt: notify.Format) -> None:
    state = SeriesState(id="s")
    check(state, "h1", CiStatus.SUCCESS)
    notice = check(state, "h2", CiStatus.FAILURE)
    assert notice is not None
    fields = notice.to_dict()
    body = notify.body(fields, fmt, "https://carry.example.com")
    sent = notify.headers(fields, body, b"s3cret")
    expected = "sha256=" + hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
    assert sent[notify.SIGNATURE_HEADER] == expected
    assert sent[notify.EVENT_HEADER] == "went-red"
    assert sent[notify.DELIVERY_HEADER] == notice.key
    decoded = json.loads(body)
    if fmt == "slack":
        assert decoded["text"].startswith(":red_circle: carry: s went red on h2")
        assert "<https://carry.example.com/series/s|dashboard>" in decoded["text"]
    else:
        assert decoded["head"] == "h2" and decoded["last_good"] == "h1"
        assert decoded["dashboard"] == "https://carry.example.com/series/s"
    assert notify.SIGNATURE_HEADER not in notify.headers(fields, body, None)
