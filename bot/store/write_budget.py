"""The content-creating requests carry sent GitHub per installation (or token), in Redis (keys
`carry:github-writes:<who>`, a sorted set of send times): every worker process takes its
turn here before a POST, PATCH, PUT or DELETE, so that together they stay inside GitHub's
secondary limits (bot.core.ci_report.CONTENT_LIMITS) instead of being refused."""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import Final, cast

import redis

from bot.core.ci_report import CONTENT_LIMITS, WriteLimit, write_wait
from bot.store.series import PREFIX

WRITES_PREFIX: Final = f"{PREFIX}github-writes:"
_KEEP_S: Final = max(limit.window_s for limit in CONTENT_LIMITS)


def take_write(
    client: redis.Redis,
    who: str,
    now: float | None = None,
    limits: Sequence[WriteLimit] = CONTENT_LIMITS,
) -> float:
    """Counts one content-creating request of `who` and returns 0.0, or returns the seconds to
    wait when GitHub's limits leave no room now (nothing counted then)."""
    key = WRITES_PREFIX + who
    while True:
        at = time.time() if now is None else now
        with client.pipeline() as pipe:
            try:
                pipe.watch(key)
                # immediate mode (after WATCH): the pipeline answers at once
                scored = cast(list[tuple[bytes, float]], pipe.zrange(key, 0, -1, withscores=True))
                recent = [float(score) for _member, score in scored]
                wait = write_wait(recent, at, limits)
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
