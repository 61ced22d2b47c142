"""Issue 14: a runner's broker user is least-privilege, and what it reports is data the
service checks. Real redis-server with the ACL rules carry ships (bot/store/runner_channel),
the real report applier (workers/ci/reports.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from bot.ci.spec import JobPayload, StepSpec, TreeSpec
from bot.core.state import SeriesState
from bot.queue.celery_app import make_app
from bot.store import runner_channel as channel
from bot.store.ci_runs import Issued, IssuedState, record_issued, write_run
from bot.store.runners import forget_runner, heartbeat, runners
from bot.store.series import history, save_series
from harness.job_keys import job_issuer
from harness.redis_server import PrivateRedis
from tests.support.markers import needs_redis_server
from tests.support.paths import REPO_ROOT
from workers.ci.reports import ReportApplier

pytestmark = needs_redis_server

PASSWORD = "runner-password"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[PrivateRedis]:
    redis_server = PrivateRedis(tmp_path / "redis", persist=False).start()
    try:
        yield redis_server
    finally:
        redis_server.stop(kill=True)


@pytest.fixture
def service(server: PrivateRedis) -> redis.Redis:
    client = redis.Redis.from_url(server.url)
    channel.set_runner_user(client, "gaudi", "hw.gaudi", PASSWORD)
    channel.set_runner_user(client, "gb10", "hw.gb10", PASSWORD)
    return client


@pytest.fixture
def gaudi(server: PrivateRedis, service: redis.Redis) -> redis.Redis:
    url = server.url.replace("redis://", f"redis://carry-runner-gaudi:{PASSWORD}@", 1)
    return redis.Redis.from_url(url)


def denied(call: object) -> str:
    try:
        call()  # type: ignore[operator]
    except redis.exceptions.NoPermissionError as err:
        return str(err)
    raise AssertionError("Redis allowed it")


def test_the_runner_user_reaches_only_its_own_keys_and_queue(
    service: redis.Redis, gaudi: redis.Redis
) -> None:
    save_series(service, SeriesState(id="s1"))
    # What it needs: its queue, its reports, the runs' keys, run logs, heartbeats, live page.
    gaudi.lpush("hw.gaudi", "job")
    assert gaudi.brpop(["hw.gaudi"], timeout=1) == (b"hw.gaudi", b"job")
    channel.send_report(gaudi, "gaudi", "rows", "r1", "gaudi1")
    own, other = "gaudi-0123456789ab", "gb10-0123456789ab"
    gaudi.hset(f"carry:ci:run:{own}", "state", "running")
    gaudi.xadd(f"carry:runlog:{own}", {"stream": "stdout", "text": "hi"})
    gaudi.set("carry:ci:result:gaudi:tree", "{}")
    assert gaudi.get(f"carry:ci:cancel:{own}") is None
    gaudi.publish("carry:updates", "{}")
    heartbeat(gaudi, "gaudi", "gaudi1@host", {"state": "idle"})
    # Another kind's runs, a run id carry does not issue, a cancel marker: not its to write.
    assert denied(lambda: gaudi.hset(f"carry:ci:run:{other}", "state", "success"))
    assert denied(lambda: gaudi.hset("carry:ci:run:gaudi-0123456789abc", "state", "success"))
    assert denied(lambda: gaudi.xadd(f"carry:runlog:{other}", {"text": "x"}))
    assert denied(lambda: gaudi.set("carry:ci:result:gb10:tree", "{}"))
    assert denied(lambda: gaudi.delete(f"carry:ci:cancel:{own}"))
    assert denied(lambda: gaudi.set("carry:ci:current:s1:gaudi", own))
    assert denied(lambda: heartbeat(gaudi, "gb10", "gb10-1@host", {"state": "idle"}))
    assert denied(lambda: forget_runner(gaudi, "gb10", "gb10-1@host"))
    assert [(r["kind"], r["name"]) for r in runners(service)] == [("gaudi", "gaudi1@host")]
    # What it may not: series state, history, approvals, service queues, another kind, the
    # workers' remote control, the server.
    assert "no permissions to access" in denied(lambda: gaudi.get("carry:series:s1"))
    assert denied(lambda: gaudi.set("carry:series:s1", "{}"))
    assert denied(lambda: gaudi.xadd("carry:history:s1", {"kind": "approved"}))
    assert denied(lambda: gaudi.lpush("carry", "forged task"))
    assert denied(lambda: gaudi.lpush("carry.git", "forged task"))
    assert denied(lambda: gaudi.lpush("hw.gb10", "forged job"))
    assert denied(lambda: channel.send_report(gaudi, "gb10", "rows", "r1", "gaudi1"))
    assert denied(lambda: gaudi.hset("unacked", "tag", "[]"))  # the service's deliveries
    assert denied(lambda: gaudi.publish("/0.celery.pidbox", "shutdown"))
    assert denied(lambda: gaudi.keys("*"))
    assert denied(lambda: list(gaudi.scan_iter("carry:series:*")))
    assert denied(lambda: gaudi.config_set("appendonly", "no"))
    assert denied(lambda: gaudi.flushall())
    assert json.loads(service.get("carry:series:s1") or b"{}")["id"] == "s1"


def _run(service: redis.Redis, run_id: str, kind: str, series: str = "s1") -> None:
    tree = TreeSpec("u", "a" * 40, "d", "refs/heads/carry/s1", "b" * 40, "p", "c" * 64, "e" * 40)
    job = JobPayload(
        run_id=run_id,
        series_id=series,
        kind=kind,
        queue=f"hw.{kind}",
        tree_key=f"{kind}-tree",
        head_sha="a" * 40,
        tree=tree,
        setup=(),
        checks=(StepSpec("fixed", ("true",)),),
    )
    values = {"payload": json.dumps(job.to_dict()), "state": "running", "tree_key": job.tree_key}
    values |= {"series": series, "kind": kind}
    write_run(service, run_id, series, kind, {**values, "head_sha": "a" * 40})
    dispatched = Issued(run_id, series, kind, job.tree_key, "a" * 40, IssuedState.DISPATCHED)
    record_issued(service, dispatched)  # as the service issues a run it hands to a runner


def test_reports_that_do_not_fit_their_run_change_nothing(
    service: redis.Redis, gaudi: redis.Redis
) -> None:
    save_series(service, SeriesState(id="s1"))
    save_series(service, SeriesState(id="s2"))
    _run(service, "gaudi-1", "gaudi")
    _run(service, "gb10-1", "gb10")
    forged = [
        (
            "history",
            "gaudi-1",
            {"series": "s1", "event": "approved", "fields": {"run_id": "gaudi-1"}},
        ),
        (
            "history",
            "gb10-1",
            {"series": "s1", "event": "ci-success", "fields": {"run_id": "gb10-1"}},
        ),
        (
            "history",
            "gaudi-1",
            {"series": "s2", "event": "ci-started", "fields": {"run_id": "gaudi-1"}},
        ),
        (
            "history",
            "gaudi-1",
            {
                "series": "s1",
                "event": "ci-check",
                "fields": {"run_id": "gaudi-1", "key": "gaudi/other"},
            },
        ),
        ("history", "nope", {"series": "s1", "event": "ci-success", "fields": {"run_id": "nope"}}),
        ("history", "nope", {"series": "zz", "event": "ci-refused", "fields": {"run_id": "nope"}}),
        ("rows", "gb10-1", {}),
        ("rows", "gaudi-1", {"only": "gaudi/other"}),
        ("reply", "gaudi-1", {"body": "pwned"}),
    ]
    for type_, run_id, data in forged:
        channel.send_report(gaudi, "gaudi", type_, run_id, "gaudi1", **data)
    # One a runner may send: it refused a job nobody issued, naming a real series.
    fine = {"series": "s1", "event": "ci-refused", "fields": {"run_id": "nope", "reason": "x"}}
    channel.send_report(gaudi, "gaudi", "history", "nope", "gaudi1", **fine)
    applier = ReportApplier(service, make_app(), ["gaudi"], job_issuer(), block_ms=100)
    for kind in applier.kinds:
        channel.ensure_group(service, kind)
    assert applier.apply_new() == len(forged) + 1

    refused = [
        e["data"]["reason"] for e in reversed(history(service, None, kind="ci-report-refused"))
    ]
    assert refused == [
        "a runner may not write 'approved' entries",
        "run gb10-1 is a gb10 run, not gaudi",
        "run gaudi-1 belongs to series 's1', not 's2'",
        "run gaudi-1 has no check 'gaudi/other'",
        "carry never issued run nope (only a refusal may name one)",
        "no series 'zz'",
        "run gb10-1 is a gb10 run, not gaudi",
        "run gaudi-1 has no check 'gaudi/other'",
        "unknown report type 'reply'",
    ]
    assert [e["kind"] for e in history(service, "s1")] == ["ci-refused"]
    assert history(service, "s2") == []
    assert service.llen("carry") == 0  # no CI row was reported for anything forged
    assert channel.pending_reports(service, "gaudi") == 0


def _carry(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bot.cli", *argv],
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_carry_runner_user_creates_the_user_the_runner_logs_in_with(
    server: PrivateRedis, tmp_path: Path
) -> None:
    config = tmp_path / "carry.json"
    config.write_text(
        json.dumps(
            {
                "downstream": {"repo": "carry/downstream"},
                "upstreams": {"engine": {"url": "https://example.invalid/u.git", "repo": "u/u"}},
                "series": [],
                "runners": {"gaudi": {"queue": "hw.gaudi-lab", "workdir": str(tmp_path)}},
            }
        )
    )
    env = {"REDIS_URL": server.url, "CARRY_CONFIG": str(config)}
    missing = _carry(env, "runner-user", "--kind", "gaudi")
    assert missing.returncode == 2
    assert "CARRY_RUNNER_PASSWORD is not set" in missing.stderr
    unknown = _carry({**env, "CARRY_RUNNER_PASSWORD": PASSWORD}, "runner-user", "--kind", "tpu")
    assert unknown.returncode == 2 and "'tpu' is not in runners (known: gaudi)" in unknown.stderr
    printed = _carry(env, "runner-user", "--kind", "gaudi", "--print")
    assert printed.stdout.startswith("ACL SETUSER carry-runner-gaudi reset on ><password> ")
    assert "~hw.gaudi-lab " in printed.stdout

    made = _carry({**env, "CARRY_RUNNER_PASSWORD": PASSWORD}, "runner-user", "--kind", "gaudi")
    assert made.returncode == 0, made.stderr
    assert PASSWORD not in made.stdout + made.stderr
    runner = redis.Redis.from_url(server.url.replace("://", f"://carry-runner-gaudi:{PASSWORD}@"))
    runner.lpush("hw.gaudi-lab", "job")
    assert denied(lambda: runner.lpush("hw.gaudi", "job"))
