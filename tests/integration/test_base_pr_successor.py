"""A series' base PR closed unmerged (the PLE case: vllm#53899, continued in #54371): carry
finds the successor in the closed PR's timeline, checks the patches on it, proposes
`/carry retarget`, and a maintainer's retarget moves the series (real git, Redis, emulator)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bot.emulator import GitHubEmulator
from bot.queue.celery_app import app as celery_app
from bot.store import series as store
from bot.web.app import create_app
from harness.carry_env import BODY, SERIES, CarryEnv, authorized_comment, queued_tasks
from tests.support.asgi import serve
from tests.support.broker import point_at
from workers import poller
from workers import runtime as runtime_module
from workers.runtime import Runtime
from workers.successor import find_successor
from workers.tasks import handle_event

UP = ("upstream-org", "engine")
REPO = "/".join(UP)
FIX = {"mod.py": BODY.replace("compute(10)", "compute(10, safe=True)")}


@pytest.fixture
def world(
    tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[CarryEnv, GitHubEmulator, int, int, Runtime]]:
    env = CarryEnv(tmp_path, redis_url)
    env.carry_patches([FIX])
    up = env.upstream
    up.checkout("main", new_branch="first-try")
    up.commit("Offload, first try", {"offload.py": "first = True\n"})
    up.checkout("main", new_branch="second-try")
    up.commit("Offload, second try", {"offload.py": "second = True\n"})
    up.checkout("main")
    with GitHubEmulator(tmp_path / "gh") as gh:
        gh.create_repo(*UP, from_path=up.path)
        gh.add_user("carry[bot]", type="Bot")
        gh.add_token("carry-token", "carry[bot]")
        gh.create_repo("downstream-org", "carry")
        closed = gh.open_pull(*UP, head="first-try", title="Offload", user="dev")
        successor = gh.open_pull(
            *UP, head="second-try", title="Offload, v2", body=f"Continues #{closed}.", user="dev"
        )
        gh.add_comment(*UP, closed, f"Closing in favor of #{successor}.", user="dev")
        gh.close_pull(*UP, closed)
        env.write_config(base={"pull": closed})
        config = json.loads(env.config_path.read_text())
        config["upstreams"]["engine"]["url"] = gh.git_url(*UP)
        env.config_path.write_text(json.dumps(config))
        settings = {**env.env, "GITHUB_TOKEN": "carry-token", "GITHUB_BASE_URL": gh.base_url}
        for key, value in settings.items():
            monkeypatch.setenv(key, value)
        runtime_module.reset()
        broker = celery_app.conf.broker_url
        point_at(celery_app, redis_url)  # tasks the dispatcher sends stay in the test Redis
        yield env, gh, closed, successor, runtime_module.runtime()
        point_at(celery_app, broker)
        runtime_module.reset()
        assert gh.errors == []


def queued(rt: Runtime) -> list[dict[str, Any]]:
    return queued_tasks(rt.redis)


def test_a_closed_base_pr_gets_a_successor_proposal_and_a_retarget_moves_the_series(world):
    _env, gh, closed, successor, rt = world
    merge = gh.merge_pull(*UP, successor)
    (event,) = poller.pr_events(rt)
    assert (event.number, event.state) == (closed, "closed_unmerged")
    handle_event(rt, event)
    assert [m["headers"]["task"] for m in queued(rt)].count("carry.find_successor") == 1

    proposal = find_successor(rt, SERIES, REPO, closed)  # what that task runs
    assert (proposal["number"], proposal["state"], proposal["commit"]) == (
        successor,
        "merged",
        merge,
    )
    assert proposal["retarget"] == {"base": "branch main", "command": "/carry retarget main"}
    assert proposal["reasons"] == [
        f"dev wrote on #{closed}: “in favor of #{successor}”",
        f"PR #{successor} (Offload, v2) mentions #{closed}",
    ]
    assert proposal["evidence"] == {"0001-Carried-fix-number-1.patch": "applies, keep"}
    state = store.load_series(rt.redis, SERIES)
    assert state is not None and state.successor == proposal
    assert any("/carry retarget main" in r for r in state.needs_attention)
    assert store.history(rt.redis, SERIES, limit=1)[0]["kind"] == "successor-proposed"
    with serve(create_app(rt.config, rt.settings, rt.redis)) as url:
        page = httpx.get(f"{url}/series/{SERIES}", timeout=10).text
        detail = httpx.get(f"{url}/api/v1/series/{SERIES}", timeout=10).json()
    assert f"Its likely successor is {REPO}#{successor} (merged" in page
    assert "<code>/carry retarget main</code>" in page
    assert detail["successor"]["command"] == "/carry retarget main"

    authorized_comment(rt, "/carry retarget main", comment_id=7)
    state = store.load_series(rt.redis, SERIES)
    assert state is not None
    assert (state.base_override, state.base) == ({"branch": "main"}, "branch main")
    assert state.successor is None and not any("base PR" in r for r in state.needs_attention)
    (reply,) = [m for m in queued(rt) if m["headers"]["task"] == "carry.reply"]
    assert "now sits on branch main" in json.dumps(reply)
    (moved,) = poller.head_events(rt)  # the new base's head, polled as the config's would be
    assert (moved.ref, moved.after) == ("refs/heads/main", merge)
    assert poller.watched_prs(rt) == []  # the dead base PR is no longer polled


def test_without_a_successor_in_the_records_the_series_says_so(world):
    _env, gh, closed, successor, rt = world
    with gh.hub.lock:  # the records name no successor: no comment, no mention
        for comment in list(gh.hub.comments.values()):
            del gh.hub.comments[comment.id]
        gh.hub.repo(*UP).issues[successor].body = "Unrelated."
    proposal = find_successor(rt, SERIES, REPO, closed)
    assert proposal["candidates"] == [] and "no successor found" in proposal["summary"]


def test_a_retarget_to_a_pr_of_another_repository_is_refused(world):
    rt = world[-1]
    authorized_comment(rt, "/carry retarget other-org/engine#3", comment_id=8)
    state = store.load_series(rt.redis, SERIES)
    assert state is None or state.base_override is None
    (reply,) = [m for m in queued(rt) if m["headers"]["task"] == "carry.reply"]
    assert "is not a PR of upstream-org/engine" in json.dumps(reply)


def test_without_credentials_the_series_says_why_no_successor_was_looked_for(
    world, monkeypatch: pytest.MonkeyPatch
):
    """Read-only mode: the task used to die on the missing credentials, leaving nothing said."""
    _env, _gh, closed, _successor, _rt = world
    monkeypatch.delenv("GITHUB_TOKEN")
    runtime_module.reset()
    rt = runtime_module.runtime()
    proposal = find_successor(rt, SERIES, REPO, closed)
    assert "without GitHub credentials" in proposal["summary"]
    state = store.load_series(rt.redis, SERIES)
    assert state is not None and state.successor == proposal


def test_a_successor_lookup_github_fails_is_recorded_as_successor_failed(world):
    """The failure's history kind is the step's own (it was derived from the first word of the
    message: `finding-failed`)."""
    from workers.tasks import find_successor_task

    _env, gh, closed, _successor, rt = world
    gh.inject_fault("server_error", times=50, path=f"/repos/{REPO}/issues/{closed}/timeline*")
    find_successor_task.apply(args=[SERIES, REPO, closed], retries=5)  # its last attempt
    kinds = [e["kind"] for e in store.history(rt.redis, SERIES)]
    assert "successor-failed" in kinds, kinds
    assert "finding-failed" not in kinds
    (entry,) = [e for e in store.history(rt.redis, SERIES) if e["kind"] == "successor-failed"]
    assert entry["data"]["what"] == f"finding the successor of {REPO}#{closed}"
    assert entry["data"]["final"] is True
    gh.errors.clear()
