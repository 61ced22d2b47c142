"""A series may sit on a release upstream has not cut yet: it waits for the tag visibly (state,
dashboard, one history entry, not one per poll) and starts carrying when the tag appears."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bot.store import series as store
from bot.web.app import create_app
from harness.carry_env import SERIES, CarryEnv, one_fix_in_this_process
from tests.support.asgi import serve
from workers import poller
from workers import runtime as runtime_module

TAG = "v2.0"


@pytest.fixture
def env(tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[CarryEnv]:
    with one_fix_in_this_process(tmp_path, redis_url, monkeypatch, base={"tag": TAG}) as carry:
        yield carry


def waits(env: CarryEnv) -> list[dict]:
    return [h for h in env.history() if h["kind"] == "waiting-for-ref"]


def test_a_release_not_cut_yet_is_waited_for_and_carried_once_it_appears(env: CarryEnv) -> None:
    rt = runtime_module.runtime()
    assert poller.head_events(rt) == []
    assert poller.head_events(rt) == []  # a second poll says nothing new
    state = store.load_series(rt.redis, SERIES)
    assert state is not None and state.waiting_for_ref == f"refs/tags/{TAG}"
    (entry,) = waits(env)
    assert entry["data"]["ref"] == f"refs/tags/{TAG}"
    assert [h for h in env.history() if h["kind"] == "poll"] == []

    app = create_app(rt.config, rt.settings, rt.redis)
    with serve(app) as url:
        summary = httpx.get(f"{url}/api/v1/series/{SERIES}", timeout=10).json()
        page = httpx.get(f"{url}/series/{SERIES}", timeout=10).text
    assert summary["waiting_for_ref"] == f"refs/tags/{TAG}"
    assert f"waiting for upstream to create tag {TAG}" in page

    env.upstream.git("tag", TAG, "main")
    (moved,) = poller.head_events(rt)
    assert (moved.ref, moved.after) == (f"refs/tags/{TAG}", env.upstream.head("main"))
    state = store.load_series(rt.redis, SERIES)
    assert state is not None and state.waiting_for_ref is None
    assert [h["kind"] for h in env.history()][:1] == ["ref-appeared"]
