"""A Celery task message built, not sent: the bytes kombu's Redis transport would LPUSH.

The webhook intake stores a delivery and queues its task in one Lua script (one round trip,
one fsync, atomic: bot.store.deliveries.record_delivery), so it needs the message itself rather
than `send_task`, which talks to Redis on its own (a second and third round trip per delivery).
The message is Celery's own (`app.amqp.as_task_v2`, the body serialized by kombu, the
`before_task_publish` signal sent as `send_task` sends it, so carry's correlation ids travel in
its headers), in the envelope kombu's Redis channel writes: a JSON object with the body in
base64 and the delivery info of the anonymous exchange, whose routing key names the list.
The list is the task's queue in the broker, which is the same Redis as the delivery log
(both are REDIS_URL).
"""

from __future__ import annotations

import base64
import json
import os
import socket
import uuid
from dataclasses import dataclass
from typing import Any

from celery import Celery, signals

from bot.core.events import Event, event_to_dict

INGEST_TASK = "carry.ingest"

# What `send_task` puts in `origin` (celery.utils.nodenames.anon_nodename).
_ORIGIN = f"gen{os.getpid()}@{socket.gethostname()}"


@dataclass(frozen=True)
class QueuedTask:
    """A task message and the Redis list it goes to."""

    queue: str
    message: bytes
    task_id: str


def task_message(app: Celery, name: str, kwargs: dict[str, Any], summary: str) -> QueuedTask:
    """The message `app.send_task(name, kwargs=kwargs)` would queue; `summary` is its
    kwargsrepr (what the worker's log shows of the arguments), cheaper than Celery's repr."""
    task_id = str(uuid.uuid4())
    queue = _queue(app, name)
    headers, properties, body, _ = app.amqp.as_task_v2(
        task_id,
        name,
        args=(),
        kwargs=kwargs,
        argsrepr="()",
        kwargsrepr=summary,
        origin=_ORIGIN,
        ignore_result=None,
    )
    signals.before_task_publish.send(
        sender=name,
        body=body,
        exchange="",
        routing_key=queue,
        headers=headers,
        properties=properties,
        declare=[],
        retry_policy=None,
    )
    # What kombu's json serializer writes for plain data (the app's task_serializer is json).
    raw = json.dumps(body).encode("utf-8")
    envelope = {
        "body": base64.b64encode(raw).decode("ascii"),
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": headers,
        "properties": {
            **properties,
            "delivery_mode": 2,
            "delivery_info": {"exchange": "", "routing_key": queue},
            "priority": 0,
            "body_encoding": "base64",
            "delivery_tag": str(uuid.uuid4()),
        },
    }
    return QueuedTask(queue, json.dumps(envelope).encode(), task_id)


def _queue(app: Celery, name: str) -> str:
    """The queue Celery routes a task to (its routes are fixed once the app is configured)."""
    key = (id(app), name)
    if key not in _QUEUES:
        _QUEUES[key] = app.amqp.router.route({}, name, (), {})["queue"].name
    return _QUEUES[key]


_QUEUES: dict[tuple[int, str], str] = {}


def ingest_message(app: Celery, event: Event) -> QueuedTask:
    """The carry.ingest task of a webhook's event (what the intake queues with its record)."""
    summary = f"{{'event': <{event.kind} {event.key}>}}"
    return task_message(app, INGEST_TASK, {"event": event_to_dict(event)}, summary)
