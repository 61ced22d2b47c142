"""The hostile-check rows for a runner's broker user (issue 33, "runners propose, the service
decides"): what a check that stole its runner's Redis password can write (run records and
verdicts of its kind, reports) must never decide what carry reports or runs.

One attempt per row, on a private redis-server with the ACL users carry ships, the real request
path (workers.ci.requests) and the real report applier (workers.ci.reports). These hold in every
sandbox mode: they are about the broker, not the step's sandbox. The forged job goes through
the runner's own task (runner.task.run_job) with its own config and the service's public key.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from celery import Celery

from bot.ci.runs import load_run
from bot.ci.spec import JobPayload, StepSpec, TreeSpec
from bot.core.state import CiStatus, SeriesState
from bot.queue.celery_app import make_app
from bot.store import runner_channel as channel
from bot.store.series import history, load_series, save_series
from harness.job_keys import install_job_keys, job_issuer
from harness.pushes import push, trusted_push
from harness.redis_server import PrivateRedis
from runner import runtime as runner_runtime
from runner.task import run_job
from workers.ci import requests as ci
from workers.ci.reports import ReportApplier

PASSWORD = "stolen-runner-password"
KIND = "gaudi"
TARGET = ci.CiTarget(KIND, f"hw.{KIND}", (), (StepSpec("fixed", ("true",)),))
FORGED_RUN = f"{KIND}-0123456789ab"  # the form of a run id carry issues for this kind
FORGED_JOB_RUN = f"{KIND}-00000000f07e"
SERIES = ("s1", "s2", "s3", "s4", "s5")


@dataclass(frozen=True)
class BrokerAttempt:
    attempt: str
    achieved: bool
    how: str


@dataclass
class Broker:
    service: redis.Redis  # carry's own client
    runner: redis.Redis  # the runner's broker user, as the check that stole its password holds it
    app: Celery
    root: Path
    url: str  # the runner's broker URL (its user and the stolen password)

    def run_on_runner(self, payload: dict[str, Any], signed: Any) -> Any:
        """What the runner's `carry.ci.run_job` does with a job taken from its queue: the
        task itself, in this process, as a runner of KIND with its own config (the job's
        series, upstream and check) and the service's public key."""
        with self._runner_env():
            kwargs = {} if signed is None else {"signed": signed}
            result = run_job.apply(args=[payload], kwargs=kwargs, throw=False)
        return result.result

    @contextlib.contextmanager
    def _runner_env(self) -> Iterator[None]:
        config = self.root / "runner-config.json"
        series = [
            {"id": s, "upstream": "up", "base": {"branch": "main"}, "patches": s} for s in SERIES
        ]
        check = {"run": list(TARGET.checks[0].run), "timeout_s": 3600, "env": {}}
        runner = {"queue": TARGET.queue, "workdir": str(self.root / "runner"), "checks": {}}
        runner["checks"] = {TARGET.checks[0].name: check}
        body = {
            "downstream": {"repo": "carry/down"},
            "upstreams": {"up": {"url": "/srv/up.git", "repo": "up/up"}},
            "series": series,
            "runners": {KIND: runner},
        }
        config.write_text(json.dumps(body))
        env = {
            "REDIS_URL": self.url,
            "CARRY_CONFIG": str(config),
            "CARRY_RUNNER_KIND": KIND,
            "CARRY_RUNNER_NAME": f"{KIND}@bench",
            "CARRY_RUNNER_WORKDIR": str(self.root / "runner"),
            "CARRY_DOWNSTREAM_GIT_URL": "/srv/down.git",
        }
        saved = {name: os.environ.get(name) for name in env}
        os.environ.update(env)
        runner_runtime.reset()
        try:
            yield
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
            runner_runtime.reset()

    def applied(self) -> list[str]:
        """Applies the runners' reports; the reasons of those refused, oldest first."""
        ReportApplier(self.service, self.app, [KIND], job_issuer(), block_ms=100).apply_new()
        return [
            e["data"]["reason"]
            for e in reversed(history(self.service, None, kind="ci-report-refused"))
        ]

    def report_green(self, series_id: str, run_id: str) -> None:
        fields = {"run_id": run_id, "runner_kind": KIND, "reason": "passed"}
        channel.send_report(
            self.runner,
            KIND,
            "history",
            run_id,
            "r1",
            series=series_id,
            event="ci-success",
            fields=fields,
        )
        channel.send_report(self.runner, KIND, "rows", run_id, "r1", only=None)


def _tree(head: str) -> TreeSpec:
    return TreeSpec(
        "/srv/up.git",
        head,
        "/srv/down.git",
        "refs/heads/carry/s",
        "b" * 40,
        "p",
        "c" * 64,
        "e" * 40,
    )


def forged_run(b: Broker) -> BrokerAttempt:
    """A run record carry never issued, naming another repository, reported green."""
    head = "1" * 40
    job = JobPayload(
        FORGED_RUN, "s1", KIND, TARGET.queue, "t" * 64, head, _tree(head), (), TARGET.checks
    )
    record = {
        "payload": json.dumps(job.to_dict()),
        "series": "s1",
        "kind": KIND,
        "state": "success",
    }
    b.runner.hset(
        f"carry:ci:run:{FORGED_RUN}", mapping={**record, "tree_key": "t" * 64, "head_sha": head}
    )
    b.report_green("s1", FORGED_RUN)
    refused = b.applied()
    state = load_series(b.service, "s1")
    rows = state.ci if state else {}
    if rows:
        return BrokerAttempt(FORGED_ATTEMPT, True, f"carry shows a CI row for it: {rows}")
    return BrokerAttempt(FORGED_ATTEMPT, False, f"refused and recorded: {refused[-1]}")


def flipped_run(b: Broker) -> BrokerAttempt:
    """A stranger's head waits for /carry approve; its run record is flipped to success."""
    head = "2" * 40
    push(b.service, "s2", head, "stranger", trusted=False)
    (row,) = ci.request_ci(
        b.service, b.app, "s2", [TARGET], _tree(head), issuer=job_issuer(), debounce_s=0
    )
    b.runner.hset(f"carry:ci:run:{row.run_id}", mapping={"state": "success", "dispatched": "1"})
    b.runner.hset(
        f"carry:ci:run:{row.run_id}", "check:gaudi/fixed", json.dumps({"verdict": "success"})
    )
    b.report_green("s2", row.run_id)
    refused = b.applied()
    state = load_series(b.service, "s2")
    now = state.ci["gaudi/fixed"].state if state else None
    if now != CiStatus.WAITING_APPROVAL:
        return BrokerAttempt(FLIPPED_ATTEMPT, True, f"the row reads {now}")
    return BrokerAttempt(FLIPPED_ATTEMPT, False, f"the row still waits for approval; {refused[-1]}")


def planted_verdict(b: Broker) -> BrokerAttempt:
    """A passing verdict planted under a tree's key, then a stranger pushes that head."""
    head = "3" * 40
    tree = _tree(head)
    planted = {"run_id": FORGED_RUN, "state": "success", "head_sha": head, "checks": {}}
    b.runner.set(f"carry:ci:result:{KIND}:{ci.job_tree_key(TARGET, tree)}", json.dumps(planted))
    push(b.service, "s3", head, "stranger", trusted=False)
    (row,) = ci.request_ci(
        b.service, b.app, "s3", [TARGET], tree, issuer=job_issuer(), debounce_s=0
    )
    if row.state != CiStatus.WAITING_APPROVAL:
        return BrokerAttempt(PLANTED_ATTEMPT, True, f"the stranger's head reads {row.state}")
    return BrokerAttempt(
        PLANTED_ATTEMPT, False, "not reused: the stranger's head waits for /carry approve"
    )


def trusted_push_over_stranger(b: Broker) -> BrokerAttempt:
    """A trusted author pushes on top of a stranger's commits: the range still needs approval."""
    base, strangers, on_top = "4" * 40, "5" * 40, "6" * 40
    trusted_push(b.service, "s4", base)
    push(b.service, "s4", strangers, "stranger", trusted=False, before=base)
    push(b.service, "s4", on_top, "maintainer", trusted=True, before=strangers)
    (row,) = ci.request_ci(
        b.service, b.app, "s4", [TARGET], _tree(on_top), issuer=job_issuer(), debounce_s=0
    )
    if row.state != CiStatus.WAITING_APPROVAL:
        return BrokerAttempt(OVER_ATTEMPT, True, f"the head runs without approval ({row.state})")
    return BrokerAttempt(
        OVER_ATTEMPT, False, "the head waits for /carry approve: the range holds a stranger's push"
    )


def forged_job(b: Broker) -> BrokerAttempt:
    """A job carry never issued, queued with the stolen password but without the service's
    signing key: well-formed, naming only the runner's configured check and the series'
    configured upstream, for a stranger's head, with a run record of its own beside it."""
    head = "7" * 40
    job = JobPayload(
        FORGED_JOB_RUN, "s5", KIND, TARGET.queue, "j" * 64, head, _tree(head), (), TARGET.checks
    )
    payload = job.to_dict()
    record: dict[str | bytes, str] = {"payload": json.dumps(payload), "series": "s5"}
    record |= {"kind": KIND, "state": "queued"}
    record |= {"tree_key": "j" * 64, "head_sha": head, "dispatched": "1"}
    b.runner.hset(f"carry:ci:run:{FORGED_JOB_RUN}", mapping=record)
    ended = b.run_on_runner(payload, None)
    b.applied()
    run = load_run(b.service, FORGED_JOB_RUN)
    if run is None or run.state != "queued" or run.attempt or ended != "refused":
        state = run.state if run else "gone"
        return BrokerAttempt(FORGED_JOB_ATTEMPT, True, f"the runner took it: {ended!r}, {state}")
    refused = history(b.service, "s5", kind="ci-refused")
    why = refused[0]["data"]["reason"] if refused else "no refusal recorded"
    return BrokerAttempt(FORGED_JOB_ATTEMPT, False, f"refused, ran nothing: {why}")


FORGED_ATTEMPT = "report a run carry never issued (a forged run record naming another repository)"
FLIPPED_ATTEMPT = "turn a run waiting for /carry approve green (its run record flipped)"
PLANTED_ATTEMPT = "plant a passing verdict a stranger's later head would reuse"
OVER_ATTEMPT = "run a stranger's commits unapproved under a trusted push on top of them"
FORGED_JOB_ATTEMPT = "have the runner run a job it forged (no signing key: only the password)"
ATTACKS: tuple[Callable[[Broker], BrokerAttempt], ...] = (
    forged_run,
    flipped_run,
    planted_verdict,
    trusted_push_over_stranger,
    forged_job,
)


def run_broker_attempts(root: Path) -> list[BrokerAttempt]:
    """Every attack above on one private redis-server; one result each."""
    server = PrivateRedis(root / "broker-redis", persist=False).start()
    try:
        service = redis.Redis.from_url(server.url)
        channel.set_runner_user(service, KIND, TARGET.queue, PASSWORD)
        channel.ensure_group(service, KIND)
        for series_id in SERIES:
            save_series(service, SeriesState(id=series_id))
        runner_url = server.url.replace("redis://", f"redis://carry-runner-{KIND}:{PASSWORD}@", 1)
        runner = redis.Redis.from_url(runner_url)
        install_job_keys()  # the service's key pair: the runner holds the public half
        broker = Broker(service, runner, make_app(server.url), root, runner_url)
        return [attack(broker) for attack in ATTACKS]
    finally:
        server.stop(kill=True)
