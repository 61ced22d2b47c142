"""Where carry's dashboard issue is, and what its body was when carry last wrote it.

carry:dashboard-issue    hash: `repo` (owner/name), `number`, `digest` (sha256 of the body)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import redis

from bot.store.codec import text
from bot.store.series import PREFIX

KEY: Final = f"{PREFIX}dashboard-issue"


@dataclass(frozen=True)
class DashboardIssue:
    repo: str
    number: int
    digest: str = ""


def load(client: redis.Redis, repo: str) -> DashboardIssue | None:
    """The issue carry keeps on `repo`; None before the first, or after the repository changed."""
    raw = {text(k): text(v) for k, v in client.hgetall(KEY).items()}
    if raw.get("repo", "").lower() != repo.lower() or not raw.get("number", "").isdigit():
        return None
    return DashboardIssue(raw["repo"], int(raw["number"]), raw.get("digest", ""))


def save(client: redis.Redis, issue: DashboardIssue) -> None:
    mapping = {"repo": issue.repo, "number": str(issue.number), "digest": issue.digest}
    client.hset(KEY, mapping=mapping)  # type: ignore[arg-type]


def forget(client: redis.Redis) -> None:
    client.delete(KEY)
