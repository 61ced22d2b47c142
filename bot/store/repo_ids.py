"""The GitHub id of each repository the config names, as carry learned it: a repository keeps
its id through a rename or a transfer, so deliveries are matched by id, not by name.

  carry:repoid:ids             hash: configured name (lower case) -> repository id
  carry:repoid:asked:<name>    string, expires: GitHub was asked for this name's id lately
"""

from __future__ import annotations

from typing import Final

import redis

from bot.store.codec import text
from bot.store.series import PREFIX

_IDS: Final = f"{PREFIX}repoid:ids"
ASK_AGAIN_S: Final = 3600  # a name GitHub could not say the id of is asked for again after this


def known(client: redis.Redis) -> dict[str, int]:
    """Configured name (lower case) -> id, for every name whose id carry has learned."""
    raw = client.hgetall(_IDS)
    return {text(name): int(value) for name, value in raw.items()}


def learn(client: redis.Redis, name: str, repo_id: int) -> bool:
    """Records the id of a configured name, unless one is recorded: True when new. The first
    id seen for a name is its id; a later repository under the same name is another one."""
    return bool(client.hsetnx(_IDS, name.lower(), repo_id))


def may_ask(client: redis.Redis, name: str) -> bool:
    """True at most once an hour per name: whether carry may ask GitHub for its id now."""
    return bool(client.set(f"{PREFIX}repoid:asked:{name.lower()}", 1, nx=True, ex=ASK_AGAIN_S))
