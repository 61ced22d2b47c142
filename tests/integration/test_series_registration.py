"""Each configured series' stored state names its upstream as the config does now, including
where the upstream's web pages are (the dashboard links commits and PRs there), without
touching anything else stored (real Redis, carry's own registration)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.core import transitions as tr
from bot.core.state import SeriesState
from bot.store import series as store
from harness.carry_env import (
    SERIES,
    UPSTREAM_REPO,
    CarryEnv,
    one_fix_in_this_process,
)
from workers import runtime as runtime_module
from workers.rebase import register_series


@pytest.fixture
def env(tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[CarryEnv]:
    with one_fix_in_this_process(tmp_path, redis_url, monkeypatch) as carry:
        yield carry


def move_upstream_to(env: CarryEnv, url: str) -> None:
    config = json.loads(env.config_path.read_text())
    config["upstreams"]["engine"]["url"] = url
    env.config_path.write_text(json.dumps(config))
    runtime_module.reset()


def stored(env: CarryEnv) -> SeriesState:
    state = store.load_series(runtime_module.runtime().redis, SERIES)
    assert state is not None
    return state


def test_a_local_upstream_has_no_web_host(env: CarryEnv) -> None:
    register_series(runtime_module.runtime())
    assert (stored(env).upstream_repo, stored(env).upstream_web_host) == (UPSTREAM_REPO, "")


def test_a_config_change_reaches_the_stored_state_and_keeps_the_rest(env: CarryEnv) -> None:
    rt = runtime_module.runtime()
    register_series(rt)
    store.update_series(rt.redis, SERIES, lambda fresh: tr.set_paused(fresh, "alice"))
    move_upstream_to(env, f"https://ghe.corp.example/{UPSTREAM_REPO}.git")
    register_series(runtime_module.runtime())
    state = stored(env)
    assert state.upstream_web_host == "https://ghe.corp.example"
    assert state.paused_by == "alice"


def test_a_state_stored_before_carry_kept_the_host_gets_it(env: CarryEnv) -> None:
    rt = runtime_module.runtime()
    legacy = SeriesState(id=SERIES, upstream_repo=UPSTREAM_REPO, base="branch main")
    legacy.paused_by = "bob"
    data = legacy.to_dict()
    del data["upstream_web_host"]
    rt.redis.set(f"{store.PREFIX}series:{SERIES}", json.dumps(data))
    assert stored(env).upstream_web_host is None
    move_upstream_to(env, f"git@github.com:{UPSTREAM_REPO}.git")
    register_series(runtime_module.runtime())
    assert stored(env).upstream_web_host == "https://github.com"
    assert stored(env).paused_by == "bob"
