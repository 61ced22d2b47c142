"""kombu's Redis transport, with every delivery checked before kombu and Celery see it.

Anyone who may push to a queue (the service, and each runner's broker user, which requeues
its own jobs) can push bytes that are no kombu message: not JSON, not an object, without
properties, with a body kombu cannot decode. kombu's Redis channel decodes what BRPOP
returns inside the worker's event loop, where such a message is an unrecoverable error: the
worker stops, and a supervisor that restarts it meets the next one. Here each delivery is
checked first (`envelope_problem`); one that would break kombu is set aside, whole, in the
channel's quarantine list (the `quarantine_key` transport option; bot.store.quarantine),
with one log line, and the worker goes on with the next.

What this does not cover: `basic_get` (RPOP), which carry's workers do not use; and the
Celery message inside a sound envelope (unknown task, undecodable body), which Celery
itself rejects with a log line.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import logging
from typing import Any

import redis
from kombu.transport import TRANSPORT_ALIASES
from kombu.transport import redis as kombu_redis

from bot.store import quarantine

log = logging.getLogger("carry.broker")

ALIAS = "carry-redis"  # this transport's name in a kombu URL (socket URLs need one)


def broker_url(url: str) -> str:
    """carry's REDIS_URL as kombu takes it. kombu knows no unix:///PATH (redis-py's form,
    which carry's settings accept): its Redis transport takes a socket only as
    TRANSPORT+socket:///PATH, so this transport is registered under ALIAS for that form."""
    if not url.startswith("unix://"):
        return url
    TRANSPORT_ALIASES.setdefault(ALIAS, f"{__name__}:Transport")
    return f"{ALIAS}+socket://{url.removeprefix('unix://')}"


def envelope_problem(raw: bytes) -> str | None:
    """Why kombu could not take `raw` as a message, or None when it can: a JSON object with
    its properties (delivery tag and info), optional headers and a body in its encoding."""
    try:
        message = json.loads(raw)
    except (UnicodeDecodeError, ValueError):
        return "not JSON"
    if not isinstance(message, dict):
        return f"a JSON {type(message).__name__}, not an object"
    properties = message.get("properties")
    if not isinstance(properties, dict):
        return "no properties object"
    problems = [
        _typed(properties, "delivery_tag", str),
        _delivery_info_problem(properties.get("delivery_info")),
        _typed(message, "headers", dict, optional=True),
        _typed(message, "content-type", str, optional=True),
        _typed(message, "content-encoding", str, optional=True),
        _body_problem(message.get("body"), properties.get("body_encoding")),
    ]
    return next((problem for problem in problems if problem), None)


def _typed(holder: dict[str, Any], key: str, kind: type, *, optional: bool = False) -> str | None:
    value = holder.get(key)
    if value is None and optional:
        return None
    return None if isinstance(value, kind) else f"{key} is not a {kind.__name__}"


def _delivery_info_problem(info: Any) -> str | None:
    if not isinstance(info, dict):
        return "no delivery_info object"
    if not isinstance(info.get("routing_key"), str) or not isinstance(info.get("exchange"), str):
        return "delivery_info without exchange and routing_key"
    return None


def _body_problem(body: Any, encoding: Any) -> str | None:
    if body is None:
        return None
    if not isinstance(body, str):
        return "body is not a string"
    if encoding in (None, "utf-8"):
        return None
    if encoding != "base64":
        return f"body_encoding {str(encoding)[:40]!r} is not base64 or utf-8"
    try:
        base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError):
        return "body is not base64"
    return None


class _CheckedClient(redis.Redis):
    """The channel's client: a BRPOP reply that holds no kombu message is handed to
    `set_aside` and read as no message at all (kombu then polls again)."""

    def __init__(self, *, set_aside: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._set_aside = set_aside

    def parse_response(self, connection: Any, command_name: Any, **options: Any) -> Any:
        reply = super().parse_response(connection, command_name, **options)
        if command_name != "BRPOP" or not reply:
            return reply
        queue, raw = reply
        problem = envelope_problem(raw)
        if problem is None:
            return reply
        self._set_aside(queue, raw, problem)
        return None


class Channel(kombu_redis.Channel):
    quarantine_key = quarantine.SERVICE_KEY
    from_transport_options: tuple[str, ...] = (  # type: ignore[assignment]
        *kombu_redis.Channel.from_transport_options,
        "quarantine_key",
    )

    def _get_client(self) -> Any:
        client = super()._get_client()
        if client is not redis.Redis:  # a global key prefix: kombu's own client class
            raise ValueError("carry's broker transport does not take a global_keyprefix")
        return functools.partial(_CheckedClient, set_aside=self._set_aside)

    def _set_aside(self, queue: bytes, raw: bytes, problem: str) -> None:
        where = queue.decode(errors="replace")
        try:
            with self.conn_or_acquire() as client:
                quarantine.set_aside(client, self.quarantine_key, raw)
        except redis.RedisError as err:
            log.error(
                "a message in %s is not a Celery message (%s, %d bytes) and could not be set "
                "aside in %s: %s; it is dropped",
                where,
                problem,
                len(raw),
                self.quarantine_key,
                err,
            )
            return
        log.warning(
            "a message in %s is not a Celery message (%s, %d bytes): set aside in %s",
            where,
            problem,
            len(raw),
            self.quarantine_key,
        )


class Transport(kombu_redis.Transport):
    Channel = Channel
