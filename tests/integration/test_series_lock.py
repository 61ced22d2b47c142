"""The series lock on a real Redis: held for as long as its holder works, never for ever."""

from __future__ import annotations

import subprocess
import sys
import time

import redis

from bot.store.series import PREFIX, series_lock


def test_a_long_holder_keeps_the_lock_past_its_ttl(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    with series_lock(client, "s-long", ttl_s=1) as held:
        assert held
        time.sleep(2.5)  # a rebase longer than the TTL
        with series_lock(client, "s-long", ttl_s=1) as second:
            assert not second, "a second rebase of the series started while the first ran"
    with series_lock(client, "s-long", ttl_s=1) as after:
        assert after  # released at the end


def test_a_killed_holder_frees_the_lock_after_its_ttl(redis_url: str) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time, redis\n"
            "from bot.store.series import series_lock\n"
            "c = redis.Redis.from_url(sys.argv[1])\n"
            "with series_lock(c, 's-killed', ttl_s=1) as held:\n"
            "    print(held is not None, flush=True); time.sleep(60)\n",
            redis_url,
        ],
        stdout=subprocess.PIPE,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == b"True"
    holder.kill()
    holder.wait()
    client = redis.Redis.from_url(redis_url)
    assert client.exists(f"{PREFIX}lock:s-killed")
    deadline = time.monotonic() + 5
    while client.exists(f"{PREFIX}lock:s-killed") and time.monotonic() < deadline:
        time.sleep(0.1)
    with series_lock(client, "s-killed", ttl_s=1) as held:
        assert held
