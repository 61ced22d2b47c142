"""No unauthenticated broker: a carry process that runs jobs or hands them out (a worker, beat,
a runner) refuses a Redis that lets a client with no credentials in as its `default` user.

Code under test runs on the runners, and a step with network may reach the broker's address: a
Redis that answers without a password is a route to carry's control plane (issue 33's critical
finding). The check connects as a client with no credentials would, to the same host and port,
and asks for a PING: NOAUTH means the `default` user is protected. CARRY_ALLOW_OPEN_REDIS=1 names
the risk and lets a process start anyway (a throwaway Redis on a laptop, the test suite's).
"""

from __future__ import annotations

from typing import Any

import redis
from redis.connection import parse_url

from bot.config.settings import redact_url

ALLOW_VARIABLE = "CARRY_ALLOW_OPEN_REDIS"


def anyone_gets_in(url: str, timeout_s: float = 3.0) -> bool:
    """Whether a client with no username and password may use the Redis at `url`'s address;
    a Redis that cannot be reached raises redis.ConnectionError (the start fails on it)."""
    options: dict[str, Any] = {
        k: v for k, v in parse_url(url).items() if k not in ("username", "password")
    }
    client = redis.Redis(**options, socket_connect_timeout=timeout_s, socket_timeout=timeout_s)
    try:
        client.ping()
    except redis.AuthenticationError:
        return False
    except redis.ResponseError as err:
        if "NOAUTH" in str(err) or "NOPERM" in str(err):
            return False
        raise
    finally:
        client.close()
    return True


def open_broker_problem(url: str, allowed: bool) -> str | None:
    """Why a process must not start on this Redis, in one line; None when it may."""
    if allowed or not anyone_gets_in(url):
        return None
    return (
        f"the Redis at {redact_url(url)} lets a client with no password in (its default user "
        "has none), so code under test that reaches it could queue jobs and forge results: "
        "protect it (requirepass, or `ACL SETUSER default off`; carry run and the demo start "
        f"one that is) or set {ALLOW_VARIABLE}=1 to accept that risk"
    )
