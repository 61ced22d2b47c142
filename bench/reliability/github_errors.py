"""4. GitHub storms: 5xx and rate limits from the emulator, and GitHub's production faults
(bench/github_faults.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis
import requests

from bench.reliability.common import NAME, OWNER, TOKEN, RedisServer, Row, Scale, emulated_github
from bot.github.forge import ForgeError
from bot.store.metrics import GITHUB_KEY, record_rate_limit

RETRY_BUDGET = 5  # bot.github.forge._retry(): GithubRetry(total=5)


def _timed(call: Callable[[], Any]) -> tuple[float, str | None]:
    """(seconds, None or the error). An error that is not a ForgeError is marked: the tasks
    only catch ForgeError, so anything else fails the job without a retry."""
    started = time.monotonic()
    try:
        call()
    except ForgeError as err:
        return time.monotonic() - started, f"ForgeError: {str(err)[:70]}"
    except requests.RequestException as err:
        kind = f"{type(err).__module__}.{type(err).__name__}"
        return time.monotonic() - started, f"escaped as {kind}, not ForgeError"
    return time.monotonic() - started, None


def scenario_github_5xx(root: Path, scale: Scale) -> Row:
    with emulated_github(root) as (gh, forge):
        forge.find_open_pull("topic")  # warm: the repository is looked up once
        gh.clear_requests()
        gh.inject_fault("server_error", times=scale.storm_size, method="GET", status=502)
        seconds, error = _timed(lambda: forge.find_open_pull("topic"))
        small = len(gh.api_requests("GET"))
        gh.clear_requests()
        gh.inject_fault("server_error", times=RETRY_BUDGET + 1, method="GET", status=503)
        long_seconds, long_error = _timed(lambda: forge.find_open_pull("topic"))
        big = len(gh.api_requests("GET"))
        _, after_error = _timed(lambda: forge.find_open_pull("topic"))
        gh.clear_requests()
        gh.inject_fault("server_error", times=1, method="POST", path="/repos/*/pulls")
        _, post_error = _timed(lambda: forge.create_pull("main", "topic", "t", "b", False))
        _timed(lambda: forge.create_pull("main", "topic", "t", "b", False))
        pulls = len(gh.pulls(OWNER, NAME))
    long_ok = long_error is not None and long_error.startswith("ForgeError")
    post_ok = post_error is not None and post_error.startswith("ForgeError")
    return Row(
        "GitHub 5xx storm",
        f"{scale.storm_size} x 502 on a GET; a storm one longer than the retry budget "
        f"({RETRY_BUDGET + 1} x 503); a 502 on POST /pulls, then the call again",
        "0 calls"
        if long_ok
        else f"the long storm's failure {long_error}: the publish and reply tasks catch only "
        "ForgeError, so such a job fails without retry and without a visible error (lost)",
        f"0: the failed POST was not retried blindly ({'ForgeError' if post_ok else post_error}); "
        f"calling again opened {pulls} PR",
        f"GET retried with backoff (factor 0.5 s): OK after {small - 1} retries in "
        f"{seconds:.1f} s; the long storm stopped after {big} attempts in {long_seconds:.1f} s; "
        f"next call {'OK' if after_error is None else after_error}",
        ok=error is None and long_ok and after_error is None and post_ok and pulls == 1,
    )


def scenario_github_429(root: Path, scale: Scale) -> Row:
    retry_after = 2
    with emulated_github(root) as (gh, forge):
        forge.find_open_pull("topic")
        gh.clear_requests()
        gh.inject_fault(
            "too_many_requests", times=scale.storm_size, method="GET", retry_after=retry_after
        )
        seconds, error = _timed(lambda: forge.find_open_pull("topic"))
        attempts = len(gh.api_requests("GET"))
        gh.clear_requests()
        gh.inject_fault("secondary_rate_limit", times=1, method="GET", retry_after=1)
        secondary_seconds, secondary_error = _timed(lambda: forge.find_open_pull("topic"))
        gh.set_rate_limit(token=TOKEN, remaining=4321)
        forge.find_open_pull("topic")
        server = RedisServer(root / "redis", aof=False).start()
        try:
            client = redis.Redis(port=server.port)
            record_rate_limit(client, forge.rate_remaining)
            recorded = client.hget(GITHUB_KEY, "remaining")
        finally:
            server.kill()
    waited = scale.storm_size * retry_after
    honoured = seconds >= waited * 0.95
    return Row(
        "GitHub 429 / rate-limit storm",
        f"{scale.storm_size} x 429 (Retry-After: {retry_after}) on a GET; a secondary-rate-limit "
        "403 (Retry-After: 1)",
        "0 calls" if error is None and secondary_error is None else f"failed: {error}",
        "0",
        f"Retry-After honoured: {attempts} attempts over {seconds:.1f} s (>= {waited} s asked); "
        f"403 secondary limit waited {secondary_seconds:.1f} s; carry_github_rate_limit_remaining "
        f"recorded {int(recorded or -1)}",
        ok=error is None
        and secondary_error is None
        and honoured
        and recorded == str(forge.rate_remaining).encode(),
    )


def scenario_github_faults(root: Path, _scale: Scale) -> list[Row]:
    """bench/github_faults.py: one row per fault GitHub has in production, on one deployment."""
    from bench import github_faults  # the harness imports this module's helpers

    return [Row(*outcome.cells()) for outcome in github_faults.run(root)]
