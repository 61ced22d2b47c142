"""Shared fixtures: real git repositories and a real Redis."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.support.gitrepo import RepoBuilder
from tests.support.redis_server import PrivateRedis, answers

MACHINE_REDIS = "redis://127.0.0.1:6379"
TEST_DB = 9


@pytest.fixture
def make_repo(tmp_path: Path):
    """Factory for pinned-env repositories under tmp_path: make_repo("upstream")."""

    def make(name: str = "upstream") -> RepoBuilder:
        return RepoBuilder(tmp_path / name)

    return make


@pytest.fixture(scope="session")
def redis_base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The machine's Redis when it answers, else a private redis-server for the whole session."""
    wanted = os.environ.get("CARRY_TEST_REDIS_URL", MACHINE_REDIS)
    if answers(wanted):
        yield wanted.rsplit("/", 1)[0] if wanted.count("/") > 2 else wanted
        return
    server = PrivateRedis(tmp_path_factory.mktemp("redis"), appendonly=False).start()
    try:
        yield f"redis://127.0.0.1:{server.port}"
    finally:
        server.stop()


@pytest.fixture
def redis_url(redis_base_url: str) -> Iterator[str]:
    """A Redis database reserved for tests, emptied before each test."""
    url = f"{redis_base_url}/{TEST_DB}"
    redis.Redis.from_url(url).flushdb()
    yield url


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    """A private AOF-backed redis-server that a test may kill and restart."""
    server = PrivateRedis(tmp_path / "redis").start()
    try:
        yield server
    finally:
        server.stop(kill=True)
