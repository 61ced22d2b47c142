"""Which configured repository a delivery is about: by GitHub's id, which a rename or a
transfer keeps, and by name only until the id is known (issue 34, item 7)."""

from __future__ import annotations

import pytest

from bot.core import events as ev
from bot.core import repo_identity as ri
from bot.core.github_payloads import PayloadError, normalize

DOWN, UP = "acme/carry", "up/engine"
NAMES = {DOWN: "downstream.repo", UP: "upstreams.engine.repo"}
SHA = "a" * 40


def comment(repo: str, repo_id: int | None) -> ev.CommentCreated:
    return ev.CommentCreated(
        repo=repo,
        repo_id=repo_id,
        number=3,
        on_pull_request=True,
        author="maint",
        author_association="MEMBER",
        body="/carry pause",
        comment_id=9,
    )


@pytest.mark.parametrize(
    ("repo", "repo_id", "known", "expected"),
    [
        ("acme/carry", 7, {}, ri.Match(DOWN, learn=7)),  # first seen: its id is learned
        ("ACME/Carry", 7, {"acme/carry": 7}, ri.Match(DOWN)),  # names are case-insensitive
        ("acme/renamed", 7, {"acme/carry": 7}, ri.Match(DOWN)),  # by id after a rename
        ("other/home", 8, {"up/engine": 8}, ri.Match(UP)),  # by id after a transfer
        ("acme/renamed", 7, {}, ri.Match(None)),  # id not learned yet: not carry's
        ("acme/carry", 99, {"acme/carry": 7}, ri.Match(None, other_id=7)),  # took the old name
        ("acme/carry", None, {"acme/carry": 7}, ri.Match(DOWN)),  # the poller's events
        ("else/where", 5, {"acme/carry": 7}, ri.Match(None)),
    ],
)
def test_a_repository_is_matched_by_id_then_by_name(
    repo: str, repo_id: int | None, known: dict[str, int], expected: ri.Match
) -> None:
    assert ri.match(repo, repo_id, NAMES, known) == expected


def test_an_event_under_a_new_name_says_the_move_and_reaches_the_planner_under_the_config_name():
    event = comment("acme/renamed", 7)
    move = ri.seen_moved(event, DOWN, NAMES)
    assert move == ri.Move(DOWN, "downstream.repo", DOWN, "acme/renamed", "renamed", 7)
    assert move.action_words == "set downstream.repo to acme/renamed in the config"
    assert ri.as_configured(event, DOWN).repo == DOWN
    assert ri.as_configured(event, DOWN).key == comment(DOWN, 7).key  # as the poller keys it
    moved = ri.seen_moved(comment("newowner/carry", 7), DOWN, NAMES)
    assert moved is not None and moved.action == "transferred"
    assert ri.seen_moved(comment(DOWN, 7), DOWN, NAMES) is None


def test_a_move_is_said_once_per_new_name_whichever_event_tells_it() -> None:
    renamed = ev.RepositoryMoved(action="renamed", repo="acme/renamed", repo_id=7, was=DOWN)
    move, found = ri.move_of(renamed, NAMES, {})
    assert move is not None and found.learn == 7  # matched by the old name, id learned
    seen = ri.seen_moved(comment("acme/renamed", 7), DOWN, NAMES)
    assert seen is not None and seen.key == move.key
    again = ev.RepositoryMoved(action="renamed", repo="acme/third", repo_id=7, was="acme/renamed")
    third, _ = ri.move_of(again, NAMES, {"acme/carry": 7})
    assert third is not None and (third.configured, third.now) == (DOWN, "acme/third")
    stranger = ev.RepositoryMoved(action="renamed", repo="x/y", repo_id=3, was="x/z")
    assert ri.move_of(stranger, NAMES, {"acme/carry": 7})[0] is None


def test_unknown_names_are_those_without_an_id() -> None:
    assert ri.unknown(NAMES, {"acme/carry": 7}) == (UP,)


def _repository(action: str, changes: dict) -> dict:
    return {
        "action": action,
        "changes": changes,
        "repository": {"id": 7, "full_name": "newowner/renamed"},
        "sender": {"login": "admin"},
    }


def test_repository_renamed_and_transferred_deliveries_normalize() -> None:
    renamed = normalize(
        "repository", "d1", _repository("renamed", {"repository": {"name": {"from": "carry"}}})
    )
    assert renamed == ev.RepositoryMoved(
        action="renamed",
        repo="newowner/renamed",
        repo_id=7,
        was="newowner/carry",
        actor="admin",
        delivery_id="d1",
    )
    by_org = {"owner": {"from": {"organization": {"login": "acme"}}}}
    transferred = normalize("repository", "d2", _repository("transferred", by_org))
    assert isinstance(transferred, ev.RepositoryMoved)
    assert (transferred.action, transferred.was) == ("transferred", "acme/renamed")
    by_user = {"owner": {"from": {"user": {"login": "someone"}}}}
    assert normalize("repository", "d3", _repository("transferred", by_user)).was == (
        "someone/renamed"
    )
    assert isinstance(normalize("repository", "d4", _repository("archived", {})), ev.Ignored)
    with pytest.raises(PayloadError, match=r"changes\.owner\.from"):
        normalize("repository", "d5", _repository("transferred", {}))
    assert ev.event_from_dict(ev.event_to_dict(renamed)) == renamed
