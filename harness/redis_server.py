"""Real Redis for tests: a private redis-server (bot.local_redis), durable by default so a test
may kill it and start it again on the same files."""

from __future__ import annotations

from dataclasses import dataclass

from bot.local_redis import LocalRedis, answers, free_port

__all__ = ["PrivateRedis", "answers", "free_port"]


@dataclass
class PrivateRedis(LocalRedis):
    persist: bool = True
