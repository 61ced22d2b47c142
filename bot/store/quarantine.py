"""Messages taken off a broker queue that are no Celery message, set aside whole
(bot/queue/broker_transport.py), newest first; the newest KEEP of each list are kept.

  carry:broker:quarantine    what the service's workers set aside
  carry:hw:<kind>:quarantine what the runners of a kind set aside
                             (bot.store.runner_channel.quarantine_key: the runner's broker
                             user reaches only its kind's keys)
"""

from __future__ import annotations

from typing import Final

import redis

from bot.store.series import PREFIX

SERVICE_KEY: Final = f"{PREFIX}broker:quarantine"
KEEP: Final = 1000


def set_aside(client: redis.Redis, key: str, raw: bytes) -> None:
    pipe = client.pipeline()
    pipe.lpush(key, raw).ltrim(key, 0, KEEP - 1)
    pipe.execute()


def set_aside_messages(client: redis.Redis, key: str) -> list[bytes]:
    """Newest first."""
    return list(client.lrange(key, 0, -1))
