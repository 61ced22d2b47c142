"""Queue entries that are no Celery message, each named by what is wrong with it, built from
a real envelope (what a Celery app publishes to a real Redis). The first six stopped a stock
kombu worker ("Unrecoverable error"); the others it dropped without a word."""

from __future__ import annotations

import json
from typing import Any

import redis
from celery import Celery

TEMPLATE_QUEUE = "carry-test-envelope"


def real_envelope(app: Celery, client: redis.Redis) -> bytes:
    """The exact bytes a Celery app pushes for one task."""
    app.send_task("carry.ci.run_job", args=[{"run_id": "template"}], queue=TEMPLATE_QUEUE)
    raw = client.rpop(TEMPLATE_QUEUE)
    assert isinstance(raw, bytes)
    return raw


def malformed(envelope: bytes) -> dict[str, bytes]:
    def changed(*path: str, to: Any = None, drop: bool = False) -> bytes:
        message = json.loads(envelope)
        holder = message
        for key in path[:-1]:
            holder = holder[key]
        if drop:
            holder.pop(path[-1])
        else:
            holder[path[-1]] = to
        return json.dumps(message).encode()

    return {
        "not JSON": b"not json",
        "a JSON int, not an object": b"42",
        "headers is not a dict": changed("headers", to=["task"]),
        "body_encoding 'rot13' is not base64 or utf-8": changed(
            "properties", "body_encoding", to="rot13"
        ),
        "body is not a string": changed("body", to=5),
        "body is not base64": changed("body", to="@@@"),
        "no properties object": changed("properties", drop=True),
        "delivery_tag is not a str": changed("properties", "delivery_tag", to=7),
        "no delivery_info object": changed("properties", "delivery_info", drop=True),
        "delivery_info without exchange and routing_key": changed(
            "properties", "delivery_info", to={}
        ),
        "a JSON list, not an object": b'["a", "list"]',
    }
