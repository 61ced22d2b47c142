"""Shared fixtures: real git repositories and a real Redis."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from bot.emulator import WebhookSink
from harness.gitrepo import RepoBuilder
from harness.job_keys import install_job_keys
from harness.redis_server import PrivateRedis, answers

MACHINE_REDIS = "redis://127.0.0.1:6379"
TEST_DB = 9
# The test Redis servers have no password: the processes the tests start (workers, beat,
# runners) accept that risk by name, as a developer's throwaway Redis would
# (bot/queue/broker_auth.py; tests/integration/test_broker_auth.py checks the refusal).
os.environ.setdefault("CARRY_ALLOW_OPEN_REDIS", "1")
# The tests' deployment signs the jobs it hands to runners; the runners it starts verify them.
install_job_keys()


@pytest.fixture
def make_repo(tmp_path: Path):
    """Factory for pinned-env repositories under tmp_path: make_repo("upstream")."""

    def make(name: str = "upstream") -> RepoBuilder:
        return RepoBuilder(tmp_path / name)

    return make


@pytest.fixture(scope="session")
def redis_base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A private redis-server for this test session, so that concurrent test runs cannot
    flush each other's data; the machine's Redis when redis-server is not installed."""
    wanted = os.environ.get("CARRY_TEST_REDIS_URL")
    if wanted or not shutil.which("redis-server"):
        url = wanted or MACHINE_REDIS
        if not answers(url):
            pytest.exit(f"no Redis at {url} and no redis-server to start one", returncode=3)
        yield url.rsplit("/", 1)[0] if url.count("/") > 2 else url
        return
    server = PrivateRedis(tmp_path_factory.mktemp("redis"), persist=False).start()
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
def client(redis_url: str) -> redis.Redis:
    """A client of the test's Redis database (redis_url)."""
    return redis.Redis.from_url(redis_url)


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    """A private AOF-backed redis-server that a test may kill and restart."""
    server = PrivateRedis(tmp_path / "redis").start()
    try:
        yield server
    finally:
        server.stop(kill=True)


@pytest.fixture
def sink() -> Iterator[WebhookSink]:
    """A local HTTP receiver for the emulator's webhook deliveries."""
    with WebhookSink() as receiver:
        yield receiver
