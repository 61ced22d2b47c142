"""The webhook delivery log in Redis: dedup by delivery id, raw bodies kept, a capped stream.

Layout (all keys prefixed `carry:`):
  carry:delivery:<id>   hash: the delivery (raw body, zlib-compressed behind BODY_ZLIB;
                        normalized event, outcome, reason). Its existence is the dedup
                        marker; it expires after `retention_s`, which outlives GitHub's
                        redelivery window.
  carry:deliveries      stream, newest last: one entry per delivery attempt, duplicates included,
                        without the body. Capped near STREAM_MAXLEN entries.
  carry:deliveries:open sorted set: the queued deliveries no worker has finished yet, scored by
                        when their message was last queued (bot/core/requeue.py says why).
"""

from __future__ import annotations

import hashlib
import json
import time
import zlib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final, Literal, get_args

import redis
import redis.asyncio
from redis.commands.core import Script
from redis.exceptions import NoScriptError

from bot.store.codec import text

if TYPE_CHECKING:
    from bot.queue.task_message import QueuedTask

Outcome = Literal[
    "accepted", "duplicate", "ignored", "rejected_signature", "rejected_payload", "dispatch_failed"
]
OUTCOMES: Final = frozenset(get_args(Outcome))

STREAM_KEY: Final = "carry:deliveries"
STREAM_MAXLEN: Final = 10_000
DELIVERY_PREFIX: Final = "carry:delivery:"
OPEN_KEY: Final = "carry:deliveries:open"
# GitHub's redelivery window is 3 days on github.com and up to 30 in its docs' sources.
DEFAULT_RETENTION_S: Final = 35 * 24 * 3600
# A stored body that starts so is zlib-compressed (a JSON body never starts with a NUL byte);
# bodies were kept as sent before, and such bodies still read back as they are. Webhook
# payloads are JSON full of repeated keys and URLs: compressed they take several times less of
# Redis's memory, which the kept bodies dominated (bench/scale.py).
BODY_ZLIB: Final = b"\x00zlib\x00"


def stored_body(body: bytes) -> bytes:
    return BODY_ZLIB + zlib.compress(body, 6)


def sent_body(stored: bytes) -> bytes:
    """The body as GitHub sent it, from what the hash holds."""
    if stored.startswith(BODY_ZLIB):
        return zlib.decompress(stored[len(BODY_ZLIB) :])
    return stored


# One round trip, atomic: either this id is new (store it, log "accepted"/..., and queue its
# task when one is given: KEYS[3] the queue's list, ARGV[15] the message, and mark it open in
# KEYS[4] until a worker settles it) or it was seen (log
# "duplicate" with a pointer to the first outcome). Concurrent deliveries of one id cannot
# both see it as new, and a delivery is never stored without its task or queued twice.
_RECORD = """
local first = redis.call('HGET', KEYS[1], 'outcome')
if first then
  local handed = redis.call('HGET', KEYS[1], 'handed')
  local since = tonumber(redis.call('HGET', KEYS[1], 'pending_since') or '0')
  local stale = handed == '0' and tonumber(ARGV[12]) - since >= tonumber(ARGV[13])
  if not stale then
    if handed == '0' then
      return 2
    end
    redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[1], '*',
      'delivery_id', ARGV[3], 'event', ARGV[4], 'action', ARGV[5], 'outcome', 'duplicate',
      'reason', 'delivery id seen before (first outcome: ' .. first .. ')',
      'received_at', ARGV[7], 'event_key', ARGV[8], 'event_json', '')
    return 0
  end
end
redis.call('HSET', KEYS[1],
  'delivery_id', ARGV[3], 'event', ARGV[4], 'action', ARGV[5], 'outcome', ARGV[6],
  'received_at', ARGV[7], 'event_key', ARGV[8], 'event_json', ARGV[9], 'reason', ARGV[10],
  'body', ARGV[11], 'pending_since', ARGV[12], 'handed', ARGV[14])
redis.call('EXPIRE', KEYS[1], ARGV[2])
if KEYS[3] then
  redis.call('LPUSH', KEYS[3], ARGV[15])
  redis.call('ZADD', KEYS[4], ARGV[12], ARGV[3])
end
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[1], '*',
  'delivery_id', ARGV[3], 'event', ARGV[4], 'action', ARGV[5], 'outcome', ARGV[6],
  'reason', ARGV[10], 'received_at', ARGV[7], 'event_key', ARGV[8], 'event_json', ARGV[9])
return 1
"""

_RECORD_SCRIPT: Final = Script(None, _RECORD.encode())  # EVALSHA: the text is sent once
_RECORD_SHA: Final = hashlib.sha1(_RECORD.encode()).hexdigest()  # the same, for asyncio

# A delivery recorded but never marked handed off (the hand-off failed and so did un-recording
# it, e.g. Redis went away in between) is taken over by a redelivery this much later; sooner,
# the redelivery is told to come back (the first attempt may still be handing off).
HANDOFF_TAKEOVER_S = 10.0

# Un-dedups a delivery whose hand-off failed, so that GitHub's redelivery is processed again.
_FORGET = """
if redis.call('DEL', KEYS[1]) == 1 then
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[1], '*',
    'delivery_id', ARGV[2], 'event', ARGV[3], 'action', ARGV[4], 'outcome', 'dispatch_failed',
    'reason', ARGV[5], 'received_at', ARGV[6], 'event_key', ARGV[7], 'event_json', '')
  return 1
end
return 0
"""


@dataclass(frozen=True)
class DeliveryEntry:
    """One entry of the delivery stream (no body)."""

    stream_id: str
    delivery_id: str
    event_name: str
    action: str | None
    outcome: str
    reason: str | None
    received_at: datetime
    event_key: str | None
    event: dict[str, Any] | None

    def to_json(self) -> dict[str, Any]:
        return {
            "stream_id": self.stream_id,
            "delivery_id": self.delivery_id,
            "event": self.event_name,
            "action": self.action,
            "outcome": self.outcome,
            "reason": self.reason,
            "received_at": self.received_at.isoformat().replace("+00:00", "Z"),
            "event_key": self.event_key,
            "normalized": self.event,
        }


@dataclass(frozen=True)
class StoredDelivery:
    """A delivery as first recorded, with its raw body."""

    delivery_id: str
    event_name: str
    action: str | None
    outcome: str
    reason: str | None
    received_at: datetime
    event_key: str | None
    event: dict[str, Any] | None
    body: bytes


@dataclass(frozen=True)
class NewDelivery:
    """A delivery as the intake records it: what GitHub sent, and what carry made of it."""

    delivery_id: str
    event_name: str
    body: bytes
    received_at: datetime
    outcome: Outcome
    event_json: str | None = None
    reason: str | None = None
    action: str | None = None
    event_key: str | None = None
    retention_s: int = DEFAULT_RETENTION_S
    task: QueuedTask | None = None  # an accepted delivery's task message, queued with it

    def script_request(self) -> tuple[list[str], list[Any]]:
        """The keys and arguments of the _RECORD script, after checking them."""
        if self.outcome not in OUTCOMES or self.outcome == "duplicate":
            raise ValueError(f"cannot record a delivery with outcome {self.outcome!r}")
        if not self.delivery_id:
            raise ValueError("delivery_id must not be empty")
        task = self.task
        if task is not None and self.outcome != "accepted":
            raise ValueError(f"only an accepted delivery has a task to queue, not {self.outcome!r}")
        keys = [_delivery_key(self.delivery_id), STREAM_KEY]
        if task is not None:
            keys += [task.queue, OPEN_KEY]
        pending = self.outcome == "accepted" and task is None
        args = [
            STREAM_MAXLEN,
            self.retention_s,
            self.delivery_id,
            self.event_name,
            self.action or "",
            self.outcome,
            _iso(self.received_at),
            self.event_key or "",
            self.event_json or "",
            self.reason or "",
            stored_body(self.body),
            time.time(),
            HANDOFF_TAKEOVER_S,
            "0" if pending else "1",
            task.message if task is not None else "",
        ]
        return keys, args


def record_delivery(client: redis.Redis, delivery: NewDelivery) -> bool:
    """Store a delivery once. True when new; False for a duplicate id (logged as 'duplicate').
    With a `task` (an "accepted" delivery's task message) the delivery is queued in the same
    atomic step and handed off at once. Otherwise an outcome of "accepted" is pending until
    mark_handed_off(): a redelivery of a pending one raises DeliveryInFlight, or,
    HANDOFF_TAKEOVER_S later, is recorded anew (True).

    Raises redis.RedisError when Redis cannot be reached: the caller must not acknowledge.
    """
    keys, args = delivery.script_request()
    return _recorded(_RECORD_SCRIPT(keys, args, client=client), delivery.delivery_id)


async def record_delivery_async(client: redis.asyncio.Redis, delivery: NewDelivery) -> bool:
    """record_delivery on an asyncio client (the web service's event loop), same contract."""
    keys, args = delivery.script_request()
    try:
        result = await _evalsha(client, keys, args)
    except redis.ConnectionError:
        # A pooled connection the server closed (it restarted) fails once, and is dropped;
        # a fresh one either works or fails the same way. Running the script again is safe:
        # had the first run taken effect, this one finds the id and answers "duplicate".
        result = await _evalsha(client, keys, args)
    return _recorded(result, delivery.delivery_id)


async def _evalsha(client: redis.asyncio.Redis, keys: list[str], args: list[Any]) -> Any:
    try:
        return await client.evalsha(_RECORD_SHA, len(keys), *keys, *args)
    except NoScriptError:  # a restarted or flushed server: load it again
        await client.script_load(_RECORD)
        return await client.evalsha(_RECORD_SHA, len(keys), *keys, *args)


def _recorded(result: Any, delivery_id: str) -> bool:
    if result == 2:
        raise DeliveryInFlight(delivery_id)
    return bool(result)


class DeliveryInFlight(Exception):
    """An earlier attempt of this delivery is still being handed off."""


def mark_handed_off(client: redis.Redis, delivery_id: str) -> None:
    """The delivery's event reached the queue: a redelivery of it is a duplicate from now."""
    client.hset(_delivery_key(delivery_id), "handed", "1")


def forget_delivery(
    client: redis.Redis, delivery_id: str, reason: str, *, at: datetime | None = None
) -> bool:
    """Drop the dedup record of a delivery that could not be handed off (logged in the stream
    as 'dispatch_failed'), so that a redelivery with the same id is processed anew."""
    stored = get_delivery(client, delivery_id)
    if stored is None:
        return False
    result = client.eval(
        _FORGET,
        2,
        _delivery_key(delivery_id),
        STREAM_KEY,
        STREAM_MAXLEN,
        delivery_id,
        stored.event_name,
        stored.action or "",
        reason,
        _iso(at or datetime.now(UTC)),
        stored.event_key or "",
    )
    return bool(result)


def settle(client: redis.Redis, delivery_id: str) -> None:
    """A worker finished the delivery's event (or found it handled before): no longer open."""
    client.zrem(OPEN_KEY, delivery_id)


def open_since(client: redis.Redis, before: float, limit: int = 100) -> list[str]:
    """The open deliveries whose message was last queued before `before`, oldest first."""
    found = client.zrangebyscore(OPEN_KEY, "-inf", before, start=0, num=limit)
    return [text(member) for member in found]


def requeued(client: redis.Redis, delivery_id: str) -> int:
    """How often a sweep queued the delivery's event again."""
    return int(client.hget(_delivery_key(delivery_id), "requeued") or 0)


def requeue(client: redis.Redis, delivery_id: str, task: QueuedTask, now: float) -> int:
    """Queue the delivery's event again, count it, and keep it open from `now`: one atomic
    step, so a message is never queued without the count. Returns the new count."""
    pipe = client.pipeline(transaction=True)
    pipe.lpush(task.queue, task.message)
    pipe.hincrby(_delivery_key(delivery_id), "requeued", 1)
    pipe.zadd(OPEN_KEY, {delivery_id: now})
    return int(pipe.execute()[1])


def get_delivery(client: redis.Redis, delivery_id: str) -> StoredDelivery | None:
    fields = client.hgetall(_delivery_key(delivery_id))
    if not fields:
        return None
    data = {text(key): value for key, value in fields.items()}
    body = data.get("body", b"")
    return StoredDelivery(
        delivery_id=text(data["delivery_id"]),
        event_name=text(data["event"]),
        action=text(data.get("action", "")) or None,
        outcome=text(data["outcome"]),
        reason=text(data.get("reason", "")) or None,
        received_at=datetime.fromisoformat(text(data["received_at"])),
        event_key=text(data.get("event_key", "")) or None,
        event=_json_or_none(text(data.get("event_json", ""))),
        body=sent_body(body if isinstance(body, bytes) else str(body).encode()),
    )


def recent_deliveries(client: redis.Redis, limit: int = 50) -> list[DeliveryEntry]:
    """The newest `limit` stream entries, newest first."""
    if limit < 1:
        raise ValueError("limit must be at least 1")
    rows = client.xrevrange(STREAM_KEY, count=limit)
    return [_entry(stream_id, fields) for stream_id, fields in rows]


def _entry(stream_id: Any, fields: dict[Any, Any]) -> DeliveryEntry:
    data = {text(key): text(value) for key, value in fields.items()}
    return DeliveryEntry(
        stream_id=text(stream_id),
        delivery_id=data["delivery_id"],
        event_name=data["event"],
        action=data.get("action") or None,
        outcome=data["outcome"],
        reason=data.get("reason") or None,
        received_at=datetime.fromisoformat(data["received_at"]),
        event_key=data.get("event_key") or None,
        event=_json_or_none(data.get("event_json", "")),
    )


def _delivery_key(delivery_id: str) -> str:
    return f"{DELIVERY_PREFIX}{delivery_id}"


def _iso(moment: datetime) -> str:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat()


def _json_or_none(text: str) -> dict[str, Any] | None:
    if not text:
        return None
    value = json.loads(text)
    return value if isinstance(value, dict) else None
