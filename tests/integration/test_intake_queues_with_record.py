"""The service's intake stores a delivery and queues its carry.ingest task in one Redis round
trip (one Lua script), from the event loop: real uvicorn, a real redis-server, Celery's own
message. bench/webhook.py measured why: three round trips and three worker-thread hops per
delivery saturated the intake at 300 deliveries/s (issue 34)."""

from __future__ import annotations

import base64
import functools
import json
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis

from bot.config import Settings
from bot.queue import logging_hooks  # noqa: F401  (correlation ids in the headers, as in the service)
from bot.queue.broker_transport import envelope_problem
from bot.queue.celery_app import app as celery_app
from bot.queue.task_message import ingest_message
from bot.store import get_delivery
from bot.web.app import create_app
from bot.web.webhooks import sign
from harness.redis_server import PrivateRedis
from tests.support.asgi import serve
from tests.support.webhook_intake import CONFIG, SECRET, example_body

QUEUE = "carry"  # carry.ingest's queue (the default one)


def post(url: str, body: bytes, delivery: str) -> httpx.Response:
    headers = {
        "Content-Type": "application/json",
        "X-GitHub-Event": "push",
        "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": sign(SECRET, body),
    }
    return httpx.post(f"{url}/webhooks/github", content=body, headers=headers, timeout=10)


@pytest.fixture
def web(private_redis: PrivateRedis) -> Iterator[str]:
    client = redis.Redis.from_url(private_redis.url)
    settings = Settings(webhook_secret=SECRET, max_body_bytes=None)
    queue_task = functools.partial(ingest_message, celery_app)
    with serve(create_app(CONFIG, settings, client, queue_task=queue_task)) as url:
        yield url


class Monitor:
    """The commands clients send to Redis (MONITOR), without those scripts run."""

    def __init__(self, url: str) -> None:
        self._client = redis.Redis.from_url(url, socket_timeout=0.5)
        self._stop = threading.Event()
        self._ready = threading.Event()
        self.commands: list[str] = []
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Monitor:
        self._thread.start()
        self._ready.wait(5)
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        with self._client.monitor() as monitor:
            self._ready.set()
            while not self._stop.is_set():
                try:
                    seen = monitor.next_command()
                except redis.TimeoutError:
                    continue
                if seen.get("client_type") != "lua":
                    self.commands.append(str(seen["command"]).split(" ", 1)[0].upper())


def queued(client: redis.Redis) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in reversed(client.lrange(QUEUE, 0, -1))]


def test_a_delivery_is_stored_and_queued_in_one_round_trip(
    web: str, private_redis: PrivateRedis
) -> None:
    client = redis.Redis.from_url(private_redis.url)
    body = example_body("push.json")
    assert post(web, body, str(uuid.uuid4())).status_code == 202  # loads the script once
    deliveries = [str(uuid.uuid4()) for _ in range(5)]
    with Monitor(private_redis.url) as monitor:
        answers = [post(web, body, delivery).status_code for delivery in deliveries]

    assert answers == [202] * 5
    assert monitor.commands == ["EVALSHA"] * 5
    messages = queued(client)[1:]
    assert len(messages) == 5
    for delivery, message in zip(deliveries, messages, strict=True):
        assert envelope_problem(json.dumps(message).encode()) is None
        assert message["headers"]["task"] == "carry.ingest"
        ids = message["headers"]["carry_correlation"]
        assert ids["delivery_id"] == delivery and ids["event_key"].startswith("head:")
        args, kwargs, _ = json.loads(base64.b64decode(message["body"]))
        assert args == [] and kwargs["event"]["delivery_id"] == delivery
        stored = get_delivery(client, delivery)
        assert stored is not None and stored.outcome == "accepted" and stored.body == body
        assert client.hget(f"carry:delivery:{delivery}", "handed") == b"1"  # nothing pending


def test_a_redelivery_is_not_queued_again(web: str, private_redis: PrivateRedis) -> None:
    client = redis.Redis.from_url(private_redis.url)
    body = example_body("push.json")
    delivery = str(uuid.uuid4())

    first, again = post(web, body, delivery), post(web, body, delivery)

    assert (first.status_code, again.status_code) == (202, 200)
    assert again.json()["status"] == "duplicate"
    assert len(queued(client)) == 1


def test_a_delivery_redis_refused_is_neither_stored_nor_queued_and_its_redelivery_is(
    web: str, private_redis: PrivateRedis
) -> None:
    client = redis.Redis.from_url(private_redis.url)
    body = example_body("push.json")
    delivery = str(uuid.uuid4())
    private_redis.stop(kill=True)
    down = post(web, body, delivery)
    private_redis.start()
    redelivered = post(web, body, delivery)

    assert down.status_code == 503
    assert redelivered.status_code == 202
    assert len(queued(client)) == 1
    assert get_delivery(client, delivery) is not None
