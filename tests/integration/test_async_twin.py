"""bot.store.async_twin: the asyncio client reaches the same server, with the same timeouts,
credentials and retry policy as the sync client it twins."""

from __future__ import annotations

import asyncio
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from bot.store.async_twin import MAX_CONNECTIONS, AsyncTwin, async_twin


def test_tcp_client_keeps_address_credentials_timeouts_and_retries() -> None:
    sync = redis.Redis.from_url(
        "redis://someone:pw@127.0.0.1:6390/3",
        socket_timeout=2,
        socket_connect_timeout=1,
        retry=Retry(NoBackoff(), 0),
    )
    kwargs = async_twin(sync).connection_pool.connection_kwargs
    assert (kwargs["host"], kwargs["port"], kwargs["db"]) == ("127.0.0.1", 6390, 3)
    assert (kwargs["username"], kwargs["password"]) == ("someone", "pw")
    assert (kwargs["socket_timeout"], kwargs["socket_connect_timeout"]) == (2, 1)
    assert isinstance(kwargs["retry"], redis.asyncio.retry.Retry)
    assert kwargs["retry"].get_retries() == 0


def test_unix_socket_client_gets_an_asyncio_unix_connection() -> None:
    sync = redis.Redis.from_url("unix:///run/carry/redis.sock?db=2")
    pool = async_twin(sync).connection_pool
    assert pool.connection_class is redis.asyncio.UnixDomainSocketConnection
    assert pool.connection_kwargs["path"] == "/run/carry/redis.sock"


def test_one_client_per_event_loop() -> None:
    twin = AsyncTwin(redis.Redis(port=6390))

    async def twice() -> tuple[redis.asyncio.Redis, redis.asyncio.Redis]:
        return twin.get(), twin.get()

    first, same = asyncio.run(twice())
    second, _ = asyncio.run(twice())
    assert first is same
    assert second is not first


def test_a_burst_past_the_connection_bound_waits_instead_of_failing(redis_url: str) -> None:
    """redis-py's asyncio pool refuses a call past 100 connections ('Too many connections'):
    a burst of deliveries was answered 503."""
    twin = AsyncTwin(redis.Redis.from_url(redis_url))

    async def burst() -> tuple[list[object], int]:
        client = twin.get()
        answers = await asyncio.gather(*(client.incr("burst") for _ in range(300)))
        pool: Any = client.connection_pool
        made = len(pool._available_connections) + len(pool._in_use_connections)
        await client.aclose()
        return list(answers), made

    answers, made = asyncio.run(burst())
    assert sorted(answers) == list(range(1, 301))  # type: ignore[type-var]
    assert made <= MAX_CONNECTIONS
