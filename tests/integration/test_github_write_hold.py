"""Issue 34, item 2: a rate-limit refusal holds all of the installation's writes.

GitHub's secondary limit is the installation's, not one request's: its docs ("Best practices
for using the REST API") ask a client refused with `Retry-After` to send nothing before then,
and warn that going on may get the integration banned. carry's runtime records the hold in
Redis (bot.store.write_budget.hold_writes), so that every worker's next write waits it out.

carry's real GitHub port (PyGithub) against the GitHub emulator as a GitHub App, with real git
and Redis; the second worker is a second runtime with its own Redis connection and caches,
sharing only Redis, as a second worker process does."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from bot.github.forge import RateLimited
from bot.store.write_budget import hold_writes, take_write
from tests.support.deployment import DOWN_NAME, DOWN_OWNER, Deploy, Deployment, deployments
from workers.runtime import Runtime

COMMENTS = f"/repos/{DOWN_OWNER}/{DOWN_NAME}/issues/*/comments"


@pytest.fixture
def deploy(tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Deploy]:
    waits: list[float] = []  # the first worker's waits, recorded, not slept
    with deployments(tmp_path, redis_url, monkeypatch, waits=waits) as start:
        yield start


def other_worker(d: Deployment, redis_url: str) -> Runtime:
    """A second worker of the same installation: its own Redis connection and Forge caches
    (tokens, waits, which it sleeps), the same settings."""
    return Runtime(d.rt.config, d.rt.settings, redis.Redis.from_url(redis_url), d.rt.downstream_dir)


def comments_posted(d: Deployment) -> int:
    return len([r for r in d.gh.api_requests("POST") if r.path.endswith("/comments")])


def test_a_long_retry_after_holds_every_workers_writes_until_it_ends(
    deploy: Deploy, redis_url: str
) -> None:
    d = deploy(auth="app")
    number = d.open_pr()
    d.gh.secondary_limit(next_n_writes=1, retry_after_s=600, path=COMMENTS)
    with pytest.raises(RateLimited) as refused:
        d.rt.forge().comment(number, "first")
    assert refused.value.retry_after_s == 600
    posted = comments_posted(d)
    # GitHub would take this one (the refusal is spent): carry does not send it before the
    # installation's 10 minutes are over; the task that sends it is told when to come back
    started = time.monotonic()
    with pytest.raises(RateLimited) as held:  # fails on main: the comment is posted
        other_worker(d, redis_url).forge().comment(number, "second")
    assert time.monotonic() - started < 5  # told, not blocked for ten minutes
    assert 590 < held.value.retry_after_s <= 600
    assert "budget of content-creating requests" in str(held.value)
    assert comments_posted(d) == posted
    assert [c["body"] for c in d.gh.comments(DOWN_OWNER, DOWN_NAME, number)] == []


def test_a_short_retry_after_is_waited_out_by_the_other_workers_write(
    deploy: Deploy, redis_url: str
) -> None:
    """The refused write waits GitHub's 3 s and lands; the other worker's write, sent meanwhile,
    waits for the same hold instead of reaching GitHub inside it."""
    d = deploy(auth="app")
    number = d.open_pr()
    d.gh.secondary_limit(next_n_writes=1, retry_after_s=3, path=COMMENTS)
    refused_at = time.time()
    d.rt.forge().comment(number, "first")  # its 3 s wait is recorded, not slept
    d.gh.clear_requests()
    other = other_worker(d, redis_url).forge()
    other.comment(number, "second")
    (sent,) = [r for r in d.gh.api_requests("POST") if r.path.endswith("/comments")]
    # fails on main: the second comment is sent at once, inside GitHub's 3 s
    assert time.time() - refused_at >= 3 - 0.1
    assert sent.method == "POST"
    assert [c["body"] for c in d.gh.comments(DOWN_OWNER, DOWN_NAME, number)] == [
        "first",
        "second",
    ]


def test_a_limit_that_pygithub_sat_out_on_a_read_holds_the_writes_too(
    deploy: Deploy, redis_url: str
) -> None:
    """PyGithub's own retry waits out a 429 on a GET (Retry-After: 30) and the read succeeds;
    the installation's writes are held all the same."""
    d = deploy(auth="app")
    number = d.open_pr()
    d.gh.inject_fault("too_many_requests", method="GET", retry_after=30)
    assert d.rt.forge().find_open_pull(d.pull()["head"]["ref"]) is not None
    with pytest.raises(RateLimited) as held:  # fails without the retry's hold: it is posted
        other_worker(d, redis_url).forge().comment(number, "second")
    assert 25 < held.value.retry_after_s <= 30
    assert d.gh.comments(DOWN_OWNER, DOWN_NAME, number) == []


def test_a_hold_keeps_the_longer_wait_and_counts_nothing_meanwhile(client: redis.Redis) -> None:
    who = "test-hold|installation:1"
    assert hold_writes(client, who, 30, now=1000.0) == 1030.0
    assert hold_writes(client, who, 5, now=1001.0) == 1030.0  # a shorter one leaves it on
    assert take_write(client, who, now=1010.0) == pytest.approx(20.0)
    assert take_write(client, who, now=1029.5) == pytest.approx(0.5)
    assert take_write(client, who, now=1030.0) == 0.0  # over: this write is counted
    assert take_write(client, "test-hold|installation:2", now=1010.0) == 0.0  # not another's
