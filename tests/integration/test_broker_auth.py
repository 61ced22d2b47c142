"""No unauthenticated broker (issue 33, critical): a worker, `carry beat` and a runner refuse to
start on a Redis whose `default` user needs no password, with one line that says why and how to
fix it; on a password-protected Redis they start. CARRY_ALLOW_OPEN_REDIS=1 names the risk.

Real processes (`python -m bot.cli ...`) on real private redis-servers, with and without a
password. Failed on main before: the worker and the runner started on the open Redis."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.local_redis import LocalRedis
from bot.queue.broker_auth import anyone_gets_in, open_broker_problem
from tests.support.paths import REPO_ROOT

EXAMPLE = REPO_ROOT / "config" / "carry.example.yaml"


@pytest.fixture
def open_redis(tmp_path: Path) -> Iterator[str]:
    server = LocalRedis(tmp_path / "open").start()
    yield server.url
    server.stop()


@pytest.fixture
def locked_redis(tmp_path: Path) -> Iterator[str]:
    server = LocalRedis(tmp_path / "locked", password="pw-for-the-test").start()
    yield server.url
    server.stop()


def carry(url: str, *argv: str, allow: bool = False, timeout: float = 30) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if k != "CARRY_ALLOW_OPEN_REDIS"}
    env |= {"REDIS_URL": url, "PYTHONPATH": str(REPO_ROOT), "CARRY_CONFIG": str(EXAMPLE)}
    if allow:
        env["CARRY_ALLOW_OPEN_REDIS"] = "1"
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "bot.cli", *argv],
            env=env,
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as err:  # it started and kept running
        return -1, (err.stderr or b"").decode() if isinstance(err.stderr, bytes) else ""
    return proc.returncode, proc.stderr


@pytest.mark.parametrize(
    "argv",
    [("worker",), ("beat",), ("runner", "--kind", "gaudi", "--name", "g@test"), ("run",)],
)
def test_a_worker_beat_or_runner_refuses_a_redis_anyone_can_use(
    open_redis: str, argv: tuple[str, ...]
) -> None:
    status, err = carry(open_redis, *argv)
    assert status == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    # one refusal: `carry run` says it once, before it starts a process (not once per process)
    (reason,) = [line for line in lines if "lets a client with no password in" in line]
    assert "Traceback" not in err and "dashboard at" not in err, err
    assert len(lines) <= 2, err  # the runner heads it as config; run first names the Redis
    assert "CARRY_ALLOW_OPEN_REDIS=1" in reason


def test_the_check_tells_an_open_default_user_from_a_protected_one(
    open_redis: str, locked_redis: str
) -> None:
    assert anyone_gets_in(open_redis)
    assert not anyone_gets_in(locked_redis)
    # the password in the URL is not what is checked: a client without one is refused
    assert open_broker_problem(locked_redis, allowed=False) is None
    problem = open_broker_problem(open_redis, allowed=False)
    assert problem is not None and "pw-for-the-test" not in problem
    assert open_broker_problem(open_redis, allowed=True) is None


def test_on_a_protected_redis_a_runner_starts(locked_redis: str) -> None:
    status, err = carry(locked_redis, "runner", "--kind", "gaudi", "--name", "g@t", timeout=8)
    assert status == -1, err  # still running when the timeout came: it started
