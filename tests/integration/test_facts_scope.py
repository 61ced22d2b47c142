"""The facts of an event are gathered for the series the planner reads for it (issue 37: at 200
series every event read all 200 series' states and fix pages, 0.7 s a task, and the decision
latency of a head grew with the series on other upstreams)."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from bot.config import CarryConfig, Settings
from bot.core import events as ev
from bot.store import series as store
from workers.facts import gather
from workers.runtime import Runtime

HEAD, NEWER = "2" * 40, "3" * 40
CONFIG = CarryConfig.model_validate(
    {
        "downstream": {"repo": "acme/carry"},
        "upstreams": {
            "a": {"url": "/srv/a.git", "repo": "up/a"},
            "b": {"url": "/srv/b.git", "repo": "up/b"},
        },
        "series": [
            {"id": sid, "upstream": up, "base": {"branch": "main"}, "patches": sid}
            for sid, up in (("a1", "a"), ("a2", "a"), ("b1", "b"), ("b2", "b"), ("b3", "b"))
        ],
    }
)


@pytest.fixture
def rt(client: redis.Redis, tmp_path: Path) -> Runtime:
    return Runtime(CONFIG, Settings(), client, tmp_path)


def test_a_series_event_gathers_that_series_only(rt: Runtime) -> None:
    done = ev.RebaseFinished(series_id="b2", head_sha=HEAD, digest="d", outcome="ok", changed=True)
    assert [s.id for s in gather(rt, event=done).series] == ["b2"]


def test_a_head_move_gathers_the_series_on_its_upstream_with_their_wanted_heads(
    rt: Runtime,
) -> None:
    store.set_wanted(rt.redis, "a2", NEWER)
    moved = ev.HeadMoved(repo="up/a", ref="refs/heads/main", before=HEAD, after=NEWER, actor=None)
    facts = gather(rt, event=moved)
    assert [(s.id, s.newest_head) for s in facts.series] == [("a1", None), ("a2", NEWER)]


def test_without_an_event_or_for_an_unscoped_one_every_series_is_gathered(rt: Runtime) -> None:
    every = ["a1", "a2", "b1", "b2", "b3"]
    assert [s.id for s in gather(rt).series] == every
    installed = ev.InstallationChanged(action="created", installation_id=1, account="acme")
    assert [s.id for s in gather(rt, event=installed).series] == every
