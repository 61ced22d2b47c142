"""Pushes of a series' watched ref, recorded as carry records a push webhook's (the series'
trust covers the range of pushes: bot.core.trust)."""

from __future__ import annotations

import subprocess
import sys

import redis

from bot.core.trust import ZERO_SHA, Push
from workers.ci import requests as ci


def push(
    client: redis.Redis,
    series_id: str,
    after: str,
    by: str,
    *,
    trusted: bool,
    before: str = ZERO_SHA,
    forced: bool = False,
) -> Push:
    """Records that `by` pushed `after` onto `before` (default: created the ref with it)."""
    pushed = Push(before, after, by, trusted, forced)
    ci.record_push(client, series_id, pushed)
    return pushed


def trusted_push(client: redis.Redis, series_id: str, after: str, by: str = "ada") -> Push:
    """A trusted author created the ref at `after`: its head runs without approval."""
    return push(client, series_id, after, by, trusted=True)


def approve_with_cli(env: dict[str, str], series_id: str, sha: str, by: str = "operator") -> str:
    """`carry approve --series ID SHA` in the environment of carry's processes, as an
    operator approves the first head after carry starts (no trusted head is under it).
    Returns what it printed; raises with its error when it fails."""
    done = subprocess.run(
        [sys.executable, "-m", "bot.cli", "approve", "--series", series_id, sha, "--by", by],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        raise AssertionError(f"carry approve failed: {done.stderr.strip()}")
    return done.stdout
