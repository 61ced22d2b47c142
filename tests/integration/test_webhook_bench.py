"""bench/webhook.py at a small rate (issue 34): the bare endpoint, the floor and carry, each its
own process, with carry and the floor also reaching Redis by its unix socket; every row sent
its deliveries, none failed and carry lost none (no timing is asserted)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.markers import needs_redis_server
from tests.support.paths import REPO_ROOT

pytestmark = [
    pytest.mark.slow,
    needs_redis_server,
]

ENDPOINTS = [
    "bare starlette + HMAC",
    "bare + 1 Redis script",
    "floor, unix socket",
    "carry",
    "carry, unix socket",
]


def test_the_webhook_bench_has_every_endpoint_and_carry_loses_nothing() -> None:
    done = subprocess.run(
        [sys.executable, "bench/webhook.py", "--rates", "20", "--seconds", "1", "--unix-socket"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("     20 ")]
    assert [row[8:32].strip() for row in rows] == ENDPOINTS, done.stdout
    for row in rows:
        name = row[8:32].strip()
        sent, errors, _p50, _p99, lost = row[32:].split()[:5]
        assert (sent, errors) == ("20", "0"), row
        assert lost == ("0" if name.startswith("carry") else "-"), row
