"""CI results come back as events the planner plans (issues 31 and 32): the store commits what a
run reported and hands a ChecksRecorded event to the planner, which decides what follows (rows
shown on GitHub, people told, a bisection, owners mentioned, carry/good/<series> moved). Before,
workers/ci/rows.py sent those tasks itself."""

from __future__ import annotations

import json
from dataclasses import replace

from bot.core import events as ev
from bot.core.owners import StreakGrew
from bot.core.planner import Action, ActionKind, Facts, SeriesFacts, plan
from bot.core.state import CiState, CiStatus
from bot.core.verified import Change, Notice

HEAD, GOOD, TREE = "a" * 40, "9" * 40, "t" * 40
ROW = CiState(
    runner="gaudi/async-inputs",
    state=CiStatus.FAILURE,
    run_id="run-1",
    tree_key=TREE,
    head_sha=HEAD,
    detail="2 classes",
)
RED = Notice(Change.WENT_RED, "s1", HEAD, TREE, (("gaudi/async-inputs", "failure"),), GOOD, 1, "t0")
STREAK = StreakGrew("s1", HEAD, "1" * 40, 3, "t0", (("gaudi/async-inputs", "failure"),))
RECORDED = ev.ChecksRecorded(series_id="s1", head_sha=HEAD, at="2026-12-06T12:00:00Z", rows=(ROW,))


def kinds(event: ev.ChecksRecorded, facts: Facts | None = None) -> list[ActionKind]:
    return [a.kind for a in plan(event, facts or Facts(downstream_repo="acme/carry"))]


def test_rows_are_shown_on_github_and_remembered_only_as_long_as_a_redelivery() -> None:
    (action,) = plan(RECORDED, Facts(downstream_repo="acme/carry"))
    assert action.kind is ActionKind.REPORT_CHECKS and action.series_id == "s1"
    assert action.args["rows"][0]["runner"] == "gaudi/async-inputs"
    assert action.args["rows"][0]["state"] == "failure"
    assert "gaudi/async-inputs: failure" in action.reason
    assert action.remember_s == ev.ChecksRecorded.remember_s < 7 * 24 * 3600


def test_a_head_that_went_red_after_a_good_one_is_told_and_bisected_once() -> None:
    actions = plan(replace(RECORDED, notices=(RED,)), Facts(downstream_repo="acme/carry"))
    by_kind = {a.kind: a for a in actions}
    assert list(by_kind) == [ActionKind.REPORT_CHECKS, ActionKind.NOTIFY, ActionKind.BISECT]
    assert by_kind[ActionKind.NOTIFY].key == f"notify:{RED.key}"
    assert by_kind[ActionKind.NOTIFY].args["notice"]["change"] == "went-red"
    assert by_kind[ActionKind.BISECT].key == f"bisect:{RED.key}"
    assert GOOD[:12] in by_kind[ActionKind.BISECT].reason
    # the notice's identity keeps it to one message and one bisection however often it comes
    assert by_kind[ActionKind.NOTIFY].remember_s is None


def test_red_with_no_good_head_before_is_told_but_not_bisected() -> None:
    first = replace(RED, last_good=None)
    assert kinds(replace(RECORDED, notices=(first,))) == [
        ActionKind.REPORT_CHECKS,
        ActionKind.NOTIFY,
    ]


def test_green_again_is_told_and_the_good_ref_follows_the_new_good_head() -> None:
    green = replace(RED, change=Change.WENT_GREEN, streak_heads=4)
    actions = plan(
        replace(RECORDED, notices=(green,), good_head=HEAD), Facts(downstream_repo="acme/carry")
    )
    assert [a.kind for a in actions] == [
        ActionKind.REPORT_CHECKS,
        ActionKind.NOTIFY,
        ActionKind.MOVE_GOOD_REF,
    ]
    assert actions[-1].key == f"good-ref:s1:{HEAD}"


def test_owners_are_mentioned_when_the_streak_reaches_the_configured_length() -> None:
    event = replace(RECORDED, streak=STREAK)
    facts = Facts(downstream_repo="acme/carry", red_streak_mention=3)
    (_, mention) = plan(event, facts)
    assert mention.kind is ActionKind.MENTION_OWNERS and mention.args["grew"]["heads"] == 3
    assert kinds(event, replace(facts, red_streak_mention=4)) == [ActionKind.REPORT_CHECKS]
    assert kinds(event, replace(facts, red_streak_mention=None)) == [ActionKind.REPORT_CHECKS]


def test_a_probe_that_ended_asks_for_the_bisections_next_step() -> None:
    probe = ev.ChecksRecorded(series_id="s1", head_sha=HEAD, at="t1", probe=True)
    (action,) = plan(probe, Facts(downstream_repo="acme/carry"))
    assert action.kind is ActionKind.BISECT and action.args == {"notice": None}
    assert "next step" in action.reason


def test_nothing_recorded_is_a_note() -> None:
    empty = ev.ChecksRecorded(series_id="s1", head_sha=HEAD, at="t1")
    assert kinds(empty) == [ActionKind.NOTE]


def test_two_commits_of_one_run_are_two_events() -> None:
    later = replace(RECORDED, at="2026-12-06T12:00:05Z")
    assert later.key != RECORDED.key and "run-1" in later.key


def test_the_event_goes_through_the_task_queue_and_back_with_its_records() -> None:
    full = replace(RECORDED, notices=(RED,), streak=STREAK, good_head=GOOD)
    back = ev.event_from_dict(json.loads(json.dumps(ev.event_to_dict(full))))
    assert back == full
    assert isinstance(back, ev.ChecksRecorded) and isinstance(back.notices[0], Notice)
    assert isinstance(back.rows[0].state, CiStatus)


# -- follow-ups of commands: decided by the planner, not the dispatcher (issue 31) -------------


def _command(body: str, head_sha: str | None = None) -> list[Action]:
    series = SeriesFacts(
        id="s1",
        upstream_repo="up/up",
        patch_names=("0001-a.patch",),
        head_sha=head_sha,
        head_ref="refs/heads/main" if head_sha else None,
    )
    event = ev.CommandAuthorized(
        series_id="s1", number=7, comment_id=99, author="lead", permission="write", body=body
    )
    return plan(event, Facts(downstream_repo="acme/carry", series=(series,)))


def test_a_pin_or_drop_is_re_decided_on_the_newest_head_at_once() -> None:
    for body, kind in (
        ("/carry keep 0001-a.patch", ActionKind.PIN_PATCH),
        ("/carry drop 0001-a.patch", ActionKind.REQUEST_DROP),
    ):
        change, recheck, _reply = _command(body, head_sha=HEAD)
        assert change.kind is kind and recheck.kind is ActionKind.REBASE
        assert recheck.args == {
            "head_sha": HEAD,
            "head_ref": "refs/heads/main",
            "actor": None,
            "force": True,
            "trigger": change.key,
            "replaces": (),
            "recheck": True,
        }


def test_no_recheck_before_the_first_head_and_a_retarget_polls_now() -> None:
    change, _reply = _command("/carry keep 0001-a.patch")
    assert change.kind is ActionKind.PIN_PATCH
    retarget, poll, _reply = _command("/carry retarget v1.2.0", head_sha=HEAD)
    assert retarget.kind is ActionKind.RETARGET and poll.kind is ActionKind.POLL
