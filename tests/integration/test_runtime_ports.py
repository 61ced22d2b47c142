"""A worker step gets its ports from the Runtime (the store's Redis, GitHub, the task queue, the
clock), never from module globals: the same handle_event runs on a real Redis with a recording
queue, a fixed clock and the in-memory GitHub, and nothing reaches Celery's broker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis

from bot.config import CarryConfig, Settings
from bot.core.events import CommandAuthorized, HeadMoved
from bot.github.fake import InMemoryForge
from bot.store import series as store
from harness.carry_env import SERVICE_QUEUES
from workers.runtime import Runtime
from workers.tasks import handle_event

NOW = "2026-12-02T12:00:00Z"
HEAD = "2" * 40
CONFIG = CarryConfig.model_validate(
    {
        "downstream": {"repo": "acme/carry"},
        "upstreams": {"up": {"url": "/srv/up.git", "repo": "up/stream"}},
        "series": [{"id": "s1", "upstream": "up", "base": {"branch": "main"}, "patches": "s1"}],
    }
)


class Queue:
    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, name: str, kwargs: dict[str, Any]) -> None:
        self.sent.append((name, kwargs))

    def names(self) -> list[str]:
        return [name for name, _ in self.sent]


@pytest.fixture
def queue() -> Queue:
    return Queue()


@pytest.fixture
def rt(redis_url: str, tmp_path: Path, queue: Queue) -> Runtime:
    forge = InMemoryForge("acme/carry")
    return Runtime(
        CONFIG,
        Settings(),
        redis.Redis.from_url(redis_url),
        tmp_path,
        send=queue,
        clock=lambda: NOW,
        connect_forge=lambda _rt: forge,
    )


def push() -> HeadMoved:
    return HeadMoved(
        repo="up/stream", ref="refs/heads/main", before="1" * 40, after=HEAD, actor="maintainer"
    )


def test_an_upstream_push_queues_its_rebase_on_the_runtimes_queue(rt: Runtime, queue: Queue):
    handle_event(rt, push())

    assert queue.names() == ["carry.rebase"]
    (_, kwargs) = queue.sent[0]
    assert (kwargs["series_id"], kwargs["head_sha"]) == ("s1", HEAD)
    assert all(rt.redis.llen(lane) == 0 for lane in SERVICE_QUEUES.split(","))


def test_a_paused_series_records_the_head_at_the_runtimes_time(rt: Runtime, queue: Queue):
    store.ensure_series(rt.redis, "s1", paused_by="alice")
    handle_event(rt, push())

    assert queue.names() == []
    state = store.load_series(rt.redis, "s1")
    assert state is not None and state.head_sha == HEAD
    assert state.head_seen_at == NOW  # the runtime's clock, not the wall clock


def test_a_command_is_answered_through_the_runtimes_queue(rt: Runtime, queue: Queue):
    store.ensure_series(rt.redis, "s1")
    command = CommandAuthorized(
        series_id="s1",
        number=4,
        comment_id=9,
        author="alice",
        permission="write",
        body="/carry pause",
    )
    handle_event(rt, command)

    state = store.load_series(rt.redis, "s1")
    assert state is not None and state.paused_by == "alice"
    assert "carry.reply" in queue.names()
    (reply,) = [kwargs for name, kwargs in queue.sent if name == "carry.reply"]
    assert reply["body"].startswith("Paused") and reply["number"] == 4
    assert all(rt.redis.llen(lane) == 0 for lane in SERVICE_QUEUES.split(","))


def test_the_runtimes_forge_is_the_one_it_was_given(rt: Runtime):
    assert isinstance(rt.forge(), InMemoryForge)
