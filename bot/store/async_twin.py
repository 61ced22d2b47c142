"""An asyncio Redis client to the same server, with the same credentials and timeouts, as a
synchronous one: for code on the web service's event loop that must not hop to a worker thread
for each call (the webhook intake, where thread hops made the event loop and the threads
contend for the GIL and deliveries queue up at a few hundred a second).

A client belongs to one event loop (its connections do): `AsyncTwin.get()` makes one for
the running loop, and a new one when the loop changes (each TestClient runs its own).
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

import redis
import redis.asyncio
import redis.asyncio.retry
import redis.retry

# Connections to Redis at most; a call past them waits for one (up to CONNECTION_WAIT_S, then
# redis.ConnectionError) instead of failing at once, as redis-py's asyncio pool does past its
# default of 100: a burst of deliveries queues for a moment rather than being answered 503.
MAX_CONNECTIONS: Final = 64
CONNECTION_WAIT_S: Final = 5

# What a connection needs to reach and talk to the server; everything else (sync-only hooks)
# keeps the async defaults, and the retry policy is rebuilt below.
_KEPT: Final = frozenset(
    {
        "host",
        "port",
        "path",
        "db",
        "username",
        "password",
        "socket_timeout",
        "socket_connect_timeout",
        "socket_keepalive",
        "health_check_interval",
        "client_name",
        "encoding",
        "encoding_errors",
        "decode_responses",
    }
)
_CLASSES: Final[dict[type[Any], type[redis.asyncio.Connection]]] = {
    redis.Connection: redis.asyncio.Connection,
    redis.UnixDomainSocketConnection: redis.asyncio.UnixDomainSocketConnection,
    redis.SSLConnection: redis.asyncio.SSLConnection,
}


def async_twin(client: redis.Redis) -> redis.asyncio.Redis:
    """A new asyncio client to `client`'s server (call it on the loop that will use it)."""
    pool = client.connection_pool
    connection_class = _CLASSES.get(pool.connection_class)
    if connection_class is None:
        raise TypeError(f"no asyncio counterpart for {pool.connection_class.__name__}")
    kwargs = {
        key: value
        for key, value in pool.connection_kwargs.items()
        if key in _KEPT
        or (key.startswith("ssl_") and connection_class is redis.asyncio.SSLConnection)
    }
    retry = pool.connection_kwargs.get("retry")
    if isinstance(retry, redis.retry.Retry):  # the same retries and backoff, in asyncio
        policy: Any = retry  # (redis-py's typing stubs lag its Retry)
        kwargs["retry"] = redis.asyncio.retry.Retry(
            policy._backoff, policy.get_retries(), policy._supported_errors
        )
    async_pool = redis.asyncio.BlockingConnectionPool(
        max_connections=MAX_CONNECTIONS,
        timeout=CONNECTION_WAIT_S,
        connection_class=connection_class,
        **kwargs,
    )
    return redis.asyncio.Redis(connection_pool=async_pool)


class AsyncTwin:
    """The asyncio twin of one sync client, made on first use on each event loop."""

    def __init__(self, client: redis.Redis) -> None:
        self._client = client
        self._loop: asyncio.AbstractEventLoop | None = None
        self._twin: redis.asyncio.Redis | None = None

    def get(self) -> redis.asyncio.Redis:
        loop = asyncio.get_running_loop()
        if self._twin is None or self._loop is not loop:
            self._twin = async_twin(self._client)
            self._loop = loop
        return self._twin
