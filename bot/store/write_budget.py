"""The content-creating requests carry sent GitHub per installation (or token), in Redis (keys
`carry:github-writes:<who>`, a sorted set of send times): every worker process takes its
turn here before a POST, PATCH, PUT or DELETE, so that together they stay inside GitHub's
secondary limits (bot.core.ci_report.CONTENT_LIMITS) instead of being refused.

A rate-limit refusal holds them all (keys `carry:github-write-hold:<who>`, the epoch second the
hold ends): GitHub asked the installation, not one request, to wait (its Retry-After), so no
worker sends a write before then."""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Sequence
from typing import Final, cast

import redis

from bot.core.ci_report import CONTENT_LIMITS, WriteLimit, write_wait
from bot.store.series import PREFIX

WRITES_PREFIX: Final = f"{PREFIX}github-writes:"
HOLDS_PREFIX: Final = f"{PREFIX}github-write-hold:"
_KEEP_S: Final = max(limit.window_s for limit in CONTENT_LIMITS)


def take_write(
    client: redis.Redis,
    who: str,
    now: float | None = None,
    limits: Sequence[WriteLimit] = CONTENT_LIMITS,
    waited_until: float | None = None,
) -> float:
    """Counts one content-creating request of `who` and returns 0.0, or returns the seconds to
    wait when GitHub's limits leave no room now or a hold is on (nothing counted then). A hold
    that ends by `waited_until` was sat out by the caller already (its own wait, as GitHub
    asked) and holds it no longer."""
    key, hold = WRITES_PREFIX + who, HOLDS_PREFIX + who
    while True:
        at = time.time() if now is None else now
        with client.pipeline() as pipe:
            try:
                pipe.watch(key, hold)
                # immediate mode (after WATCH): the pipeline answers at once
                scored = cast(list[tuple[bytes, float]], pipe.zrange(key, 0, -1, withscores=True))
                recent = [float(score) for _member, score in scored]
                held = _held_until(pipe.get(hold))
                wait = write_wait(recent, at, limits, held_until=held, waited_until=waited_until)
                if wait > 0:
                    pipe.unwatch()
                    return wait
                pipe.multi()
                pipe.zremrangebyscore(key, "-inf", at - _KEEP_S)
                pipe.zadd(key, {f"{at:.6f}:{uuid.uuid4().hex[:8]}": at})
                pipe.expire(key, int(_KEEP_S) + 60)
                pipe.execute()
                return 0.0
            except redis.WatchError:
                continue


def hold_writes(client: redis.Redis, who: str, seconds: float, now: float | None = None) -> float:
    """GitHub refused a request of `who` with a rate limit and asked it to wait `seconds`: no
    write of `who` is let through until then (a longer hold already on stays). Returns the
    epoch second the hold ends."""
    hold = HOLDS_PREFIX + who
    while True:
        until = (time.time() if now is None else now) + max(seconds, 0.0)
        with client.pipeline() as pipe:
            try:
                pipe.watch(hold)
                held = _held_until(pipe.get(hold))
                if held is not None and held >= until:
                    pipe.unwatch()
                    return held
                pipe.multi()
                # kept a little past its end (Redis expires whole seconds); a stale one waits 0
                pipe.set(hold, f"{until:.3f}", ex=max(math.ceil(seconds) + 1, 1))
                pipe.execute()
                return until
            except redis.WatchError:
                continue


def _held_until(raw: object) -> float | None:
    if isinstance(raw, bytes | str):
        try:
            return float(raw)
        except ValueError:
            return None
    return None
