"""A REDIS_URL of the form unix:///PATH (which carry's settings accept) reaches a real
redis-server on its socket through carry's broker transport; kombu alone refused it ("No such
transport: unix")."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from bot.queue.broker_transport import Channel, broker_url
from bot.queue.celery_app import make_app
from tests.support.markers import needs_redis_server

pytestmark = needs_redis_server


@pytest.fixture
def socket_path(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "redis.sock"
    argv = ["redis-server", "--port", "0", "--unixsocket", str(path), "--save", ""]
    server = subprocess.Popen([*argv, "--dir", str(tmp_path)], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while not path.exists():
            assert time.monotonic() < deadline, "redis-server made no socket"
            time.sleep(0.05)
        yield path
    finally:
        server.kill()
        server.wait()


def test_a_task_goes_through_the_socket_and_back(socket_path: Path) -> None:
    app = make_app(f"unix://{socket_path}")
    app.send_task("carry.ci.run_job", args=[{"run_id": "over-the-socket"}], queue="hw.sock")
    assert redis.Redis(unix_socket_path=str(socket_path)).llen("hw.sock") == 1
    with app.connection_for_read() as connection:
        assert isinstance(connection.default_channel, Channel)
        message = connection.SimpleQueue("hw.sock").get(timeout=5)
    assert message.headers["task"] == "carry.ci.run_job"
    message.ack()


def test_only_a_unix_url_is_rewritten() -> None:
    assert broker_url("redis://:pw@h:6379/3") == "redis://:pw@h:6379/3"
    assert broker_url("unix:///run/redis.sock") == "carry-redis+socket:///run/redis.sock"
