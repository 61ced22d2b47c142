"""Trust belongs to a SHA and who pushed it: a tree built on an older head never borrows the
pusher of a newer one (real Redis, the real request path of the service)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import redis

from bot.config import CarryConfig, Settings
from bot.core import events as ev
from bot.core.state import SeriesState
from bot.queue.celery_app import app as celery_app
from bot.store import series as store
from harness.gitrepo import RepoBuilder
from harness.pushes import push, trusted_push
from tests.support.broker import point_at
from tests.support.paths import REPO_ROOT
from workers.ci import github as hardware
from workers.runtime import Runtime

OLD, NEW = "1" * 40, "2" * 40
CONFIG = CarryConfig.model_validate(
    {
        "downstream": {"repo": "acme/carry"},
        "upstreams": {"up": {"url": "/srv/up.git", "repo": "up/stream"}},
        "series": [
            {
                "id": "s1",
                "upstream": "up",
                "base": {"branch": "main"},
                "patches": "s1",
                "runners": ["gaudi"],
                "checks": ["fixed"],
                "trusted_authors": ["maintainer"],
            }
        ],
        "runners": {
            "gaudi": {
                "queue": "hw.gaudi",
                "workdir": "/tmp/r",
                "checks": {"fixed": {"run": ["true"]}},
            }
        },
    }
)


@pytest.fixture
def rt(redis_url: str, tmp_path: Path) -> Iterator[Runtime]:
    broker = celery_app.conf.broker_url
    point_at(celery_app, redis_url)  # a dispatched job lands in the test's Redis
    yield Runtime(CONFIG, Settings(), redis.Redis.from_url(redis_url), tmp_path)
    point_at(celery_app, broker)


def request(rt: Runtime, state: SeriesState) -> str:
    (row,) = hardware.request(
        rt, state, "3" * 40, "/srv/down.git", "carry/s1", "4" * 40, "patches/s1"
    )
    return row.state


def test_a_retried_publish_of_an_old_head_does_not_borrow_the_newer_heads_pusher(
    rt: Runtime,
) -> None:
    # A stranger pushed OLD; it was checked and is being published (or retried) while the
    # maintainer's NEW head is already recorded and still rebasing.
    state = SeriesState(id="s1", head_sha=NEW, head_actor="maintainer", checked_head=OLD)
    state.checked_digest = "d" * 64
    store.save_series(rt.redis, state)
    assert request(rt, state) == "waiting-approval"


def test_the_head_that_was_checked_keeps_its_own_trusted_push(rt: Runtime) -> None:
    state = SeriesState(id="s1", head_sha=OLD, head_actor="maintainer", checked_head=OLD)
    state.checked_digest = "d" * 64
    store.save_series(rt.redis, state)
    # a last pusher with no recorded push (from ZERO or a trusted head) is no range of trust
    assert request(rt, state) == "waiting-approval"
    trusted_push(rt.redis, "s1", OLD, by="maintainer")
    state = store.load_series(rt.redis, "s1")
    assert state is not None
    assert request(rt, state) != "waiting-approval"


def moved(before: str, after: str, actor: str) -> ev.HeadMoved:
    return ev.HeadMoved(
        repo="up/stream", ref="refs/heads/main", before=before, after=after, actor=actor
    )


def checked(rt: Runtime, head: str) -> SeriesState:
    """The series as its rebase leaves it once `head` was checked (the rebase itself runs in
    a worker this test does not start)."""
    state = store.load_series(rt.redis, "s1")
    assert state is not None
    state.head_sha, state.checked_head, state.checked_digest = head, head, "d" * 64
    store.save_series(rt.redis, state)
    return state


def test_a_trusted_push_over_a_strangers_head_waits_for_approval(
    rt: Runtime, redis_url: str
) -> None:
    """Issue 33: a stranger pushed STRANGER onto the maintainer's BASE, then the maintainer
    pushed FIXUP on top (GitHub's "Update branch", a fixup): the maintainer is the last
    pusher, and the stranger's code ran with no approval. The push webhooks go through the
    real planner and adapters; the head waits until an operator's `carry approve`."""
    from workers.tasks import handle_event

    base, stranger, fixup = "5" * 40, "6" * 40, "7" * 40
    store.save_series(rt.redis, SeriesState(id="s1"))
    handle_event(rt, moved(ev.ZERO_SHA, base, "maintainer"))
    handle_event(rt, moved(base, stranger, "stranger"))
    handle_event(rt, moved(stranger, fixup, "maintainer"))
    state = checked(rt, fixup)
    assert [(p.pusher, p.trusted) for p in state.pushes] == [
        ("maintainer", True),
        ("stranger", False),
        ("maintainer", True),
    ]
    assert state.pushes[-1].pusher == "maintainer"  # the last pusher: trusted, and not enough
    assert request(rt, state) == "waiting-approval"
    (waits,) = [h for h in store.history(rt.redis, "s1") if h["kind"] == "ci-wait-approval"]
    assert waits["data"]["reason"] == (
        f"head {fixup[:12]} contains {stranger[:12]}, pushed by @stranger, who is not a "
        f"trusted author, and nobody approved it: it waits for `/carry approve {fixup[:12]}`"
    )

    env = {**os.environ, "REDIS_URL": redis_url, "PYTHONPATH": str(REPO_ROOT)}
    wrong = carry_cli(env, "approve", "--series", "s1", "f" * 7)
    assert wrong.returncode == 2
    assert (
        wrong.stderr.strip()
        == "carry: error: not approved: no head waiting for approval matches fffffff"
    )
    unknown = carry_cli(env, "approve", "--series", "nope", fixup)
    assert (unknown.returncode, unknown.stderr.strip()) == (
        2,
        "carry: error: carry knows no series 'nope'",
    )
    done = carry_cli(env, "approve", "--series", "s1", fixup[:10], "--by", "ops")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(
        f"Approved {fixup[:12]} of series s1 for the hardware runners; released "
    )
    after = store.load_series(rt.redis, "s1")
    assert after is not None and after.approvals == [fixup]
    assert all(row.state != "waiting-approval" for row in after.ci.values())
    (approved,) = [h for h in store.history(rt.redis, "s1") if h["kind"] == "ci-approved"]
    assert approved["data"]["by"] == "ops" and approved["data"]["sha"] == fixup

    # the maintainer's next push is on an approved head: it runs with no approval
    handle_event(rt, moved(fixup, "8" * 40, "maintainer"))
    assert request(rt, checked(rt, "8" * 40)) != "waiting-approval"


def carry_cli(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bot.cli", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_trusted_push_webhook_after_a_poll_releases_the_runs_that_waited(rt: Runtime) -> None:
    """A poll saw OLD first (no pusher), so its tree waited for approval; the maintainer's
    push webhook for OLD then arrives: its pusher is recorded and the runs start."""
    from workers.tasks import handle_event

    state = SeriesState(id="s1", head_sha=OLD, head_ref="refs/heads/main", checked_head=OLD)
    state.checked_digest = "d" * 64
    store.save_series(rt.redis, state)
    assert request(rt, state) == "waiting-approval"
    pushed = ev.HeadMoved(
        repo="up/stream", ref="refs/heads/main", before="0" * 40, after=OLD, actor="maintainer"
    )
    handle_event(rt, pushed)
    after = store.load_series(rt.redis, "s1")
    assert after is not None and after.head_actor == "maintainer"
    assert after.ci and all(row.state != "waiting-approval" for row in after.ci.values())
    assert [h["kind"] for h in store.history(rt.redis, "s1") if h["kind"] == "ci-trusted-pusher"]


def test_a_trusted_push_webhook_that_a_poll_beat_still_releases_the_runs(rt: Runtime) -> None:
    """As it happens in a deployment: the poll's event for OLD is handled first and claims the
    head's event key; the push webhook for the same head and ref comes second. It is a
    duplicate as an event, but the pusher it names is a new fact: it is recorded and the runs
    start (the demo stalled for 60 s on this, waiting for an approval nobody needed)."""
    from workers.tasks import handle_event

    polled = ev.HeadMoved(
        repo="up/stream",
        ref="refs/heads/main",
        before="0" * 40,
        after=OLD,
        actor=None,
        source="poll",
        delivery_id="poll:s1:111111111111",
    )
    store.save_series(rt.redis, SeriesState(id="s1"))  # registered, as carry does at start
    handle_event(rt, polled)  # claims the head's event key and queues its rebase
    state = store.load_series(rt.redis, "s1")
    assert state is not None and state.head_actor is None
    # ... which checks OLD with no pusher known
    state.head_sha, state.head_ref, state.checked_head = OLD, "refs/heads/main", OLD
    state.checked_digest = "d" * 64
    store.save_series(rt.redis, state)
    assert request(rt, state) == "waiting-approval"

    pushed = ev.HeadMoved(
        repo="up/stream", ref="refs/heads/main", before="0" * 40, after=OLD, actor="maintainer"
    )
    assert pushed.key == polled.key
    handle_event(rt, pushed)
    after = store.load_series(rt.redis, "s1")
    assert after is not None and after.pushers.get(OLD) == "maintainer"
    assert after.ci and all(row.state != "waiting-approval" for row in after.ci.values())
    kinds = [h["kind"] for h in store.history(rt.redis, "s1")]
    assert "ci-trusted-pusher" in kinds


def test_an_approved_head_covers_its_ancestors_as_git_says(rt: Runtime, tmp_path: Path) -> None:
    """`/carry approve` of a head approves what it contains: a stranger's commit under the
    approved fixup runs (the upstream's mirror says it is an ancestor), a commit beside it
    does not."""
    up = RepoBuilder(tmp_path / "up")
    up.commit("base", {"a.txt": "1\n"})
    stranger = up.commit("a stranger's change", {"b.txt": "2\n"})
    fixup = up.commit("the maintainer's fixup", {"c.txt": "3\n"})
    up.git("branch", "-f", "followed", fixup)  # the ref the series follows
    up.checkout(stranger, new_branch="beside")
    beside = up.commit("another stranger's change", {"d.txt": "4\n"})
    data = CONFIG.model_dump(mode="json")
    data["upstreams"]["up"]["url"] = str(up.path)
    rt = replace(
        rt, config=CarryConfig.model_validate(data), settings=Settings(cache_dir=tmp_path / "c")
    )
    push(rt.redis, "s1", stranger, "stranger", trusted=False)
    push(rt.redis, "s1", fixup, "maintainer", trusted=True, before=stranger)
    push(rt.redis, "s1", beside, "stranger", trusted=False, before=stranger)
    state = SeriesState(id="s1", approvals=[fixup], checked_digest="d" * 64)
    state.head_ref = "refs/heads/followed"
    state.pushes = (store.load_series(rt.redis, "s1") or state).pushes
    for head, waits in ((stranger, False), (beside, True)):
        state.head_sha = state.checked_head = head
        store.save_series(rt.redis, state)
        assert (request(rt, state) == "waiting-approval") is waits, head
