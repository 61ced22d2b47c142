"""One GitHub event reaching carry through two hooks (a repository hook and the App's hook,
both pointing at carry): GitHub gives every delivery of one event the same GUID (its REST docs
for a hook's deliveries: `guid` is the "Unique identifier for the event (shared with all
deliveries for all webhooks that subscribe to this event)"; each delivery has its own numeric
`id`). carry's intake, which deduplicates by X-GitHub-Delivery, must act on the event once, not
lose it and not act twice; and `carry.redeliver`'s step (workers/redelivery.py), which asks for
a failed delivery by its hook's numeric id, still finds and redelivers the failed ones.

The emulator's hooks deliver over real HTTP to carry's web app (uvicorn), with a real Redis."""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

from bot.config import CarryConfig, Settings
from bot.core.events import Event, HeadMoved
from bot.emulator import GitHubEmulator, generate_app_key
from bot.github.forge import Forge, ForgeCaches
from bot.queue.celery_app import app as celery_app
from bot.queue.task_message import ingest_message
from bot.web.app import create_app
from harness.gitrepo import RepoBuilder
from harness.redis_server import PrivateRedis
from tests.support.asgi import serve
from tests.support.github_settings import emulator_settings
from workers import redelivery

OWNER, NAME = "acme", "widget"
REPO = f"{OWNER}/{NAME}"
APP_ID, INSTALLATION_ID = 4242, 77
SECRET = "two-hooks-secret"
CONFIG = CarryConfig.model_validate(
    {
        "downstream": {"repo": REPO},
        "upstreams": {"w": {"url": "https://github.com/acme/widget.git", "repo": REPO}},
        "series": [],
    }
)


@dataclass
class Handed:
    """carry's hand-off (on_event): the events it took, or a failure it raises (a broker down:
    the intake answers 503 and forgets the delivery, so that a redelivery is acted on)."""

    events: list[Event] = field(default_factory=list)
    down: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, event: Event) -> None:
        if self.down:
            raise redis.ConnectionError("broker down")
        with self.lock:
            self.events.append(event)


@dataclass
class TwoHooks:
    gh: GitHubEmulator
    work: RepoBuilder
    handed: Handed
    repo_hook: int
    app_key: str
    client: redis.Redis

    def push(self, message: str) -> str:
        sha = self.work.commit(message, {"README.md": f"{message}\n"})
        self.gh.push(OWNER, NAME, self.work.path, "HEAD:refs/heads/main", pusher="admin-bot")
        self.gh.wait_for_deliveries()
        return sha

    def forge(self, **given: Any) -> Forge:
        return Forge.connect(
            emulator_settings(self.gh.base_url, **given), REPO, caches=ForgeCaches()
        )

    def app_forge(self) -> Forge:
        return self.forge(
            github_app_id=APP_ID,
            github_app_private_key=self.app_key,
            github_installation_id=INSTALLATION_ID,
        )


@contextlib.contextmanager
def two_hooks(tmp_path: Path, make_repo: Any, client: redis.Redis, app: Any) -> Iterator[TwoHooks]:
    work: RepoBuilder = make_repo("widget")
    work.commit("init", {"README.md": "hello\n"})
    handed = Handed()
    if app is None:  # the hand-off through on_event, which can fail (see Handed)
        app = create_app(CONFIG, Settings(webhook_secret=SECRET), client, on_event=handed)
    private_key, public_key = generate_app_key()
    with GitHubEmulator(tmp_path / "github") as gh, serve(app) as url:
        gh.create_repo(OWNER, NAME, from_path=work.path)
        gh.add_user("admin-bot", type="Bot")
        gh.add_token("admin-token", "admin-bot")
        gh.set_permission(OWNER, NAME, "admin-bot", "admin")
        gh.add_app(
            APP_ID,
            public_key,
            slug="carry",
            installation_id=INSTALLATION_ID,
            account=OWNER,
            permissions={"contents": "read", "metadata": "read"},
        )
        repo_hook = gh.add_webhook(f"{url}/webhooks/github", SECRET, owner=OWNER, repo=NAME)
        gh.add_webhook(f"{url}/webhooks/github", SECRET, app_id=APP_ID)
        yield TwoHooks(gh, work, handed, repo_hook, private_key, client)
        assert gh.errors == []


@pytest.fixture
def hooks(tmp_path: Path, make_repo: Any, client: redis.Redis) -> Iterator[TwoHooks]:
    with two_hooks(tmp_path, make_repo, client, None) as running:
        yield running


@pytest.fixture
def service_hooks(
    tmp_path: Path, make_repo: Any, private_redis: PrivateRedis
) -> Iterator[TwoHooks]:
    """As `carry web` runs: the delivery stored and its carry.ingest task queued in one Lua
    script (bot.queue.task_message)."""
    client = redis.Redis.from_url(private_redis.url)
    queue_task = functools.partial(ingest_message, celery_app)
    app = create_app(CONFIG, Settings(webhook_secret=SECRET), client, queue_task=queue_task)
    with two_hooks(tmp_path, make_repo, client, app) as running:
        yield running


def _answers(gh: GitHubEmulator, guid: str) -> list[tuple[int, int | None, str]]:
    """Each delivery of the event: its hook, carry's status code and its word."""
    return [
        (d.hook_id, d.status_code, json.loads(d.response_body or b"{}").get("status", ""))
        for d in gh.deliveries
        if d.guid == guid
    ]


def test_one_event_through_two_hooks_is_acted_on_once(hooks: TwoHooks) -> None:
    sha = hooks.push("second")
    pushed = next(d for d in hooks.gh.deliveries if d.event == "push")
    both = [d for d in hooks.gh.deliveries if d.guid == pushed.guid]
    assert len(both) == 2 and len({d.id for d in both}) == 2  # one GUID, two deliveries
    assert sorted(status for _hook, status, _word in _answers(hooks.gh, pushed.guid)) == [200, 202]
    assert {word for _hook, _status, word in _answers(hooks.gh, pushed.guid)} == {
        "accepted",
        "duplicate",
    }
    # fails on the old emulator: each hook had its own GUID, and carry acted on the push twice
    (moved,) = hooks.handed.events
    assert isinstance(moved, HeadMoved) and moved.after == sha
    assert moved.delivery_id == pushed.guid


def test_a_failed_event_of_two_hooks_is_redelivered_and_acted_on_once(hooks: TwoHooks) -> None:
    """Both deliveries failed (carry answered 503); carry's redelivery step reads the App's hook
    and asks for that hook's delivery by its own numeric id: the event is acted on once. Asking
    through the repository hook too finds its failed delivery and gets 'duplicate'."""
    hooks.handed.down = True
    sha = hooks.push("second")
    pushed = next(d for d in hooks.gh.deliveries if d.event == "push")
    assert [status for _hook, status, _word in _answers(hooks.gh, pushed.guid)] == [503, 503]
    assert hooks.handed.events == []
    hooks.handed.down = False
    asked = redelivery.redeliver_failed(hooks.client, hooks.app_forge(), None)
    hooks.gh.wait_for_deliveries()
    assert [a.attempt.guid for a in asked] == [pushed.guid]
    app_delivery = next(
        d for d in hooks.gh.deliveries if d.guid == pushed.guid and d.hook_id != hooks.repo_hook
    )
    assert asked[0].attempt.id == app_delivery.id
    (moved,) = hooks.handed.events
    assert isinstance(moved, HeadMoved) and moved.after == sha
    asked = redelivery.redeliver_failed(
        hooks.client, hooks.forge(github_token="admin-token"), hooks.repo_hook
    )
    hooks.gh.wait_for_deliveries()
    assert [a.attempt.guid for a in asked] == [pushed.guid]
    redelivered = [d for d in hooks.gh.deliveries if d.guid == pushed.guid and d.redelivery]
    assert [
        (d.status_code, json.loads(d.response_body or b"{}")["status"]) for d in redelivered
    ] == [
        (202, "accepted"),
        (200, "duplicate"),
    ]
    assert len(hooks.handed.events) == 1  # acted on once
    # every event has a 2xx attempt on each hook now: nothing more is asked for
    assert redelivery.redeliver_failed(hooks.client, hooks.app_forge(), None) == []


def test_the_service_intake_queues_one_task_for_an_event_through_two_hooks(
    service_hooks: TwoHooks,
) -> None:
    """The service's intake (record and queue in one script): the push's carry.ingest task is
    queued once, whichever hook's delivery came first."""
    sha = service_hooks.push("second")
    pushed = next(d for d in service_hooks.gh.deliveries if d.event == "push")
    assert sorted(s for _h, s, _w in _answers(service_hooks.gh, pushed.guid)) == [200, 202]
    queued = []
    for raw in service_hooks.client.lrange("carry", 0, -1):
        message = json.loads(raw)
        if message["headers"]["task"] == "carry.ingest":
            args, kwargs, _embed = json.loads(base64.b64decode(message["body"]))
            queued.append(kwargs.get("event") or args[0])
    # fails on the old emulator: two GUIDs, two tasks for one push
    assert [(e["delivery_id"], e["after"]) for e in queued] == [(pushed.guid, sha)]
