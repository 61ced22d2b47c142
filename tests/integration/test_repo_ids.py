"""carry learns the GitHub id of each repository its config names (issue 34, item 7), so that a
repository renamed before carry saw any delivery of it is still matched: at a worker's start
GitHub is asked, and answers by the old name with a redirect that names the id."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.core import events as ev
from bot.core import repo_identity as ri
from bot.store import repo_ids
from tests.support.deployment import DOWN_NAME, DOWN_OWNER, UP_NAME, UP_OWNER, Deploy, deployments
from workers import repo_identity


@pytest.fixture
def deploy(tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Deploy]:
    with deployments(tmp_path, redis_url, monkeypatch) as start:
        yield start


def test_ids_are_learned_from_github_once_even_by_an_old_name(deploy: Deploy) -> None:
    d = deploy(auth="token")
    d.gh.rename_repo(DOWN_OWNER, DOWN_NAME, "carry-renamed")  # before any delivery
    repo_identity.learn_ids(d.rt, d.rt.forge())
    down_id = d.gh.hub.repo(DOWN_OWNER, "carry-renamed").id
    up_id = d.gh.hub.repo(UP_OWNER, UP_NAME).id
    assert repo_ids.known(d.rt.redis) == {
        f"{DOWN_OWNER}/{DOWN_NAME}": down_id,
        f"{UP_OWNER}/{UP_NAME}": up_id,
    }
    asked = len(d.gh.api_requests("GET"))
    repo_identity.learn_ids(d.rt, d.rt.forge())  # known now: GitHub is not asked again
    assert len(d.gh.api_requests("GET")) == asked

    # a comment under the new name is carry's, under the config's name
    comment = ev.CommentCreated(
        repo=f"{DOWN_OWNER}/carry-renamed",
        repo_id=down_id,
        number=1,
        on_pull_request=True,
        author="maint",
        author_association="MEMBER",
        body="/carry pause",
        comment_id=5,
    )
    resolved = repo_identity.resolve(d.rt, comment)
    assert isinstance(resolved, ev.CommentCreated)
    assert resolved.repo == f"{DOWN_OWNER}/{DOWN_NAME}"
    (moved,) = d.history("repository-moved")
    assert moved["data"]["now"] == f"{DOWN_OWNER}/carry-renamed"
    # a new repository under the old name is not carry's
    stranger = ev.CommentCreated(
        repo=f"{DOWN_OWNER}/{DOWN_NAME}",
        repo_id=down_id + 1000,
        number=1,
        on_pull_request=True,
        author="maint",
        author_association="MEMBER",
        body="/carry pause",
        comment_id=6,
    )
    assert repo_identity.resolve(d.rt, stranger) is None


def test_a_move_told_by_several_workers_at_once_is_said_once(deploy: Deploy) -> None:
    """The github-faults bench saw `renamed` twice in the history with two worker processes:
    the `repository` delivery and an event under the new name each told the move, both having
    seen it untold before either marked it told. Eight threads tell one move at once."""
    d = deploy(auth="token")
    move = ri.Move(
        configured=f"{DOWN_OWNER}/{DOWN_NAME}",
        field="downstream.repo",
        was=f"{DOWN_OWNER}/{DOWN_NAME}",
        now=f"{DOWN_OWNER}/carry-renamed",
        action="renamed",
        repo_id=4242,
    )
    start = threading.Barrier(8)

    def tell() -> None:
        start.wait()
        repo_identity.tell(d.rt, move)

    threads = [threading.Thread(target=tell) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    (said,) = d.history("repository-moved")
    assert said["data"]["now"] == f"{DOWN_OWNER}/carry-renamed"

    repo_identity.tell(d.rt, move)  # told already: nothing more
    assert len(d.history("repository-moved")) == 1
