"""The planner reads only the series an event is about (bot.core.planner.scope), so the adapter
gathers only theirs and an event's cost does not grow with the series on other upstreams: each
event planned on every series' facts and on its scope's alone gives the same actions."""

from __future__ import annotations

import dataclasses

import pytest

from bot.core import events as ev
from bot.core.planner import Facts, Scope, SeriesFacts, plan, plan_duplicate, scope

A, B, C, D = "a" * 40, "b" * 40, "c" * 40, "d" * 40
MAIN = "refs/heads/main"

SERIES = (
    SeriesFacts(
        id="s1",
        upstream_repo="up/a",
        watched_ref=MAIN,
        pr_number=7,
        head_sha=A,
        newest_head=A,
        head_ref=MAIN,
        trusted_authors=frozenset({"maint"}),
        patch_names=("0001-fix.patch",),
        runners=("gaudi",),
    ),
    SeriesFacts(id="s2", upstream_repo="up/a", watched_ref=MAIN, head_sha=B, newest_head=C),
    SeriesFacts(id="s3", upstream_repo="up/b", watched_ref=MAIN, pr_number=9, head_sha=A),
    SeriesFacts(id="s4", upstream_repo="up/b", tag_pattern="v*", current_tag="v1.0"),
)
FACTS = Facts("acme/carry", series=SERIES, dashboard_issue=3)

EVENTS: list[ev.Event] = [
    ev.HeadMoved(repo="up/a", ref=MAIN, before=A, after=D, actor="maint"),
    ev.HeadMoved(repo="up/a", ref=MAIN, before=D, after=B, actor=None, source="poll"),
    ev.HeadMoved(repo="up/b", ref="refs/tags/v2.0", before=ev.ZERO_SHA, after=D, actor="x"),
    ev.HeadMoved(repo="up/c", ref=MAIN, before=A, after=D, actor="x"),
    ev.RefDeleted(repo="up/b", ref=MAIN, before=A, actor="x"),
    ev.RebaseFinished(series_id="s1", head_sha=D, digest="d1", outcome="ok", changed=True),
    ev.RebaseFinished(series_id="s3", head_sha=D, digest="d2", outcome="conflict", changed=False),
    ev.TreeReady(
        series_id="s1",
        head_sha=D,
        tree="t" * 40,
        branch="carry/s1",
        branch_sha=C,
        series_sha=B,
        patches_dir="patches/s1",
    ),
    ev.CommandAuthorized(
        series_id="s1",
        number=7,
        comment_id=11,
        author="maint",
        permission="write",
        body="/carry rebase",
    ),
    ev.CommandAuthorized(
        series_id="s3", number=9, comment_id=12, author="x", permission="read", body="/carry pause"
    ),
    ev.ChecksRecorded(series_id="s1", head_sha=D, at="2026-12-07T02:00:00.000001Z", probe=True),
]


def scoped(event: ev.Event) -> Facts:
    read = scope(event)
    kept = tuple(s for s in SERIES if read.includes(s.id, s.upstream_repo))
    return dataclasses.replace(FACTS, series=kept)


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: f"{e.kind}:{e.key[:40]}")
def test_an_event_plans_the_same_on_its_scope_alone(event: ev.Event) -> None:
    everything = plan(event, FACTS)
    assert everything, "the event plans nothing: the comparison would prove nothing"
    assert plan(event, scoped(event)) == everything
    assert plan_duplicate(event, scoped(event)) == plan_duplicate(event, FACTS)


def test_the_scopes_leave_out_other_upstreams_and_other_series() -> None:
    moved_a, _, moved_b, _, _, finished, *_ = EVENTS
    assert [s.id for s in scoped(moved_a).series] == ["s1", "s2"]
    assert [s.id for s in scoped(moved_b).series] == ["s3", "s4"]
    assert [s.id for s in scoped(finished).series] == ["s1"]
    # an event the scope does not know reads every series
    comment = ev.CommentCreated(
        repo="acme/carry",
        number=7,
        on_pull_request=True,
        author="x",
        author_association="MEMBER",
        body="/carry rebase",
        comment_id=1,
    )
    assert scope(comment) == Scope() and scoped(comment).series == SERIES


def test_head_moves_that_act_act_on_their_scope() -> None:
    """The events above are not all notes: head moves start rebases, a finished rebase
    publishes, so equal plans compare real decisions."""
    kinds = {type(a).__name__ for e in EVENTS for a in plan(e, FACTS)}
    assert {"Rebase", "Publish"} <= kinds
