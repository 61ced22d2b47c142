"""Issue 33, "runners propose, the service decides": what a runner's broker user writes (it
may write the run records and verdicts of its kind) never decides what carry reports. A run
the service did not issue, or one it has not released from `/carry approve`, takes no report;
a verdict it did not issue is not reused; a head that needs approval reuses none. Real
redis-server with the ACL users carry ships, the real request path and report applier."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import redis
from celery import Celery

from bot.ci.spec import JobPayload, StepSpec, TreeSpec
from bot.core.state import SeriesState
from bot.queue.celery_app import make_app
from bot.store import runner_channel as channel
from bot.store.series import history, load_series, save_series
from harness.job_keys import job_issuer
from harness.pushes import push, trusted_push
from harness.redis_server import PrivateRedis
from tests.support.markers import needs_redis_server
from workers.ci import requests as ci
from workers.ci.reports import ReportApplier

pytestmark = needs_redis_server

PASSWORD = "runner-password"
HEAD = "a" * 40
FORGED_RUN = "gaudi-0123456789ab"  # the form of a run id carry issues for gaudi
TARGET = ci.CiTarget("gaudi", "hw.gaudi", (), (StepSpec("fixed", ("true",)),))
TREE = TreeSpec(
    "/srv/up.git", HEAD, "/srv/down.git", "refs/heads/carry/s1", "b" * 40, "p", "c" * 64, "e" * 40
)


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
    channel.ensure_group(client, "gaudi")
    for series_id in ("s1", "s2"):
        save_series(client, SeriesState(id=series_id))
    return client


@pytest.fixture
def app(server: PrivateRedis) -> Celery:
    return make_app(server.url)


@pytest.fixture
def gaudi(server: PrivateRedis, service: redis.Redis) -> redis.Redis:
    """The gaudi runner's broker user, as a check that stole its password holds it."""
    return redis.Redis.from_url(
        server.url.replace("redis://", f"redis://carry-runner-gaudi:{PASSWORD}@", 1)
    )


def apply(service: redis.Redis, app: Celery) -> list[str]:
    """Applies the runners' reports; returns the reasons of those refused, oldest first."""
    ReportApplier(service, app, ["gaudi"], job_issuer(), block_ms=100).apply_new()
    refused = reversed(history(service, None, kind="ci-report-refused"))
    return [entry["data"]["reason"] for entry in refused]


def report_green(gaudi: redis.Redis, run_id: str) -> None:
    """What a runner reports when a run passed: its history entry and its rows."""
    fields = {"run_id": run_id, "runner_kind": "gaudi", "reason": "passed"}
    channel.send_report(
        gaudi, "gaudi", "history", run_id, "gaudi1", series="s1", event="ci-success", fields=fields
    )
    channel.send_report(gaudi, "gaudi", "rows", run_id, "gaudi1", only=None)


def service_tasks(service: redis.Redis) -> int:
    """Tasks sent to the service's queue (a CI row reported to GitHub is one)."""
    return int(service.llen("carry"))


def test_a_run_carry_never_issued_takes_no_report(
    service: redis.Redis, app: Celery, gaudi: redis.Redis
) -> None:
    """The runner's broker user created a run record (its ACL lets it write run records of
    its kind) naming another repository, and reported it green: both reports are refused
    and recorded, and no CI row appears."""
    other = replace(TREE, upstream_url="https://example.invalid/other.git")
    job = JobPayload(
        FORGED_RUN, "s1", "gaudi", "hw.gaudi", "t" * 64, HEAD, other, (), TARGET.checks
    )
    payload = job.to_dict()
    record = {"payload": json.dumps(payload), "series": "s1", "kind": "gaudi", "state": "success"}
    gaudi.hset(
        f"carry:ci:run:{FORGED_RUN}", mapping={**record, "tree_key": "t" * 64, "head_sha": HEAD}
    )
    gaudi.hset(
        f"carry:ci:run:{FORGED_RUN}", "check:gaudi/fixed", json.dumps({"verdict": "success"})
    )
    with pytest.raises(redis.exceptions.NoPermissionError):  # what carry issued is not its to write
        gaudi.hset(f"carry:ci:issued:{FORGED_RUN}", "state", "dispatched")
    report_green(gaudi, FORGED_RUN)

    assert apply(service, app) == [
        f"carry never issued run {FORGED_RUN} (only a refusal may name one)",
        f"carry never issued run {FORGED_RUN}",
    ]
    state = load_series(service, "s1")
    assert state is not None and state.ci == {}
    assert [e["kind"] for e in history(service, "s1")] == []
    assert service_tasks(service) == 0
    assert channel.pending_reports(service, "gaudi") == 0


def test_a_run_waiting_for_approval_cannot_be_flipped_green(
    service: redis.Redis, app: Celery, gaudi: redis.Redis
) -> None:
    """A stranger's head waits for /carry approve; the runner's broker user wrote a passing
    verdict into its run record and reported it: refused and recorded, the row still waits."""
    push(service, "s1", HEAD, "stranger", trusted=False)
    (row,) = ci.request_ci(service, app, "s1", [TARGET], TREE, issuer=job_issuer(), debounce_s=0)
    assert row.state == "waiting-approval"
    sent = service_tasks(service)
    gaudi.hset(f"carry:ci:run:{row.run_id}", mapping={"state": "success", "dispatched": "1"})
    gaudi.hset(
        f"carry:ci:run:{row.run_id}", "check:gaudi/fixed", json.dumps({"verdict": "success"})
    )
    report_green(gaudi, row.run_id)
    # a runner may still say it refused a copy of the waiting run: it ran nothing
    refusal = {"run_id": row.run_id, "runner": "gaudi1", "reason": "waits for /carry approve"}
    channel.send_report(
        gaudi,
        "gaudi",
        "history",
        row.run_id,
        "gaudi1",
        series="s1",
        event="ci-refused",
        fields=refusal,
    )

    waits = f"run {row.run_id} waits for /carry approve: carry has not queued it"
    assert apply(service, app) == [waits, waits]
    state = load_series(service, "s1")
    assert state is not None and state.ci["gaudi/fixed"].state == "waiting-approval"
    assert [e["kind"] for e in history(service, "s1") if e["kind"].startswith("ci-s")] == []
    assert next(e["kind"] for e in history(service, "s1")) == "ci-refused"
    assert service_tasks(service) == sent  # no row went to GitHub
    assert service.llen("hw.gaudi") == 0


def test_a_planted_verdict_is_not_reused(
    service: redis.Redis, app: Celery, gaudi: redis.Redis
) -> None:
    """The runner's broker user planted a passing verdict under a tree's key (it may write
    verdicts of its kind). A stranger later pushed that head: it waits for approval instead
    of turning green; and a trusted head of the same tree runs it, since carry never issued
    the run the verdict names."""
    tree_key = ci.job_tree_key(TARGET, TREE)
    planted = {"run_id": FORGED_RUN, "state": "success", "head_sha": HEAD, "checks": {}}
    gaudi.set(f"carry:ci:result:gaudi:{tree_key}", json.dumps(planted))

    push(service, "s1", HEAD, "stranger", trusted=False)
    (waiting,) = ci.request_ci(
        service, app, "s1", [TARGET], TREE, issuer=job_issuer(), debounce_s=0
    )
    assert waiting.state == "waiting-approval"
    (decided,) = [e for e in history(service, "s1") if e["kind"].startswith("ci-")]
    assert decided["kind"] == "ci-wait-approval"
    assert decided["data"]["reason"] == (
        f"head {HEAD[:12]} was pushed by @stranger, who is not a trusted author: "
        f"it waits for `/carry approve {HEAD[:12]}`"
    )

    trusted_push(service, "s2", HEAD)
    (ran,) = ci.request_ci(service, app, "s2", [TARGET], TREE, issuer=job_issuer(), debounce_s=0)
    assert ran.state == "queued" and ran.run_id != FORGED_RUN
    assert service.llen("hw.gaudi") == 1  # handed to a runner, not answered by the plant
    assert [e["kind"] for e in history(service, "s2") if e["kind"] == "ci-reuse"] == []


def test_a_verdict_of_an_issued_run_is_reused_for_a_trusted_head(
    service: redis.Redis, app: Celery
) -> None:
    """What the planted verdict lacks: the run it names was issued and handed to a runner
    for this tree. Such a verdict is reused for a trusted head, and never for a stranger's."""
    trusted_push(service, "s1", HEAD)
    (first,) = ci.request_ci(service, app, "s1", [TARGET], TREE, issuer=job_issuer(), debounce_s=0)
    assert first.state == "queued"
    tree_key = ci.job_tree_key(TARGET, TREE)
    verdict = {"run_id": first.run_id, "state": "success", "head_sha": HEAD, "checks": {}}
    service.set(f"carry:ci:result:gaudi:{tree_key}", json.dumps(verdict))  # as the runner stores it

    trusted_push(service, "s2", HEAD)
    (reused,) = ci.request_ci(service, app, "s2", [TARGET], TREE, issuer=job_issuer(), debounce_s=0)
    assert reused.state == "reused" and reused.run_id == first.run_id
    save_series(service, SeriesState(id="s3"))
    push(service, "s3", HEAD, "stranger", trusted=False)
    (waits,) = ci.request_ci(service, app, "s3", [TARGET], TREE, issuer=job_issuer(), debounce_s=0)
    assert waits.state == "waiting-approval"


@pytest.mark.parametrize("state", ["green", "cancelled", "infra-error", None])
def test_a_verdict_whose_state_carry_does_not_reuse_lets_the_tree_run(
    service: redis.Redis, app: Celery, state: str | None
) -> None:
    """The run is carry's, but the state stored with it is not a verdict that says anything
    about the code (a runner's broker user wrote junk, or a cancel or infra error): the tree
    runs instead of being answered with it."""
    trusted_push(service, "s1", HEAD)
    (first,) = ci.request_ci(service, app, "s1", [TARGET], TREE, issuer=job_issuer(), debounce_s=0)
    tree_key = ci.job_tree_key(TARGET, TREE)
    verdict = {"run_id": first.run_id, "state": state, "head_sha": HEAD, "checks": {}}
    service.set(f"carry:ci:result:gaudi:{tree_key}", json.dumps(verdict))

    trusted_push(service, "s2", HEAD)
    (ran,) = ci.request_ci(service, app, "s2", [TARGET], TREE, issuer=job_issuer(), debounce_s=0)
    assert ran.state == "queued" and ran.run_id != first.run_id
    assert [e["kind"] for e in history(service, "s2") if e["kind"] == "ci-reuse"] == []


def test_a_run_record_a_runner_garbled_is_refused_and_the_applier_goes_on(
    service: redis.Redis, app: Celery, gaudi: redis.Redis
) -> None:
    """A record that no longer reads (its payload rewritten) is refused like any report that
    does not fit: it stopped the applier's thread before, and every later report waited."""
    trusted_push(service, "s1", HEAD)
    (row,) = ci.request_ci(service, app, "s1", [TARGET], TREE, issuer=job_issuer(), debounce_s=0)
    gaudi.hset(f"carry:ci:run:{row.run_id}", "payload", "{}")
    channel.send_report(gaudi, "gaudi", "rows", row.run_id, "gaudi1", only=None)
    channel.send_report(gaudi, "gaudi", "rows", FORGED_RUN, "gaudi1", only=None)
    assert apply(service, app) == [
        f"run {row.run_id}'s record cannot be read: job payload version 0 is not 1",
        f"carry never issued run {FORGED_RUN}",
    ]
    assert channel.pending_reports(service, "gaudi") == 0
