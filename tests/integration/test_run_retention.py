"""A run's record, what the service issued of it and its live log are kept RUN_RETENTION_S, not
for ever (issue 37): one of each is written per head, series and runner kind, so without an
expiry Redis grew with every head. The log is written by the runner's own broker user, which
may set that expiry on its kind's logs and nothing else."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from bot.store import runner_channel as channel
from bot.store.ci_runs import (
    RUN_RETENTION_S,
    Issued,
    IssuedState,
    record_issued,
    run_key,
    transition,
    write_run,
)
from bot.store.runners import append_runlog, runlog, runlog_key
from harness.redis_server import PrivateRedis

PASSWORD = "runner-password"
RUN = "gaudi-0123456789ab"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[PrivateRedis]:
    redis_server = PrivateRedis(tmp_path / "redis", persist=False).start()
    try:
        yield redis_server
    finally:
        redis_server.stop(kill=True)


def kept_for(client: redis.Redis, key: str) -> int:
    ttl = int(client.ttl(key))
    assert ttl != -2, f"{key} does not exist"
    return ttl


def test_the_run_record_and_what_was_issued_expire(server: PrivateRedis) -> None:
    client = redis.Redis.from_url(server.url)
    write_run(client, RUN, "s1", "gaudi", {"state": "queued", "head_sha": "a" * 40})
    record_issued(client, Issued(RUN, "s1", "gaudi", "tree", "a" * 40, IssuedState.DISPATCHED))
    for key in (run_key(RUN), f"carry:ci:issued:{RUN}"):
        assert 0 < kept_for(client, key) <= RUN_RETENTION_S
    # A state change (the runner's, or the service's) keeps the expiry: the run still goes.
    assert transition(client, RUN, "running", ["queued"])
    assert 0 < kept_for(client, run_key(RUN)) <= RUN_RETENTION_S


def test_the_runner_user_keeps_its_log_only_as_long(server: PrivateRedis) -> None:
    service = redis.Redis.from_url(server.url)
    channel.set_runner_user(service, "gaudi", "hw.gaudi", PASSWORD)
    gaudi = redis.Redis.from_url(
        server.url.replace("redis://", f"redis://carry-runner-gaudi:{PASSWORD}@", 1)
    )
    append_runlog(gaudi, RUN, "stdout", "hello")
    append_runlog(gaudi, RUN, "stderr", "world")
    assert [(e["stream"], e["text"]) for e in runlog(service, RUN)] == [
        ("stdout", "hello"),
        ("stderr", "world"),
    ]
    assert 0 < kept_for(service, runlog_key(RUN)) <= RUN_RETENTION_S
