"""An upstream carry cannot reach is said everywhere a maintainer looks, and forgotten once it
answers again (real git, real Redis)."""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot import metrics
from bot.store import series as store
from harness.carry_env import SERIES, CarryEnv, one_fix_in_this_process
from workers import poller
from workers import runtime as runtime_module


@pytest.fixture
def env(tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch):
    with one_fix_in_this_process(tmp_path, redis_url, monkeypatch) as carry:
        yield carry


def test_an_unreachable_upstream_is_logged_counted_and_needs_attention(
    env: CarryEnv, caplog: pytest.LogCaptureFixture
) -> None:
    rt = runtime_module.runtime()
    hidden = env.upstream.path.with_name("upstream-away")
    shutil.move(env.upstream.path, hidden)
    with caplog.at_level(logging.WARNING, logger="carry.poller"):
        assert poller.head_events(rt) == []
    warned = [r.getMessage() for r in caplog.records if r.name == "carry.poller"]
    assert len(warned) == 1 and "poll of upstream engine failed" in warned[0]
    assert "does not exist" in warned[0]  # the cause, not only that it failed
    (entry,) = [h for h in store.history(rt.redis, SERIES) if h["kind"] == "poll-failed"]
    assert entry["data"]["upstream"] == "engine" and entry["data"]["error"]
    state = store.load_series(rt.redis, SERIES)
    assert state is not None and state.upstream_error
    assert any(r.startswith("upstream unreachable: ") for r in state.needs_attention)
    assert (
        'carry_events_total{kind="poll_failed"} 1.0' in metrics.render(rt.redis, rt.config).decode()
    )

    shutil.move(hidden, env.upstream.path)
    events = poller.head_events(rt)
    assert [e.after for e in events] == [env.upstream.head("main")]
    state = store.load_series(rt.redis, SERIES)
    assert state is not None and state.upstream_error is None
    assert not any(r.startswith("upstream unreachable") for r in state.needs_attention)


# the sweep of lost deliveries (carry.requeue_lost) runs at start-up too, as every entry does
FIRST = {"carry.poll", "carry.poll_prs", "carry.stuck", "carry.requeue_lost"}


def test_beat_polls_at_start_up_not_after_a_full_interval(env: CarryEnv) -> None:
    """The config polls every hour: the first poll of both kinds is queued at start-up, so an
    unreachable upstream is known within seconds, not after an interval (and so is the first
    look for series stuck waiting for a human: notify.stuck_hours is on by default)."""
    import json
    import time

    import redis

    client = redis.Redis.from_url(env.env["REDIS_URL"])
    env.spawn(["bot.cli", "beat"], "beat.log")
    try:
        deadline = time.monotonic() + 20
        queued: set[str] = set()
        while time.monotonic() < deadline and queued != FIRST:
            queued = {
                json.loads(m)["headers"]["task"]
                for lane in ("carry", "carry.git")  # head polls are git work (celery_app)
                for m in client.lrange(lane, 0, -1)
            }
            time.sleep(0.2)
    finally:
        env.stop()
    assert queued == FIRST, (env.root / "beat.log").read_text()


@pytest.fixture
def silent_server() -> Iterator[str]:
    """An HTTP 'upstream' that accepts connections and never answers (a hung proxy, a
    firewall that drops replies): git waits for it forever unless carry stops waiting."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError, OSError):
                held.append(listener.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/engine.git"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    listener.close()


def test_an_upstream_that_never_answers_is_a_poll_failure_after_the_git_timeout(
    env: CarryEnv, silent_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One hung upstream must not hold the poll (and every other series behind it) forever:
    git's network commands stop after CARRY_GIT_TIMEOUT_S, and the poll says why."""
    config = json.loads(env.config_path.read_text())
    config["upstreams"]["engine"]["url"] = silent_server
    env.config_path.write_text(json.dumps(config))
    monkeypatch.setenv("CARRY_GIT_TIMEOUT_S", "2")
    runtime_module.reset()
    rt = runtime_module.runtime()
    polled: list[object] = []
    thread = threading.Thread(target=lambda: polled.append(poller.head_events(rt)), daemon=True)
    started = time.monotonic()
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive(), "the poll still waits for an upstream that never answers"
    assert polled == [[]] and time.monotonic() - started < 20
    (entry,) = [h for h in store.history(rt.redis, SERIES) if h["kind"] == "poll-failed"]
    assert "got no answer in 2 s and was stopped (CARRY_GIT_TIMEOUT_S)" in entry["data"]["error"]
    state = store.load_series(rt.redis, SERIES)
    assert state is not None and state.upstream_error
