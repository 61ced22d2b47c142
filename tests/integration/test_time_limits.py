"""Every task of the service has a time limit of its kind, and a task stopped at it is shown
as timed out where a maintainer looks (the process-level case, a poll, is in test_pipeline)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from celery.exceptions import SoftTimeLimitExceeded

from bot.ci.runs import TASK_NAME as RUNNER_JOB
from bot.config import Settings
from bot.queue.celery_app import app
from bot.store import series as store
from harness.carry_env import SERIES, CarryEnv, one_fix_in_this_process
from workers import runtime as runtime_module
from workers import tasks


@pytest.fixture
def env(tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[CarryEnv]:
    with one_fix_in_this_process(tmp_path, redis_url, monkeypatch) as carry:
        yield carry


def test_every_service_task_has_the_limit_of_its_kind() -> None:
    settings = Settings(
        rebase_time_limit_s=11, publish_time_limit_s=22, poll_time_limit_s=33, quick_time_limit_s=44
    )
    limits = tasks.time_limits(settings)
    service = {name for name in app.tasks if name.startswith("carry.")} - {RUNNER_JOB}
    assert set(limits) == service
    assert (
        limits["carry.rebase"]
        == limits["carry.find_successor"]
        == (11, "CARRY_REBASE_TIME_LIMIT_S")
    )
    assert limits["carry.publish"] == (22, "CARRY_PUBLISH_TIME_LIMIT_S")
    assert limits["carry.poll"] == (33, "CARRY_POLL_TIME_LIMIT_S")
    for quick in ("carry.ingest", "carry.reply", "carry.check_permission", "carry.ci.report"):
        assert limits[quick] == (44, "CARRY_QUICK_TIME_LIMIT_S")
    before = {name: (t.soft_time_limit, t.time_limit) for name, t in app.tasks.items()}
    try:
        tasks.apply_time_limits(settings)
        publish = app.tasks["carry.publish"]
        assert (publish.soft_time_limit, publish.time_limit) == (22, 82)
    finally:
        for name, (soft, hard) in before.items():
            app.tasks[name].soft_time_limit, app.tasks[name].time_limit = soft, hard


def test_a_series_task_stopped_at_its_limit_is_the_series_error(env: CarryEnv) -> None:
    rt = runtime_module.runtime()
    tasks.task_failure.send(
        sender=tasks.publish_task,
        exception=SoftTimeLimitExceeded(),
        kwargs={"series_id": SERIES, "head_sha": "a" * 40},
    )
    state = store.load_series(rt.redis, SERIES)
    assert state is not None and state.phase == "error"
    assert state.error == (
        "carry.publish timed out after 900 s (CARRY_PUBLISH_TIME_LIMIT_S); it is not retried"
    )
    assert any(r.startswith("error: carry.publish timed out") for r in state.needs_attention)
    (entry,) = [h for h in store.history(rt.redis, SERIES) if h["kind"] == "task-timed-out"]
    assert entry["data"]["task"] == "carry.publish" and entry["data"]["final"] is True


def test_other_failures_are_not_time_outs(env: CarryEnv) -> None:
    rt = runtime_module.runtime()
    tasks.task_failure.send(
        sender=tasks.publish_task, exception=RuntimeError("boom"), kwargs={"series_id": SERIES}
    )
    assert [h for h in store.history(rt.redis, None) if h["kind"] == "task-timed-out"] == []
