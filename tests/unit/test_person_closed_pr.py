"""Issue 34, item 9: a person's close of carry's PR is respected (pure parts: the publisher's
decision, the state's transitions and words, the planner and the `/carry reopen` command)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from bot.core import events as ev
from bot.core import transitions as tr
from bot.core.commands import HELP, Command, parse_commands
from bot.core.planner import Action, Facts, SeriesFacts, plan
from bot.core.publishing import PublishStep, Step, publish_step, replaces_words
from bot.core.state import ClosedPr, PrInfo, SeriesState
from bot.web.views import attention

OLD, NEW = "a" * 40, "b" * 40
DOWN = "acme/carry"
PATCH = "0001-fix.patch"
CLOSED = ClosedPr(12, "https://github.com/acme/carry/pull/12", "maint", [OLD])


def step(
    closed: ClosedPr | None, head: str, files: dict | None = None, **kw: object
) -> PublishStep:
    chosen = {PATCH: b"new"} if files is None else files
    args: dict = {"open_pr": None, "branch_exists": False, "outcome": "changed", **kw}
    return publish_step(files=chosen, closed=closed, checked_head=head, **args)


def test_a_close_holds_back_a_new_pr_on_the_head_it_was_closed_at() -> None:
    found = step(CLOSED, OLD)

    assert found.step is Step.HELD and found.closed_pr == 12
    assert found.reason == (
        "carry's PR #12 was closed by @maint on this upstream head: carry opens no new PR until "
        "upstream moves or `/carry reopen`"
    )
    assert found.words == "open no new PR (#12 was closed by a person)"
    assert PublishStep.from_fields(found.fields()) == found


def test_a_new_upstream_head_opens_a_pr_that_replaces_the_closed_one() -> None:
    found = step(CLOSED, NEW, outcome="review")

    assert (found.step, found.draft, found.closed_pr) == (Step.OPEN, True, 12)
    assert found.reason.endswith("; it replaces PR #12, closed by @maint (upstream moved since)")
    assert PublishStep.from_fields(found.fields()) == found


def test_reopen_lifts_the_close_on_the_same_head() -> None:
    reopened = ClosedPr(12, "", "maint", [OLD], reopened_by="lead")
    found = step(reopened, OLD)

    assert (found.step, found.closed_pr) == (Step.OPEN, 12)
    assert found.reason.endswith("(reopened by `/carry reopen`)")


@pytest.mark.parametrize(
    ("files", "open_pr", "outcome", "expected"),
    [
        ({}, None, "clean", Step.NOTHING),  # nothing to propose: no PR either way
        ({}, None, "conflict", Step.REPORT),  # no branch, no file: reported without a PR
        ({PATCH: b"new"}, 30, "changed", Step.UPDATE),  # a person reopened it: carry's PR again
    ],
)
def test_a_close_changes_only_the_opening_of_a_pr(
    files: dict, open_pr: int | None, outcome: str, expected: Step
) -> None:
    found = step(CLOSED, OLD, files, open_pr=open_pr, outcome=outcome)
    assert found.step is expected and found.closed_pr is None


def test_the_new_prs_body_links_the_closed_one() -> None:
    assert replaces_words(CLOSED) == "Replaces #12, closed by @maint."
    assert replaces_words(ClosedPr(12)) == "Replaces #12, closed by someone."


def published_on(head: str) -> SeriesState:
    pr = PrInfo(12, "https://github.com/acme/carry/pull/12", "carry/s")
    return SeriesState(id="s", head_sha=head, checked_head=head, pr=pr)


WORDS = (
    "carry's PR #12 was closed by @maint; carry opens no new PR until upstream moves or "
    "`/carry reopen`"
)


def test_a_persons_close_is_kept_with_its_heads_and_needs_attention() -> None:
    state = published_on(OLD)
    state.head_sha = NEW  # a newer head seen, not checked yet: the close holds for it too

    assert tr.record_carry_pr(state, "closed_unmerged", "maint", person=True)

    assert state.pr is not None and state.pr.state == "closed"
    assert state.closed_pr == ClosedPr(12, state.pr.url, "maint", [OLD, NEW])
    assert WORDS in state.needs_attention
    assert SeriesState.from_dict(state.to_dict()).closed_pr == state.closed_pr


def test_upstream_moving_on_ends_the_attention_and_a_new_pr_ends_the_close() -> None:
    state = published_on(OLD)
    tr.record_carry_pr(state, "closed_unmerged", "maint", person=True)
    state.checked_head = "c" * 40

    assert WORDS not in state.needs_attention
    assert state.closed_pr is not None  # the next PR links it
    tr.published(state, PrInfo(13, "", "carry/s"), None, "PR #13 updated")
    assert state.closed_pr is None


def test_carrys_own_close_and_a_merge_are_not_a_persons_close() -> None:
    for how, person in (("closed_unmerged", False), ("merged", True)):
        state = published_on(OLD)
        assert tr.record_carry_pr(state, how, "carry[bot]", person=person)
        assert state.closed_pr is None and state.needs_attention == []


def test_a_pr_reopened_on_github_is_carrys_again_and_an_edit_keeps_the_state() -> None:
    state = published_on(OLD)
    tr.record_carry_pr(state, "closed_unmerged", "maint", person=True)

    assert not tr.record_carry_pr(state, "edited", "maint")
    assert state.pr is not None and state.pr.state == "closed"
    assert tr.record_carry_pr(state, "reopened", "maint")
    assert state.pr.state == "open" and state.closed_pr is None


def test_reopen_marks_the_close_lifted_once() -> None:
    state = published_on(OLD)
    assert not tr.reopen(state, "lead")  # nothing closed
    tr.record_carry_pr(state, "closed_unmerged", "maint", person=True)

    assert tr.reopen(state, "lead")
    assert not tr.reopen(state, "lead")
    assert state.closed_pr is not None and state.closed_pr.reopened_by == "lead"
    assert state.needs_attention == []


def facts(**series: object) -> Facts:
    defaults: dict[str, object] = {
        "id": "s1",
        "upstream_repo": "up/stream",
        "watched_ref": "refs/heads/main",
        "pr_number": 12,
        "head_sha": OLD,
    }
    return Facts(DOWN, bot_login="carry[bot]", series=(SeriesFacts(**{**defaults, **series}),))  # type: ignore[arg-type]


CLOSED_AT = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)


def closed_event(actor: str | None, state: ev.PrState = "closed_unmerged") -> ev.PrStateChanged:
    return ev.PrStateChanged(
        repo=DOWN, number=12, state=state, head_sha=NEW, base_ref="main", actor=actor, at=CLOSED_AT
    )


@pytest.mark.parametrize(
    ("actor", "state", "person", "why"),
    [
        ("maint", "closed_unmerged", True, "carry's PR #12 is closed unmerged by @maint: carry "
         "opens no new PR until upstream moves or `/carry reopen`"),
        (None, "closed_unmerged", True, "carry's PR #12 is closed unmerged by a person: carry "
         "opens no new PR until upstream moves or `/carry reopen`"),
        ("carry[bot]", "closed_unmerged", False, "carry's PR #12 is closed unmerged"),
        ("maint", "merged", False, "carry's PR #12 is merged"),
    ],
)  # fmt: skip
def test_the_planner_tells_a_persons_close_from_carrys_own(
    actor: str | None, state: ev.PrState, person: bool, why: str
) -> None:
    (action,) = plan(closed_event(actor, state), facts())
    assert action.kind == "record_carry_pr"
    assert (action.args["person"], action.args["by"], action.reason) == (person, actor, why)
    assert action.args["at"] == "2026-12-01T09:30:00+00:00"


def test_the_dashboard_row_says_since_when_the_pr_is_closed() -> None:
    state = published_on(OLD)
    tr.record_carry_pr(state, "closed_unmerged", "maint", person=True, at="2026-12-01T09:30:00Z")

    (row,) = attention(state)
    assert (row.reason, row.since) == (WORDS, "2026-12-01T09:30:00Z")


def authorized(body: str) -> ev.CommandAuthorized:
    return ev.CommandAuthorized(
        series_id="s1", number=12, comment_id=99, author="lead", permission="write", body=body
    )


def kinds(actions: list[Action]) -> list[str]:
    return [a.kind for a in actions]


def test_reopen_is_a_command_without_arguments() -> None:
    assert parse_commands("/carry reopen") == [Command("reopen", None, "/carry reopen")]
    (bad,) = parse_commands("/carry reopen now")
    assert (bad.verb, bad.problem) == ("unknown", "`/carry reopen` takes no arguments")
    assert "`/carry reopen`" in HELP


def test_reopen_of_a_closed_pr_lifts_the_close_and_answers() -> None:
    actions = plan(authorized("/carry reopen"), facts(closed_pr=12))

    assert kinds(actions) == ["reopen", "rebase", "reply"]
    assert actions[0].args == {"by": "lead", "closed_pr": 12}
    # the planner asks for the re-check that publishes (the dispatcher used to decide it)
    assert actions[1].args == {
        "head_sha": OLD,
        "head_ref": "",
        "actor": None,
        "force": True,
        "trigger": actions[0].key,
        "replaces": (),
        "recheck": True,
    }
    assert actions[2].args["body"] == (
        "Re-checking the series: carry opens a new PR in place of #12, which links it."
    )


def test_reopen_with_nothing_closed_does_nothing_and_says_so() -> None:
    actions = plan(authorized("/carry reopen"), facts())

    assert kinds(actions) == ["reply"]
    assert actions[0].args["body"] == (
        "Nothing to reopen: no PR of carry's for this series was closed by a person."
    )
