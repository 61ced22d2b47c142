"""Trust is a fact about a SHA: comment commands never confer it on a head nobody approved."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bot.core import events as ev
from bot.core.planner import Action, Facts, SeriesFacts, plan, plan_duplicate

OLD, NEW = "a" * 40, "b" * 40
DOWN = "acme/carry"


def facts(**series: object) -> Facts:
    defaults: dict[str, object] = {
        "id": "s1",
        "upstream_repo": "up/stream",
        "watched_ref": "refs/heads/main",
        "pr_number": 7,
        "head_sha": OLD,
        "head_ref": "refs/heads/main",
        "head_actor": "stranger",
        "trusted_authors": frozenset({"maintainer"}),
    }
    return Facts(DOWN, series=(SeriesFacts(**{**defaults, **series}),))  # type: ignore[arg-type]


def authorized(body: str, head_at_comment: str | None = OLD) -> ev.CommandAuthorized:
    return ev.CommandAuthorized(
        series_id="s1",
        number=7,
        comment_id=99,
        author="maintainer",
        permission="write",
        body=body,
        head_at_comment=head_at_comment,
    )


def only(actions: list[Action], kind: str) -> list[Action]:
    return [a for a in actions if a.kind == kind]


def reply(actions: list[Action]) -> str:
    (answer,) = only(actions, "reply")
    return str(answer.args["body"])


def test_a_comment_remembers_the_head_its_author_could_see() -> None:
    comment = ev.CommentCreated(
        repo=DOWN,
        number=7,
        on_pull_request=True,
        author="maintainer",
        author_association="MEMBER",
        body="/carry approve",
        comment_id=99,
    )
    (lookup,) = plan(comment, facts())
    assert lookup.kind == "check_permission" and lookup.args["head_at_comment"] == OLD


def test_a_bare_approve_binds_to_the_head_at_comment_time_not_a_newer_one() -> None:
    # The head moved to NEW while the permission lookup was in flight.
    actions = plan(authorized("/carry approve", head_at_comment=OLD), facts(head_sha=NEW))
    (approve,) = only(actions, "approve")
    assert approve.args["sha"] == OLD
    assert f"moved since your comment, to {NEW[:12]}: it is not approved" in reply(actions)


def test_a_bare_approve_with_no_known_head_at_comment_time_approves_nothing() -> None:
    actions = plan(authorized("/carry approve", head_at_comment=None), facts(head_sha=NEW))
    assert only(actions, "approve") == []
    assert f"Name it: `/carry approve {NEW[:12]}`" in reply(actions)


def test_an_approve_naming_a_sha_binds_to_it() -> None:
    actions = plan(authorized(f"/carry approve {NEW[:12]}"), facts(head_sha=NEW))
    (approve,) = only(actions, "approve")
    assert approve.args["sha"] == NEW[:12]


def test_rebase_by_a_trusted_commenter_keeps_the_heads_pusher() -> None:
    (rebase,) = only(plan(authorized("/carry rebase"), facts()), "rebase")
    assert rebase.args["actor"] == "stranger" and rebase.args["head_sha"] == OLD


def test_rebase_of_a_head_with_unknown_pusher_stays_unknown() -> None:
    (rebase,) = only(plan(authorized("/carry rebase"), facts(head_actor=None)), "rebase")
    assert rebase.args["actor"] is None


def base_pr(state: ev.PrState, head: str) -> ev.PrStateChanged:
    return ev.PrStateChanged(
        repo="up/stream", number=5, state=state, head_sha=head, base_ref="main", actor="maintainer"
    )


def test_reopening_a_pr_confers_no_trust_on_a_head_pushed_while_it_was_closed() -> None:
    pulled = facts(watched_ref="refs/pull/5/head", pull=5, head_actor="stranger")
    (rebase,) = only(plan(base_pr("reopened", NEW), pulled), "rebase")
    assert rebase.args["head_sha"] == NEW and rebase.args["actor"] is None
    (same,) = only(plan(base_pr("reopened", OLD), pulled), "rebase")
    assert same.args["actor"] == "stranger"  # the head carry knows keeps its known pusher


def test_a_mistyped_patch_name_is_answered_and_the_other_commands_still_run() -> None:
    body = "/carry keep 0009-typo.patch\n/carry keep 0001-real.patch\n/carry pause\n"
    actions = plan(authorized(body), facts(patch_names=("0001-real.patch",)))
    assert [a.args.get("patch") for a in only(actions, "pin_patch")] == ["0001-real.patch"]
    assert len(only(actions, "set_paused")) == 1
    text = reply(actions)
    assert "no patch `0009-typo.patch` (its patches: `0001-real.patch`)" in text
    assert "Pinned 0001-real.patch" in text and "Pinned 0009" not in text


def test_an_approve_for_a_sha_that_matches_no_known_head_approves_nothing() -> None:
    actions = plan(authorized("/carry approve deadbeefdead"), facts())
    assert only(actions, "approve") == []
    assert "no upstream head carry knows starts with deadbeefdead" in reply(actions)


def test_an_approve_for_a_full_sha_of_no_known_head_says_so() -> None:
    """A full SHA binds as given (a maintainer may approve the commit they reviewed before
    its push reaches carry), and the answer says that carry has not seen it."""
    unseen = "c" * 40
    actions = plan(authorized(f"/carry approve {unseen}"), facts())
    (approve,) = only(actions, "approve")
    assert approve.args["sha"] == unseen
    assert reply(actions) == (
        f"Approved {unseen[:12]} for the hardware runners. carry has seen no upstream head "
        f"{unseen[:12]} (the upstream head is {OLD[:12]}): that exact commit runs on the "
        "hardware if it becomes the head, and nothing else does."
    )
    known = plan(authorized(f"/carry approve {OLD}"), facts())
    assert reply(known) == f"Approved {OLD[:12]} for the hardware runners."


def pushed(actor: str | None, after: str = OLD) -> ev.HeadMoved:
    return ev.HeadMoved(
        repo="up/stream", ref="refs/heads/main", before="0" * 40, after=after, actor=actor
    )


def test_a_push_webhook_after_a_poll_records_the_pusher_the_poll_could_not_know() -> None:
    polled = facts(head_actor=None)
    (recorded,) = only(plan(pushed("maintainer"), polled), "record_pusher")
    assert recorded.args == {"head_sha": OLD, "actor": "maintainer", "trusted": True}
    (stranger,) = only(plan(pushed("stranger"), polled), "record_pusher")
    assert stranger.args["trusted"] is False
    assert only(plan(pushed(None), polled), "record_pusher") == []  # another poll: nobody known
    (newer,) = only(plan(pushed("maintainer", NEW), polled), "record_pusher")  # a newer head
    assert newer.args["head_sha"] == NEW
    known = facts(head_actor="stranger")
    assert only(plan(pushed("maintainer"), known), "record_pusher") == []  # never replaced


def test_strangers_are_refused_once_per_pr_not_once_per_comment() -> None:
    """Twenty comments of someone without write access got twenty refusals; the refusal's
    key is now the PR, so carry_out answers the first and skips the rest, whoever wrote them
    (another account is no way to another reply)."""

    def stranger(comment_id: int, author: str = "Stranger") -> ev.CommandAuthorized:
        return ev.CommandAuthorized(
            series_id="s1",
            number=7,
            comment_id=comment_id,
            author=author,
            permission="read",
            body="/carry rebase",
        )

    keys = {a.key for n in range(20) for a in only(plan(stranger(n), facts()), "reply")}
    assert len(keys) == 1
    (other,) = only(plan(stranger(99, "someone-else"), facts()), "reply")
    assert other.key in keys
    elsewhere = ev.CommandAuthorized(
        series_id="s1", number=8, comment_id=1, author="x", permission="read", body="/carry rebase"
    )
    assert only(plan(elsewhere, facts()), "reply")[0].key not in keys  # another PR: one more


def test_a_rebase_that_finished_after_a_pause_is_not_published() -> None:
    """Paused while the check ran: the result is kept, but a paused series is never touched."""
    done = ev.RebaseFinished(
        series_id="s1", head_sha=OLD, digest="d" * 64, outcome="refreshed", changed=True
    )
    assert [a.kind for a in plan(done, facts())] == ["publish"]
    (note,) = plan(done, facts(paused_by="alice"))
    assert note.kind == "note" and "paused by @alice" in note.reason
    assert [a.kind for a in plan(done, facts(paused_by_policy=True))] == ["note"]


@pytest.mark.parametrize(
    ("actor", "known_pusher", "ref", "recorded"),
    [
        ("maintainer", None, "refs/heads/main", [("maintainer", True)]),  # a poll saw it first
        ("stranger", None, "refs/heads/main", [("stranger", False)]),  # recorded, releases nothing
        (None, None, "refs/heads/main", []),  # a poll's own duplicate names nobody
        ("maintainer", "stranger", "refs/heads/main", []),  # the head's pusher is known
        ("maintainer", None, "refs/heads/other", []),  # no series watches that ref
    ],
)
def test_a_duplicate_head_event_brings_only_the_pusher_a_poll_lacked(
    actor: str | None, known_pusher: str | None, ref: str, recorded: list[tuple[str, bool]]
) -> None:
    pushed = ev.HeadMoved(repo="up/stream", ref=ref, before="0" * 40, after=OLD, actor=actor)
    actions = plan_duplicate(pushed, facts(head_actor=known_pusher))
    late = only(actions, "record_pusher")
    pushes = ("record_push", "release_runs")
    assert [a.kind for a in actions if a.kind not in pushes] == ["record_pusher"] * len(recorded)
    assert [(a.args["actor"], a.args["trusted"]) for a in late] == recorded
    # the push itself is a fact for the range's trust whenever a webhook names its pusher
    watched = actor is not None and ref == "refs/heads/main"
    assert [a.args["actor"] for a in only(actions, "record_push")] == ([actor] if watched else [])
    # and a trusted one releases the runs that waited for it: the planner says so, in order
    trusted = watched and actor == "maintainer"
    releases = only(actions, "release_runs")
    assert [a.args for a in releases] == ([{"after": OLD, "actor": actor}] if trusted else [])
    if trusted:
        kinds = [a.kind for a in actions]
        assert kinds.index("release_runs") == kinds.index("record_push") + 1


def test_every_push_webhook_records_the_push_for_the_ranges_trust() -> None:
    """Issue 33: trust covers the range of pushes, so each push (before, after, pusher,
    trusted, forced) is recorded, not only the head's first pusher; a redelivery has the
    same key, and a poll names nobody."""
    moved = ev.HeadMoved(
        repo="up/stream",
        ref="refs/heads/main",
        before=OLD,
        after=NEW,
        actor="Maintainer",
        forced=True,
    )
    (push,) = only(plan(moved, facts(head_actor="stranger")), "record_push")
    assert push.args == {
        "before": OLD,
        "after": NEW,
        "actor": "Maintainer",
        "trusted": True,
        "forced": True,
    }
    (again,) = only(plan(moved, facts()), "record_push")
    assert again.key == push.key
    (stranger,) = only(plan(replace(moved, actor="stranger"), facts()), "record_push")
    assert stranger.args["trusted"] is False and stranger.key != push.key
    assert only(plan(replace(moved, actor=None, source="poll"), facts()), "record_push") == []


@pytest.mark.parametrize(
    ("runners", "every_head", "outcome", "tested"),
    [
        (("gaudi",), True, "clean", (True, True)),  # applies unchanged: tested all the same
        (("gaudi",), False, "clean", (True, False)),  # ci.on: proposed
        (("gaudi",), True, "conflict", (False, False)),  # no tree to test
        ((), True, "clean", (False, False)),  # no runners
    ],
)
def test_the_planner_asks_for_the_tree_of_every_head_to_be_tested(
    runners: tuple[str, ...], every_head: bool, outcome: str, tested: tuple[bool, bool]
) -> None:
    """Issue 32: publishing found nothing to propose, so no run started; now the planner says
    whether the head's tree is tested whatever is published (the series' ci.on)."""
    done = ev.RebaseFinished(
        series_id="s1",
        head_sha=OLD,
        digest="d" * 64,
        outcome=outcome,
        changed=False,
        result_tree="e" * 40,
    )
    (publish,) = plan(done, facts(runners=runners, ci_every_head=every_head))
    assert (publish.args["tree"] is not None, publish.args["every_head"]) == tested
