"""A webhook's deliveries over REST, on the emulator and through carry's adapter: GitHub lists
each attempt (newest first, paged with a cursor) and redelivers one when asked, with the same
GUID; it never does so by itself (issue 34, item 3)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from bot.config import Settings
from bot.emulator import GitHubEmulator, WebhookSink, generate_app_key
from bot.github.forge import Forge, ForgeCaches, ForgeError
from bot.store.series import history
from bot.store.write_budget import HOLDS_PREFIX, hold_writes
from harness.gitrepo import RepoBuilder
from tests.support.deployment import APP_ID as DEPLOY_APP_ID
from tests.support.deployment import DOWN_NAME, DOWN_OWNER, Deploy, Deployment, deployments
from tests.support.github_schema import RestSchemas
from tests.support.github_settings import emulator_settings
from workers import redelivery, tasks

OWNER, NAME = "acme", "widget"
REPO = f"{OWNER}/{NAME}"
APP_ID, INSTALLATION_ID = 4242, 77
SECRET = "s3cret"
# GitHub's `hook-delivery-item` (REST: "List deliveries for a repository webhook")
ITEM_FIELDS = {
    "id",
    "guid",
    "delivered_at",
    "redelivery",
    "duration",
    "status",
    "status_code",
    "event",
    "action",
    "installation_id",
    "repository_id",
    "throttled_at",
}


@pytest.fixture
def gh(tmp_path: Path, make_repo: Any) -> Iterator[GitHubEmulator]:
    upstream: RepoBuilder = make_repo("widget")
    upstream.commit("init", {"README.md": "hello\n"})
    with GitHubEmulator(tmp_path / "github") as emulator:
        emulator.create_repo(OWNER, NAME, from_path=upstream.path)
        emulator.add_user("admin-bot", type="Bot")
        emulator.add_token("admin-token", "admin-bot")
        emulator.set_permission(OWNER, NAME, "admin-bot", "admin")
        emulator.add_user("writer")
        emulator.add_token("writer-token", "writer")
        emulator.set_permission(OWNER, NAME, "writer", "write")
        yield emulator
        assert emulator.errors == []
        # every answer of these endpoints fits GitHub's published description of it
        schemas = RestSchemas()
        for entry in emulator.api_requests():
            if entry.operation is not None and "/deliveries" in entry.operation:
                assert entry.status is not None
                schemas.validate(entry.method, entry.operation, entry.status, entry.response_json)


@pytest.fixture
def failing_sink() -> Iterator[WebhookSink]:
    """The emulator's webhook receiver answering 503, so deliveries fail (tests/conftest.py's
    sink answers 200); a test sets its status to 200 to let a redelivery through."""
    with WebhookSink(status=503) as receiver:
        yield receiver


def settings(gh: GitHubEmulator, **given: Any) -> Settings:
    return emulator_settings(gh.base_url, **given)


def test_a_repository_hooks_failed_delivery_is_listed_and_redelivered_with_its_guid(
    gh: GitHubEmulator, failing_sink: WebhookSink
) -> None:
    hook = gh.add_webhook(failing_sink.url, SECRET, owner=OWNER, repo=NAME)
    number = gh.open_issue(OWNER, NAME, title="A bug", user="writer")
    gh.add_comment(OWNER, NAME, number, "/carry pause", user="writer")
    gh.wait_for_deliveries()
    forge = Forge.connect(settings(gh, github_token="admin-token"), REPO, caches=ForgeCaches())

    items, cursor = forge.hook_deliveries(hook)
    assert cursor is None
    assert [(i["event"], i["action"]) for i in items] == [
        ("issue_comment", "created"),
        ("issues", "opened"),
    ]  # newest first
    failed = items[0]
    assert set(failed) == ITEM_FIELDS
    assert (failed["status_code"], failed["status"]) == (503, "Invalid HTTP Response: 503")
    assert failed["redelivery"] is False and failed["delivered_at"].endswith("Z")
    assert failed["repository_id"] == gh.hub.repo(OWNER, NAME).id

    failing_sink.status = 200
    forge.redeliver(hook, failed["id"])
    gh.wait_for_deliveries()
    again, _ = forge.hook_deliveries(hook)
    assert (again[0]["guid"], again[0]["redelivery"], again[0]["status_code"]) == (
        failed["guid"],
        True,
        200,
    )
    assert again[0]["status"] == "OK" and again[0]["id"] > failed["id"]
    sent = failing_sink.received[-1]
    assert sent.headers["x-github-delivery"] == failed["guid"]
    # nothing is redelivered unless asked for
    assert [d.redelivery for d in gh.deliveries] == [False, False, True]


def test_the_list_is_paged_with_a_cursor_and_only_an_admin_sees_it(
    gh: GitHubEmulator, failing_sink: WebhookSink
) -> None:
    hook = gh.add_webhook(failing_sink.url, SECRET, owner=OWNER, repo=NAME)
    for n in range(5):
        gh.open_issue(OWNER, NAME, title=f"issue {n}", user="writer")
    gh.wait_for_deliveries()
    path = f"/repos/{REPO}/hooks/{hook}/deliveries"
    api = httpx.Client(base_url=gh.base_url, headers={"User-Agent": "tests"})
    admin = {"Authorization": "token admin-token"}
    ids: list[int] = []
    url: str | None = f"{gh.base_url}{path}?per_page=2"
    while url:
        answer = api.get(url, headers=admin)
        assert answer.status_code == 200
        ids += [item["id"] for item in answer.json()]
        url = answer.links.get("next", {}).get("url")
        assert url is None or "cursor=" in url
    assert ids == sorted((d.id for d in gh.deliveries), reverse=True) and len(ids) == 5
    assert api.get(path, params={"cursor": "nonsense"}, headers=admin).status_code == 400
    # GitHub hides a repository's hooks from anyone without admin access
    writer = {"Authorization": "token writer-token"}
    assert api.get(path, headers=writer).status_code == 404
    assert api.get(f"/repos/{REPO}/hooks/999/deliveries", headers=admin).status_code == 404
    with pytest.raises(ForgeError, match=r"\(404\)"):
        Forge.connect(
            settings(gh, github_token="writer-token"), REPO, caches=ForgeCaches()
        ).hook_deliveries(hook)


def test_a_delivery_past_the_retention_is_not_redelivered(
    gh: GitHubEmulator, failing_sink: WebhookSink
) -> None:
    hook = gh.add_webhook(failing_sink.url, SECRET, owner=OWNER, repo=NAME)
    gh.open_issue(OWNER, NAME, title="old", user="writer")
    gh.wait_for_deliveries()
    gh.advance_time(3 * 24 * 3600 + 60)
    forge = Forge.connect(settings(gh, github_token="admin-token"), REPO, caches=ForgeCaches())
    (old,), _ = forge.hook_deliveries(hook)
    with pytest.raises(ForgeError, match=r"\(422\)"):
        forge.redeliver(hook, old["id"])


def test_an_apps_hook_is_read_and_redelivered_with_the_apps_jwt(
    gh: GitHubEmulator, failing_sink: WebhookSink
) -> None:
    private_key, public_key = generate_app_key()
    gh.add_app(
        APP_ID,
        public_key,
        slug="carry",
        installation_id=INSTALLATION_ID,
        account=OWNER,
        permissions={"issues": "write", "metadata": "read"},
    )
    gh.add_webhook(failing_sink.url, SECRET, app_id=APP_ID)
    gh.open_issue(OWNER, NAME, title="A bug", user="writer")
    gh.wait_for_deliveries()
    app = settings(
        gh,
        github_app_id=APP_ID,
        github_app_private_key=private_key,
        github_installation_id=INSTALLATION_ID,
    )
    forge = Forge.connect(app, REPO, caches=ForgeCaches())
    (failed,), _ = forge.hook_deliveries(None)
    assert failed["installation_id"] == INSTALLATION_ID and failed["status_code"] == 503
    failing_sink.status = 202
    forge.redeliver(None, failed["id"])
    gh.wait_for_deliveries()
    again, _ = forge.hook_deliveries(None)
    assert [(i["guid"], i["redelivery"], i["status_code"]) for i in again] == [
        (failed["guid"], True, 202),
        (failed["guid"], False, 503),
    ]
    # an installation token is not the App: GitHub wants the JWT there
    token = gh.installation_token(INSTALLATION_ID)
    api = httpx.Client(base_url=gh.base_url, headers={"User-Agent": "tests"})
    refused = api.get("/app/hook/deliveries", headers={"Authorization": f"token {token}"})
    assert refused.status_code == 401


def test_carrys_step_reads_every_page_and_asks_for_each_failed_event_once(
    gh: GitHubEmulator, failing_sink: WebhookSink, redis_url: str
) -> None:
    """workers/redelivery.py against the emulator: 120 failed events (two pages of 100), one
    already delivered by a redelivery. Each run asks for at most 50, oldest first; a refused
    request is recorded and the rest still asked for; once every event has a 2xx attempt
    nothing more is asked for."""
    client = redis.Redis.from_url(redis_url)
    hook = gh.add_webhook(failing_sink.url, SECRET, owner=OWNER, repo=NAME)
    for n in range(120):
        gh.open_issue(OWNER, NAME, title=f"issue {n}", user="writer")
    gh.wait_for_deliveries()
    failing_sink.status = 200
    gh.redeliver(gh.deliveries[0])  # the oldest event is already in
    gh.wait_for_deliveries()
    oldest_failed = gh.deliveries[1]
    path = f"/repos/{REPO}/hooks/{hook}/deliveries/{oldest_failed.id}/attempts"
    gh.inject_fault("server_error", times=1, method="POST", path=path)

    def run() -> list[str]:  # a task connects anew (its own GitHub call budget)
        forge = Forge.connect(settings(gh, github_token="admin-token"), REPO, caches=ForgeCaches())
        asked = redelivery.redeliver_failed(client, forge, hook)
        gh.wait_for_deliveries()
        return [r.attempt.guid for r in asked]

    first = run()
    assert len(first) == redelivery.MAX_PER_RUN - 1 and oldest_failed.guid not in first
    assert len(gh.api_requests("GET", f"/repos/{REPO}/hooks/{hook}/deliveries")) == 2
    (refused,) = history(client, None, kind="redeliver-failed")
    assert refused["data"]["guid"] == oldest_failed.guid and "502" in refused["data"]["error"]
    second = run()
    assert len(second) == redelivery.MAX_PER_RUN and second[0] == oldest_failed.guid
    assert len(run()) == 119 - len(first) - len(second)
    assert run() == []
    assert len(history(client, None, kind="delivery-redelivered", limit=500)) == 119
    per_event = Counter(d.guid for d in gh.deliveries)
    assert set(per_event.values()) == {2}  # each event: the failed attempt and one redelivery
    assert all(d.ok for d in gh.deliveries if d.redelivery)


def test_a_rate_limit_stops_the_run_and_the_next_run_asks_again(
    gh: GitHubEmulator, failing_sink: WebhookSink, redis_url: str
) -> None:
    """GitHub's secondary limit refuses the first redelivery for longer than carry waits:
    the run stops there instead of sending the others into the same refusal."""
    client = redis.Redis.from_url(redis_url)
    hook = gh.add_webhook(failing_sink.url, SECRET, owner=OWNER, repo=NAME)
    for n in range(3):
        gh.open_issue(OWNER, NAME, title=f"issue {n}", user="writer")
    gh.wait_for_deliveries()
    failing_sink.status = 200
    gh.secondary_limit(next_n_writes=1, retry_after_s=600)
    forge = Forge.connect(settings(gh, github_token="admin-token"), REPO, caches=ForgeCaches())
    assert redelivery.redeliver_failed(client, forge, hook) == []
    posts = [r for r in gh.api_requests("POST") if r.path.endswith("/attempts")]
    assert [r.status for r in posts] == [403]
    (stopped,) = history(client, None, kind="redeliver-failed")
    assert "rate limit" in stopped["data"]["error"]
    forge = Forge.connect(settings(gh, github_token="admin-token"), REPO, caches=ForgeCaches())
    assert len(redelivery.redeliver_failed(client, forge, hook)) == 3


@pytest.fixture
def deploy(tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Deploy]:
    with deployments(tmp_path, redis_url, monkeypatch, waits=[]) as start:
        yield start


def _attempts_asked(d: Deployment) -> list[int | None]:
    """The statuses GitHub answered carry's redelivery requests with (the App's hook)."""
    return [r.status for r in d.gh.api_requests("POST") if r.path.endswith("/attempts")]


def test_the_redeliver_task_takes_its_turn_in_the_write_budget_and_a_refusal_holds_writes(
    deploy: Deploy, failing_sink: WebhookSink
) -> None:
    """The `carry.redeliver` task as a worker runs it, with the App's hook: a hold GitHub's
    Retry-After put on the installation's writes holds the redelivery POSTs too (nothing is
    sent), and a redelivery POST refused by the secondary limit holds the installation's other
    writes, as any refused write does. On the old code both went past the write budget."""
    d = deploy(auth="app")
    d.gh.add_user("writer")
    d.gh.set_permission(DOWN_OWNER, DOWN_NAME, "writer", "write")
    d.gh.add_webhook(failing_sink.url, SECRET, app_id=DEPLOY_APP_ID)
    number = d.gh.open_issue(DOWN_OWNER, DOWN_NAME, title="A bug", user="writer")
    d.gh.add_comment(DOWN_OWNER, DOWN_NAME, number, "/carry pause", user="writer")
    d.gh.wait_for_deliveries()
    assert [x.status_code for x in d.gh.deliveries] and not any(x.ok for x in d.gh.deliveries)
    failing_sink.status = 200
    hold_key = HOLDS_PREFIX + d.rt.github_writer

    hold_writes(d.rt.redis, d.rt.github_writer, 600)
    tasks.redeliver.apply()
    assert _attempts_asked(d) == []  # fails on the old code: the POSTs went out
    (held,) = history(d.rt.redis, None, kind="redeliver-failed")
    assert "not sent" in held["data"]["error"]

    d.rt.redis.delete(hold_key)
    d.gh.secondary_limit(next_n_writes=1, retry_after_s=600, path="/app/hook/deliveries/*")
    tasks.redeliver.apply()
    assert _attempts_asked(d) == [403]
    held_until = float(d.rt.redis.get(hold_key) or 0)  # fails on the old code: no hold
    assert held_until > time.time() + 500

    d.rt.redis.delete(hold_key)
    tasks.redeliver.apply()
    d.gh.wait_for_deliveries()
    assert all(code == 202 for code in _attempts_asked(d)[1:])
    failed_events = {x.guid for x in d.gh.deliveries if not x.redelivery}
    assert {x.guid for x in d.gh.deliveries if x.redelivery and x.ok} == failed_events
