"""Heads only move forward (issue 34, item 1): an event key never hides a head the series is
not on from the poller, and a real move back (upstream reset its branch) is followed. Real git,
real Redis; carry's planner, dispatcher, poller and rebase in this process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.core.events import HeadMoved
from bot.queue.celery_app import SERVICE_QUEUES
from bot.queue.celery_app import app as celery_app
from bot.store import series as store
from harness.carry_env import (
    SERIES,
    UPSTREAM_REPO,
    CarryEnv,
    one_fix_in_this_process,
    queued_tasks,
)
from tests.support.broker import point_at
from workers import poller
from workers import runtime as runtime_module
from workers.rebase import rebase_series
from workers.runtime import Runtime
from workers.tasks import handle_event

MAIN = "refs/heads/main"


@pytest.fixture
def env(tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[CarryEnv]:
    with one_fix_in_this_process(tmp_path, redis_url, monkeypatch) as carry:
        broker = celery_app.conf.broker_url
        point_at(celery_app, redis_url)  # tasks the dispatcher sends stay in the test Redis
        yield carry
        point_at(celery_app, broker)


def rebases_queued(rt: Runtime) -> list[str]:
    """The heads of the carry.rebase tasks waiting in the lanes; the lanes are emptied."""
    heads = [
        message["headers"]["kwargsrepr"]
        for message in queued_tasks(rt.redis)
        if message["headers"]["task"] == "carry.rebase"
    ]
    rt.redis.delete(*SERVICE_QUEUES.split(","))
    return heads


def check(rt: Runtime, head: str) -> None:
    """What the carry.rebase task does for `head` (its publish is not run here)."""
    finished = rebase_series(rt, SERIES, head, MAIN)
    assert finished is not None and finished.head_sha == head


def test_a_head_whose_event_was_seen_is_checked_when_a_poll_finds_the_series_elsewhere(
    env: CarryEnv,
) -> None:
    rt = runtime_module.runtime()
    older = env.upstream.commit("upstream change 1", {"one.py": "x = 1\n"})
    newer = env.upstream.commit("upstream change 2", {"two.py": "x = 2\n"})
    handle_event(rt, HeadMoved(repo=UPSTREAM_REPO, ref=MAIN, before=older, after=newer, actor="m"))
    assert any(newer in args for args in rebases_queued(rt))
    # A check of the older head took the series' place (two deliveries planned at once, both
    # before either head was in the mirror): the newer head's event key is taken all the same.
    store.set_wanted(rt.redis, SERIES, older)
    check(rt, older)

    (found,) = poller.head_events(rt)
    assert (found.after, found.before) == (newer, older)
    handle_event(rt, found)
    queued = rebases_queued(rt)
    assert len(queued) == 1 and newer in queued[0], f"the poll's head was not checked: {queued}"
    assert store.wanted(rt.redis, SERIES) == newer
    check(rt, newer)
    state = store.load_series(rt.redis, SERIES)
    assert state is not None and state.checked_head == newer
    assert poller.head_events(rt) == []


def test_upstream_resetting_its_branch_is_followed_and_a_stale_delivery_is_not(
    env: CarryEnv,
) -> None:
    rt = runtime_module.runtime()
    base = env.upstream.head("main")
    older = env.upstream.commit("upstream change 1", {"one.py": "x = 1\n"})
    newer = env.upstream.commit("upstream change 2", {"two.py": "x = 2\n"})
    handle_event(rt, HeadMoved(repo=UPSTREAM_REPO, ref=MAIN, before=base, after=newer, actor="m"))
    rebases_queued(rt)
    check(rt, newer)

    # The older push's delivery comes late (it moved the ref from `base`, not from `newer`).
    handle_event(rt, HeadMoved(repo=UPSTREAM_REPO, ref=MAIN, before=base, after=older, actor="m"))
    assert rebases_queued(rt) == []
    (stale,) = [h for h in env.history() if h["kind"] == "record_stale_head"]
    assert stale["data"]["head_sha"] == older and newer[:12] in stale["data"]["reason"]
    state = store.load_series(rt.redis, SERIES)
    assert state is not None and (state.head_sha, state.checked_head) == (newer, newer)
    assert "behind" in (state.last_event or "")

    # Then upstream really goes back to `older` (a force push): the poll reads the ref after
    # carry knew `newer`, so the move is followed, although `older` is behind.
    env.upstream.git("reset", "-q", "--hard", older)
    (back,) = poller.head_events(rt)
    assert (back.before, back.after) == (newer, older)
    handle_event(rt, back)
    queued = rebases_queued(rt)
    assert len(queued) == 1 and older in queued[0]
    check(rt, older)
    state = store.load_series(rt.redis, SERIES)
    assert state is not None and state.checked_head == older
    assert newer in state.replaced_heads and older not in state.replaced_heads
