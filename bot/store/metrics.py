"""carry's own counters in Redis (keys `carry:metrics:*`), written by every worker process and
read by the web process's /metrics (bot/metrics.py) and the dashboard.

  metrics:events          hash: event kind -> count (carry_events_total)
  metrics:rebase_seconds  hash: histogram buckets b<i>, sum and count (carry_rebase_seconds)
  metrics:github          hash: the REST rate limit as last seen (remaining, limit, updated_at)

Writers never raise: a metric must not fail the work it measures.
"""

from __future__ import annotations

import bisect
import logging
import time
from dataclasses import dataclass
from typing import Final

import redis

from bot.store.codec import text, text_map
from bot.store.series import PREFIX

log = logging.getLogger("carry.metrics")

EVENTS_KEY: Final = f"{PREFIX}metrics:events"
REBASE_KEY: Final = f"{PREFIX}metrics:rebase_seconds"
GITHUB_KEY: Final = f"{PREFIX}metrics:github"
# Upper bounds in seconds; a rebase of a vLLM-sized head takes a fraction of a second warm,
# minutes when the mirror is cloned first.
REBASE_BUCKETS: Final = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
# kombu's Redis transport keeps messages of priority p > 0 in "<queue>\x06\x16<p>".
_PRIORITY_SEP: Final = "\x06\x16"
_PRIORITY_STEPS: Final = (3, 6, 9)
HW_QUEUE_PREFIX: Final = "hw."  # the runner kinds' queues (the broker's lists)


def count_event(client: redis.Redis, kind: str) -> None:
    """One more event of `kind` planned (carry_events_total)."""
    try:
        client.hincrby(EVENTS_KEY, kind, 1)
    except redis.RedisError as err:
        log.debug("event not counted: %s", err)


def observe_rebase(client: redis.Redis, seconds: float) -> None:
    """One completed rebase that took `seconds` (carry_rebase_seconds)."""
    bucket = bisect.bisect_left(REBASE_BUCKETS, seconds)  # len(REBASE_BUCKETS) means +Inf
    try:
        pipe = client.pipeline()
        pipe.hincrby(REBASE_KEY, f"b{bucket}", 1)
        pipe.hincrbyfloat(REBASE_KEY, "sum", seconds)
        pipe.hincrby(REBASE_KEY, "count", 1)
        pipe.execute()
    except redis.RedisError as err:
        log.debug("rebase duration not recorded: %s", err)


def record_rate_limit(client: redis.Redis, remaining: int | None, limit: int | None = None) -> None:
    """What GitHub's last answer said about the REST rate limit (x-ratelimit-remaining); the
    GitHub layer calls it through the callback a worker's Runtime gives it."""
    if remaining is None or remaining < 0:
        return
    values = {"remaining": remaining, "updated_at": time.time()}
    if limit is not None and limit >= 0:
        values["limit"] = limit
    try:
        client.hset(GITHUB_KEY, mapping=values)  # type: ignore[arg-type]
    except redis.RedisError as err:
        log.debug("rate limit not recorded: %s", err)


@dataclass(frozen=True)
class RateLimitSeen:
    remaining: int
    limit: int | None
    seen_at: float  # Unix time


def rate_limit_seen(client: redis.Redis) -> RateLimitSeen | None:
    """The REST rate limit as a worker last saw it; None before any GitHub call."""
    raw = text_map(client.hgetall(GITHUB_KEY))
    if "remaining" not in raw:
        return None
    limit = raw.get("limit")
    return RateLimitSeen(
        int(float(raw["remaining"])),
        int(float(limit)) if limit else None,
        float(raw.get("updated_at", 0)),
    )


def event_counts(client: redis.Redis) -> dict[str, int]:
    return {kind: int(count) for kind, count in text_map(client.hgetall(EVENTS_KEY)).items()}


def rebase_histogram(client: redis.Redis) -> dict[str, str]:
    """The stored histogram: b<i> (count in bucket i of REBASE_BUCKETS; i = len is +Inf), sum,
    count."""
    return text_map(client.hgetall(REBASE_KEY))


# --------------------------------------------------------------------------- broker queues


def listed_queues(client: redis.Redis, prefix: str) -> set[str]:
    """The broker's queues whose name starts with `prefix` and hold messages now."""
    names = set()
    for key in client.scan_iter(match=f"{prefix}*", count=500):
        names.add(text(key).split(_PRIORITY_SEP, 1)[0])
    return names


def queue_depths(client: redis.Redis, queues: dict[str, str]) -> dict[str, int]:
    """Name -> messages waiting in its queue, every priority counted (one round trip)."""
    pipe = client.pipeline()
    for queue in queues.values():
        for key in _priority_keys(queue):
            pipe.llen(key)
    lengths = iter(pipe.execute())
    return {name: sum(next(lengths) for _ in _priority_keys(q)) for name, q in queues.items()}


def _priority_keys(queue: str) -> list[str]:
    return [queue, *(f"{queue}{_PRIORITY_SEP}{step}" for step in _PRIORITY_STEPS)]
