"""PR-state polling through conditional requests, and re-evaluation when a linked PR changes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.emulator import GitHubEmulator
from bot.queue.celery_app import app as celery_app
from bot.store import series as store
from harness.carry_env import BODY, SERIES, CarryEnv, queued_names
from tests.support.broker import point_at
from workers import poller
from workers import runtime as runtime_module
from workers.tasks import handle_event

UP = ("upstream-org", "engine")


@pytest.fixture
def polled(tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch):
    env = CarryEnv(tmp_path, redis_url)
    names = env.carry_patches([{"mod.py": BODY.replace("compute(10)", "compute(10, safe=True)")}])
    env.upstream.checkout("main", new_branch="fix")
    env.upstream.commit("Upstream fix", {"other.py": "fixed = True\n"})
    env.upstream.checkout("main")
    with GitHubEmulator(tmp_path / "gh") as gh:
        gh.create_repo(*UP, from_path=env.upstream.path)
        gh.create_repo("downstream-org", "carry")
        gh.add_user("carry[bot]", type="Bot")
        gh.add_token("carry-token", "carry[bot]")
        number = gh.open_pull(*UP, head="fix", base="main", title="Upstream fix", user="dev")
        env.write_config(links={names[0]: [f"{UP[0]}/{UP[1]}#{number}"]})
        for key, value in {
            **env.env,
            "GITHUB_TOKEN": "carry-token",
            "GITHUB_BASE_URL": gh.base_url,
        }.items():
            monkeypatch.setenv(key, value)
        runtime_module.reset()
        broker = celery_app.conf.broker_url
        point_at(celery_app, redis_url)  # this process enqueues into the test's Redis
        yield env, gh, number, runtime_module.runtime()
        point_at(celery_app, broker)
        runtime_module.reset()


def test_unchanged_pr_costs_a_304_and_a_merge_reevaluates_the_series(polled):
    env, gh, number, rt = polled
    store.ensure_series(rt.redis, SERIES)
    state = store.load_series(rt.redis, SERIES)
    state.head_sha, state.head_ref = env.upstream.head(), "refs/heads/main"
    store.save_series(rt.redis, state)

    first = poller.pr_events(rt)
    assert [(e.number, e.state) for e in first] == [(number, "open")]
    gh.clear_requests()
    assert poller.pr_events(rt) == []
    (request,) = gh.api_requests(path=f"/repos/{UP[0]}/{UP[1]}/pulls/{number}")
    assert request.status == 304

    merge_commit = gh.merge_pull(*UP, number)
    (merged,) = poller.pr_events(rt)
    assert (merged.state, merged.merge_commit_sha) == ("merged", merge_commit)
    handle_event(rt, merged)
    stored = store.load_series(rt.redis, SERIES)
    assert stored.patches[0].upstream_prs == [
        {"ref": f"{UP[0]}/{UP[1]}#{number}", "state": "merged", "merge_commit": merge_commit}
    ]
    rebases = [e for e in store.history(rt.redis, SERIES) if e["kind"] == "rebase"]
    assert rebases and "merged" in rebases[0]["data"]["reason"]
    queued = queued_names(rt.redis)
    assert "carry.rebase" in queued  # the dependent series is re-evaluated on its current head


def test_every_new_etag_is_kept_so_a_pr_changed_elsewhere_is_polled_with_304s(polled):
    """Issue 15 item 2: a PR's ETag changes with anything in its payload (here its title), not
    only with its state or head; the poller keeps each new one and sends it back verbatim."""
    _env, gh, number, rt = polled
    path = f"/repos/{UP[0]}/{UP[1]}/pulls/{number}"
    assert [e.state for e in poller.pr_events(rt)] == ["open"]
    gh.edit_pull(*UP, number, title="Upstream fix, reworded")
    assert poller.pr_events(rt) == []  # a new title is no state change
    (changed,) = gh.api_requests(path=path)[-1:]
    assert changed.status == 200
    etag = changed.response_headers["ETag"]
    assert etag.startswith('W/"')  # weak, as github.com sends them
    gh.clear_requests()
    assert poller.pr_events(rt) == []
    (request,) = gh.api_requests(path=path)
    assert (request.status, request.headers["if-none-match"]) == (304, etag)


def test_a_dropped_connection_on_one_pr_does_not_stop_the_others(polled):
    """Issue 15 item 10: a connection closed without an answer (after PyGithub's retries) was
    not a ForgeError, so it escaped pr_events and no later PR of the cycle was polled."""
    env, gh, number, rt = polled
    env.upstream.checkout("main", new_branch="fix-two")
    env.upstream.commit("Second upstream fix", {"two.py": "fixed = 2\n"})
    env.upstream.checkout("main")
    gh.push(*UP, env.upstream.path, "fix-two:refs/heads/fix-two", pusher="dev")
    second = gh.open_pull(*UP, head="fix-two", base="main", title="Second fix", user="dev")
    config = json.loads(env.config_path.read_text())
    (links,) = [s["links"] for s in config["series"]]
    links[next(iter(links))].append(f"{UP[0]}/{UP[1]}#{second}")
    env.config_path.write_text(json.dumps(config))
    runtime_module.reset()
    rt = runtime_module.runtime()
    gh.inject_fault("disconnect", times=50, method="GET", path=f"/repos/*/pulls/{number}")
    events = poller.pr_events(rt)
    assert [(e.number, e.state) for e in events] == [(second, "open")]
    (failed,) = [e for e in store.history(rt.redis) if e["kind"] == "poll-failed"]
    assert failed["data"]["pr"] == f"{UP[0]}/{UP[1]}#{number}"
    assert "ConnectionError" in failed["data"]["error"] or "connection" in failed["data"]["error"]
