"""The dashboard issue's body and its ticks (bot.core.dashboard_issue), and how the planner
turns an edit of the issue into `/carry` commands with a permission check."""

from __future__ import annotations

import pytest

from bot.core import dashboard_issue as board
from bot.core import events as ev
from bot.core.github_payloads import normalize
from bot.core.planner import Facts, SeriesFacts, plan
from bot.core.state import CiState, PatchState, PrInfo, SeriesState

HEAD, WAITING = "a" * 40, "b" * 40
DOWN = "acme/carry"


def state(**changes: object) -> SeriesState:
    values: dict[str, object] = {
        "id": "calc",
        "base": "branch main",
        "head_sha": HEAD,
        "phase": "idle",
        "outcome": "changed",
        "patches": [
            PatchState("0001-a.patch", status="applies", decision="keep"),
            PatchState("0002-b.patch", status="contained", decision="drop"),
            PatchState("0003-c.patch", status="conflict", decision="review"),
            PatchState("0004-d.patch", status="contained", decision="drop", pinned=True),
        ],
        "pr": PrInfo(12, "https://example/pr/12", "carry/calc"),
        "ci": {"gaudi/x": CiState("gaudi/x", "waiting-approval", head_sha=WAITING)},
    }
    return SeriesState(**{**values, **changes})  # type: ignore[arg-type]


def tick(body: str, line_part: str) -> str:
    (line,) = [line for line in body.splitlines() if line_part in line]
    return body.replace(line, line.replace("- [ ]", "- [x]", 1))


def test_the_body_lists_attention_first_and_a_box_per_action() -> None:
    quiet = state(id="quiet", patches=[], ci={}, pr=None)
    body = board.render([quiet, state()], dashboard_url="https://carry.example/")
    assert body.startswith(board.MARKER)
    assert body.index("## Needs attention") < body.index("## `calc`") < body.index("## `quiet`")
    assert "- `calc`: `0003-c.patch: conflict`" in body
    assert "[details](https://carry.example/series/calc)" in body
    verbs = [t.command for t in board.ticked("", body.replace("- [ ]", "- [x]"))]
    assert verbs == [
        "/carry rebase",
        "/carry retest",
        f"/carry approve {WAITING}",
        "/carry keep 0002-b.patch",
        "/carry keep 0003-c.patch",
        "/carry pause",
        "/carry rebase",  # quiet: no CI, no patches, no approval
        "/carry pause",
    ]
    assert "0004-d.patch` | contained | drop (pinned)" in body
    assert "keep:calc:0004-d.patch" not in body, "a pinned patch has nothing to keep"


def test_a_paused_series_offers_resume_and_no_head_offers_no_rebase() -> None:
    body = board.render([state(paused_by="alice", head_sha=None, ci={})])
    assert "carry-action:resume:calc" in body and "carry-action:pause:" not in body
    assert "carry-action:rebase:" not in body and "no head seen yet" in body


def test_text_nobody_here_wrote_is_shown_as_code() -> None:
    body = board.render([state(phase="error", error="fatal: <img src=x> @everyone #1")])
    assert "`error: fatal: <img src=x> @everyone #1`" in body


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        (None, "- [x] <!-- carry-action:rebase:calc --> x", []),  # body unchanged
        (
            "- [ ] <!-- carry-action:rebase:calc --> x",
            "- [x] <!-- carry-action:rebase:calc --> x",
            ["/carry rebase"],
        ),
        (
            "- [x] <!-- carry-action:rebase:calc --> x",
            "- [x] <!-- carry-action:rebase:calc --> y",
            [],
        ),  # ticked before: not a new tick
        ("", "- [X] <!-- carry-action:keep:calc:0002-b.patch --> y", ["/carry keep 0002-b.patch"]),
        ("", "- [x] <!-- carry-action:rm:calc --> y", []),  # not a verb carry offers
        (
            "",
            "  * [x] <!-- carry-action:retest:calc --> a\n- [x] <!-- carry-action:retest:calc -->",
            ["/carry retest"],
        ),  # twice is once
        ("", "- [x] carry-action:rebase:calc", []),  # words, not carry's marker
        ("", "```\n- [x] <!-- carry-action:pause:calc --> in a block\n```", []),
        ("", "<!--\n- [x] <!-- carry-action:pause:calc --> in a comment\n-->", []),
        (
            "",
            "<details>\n\n- [x] <!-- carry-action:pause:calc --> folded\n\n</details>\n\n"
            "+ [x] <!-- carry-action:rebase:calc --> shown",
            ["/carry rebase"],
        ),
    ],
)
def test_ticked(before: str | None, after: str, expected: list[str]) -> None:
    assert [t.command for t in board.ticked(before, after)] == expected


def facts(board_number: int | None = 40) -> Facts:
    series = SeriesFacts(
        id="calc",
        upstream_repo="up/calc",
        watched_ref="refs/heads/main",
        head_sha=HEAD,
        patch_names=("0001-a.patch", "0002-b.patch"),
    )
    return Facts(DOWN, bot_login="carry[bot]", series=(series,), dashboard_issue=board_number)


def edited(
    before: str | None, after: str, *, actor: str = "alice", number: int = 40
) -> ev.IssueEdited:
    return ev.IssueEdited(
        repo=DOWN, number=number, actor=actor, body=after, previous_body=before, delivery_id="d1"
    )


def test_a_tick_becomes_a_permission_checked_command_and_a_fresh_body() -> None:
    body = board.render([state()])
    lookup, refresh = plan(edited(body, tick(body, "keep:calc:0002-b.patch")), facts())
    assert lookup.kind == "check_permission" and lookup.series_id == "calc"
    assert lookup.args["author"] == "alice" and lookup.args["number"] == 40
    assert lookup.args["body"] == "/carry keep 0002-b.patch"
    assert lookup.args["source"] == "dashboard:d1:calc"
    assert refresh.kind == "refresh_dashboard_issue" and refresh.args == {"force": True}


@pytest.mark.parametrize(
    ("event", "board_number", "why"),
    [
        (edited("", "x", number=41), 40, "#41 is not carry's dashboard issue"),
        (edited("", "x"), None, "#40 is not carry's dashboard issue"),
        (edited("", "x", actor="carry[bot]"), 40, "carry's own edit"),
    ],
)
def test_other_edits_are_notes(event: ev.IssueEdited, board_number: int | None, why: str) -> None:
    (note,) = plan(event, facts(board_number))
    assert note.kind == "note" and why in note.reason


def test_a_box_for_a_series_not_configured_is_a_note() -> None:
    after = "- [x] <!-- carry-action:rebase:gone --> x"
    note, refresh = plan(edited("", after), facts())
    assert note.kind == "note" and "'gone'" in note.reason
    assert refresh.kind == "refresh_dashboard_issue"


def authorized(body: str, permission: str = "write") -> ev.CommandAuthorized:
    return ev.CommandAuthorized(
        series_id="calc",
        number=40,
        comment_id=0,
        author="alice",
        permission=permission,
        body=body,
        head_at_comment=HEAD,
        source="dashboard:d1:calc",
    )


def test_ticked_commands_run_like_comment_commands_and_answer_on_the_issue() -> None:
    actions = plan(authorized("/carry keep 0002-b.patch\n/carry keep 0009-no.patch"), facts())
    assert [a.kind for a in actions] == ["pin_patch", "rebase", "reply", "refresh_dashboard_issue"]
    pin, recheck, answer, _ = actions
    assert recheck.key == f"{pin.key}:recheck" and recheck.args["force"] is True
    assert pin.key == "cmd:dashboard:d1:calc:0" and pin.args == {
        "patch": "0002-b.patch",
        "by": "alice",
    }
    assert answer.args["number"] == 40
    assert "Pinned 0002-b.patch" in answer.args["body"]
    assert "no patch `0009-no.patch`" in answer.args["body"]


def test_a_tick_without_write_access_is_refused_as_a_comment_is() -> None:
    (answer,) = plan(authorized("/carry pause", permission="triage"), facts())
    assert answer.kind == "reply" and "write access" in answer.args["body"]


def test_the_webhook_normalizes_to_an_issue_edit() -> None:
    payload = {
        "action": "edited",
        "issue": {"number": 40, "body": "new"},
        "changes": {"body": {"from": "old"}},
        "repository": {"full_name": DOWN},
        "sender": {"login": "alice"},
    }
    event = normalize("issues", "d1", payload)
    assert event == edited("old", "new")
    assert ev.event_from_dict(ev.event_to_dict(event)) == event
    retitled = {**payload, "changes": {"title": {"from": "t"}}}
    assert normalize("issues", "d2", retitled).previous_body is None  # type: ignore[union-attr]
    opened = normalize("issues", "d3", {**payload, "action": "opened"})
    assert isinstance(opened, ev.Ignored) and "'opened'" in opened.reason


def test_the_dashboard_issue_is_on_by_default_where_the_credentials_can_write_issues() -> None:
    decide = board.decide_board
    assert decide(None, True, True).on
    assert decide(None, True, None).on  # GitHub did not say: carry tries
    off = decide(None, True, False)
    assert not off.on and "cannot write issues" in off.reason
    assert not decide(False, True, True).on  # an explicit false always turns it off
    assert not decide(None, False, None).on and "read-only" in decide(None, False, None).reason
    assert not decide(True, False, None).on
    forced = decide(True, True, False)
    assert forced.on and "will fail" in forced.reason
