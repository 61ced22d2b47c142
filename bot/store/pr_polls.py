"""What the PR poller last saw of each watched upstream PR, so the next poll can be a
conditional request (a 304 costs no rate limit).

  carry:prstate:<owner>/<repo>#<n>    hash: `etag`, `state`, `head`
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

from bot.store.codec import text
from bot.store.series import PREFIX


@dataclass(frozen=True)
class PrSeen:
    etag: str = ""
    state: str | None = None
    head: str | None = None


def _key(repo: str, number: int) -> str:
    return f"{PREFIX}prstate:{repo}#{number}"


def load(client: redis.Redis, repo: str, number: int) -> PrSeen:
    raw = {text(k): text(v) for k, v in client.hgetall(_key(repo, number)).items()}
    return PrSeen(raw.get("etag", ""), raw.get("state"), raw.get("head"))


def save(client: redis.Redis, repo: str, number: int, seen: PrSeen) -> None:
    mapping = {"etag": seen.etag, "state": seen.state or "", "head": seen.head or ""}
    client.hset(_key(repo, number), mapping=mapping)  # type: ignore[arg-type]
