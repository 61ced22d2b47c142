"""Hardware CI end to end: real runner workers (`python -m runner.cli`, Celery
prefork, concurrency 1), real git repositories, shell commands as setup and checks.

Redis: a private redis-server for this module, flushed before each test (fixture ci_client,
not tests/conftest.py's client). The runners are separate processes holding broker state
(queues, bindings, unacked jobs) in Redis, so the shared test database, which other test runs
may flush at any moment, is not safe for them.

Runner lost: the test kills a whole runner (main process and pool child: SIGKILL to its
process group), which is what a host crash or the OOM killer taking the worker looks like. Its
job is then unacknowledged, and Redis hands it out again only after the visibility timeout
(CARRY_VISIBILITY_TIMEOUT_S=3 here), to the only runner left, so where it runs is certain.
Killing just the pool child would requeue at once (task_reject_on_worker_lost), but either
runner, the killed one's fresh pool child included, could take it.

Trust: a runner runs only the commands its own config names (CARRY_CONFIG). The runners here
share one config file (RunnerConfig), and `request` writes each test's setup and checks into
it before asking for runs; the runners read it again when it changes.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis
from celery import Celery

from bot.ci import runs as ci_runs
from bot.ci import signing
from bot.ci.job_keys import NO_PUBLIC_KEY
from bot.ci.spec import JobPayload, LogLimits, StepSpec
from bot.core.ci_pacing import PacePolicy
from bot.core.ci_plan import (
    ApprovalError,
    Budget,
    RetryPolicy,
    classify_outcome,
)
from bot.queue.celery_app import make_app
from bot.store import ci_runs as store_ci
from bot.store import quarantine
from bot.store import runner_channel as channel
from bot.store.runners import runlog, runners
from bot.store.series import history, load_series
from harness.gitrepo import RepoBuilder
from harness.hostile_script import HOSTILE_SCRIPT, RUNNER_PTH, RUNNER_SITE
from harness.job_keys import job_issuer, service_signed
from harness.pushes import push, trusted_push
from harness.redis_server import PrivateRedis
from runner import sandbox
from runner.steps import STEP_TOKEN_ENV, RunLog, reap_orphans, run_step
from tests.support.broker_junk import malformed, real_envelope
from tests.support.hardware_ci import (
    SERIES,
    Runner,
    RunnerConfig,
    World,
    alive,
    events,
    finished,
    host_pid,
    log_text,
    reported,
    request,
    rows,
    runner_process_of,
    runners_ready,
    sh,
    spawn_runner,
    state_of,
    stop_runner,
    target,
    wait_for,
)
from tests.support.paths import REPO_ROOT
from workers.ci import requests as ci
from workers.ci.reports import ReportApplier


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path_factory.mktemp("ci-redis"), persist=False).start()
    try:
        yield server
    finally:
        server.stop(kill=True)


@pytest.fixture
def url(redis_server: PrivateRedis) -> str:
    redis.Redis.from_url(redis_server.url).flushall()
    return redis_server.url


@pytest.fixture
def ci_client(url: str) -> redis.Redis:
    """A client of this module's own redis-server (not tests/conftest.py's `client` of the
    shared test database): the runners keep broker state in it across a test and past a killed
    runner, the runners' broker users (ACL SETUSER) are the whole server's, not one database's,
    and the hostile checks reach for the broker itself; `url` empties all of it (FLUSHALL)."""
    return redis.Redis.from_url(url)


@pytest.fixture
def celery_app(url: str) -> Celery:
    return make_app(url)


@pytest.fixture
def runner_config(tmp_path: Path) -> RunnerConfig:
    return RunnerConfig(tmp_path / "runner-carry.yaml")


@pytest.fixture
def world(tmp_path: Path, runner_config: RunnerConfig) -> World:
    return World(tmp_path / "repos", runner_config)


@pytest.fixture
def marks() -> Iterator[Path]:
    """A directory outside every tree where check commands leave evidence for the test: not
    under /tmp, which is the job's own in a step's view (issue 33)."""
    path = Path(tempfile.mkdtemp(prefix="carry-marks-", dir="/var/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def start_runners(
    url: str,
    ci_client: redis.Redis,
    celery_app: Celery,
    tmp_path: Path,
    runner_config: RunnerConfig,
) -> Iterator[Callable[..., list[Runner]]]:
    started: list[Runner] = []
    appliers: list[ReportApplier] = []

    def start(
        *specs: tuple[str, str], env: dict[str, str] | None = None, configured: bool = True
    ) -> list[Runner]:
        for kind, _ in specs:
            runner_config.add_kind(kind)
        extra = {"CARRY_CONFIG": str(runner_config.path)} if configured else {}
        extra["CARRY_DOWNSTREAM_GIT_URL"] = runner_config.downstream_url
        extra.update(env or {})
        kinds = sorted({kind for kind, _ in specs} - {k for a in appliers for k in a.kinds})
        if kinds:  # the service's side: what the runners report is applied as it comes
            applier = ReportApplier(
                redis.Redis.from_url(url), celery_app, kinds, job_issuer(), block_ms=200
            )
            appliers.append(applier.start())
        batch = [spawn_runner(kind, name, url, tmp_path, extra) for kind, name in specs]
        started.extend(batch)
        names = {r.name for r in batch}
        wait_for(lambda: runners_ready(ci_client, batch, names), f"runners {sorted(names)} ready")
        return batch

    yield start
    for runner in started:
        stop_runner(runner)
    for applier in appliers:
        applier.stop()


# --------------------------------------------------------------------------- 1 exact tree, live logs


def test_job_runs_on_the_exact_tree_with_live_logs(
    ci_client: redis.Redis, celery_app: Celery, world: World, marks: Path, start_runners: Any
) -> None:
    gaudi, gb10 = start_runners(("gaudi", "gaudi1@%h"), ("gb10", "gb101@%h"))
    head = world.head({"app.txt": "hello again\n"})
    expected = world.expected_tree(head)
    go = marks / "go"
    check = StepSpec(
        "fixed",
        sh(
            'echo "tree $(git rev-parse HEAD^{tree})"; echo line-1; '
            'while [ ! -f "$GO" ]; do sleep 0.05; done; echo line-2; '
            'mkdir -p out; echo "$CARRY_RUN_ID" > out/result.txt; test -f fixed.txt'
        ),
        timeout_s=30,
        env={"GO": str(go)},
    )
    setup = (StepSpec("prepare", sh("echo preparing; echo to-stderr >&2")),)
    other = StepSpec("gb10-check", sh("grep -q fixed fixed.txt && echo gb10 ok"))
    out = request(
        ci_client,
        celery_app,
        world,
        head,
        [target("gaudi", check, setup=setup, artifacts=("out/*.txt",)), target("gb10", other)],
    )
    assert [(r.runner, r.state) for r in out] == [
        ("gaudi/fixed", "queued"),
        ("gb10/gb10-check", "queued"),
    ]
    # Each row change goes to the planner (a ChecksRecorded event on the service's queue).
    assert [(row["runner"], row["state"]) for row in reported(ci_client)] == [
        ("gaudi/fixed", "queued"),
        ("gb10/gb10-check", "queued"),
    ]
    gaudi_run, gb10_run = out[0].run_id, out[1].run_id

    # Live: the first line is readable while the check still runs.
    wait_for(lambda: "stdout: line-1" in log_text(ci_client, gaudi_run), "line-1 in the live log")
    assert state_of(ci_client, gaudi_run) == "running"
    assert rows(ci_client)["gaudi/fixed"].state == "running"
    assert "stdout: line-2" not in log_text(ci_client, gaudi_run)
    go.touch()

    info = finished(ci_client, gaudi_run)
    assert info["state"] == "success" and info["runner"] == gaudi.name and info["attempt"] == 1
    text = log_text(ci_client, gaudi_run)
    assert f"stdout: tree {expected}" in text  # the check ran on the tree the engine computed
    assert f"tree {expected} verified (upstream + 1 patch(es))" in text
    for line in ("stdout: preparing", "stderr: to-stderr", "stdout: line-2"):
        assert line in text
    artifact = gaudi.workdir / "artifacts" / gaudi_run / "out" / "result.txt"
    assert artifact.read_text().strip() == gaudi_run
    assert info["pr_head_sha"] == world.downstream.head("carry/s1")

    assert finished(ci_client, gb10_run)["state"] == "success"
    assert "stdout: gb10 ok" in log_text(ci_client, gb10_run)
    final = rows(ci_client)
    assert (final["gaudi/fixed"].state, final["gb10/gb10-check"].state) == ("success", "success")
    assert final["gaudi/fixed"].head_sha == head

    registered = {r["name"]: r for r in runners(ci_client)}
    assert (
        registered[gaudi.name]["kind"] == "gaudi" and registered[gaudi.name]["queue"] == "hw.gaudi"
    )
    assert registered[gb10.name]["kind"] == "gb10"
    # How each runner runs its steps is on the runners page (as root here: nobody cannot
    # enter pytest's directories, and the page says so).
    user = pwd.getpwuid(os.geteuid()).pw_name
    if os.geteuid() == 0:
        user = "root (step_user: auto, and nobody cannot enter "
    expected = "namespaces" if sandbox.namespaces_unavailable() is None else "none (sandbox: auto"
    assert registered[gaudi.name]["steps"].startswith(expected), registered[gaudi.name]
    assert f", as {user}" in registered[gaudi.name]["steps"], registered[gaudi.name]
    # Runner-side rows go the same way (runners hold no GitHub token), with the commit tested.
    forwarded = [json.loads(m)["headers"]["task"] for m in ci_client.lrange("carry", 0, -1)]
    assert set(forwarded) == {"carry.ingest"}  # what the rows recorded leads to is planned
    ended = [row for row in reported(ci_client) if row["run_id"] == gaudi_run][-1]
    assert ended["state"] == "success"
    assert ended["commit_sha"] == world.downstream.head("carry/s1")


# --------------------------------------------------------------------------- 2 timeout


def test_timeout_kills_the_process_group_and_is_a_test_failure(
    ci_client: redis.Redis, celery_app: Celery, world: World, marks: Path, start_runners: Any
) -> None:
    start_runners(("gaudi", "gaudi1@%h"))
    script = 'sleep 300 & echo $! > "$MARK/bg"; echo $$ > "$MARK/sh"; echo started; wait'
    slow = StepSpec("slow", sh(script), timeout_s=2, env={"MARK": str(marks)})
    out = request(ci_client, celery_app, world, world.head(), [target("gaudi", slow)])
    wait_for(lambda: (marks / "sh").exists(), "the step to start")
    marker = f"MARK={marks}"
    pids = [host_pid(int((marks / name).read_text()), marker) for name in ("sh", "bg")]
    info = finished(ci_client, out[0].run_id)

    assert info["state"] == "failure" and info["attempt"] == 1  # a timeout is not retried
    row = rows(ci_client)["gaudi/slow"]
    assert row.state == "failure" and "timed out after 2s" in row.detail
    assert not [pid for pid in pids if alive(pid)], "the whole process group is gone"
    assert "timed out, process group killed" in log_text(ci_client, out[0].run_id)
    assert not events(ci_client, "ci-retry")


# --------------------------------------------------------------------------- 3 newer head cancels


def test_newer_head_cancels_the_running_job(
    ci_client: redis.Redis, celery_app: Celery, world: World, marks: Path, start_runners: Any
) -> None:
    start_runners(("gaudi", "gaudi1@%h"))
    # The check blocks on trees that contain `block`; the newer head removes it.
    script = (
        'echo $$ > "$MARK/pid-$CARRY_RUN_ID"; [ -f block ] && exec sleep 300; test -f fixed.txt'
    )
    check = StepSpec("fixed", sh(script), timeout_s=60, env={"MARK": str(marks)})
    old_head = world.head({"block": "x\n"})
    old = request(ci_client, celery_app, world, old_head, [target("gaudi", check)])[0].run_id
    pid_file = marks / f"pid-{old}"
    wait_for(lambda: pid_file.exists() and pid_file.read_text(), "the old run's check to start")
    old_pid = host_pid(int(pid_file.read_text()), f"MARK={marks}")

    new_head = world.head({"block": None})
    new = request(ci_client, celery_app, world, new_head, [target("gaudi", check)])[0].run_id

    assert state_of(ci_client, old) == "cancelled"
    wait_for(lambda: not alive(old_pid), "the old check's process to be killed", timeout=10)
    assert finished(ci_client, new)["state"] == "success"
    assert rows(ci_client)["gaudi/fixed"].run_id == new
    assert rows(ci_client)["gaudi/fixed"].head_sha == new_head
    superseded = events(ci_client, "ci-supersede", old)
    assert superseded and "superseded by head" in superseded[0]["data"]["reason"]
    wait_for(
        lambda: "cancelled (superseded by head" in log_text(ci_client, old), "the runner's note"
    )


# --------------------------------------------------------------------------- 4 runner lost


def test_runner_killed_mid_job_is_retried_on_another_runner(
    ci_client: redis.Redis, celery_app: Celery, world: World, marks: Path, start_runners: Any
) -> None:
    first, second = start_runners(
        ("gaudi", "gaudiA@%h"), ("gaudi", "gaudiB@%h"), env={"CARRY_VISIBILITY_TIMEOUT_S": "3"}
    )
    script = (
        'echo "$CARRY_ATTEMPT $$" >> "$MARK/attempts"; '
        '[ "$CARRY_ATTEMPT" = 1 ] && exec sleep 300; test -f fixed.txt'
    )
    check = StepSpec("fixed", sh(script), timeout_s=60, env={"MARK": str(marks)})
    run_id = request(ci_client, celery_app, world, world.head(), [target("gaudi", check)])[0].run_id
    attempts = marks / "attempts"
    wait_for(lambda: attempts.exists() and attempts.read_text(), "attempt 1 to start its check")
    holder = ci.run_info(ci_client, run_id)["runner"]
    lost, survivor = (first, second) if holder == first.name else (second, first)
    step_pid = host_pid(int(attempts.read_text().split()[1]), f"MARK={marks}")

    lost.kill_host()

    wait_for(lambda: not alive(step_pid), "the lost runner's check to die with it", timeout=10)
    info = finished(ci_client, run_id, timeout=40)
    assert (info["state"], info["attempt"], info["runner"]) == ("success", 2, survivor.name)
    assert [line.split()[0] for line in attempts.read_text().splitlines()] == ["1", "2"]
    assert len(events(ci_client, "ci-runner-lost", run_id)) == 1
    assert len(events(ci_client, "ci-started", run_id)) == 2
    successes = [
        e for e in events(ci_client, "ci-check", run_id) if e["data"]["verdict"] == "success"
    ]
    assert len(successes) == 1 and successes[0]["data"]["attempt"] == 2
    assert len(events(ci_client, "ci-success", run_id)) == 1
    stored = store_ci.stored_result(ci_client, "gaudi", info["tree_key"])
    assert stored is not None and (stored["run_id"], stored["state"]) == (run_id, "success")
    row = rows(ci_client)["gaudi/fixed"]
    assert (row.state, row.attempt) == ("success", 2)


def test_lost_pool_process_is_requeued_at_once_and_retried(
    ci_client: redis.Redis, celery_app: Celery, world: World, marks: Path, start_runners: Any
) -> None:
    """The job process alone dies (the OOM killer's usual pick): the worker survives and
    requeues the job at once (task_reject_on_worker_lost); its new pool process retries it."""
    start_runners(("gaudi", "gaudi1@%h"))
    script = (
        'echo "$CARRY_ATTEMPT $$" >> "$MARK/attempts"; '
        '[ "$CARRY_ATTEMPT" = 1 ] && exec sleep 300; test -f fixed.txt'
    )
    check = StepSpec("fixed", sh(script), timeout_s=60, env={"MARK": str(marks)})
    run_id = request(ci_client, celery_app, world, world.head(), [target("gaudi", check)])[0].run_id
    attempts = marks / "attempts"
    wait_for(lambda: attempts.exists() and attempts.read_text(), "attempt 1 to start its check")
    step = host_pid(int(attempts.read_text().split()[1]), f"MARK={marks}")
    os.kill(runner_process_of(step), signal.SIGKILL)  # the pool process

    info = finished(ci_client, run_id)
    assert (info["state"], info["attempt"]) == ("success", 2)
    assert len(events(ci_client, "ci-runner-lost", run_id)) == 1


# --------------------------------------------------------------------------- 5 reuse


def test_same_tree_reuses_the_result_and_never_reruns(
    ci_client: redis.Redis, celery_app: Celery, world: World, marks: Path, start_runners: Any
) -> None:
    start_runners(("gaudi", "gaudi1@%h"))
    check = StepSpec(
        "fixed", sh('echo run >> "$MARK/runs"; test -f fixed.txt'), env={"MARK": str(marks)}
    )
    head = world.head()
    first = request(ci_client, celery_app, world, head, [target("gaudi", check)])[0]
    assert finished(ci_client, first.run_id)["state"] == "success"

    again = request(ci_client, celery_app, world, head, [target("gaudi", check)])
    assert [(r.state, r.run_id) for r in again] == [("reused", first.run_id)]
    assert again[0].detail.startswith("success: reused from run")
    assert rows(ci_client)["gaudi/fixed"].state == "reused"
    assert ci_client.llen("hw.gaudi") == 0 and len(events(ci_client, "ci-reuse")) == 1
    assert (marks / "runs").read_text().count("run") == 1

    # `/carry retest` asks for a fresh run of the same tree on purpose.
    retest = request(ci_client, celery_app, world, head, [target("gaudi", check)], force=True)[0]
    assert retest.run_id != first.run_id
    assert finished(ci_client, retest.run_id)["state"] == "success"
    assert (marks / "runs").read_text().count("run") == 2


# --------------------------------------------------------------------------- 6 approval


def test_untrusted_head_waits_for_an_approval_of_its_sha(
    ci_client: redis.Redis, celery_app: Celery, world: World, marks: Path, start_runners: Any
) -> None:
    start_runners(("gaudi", "gaudi1@%h"))
    check = StepSpec(
        "fixed",
        sh('echo "$CARRY_UPSTREAM_SHA" >> "$MARK/ran"; test -f fixed.txt'),
        env={"MARK": str(marks)},
    )
    head = world.head()
    waiting = request(ci_client, celery_app, world, head, [target("gaudi", check)], actor="mallory")
    assert [r.state for r in waiting] == ["waiting-approval"]
    assert ci_client.llen("hw.gaudi") == 0  # nothing reached the hardware queue
    assert "waiting for /carry approve" in " ".join(load_series(ci_client, SERIES).needs_attention)

    issuer = job_issuer()
    with pytest.raises(ApprovalError):
        ci.approve(ci_client, SERIES, "f" * 7, "maintainer", issuer=issuer, celery_app=celery_app)
    released = ci.approve(
        ci_client, SERIES, head[:8], "maintainer", issuer=issuer, celery_app=celery_app
    )
    assert [(r.state, r.run_id) for r in released] == [("queued", waiting[0].run_id)]
    assert finished(ci_client, waiting[0].run_id)["state"] == "success"
    assert (marks / "ran").read_text().split() == [head]
    assert load_series(ci_client, SERIES).approvals == [head]  # bound to the full SHA
    assert events(ci_client, "ci-approved")[0]["data"]["by"] == "maintainer"

    # The approval binds to that SHA: the same author's next head waits again.
    newer = world.head({"more.txt": "x\n"})
    again = request(ci_client, celery_app, world, newer, [target("gaudi", check)], actor="mallory")
    assert [r.state for r in again] == ["waiting-approval"]


# --------------------------------------------------------------------------- 7 burst


def test_a_burst_of_heads_starts_one_run_per_series_and_kind(
    ci_client: redis.Redis, celery_app: Celery, world: World, marks: Path, start_runners: Any
) -> None:
    start_runners(("gaudi", "gaudi1@%h"), ("gb10", "gb101@%h"))
    script = 'echo "$CARRY_RUNNER_KIND $CARRY_UPSTREAM_SHA" >> "$MARK/started"; test -f fixed.txt'
    check = StepSpec("fixed", sh(script), env={"MARK": str(marks)})
    targets = [target("gaudi", check), target("gb10", check)]
    heads = [world.head({"burst.txt": f"{n}\n"}) for n in range(8)]
    runs = [request(ci_client, celery_app, world, head, targets, debounce_s=1.5) for head in heads]
    newest = {r.runner: r.run_id for r in runs[-1]}

    for run_id in newest.values():
        assert finished(ci_client, run_id)["state"] == "success"
    started = sorted((marks / "started").read_text().splitlines())
    assert started == [f"gaudi {heads[-1]}", f"gb10 {heads[-1]}"]
    older = [r.run_id for batch in runs[:-1] for r in batch]
    assert {state_of(ci_client, run_id) for run_id in older} == {"cancelled"}
    assert len(events(ci_client, "ci-started")) == 2


# --------------------------------------------------------------------------- retries, A/B, mismatch


def test_infra_error_is_retried_a_test_failure_is_not(
    ci_client: redis.Redis, celery_app: Celery, world: World, marks: Path, start_runners: Any
) -> None:
    start_runners(("gaudi", "gaudi1@%h"))
    env = {"MARK": str(marks)}
    flaky = StepSpec("flaky-infra", sh('[ "$CARRY_ATTEMPT" = 1 ] && exit 2; exit 0'), env=env)
    broken = StepSpec("broken", sh('echo x >> "$MARK/broken"; exit 1'), env=env)
    out = request(ci_client, celery_app, world, world.head(), [target("gaudi", flaky, broken)])
    info = finished(ci_client, out[0].run_id)

    assert (info["state"], info["attempt"]) == ("failure", 2)
    final = rows(ci_client)
    assert (final["gaudi/flaky-infra"].state, final["gaudi/flaky-infra"].attempt) == ("success", 2)
    assert (final["gaudi/broken"].state, final["gaudi/broken"].attempt) == ("failure", 1)
    assert (marks / "broken").read_text().count("x") == 1  # the failed check ran once
    retries = events(ci_client, "ci-retry")
    assert len(retries) == 1 and "no verdict (exit 2" in retries[0]["data"]["reason"]


def test_an_inconclusive_check_is_amber_not_retried_and_the_head_still_good(
    ci_client: redis.Redis, celery_app: Celery, world: World, marks: Path, start_runners: Any
) -> None:
    """Issue 32: a check exiting 77 (it ran, but could not observe its condition) is its own
    verdict: not a pass, not a bug, not an infra error to retry; the head is still the last
    known good one (the series' default). Before, exit 77 was a test failure."""
    start_runners(("gaudi", "gaudi1@%h"))
    env = {"MARK": str(marks)}
    unobserved = StepSpec("unobserved", sh('echo x >> "$MARK/unobserved"; exit 77'), env=env)
    passing = StepSpec("fixed", sh("test -f fixed.txt"))
    head = world.head()
    out = request(ci_client, celery_app, world, head, [target("gaudi", passing, unobserved)])
    info = finished(ci_client, out[0].run_id)

    assert (info["state"], info["attempt"]) == ("inconclusive", 1)
    final = rows(ci_client)
    assert final["gaudi/fixed"].state == "success"
    assert final["gaudi/unobserved"].state == "inconclusive"
    assert "exit 77: it could not observe" in final["gaudi/unobserved"].detail
    assert (marks / "unobserved").read_text().count("x") == 1  # not retried
    assert not events(ci_client, "ci-retry")
    state = load_series(ci_client, SERIES)
    assert state is not None and state.last_good is not None and state.last_good.head == head


def test_setup_failure_exhausts_retries_as_infra_error(
    ci_client: redis.Redis, celery_app: Celery, world: World, start_runners: Any
) -> None:
    start_runners(("gaudi", "gaudi1@%h"))
    policy = RetryPolicy(max_attempts=2, base_delay_s=0.1, max_delay_s=0.1)
    check = StepSpec("fixed", sh("test -f fixed.txt"))
    setup = (StepSpec("install", sh("echo cannot fetch; exit 3")),)
    out = request(
        ci_client,
        celery_app,
        world,
        world.head(),
        [target("gaudi", check, setup=setup, retry=policy)],
    )
    info = finished(ci_client, out[0].run_id)
    assert (info["state"], info["attempt"]) == ("infra-error", 2)
    row = rows(ci_client)["gaudi/fixed"]
    assert row.state == "infra-error" and "setup install exited 3" in row.detail
    assert "gave up after 2 of 2 attempts" in row.detail
    assert store_ci.stored_result(ci_client, "gaudi", info["tree_key"]) is None  # nothing to reuse


def test_tree_mismatch_is_an_infra_error_naming_both_trees(
    ci_client: redis.Redis, celery_app: Celery, world: World, start_runners: Any
) -> None:
    start_runners(("gaudi", "gaudi1@%h"))
    head = world.head()
    wrong = "0" * 40
    tree = world.tree(head, expected_tree=wrong)
    policy = RetryPolicy(max_attempts=1)
    check = StepSpec("fixed", sh("test -f fixed.txt"))
    world.runner_config.allow([target("gaudi", check, retry=policy)])
    trusted_push(ci_client, SERIES, head)
    out = ci.request_ci(
        ci_client,
        celery_app,
        SERIES,
        [target("gaudi", check, retry=policy)],
        tree,
        issuer=job_issuer(),
        debounce_s=0,
    )
    info = finished(ci_client, out[0].run_id)
    detail = rows(ci_client)["gaudi/fixed"].detail
    assert info["state"] == "infra-error"
    assert f"the engine computed {wrong}, the runner built {world.expected_tree(head)}" in detail


def test_ab_runs_the_check_on_plain_upstream_too(
    ci_client: redis.Redis, celery_app: Celery, world: World, start_runners: Any
) -> None:
    start_runners(("gaudi", "gaudi1@%h"))
    check = StepSpec("fixed", sh("test -f fixed.txt"), ab=True)
    out = request(ci_client, celery_app, world, world.head(), [target("gaudi", check)])
    assert [r.runner for r in out] == ["gaudi/fixed", "gaudi/fixed@upstream"]
    finished(ci_client, out[0].run_id)
    final = rows(ci_client)
    assert final["gaudi/fixed"].state == "success"
    upstream = final["gaudi/fixed@upstream"]
    assert upstream.state == "failure" and upstream.detail.startswith("A/B on plain upstream")


# --------------------------------------------------------------------------- steps, in process


def test_run_log_is_bounded_head_marker_tail(ci_client: redis.Redis, tmp_path: Path) -> None:
    limits = LogLimits(max_lines=30, max_bytes=1 << 20, max_line_bytes=50, tail_lines=10)
    log = RunLog(ci_client, "r-bounded", limits, tmp_path / "full.log")
    result = run_step(
        sh('i=0; while [ $i -lt 100 ]; do echo "line $i"; i=$((i+1)); done; printf "%0200d\\n" 7'),
        cwd=tmp_path,
        env=dict(os.environ),
        timeout_s=30,
        log=log,
        cancelled=lambda: None,
    )
    log.close()
    assert result.exit_code == 0
    texts = [e["text"] for e in runlog(ci_client, "r-bounded", limit=1000)]
    assert texts[:20] == [f"line {i}" for i in range(20)]  # the head, up to the limit
    assert texts[20] == "[carry] log truncated: 71 lines omitted, last 10 follow"
    assert texts[21:30] == [f"line {i}" for i in range(91, 100)]  # the tail
    assert texts[30].endswith("[carry: line cut at 50 bytes]") and len(texts) == 31
    assert (tmp_path / "full.log").read_text().count("\n") == 101  # the local copy is whole


def test_a_step_never_leaves_processes_behind(ci_client: redis.Redis, tmp_path: Path) -> None:
    log = RunLog(ci_client, "r-leftover")
    pid_file = tmp_path / "bg.pid"
    script = f'sleep 300 & echo $! > "{pid_file}"; echo leader done'
    result = run_step(
        sh(script),
        cwd=tmp_path,
        env=dict(os.environ),
        timeout_s=30,
        log=log,
        cancelled=lambda: None,
        grace_s=1,
    )
    assert result.exit_code == 0 and not result.timed_out
    assert not alive(int(pid_file.read_text()))


def test_cancel_stops_a_step_and_a_missing_command_is_infra(
    ci_client: redis.Redis, tmp_path: Path
) -> None:
    log = RunLog(ci_client, "r-cancel")
    reasons = iter([None, None, "superseded"])
    result = run_step(
        sh("exec sleep 300"),
        cwd=tmp_path,
        env=dict(os.environ),
        timeout_s=30,
        log=log,
        cancelled=lambda: next(reasons, "superseded"),
        poll_s=0.05,
    )
    assert result.cancelled == "superseded" and result.signal == signal.SIGTERM
    missing = run_step(
        ("no-such-command-xyz",),
        cwd=tmp_path,
        env=dict(os.environ),
        timeout_s=5,
        log=log,
        cancelled=lambda: None,
    )
    assert missing.exit_code == 127
    assert classify_outcome("check", missing.exit_code).verdict == "infra-error"


def test_reap_orphans_finds_a_lost_runners_step_by_its_token(tmp_path: Path) -> None:
    state_dir = tmp_path / "steps"
    state_dir.mkdir()
    token = "t" * 32
    orphan = subprocess.Popen(
        ["sleep", "300"], env={**os.environ, STEP_TOKEN_ENV: token}, start_new_session=True
    )
    bystander = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        (state_dir / f"{token}.json").write_text(json.dumps({"token": token, "pgid": orphan.pid}))
        assert reap_orphans(state_dir) == [orphan.pid]
        orphan.wait(timeout=10)
        assert orphan.returncode == -signal.SIGKILL and bystander.poll() is None
        assert not list(state_dir.iterdir())
    finally:
        for proc in (orphan, bystander):
            proc.kill()
            proc.wait()


def test_a_full_budget_defers_a_run_until_one_finishes(
    ci_client: redis.Redis, celery_app: Celery, world: World, marks: Path, start_runners: Any
) -> None:
    start_runners(("gaudi", "gaudi1@%h"))
    go = marks / "go"
    script = 'while [ ! -f "$GO" ]; do sleep 0.05; done; test -f fixed.txt'
    check = StepSpec("fixed", sh(script), timeout_s=30, env={"GO": str(go)})
    narrow = ci.CiTarget("gaudi", "hw.gaudi", (), (check,), budget=Budget(queued=0, running=1))
    world.runner_config.allow([narrow])
    tree = world.tree(world.head())
    for series_id in ("s1", "s2"):
        trusted_push(ci_client, series_id, tree.upstream_sha)
    kwargs: dict[str, Any] = {"debounce_s": 0, "issuer": job_issuer()}
    first = ci.request_ci(ci_client, celery_app, "s1", [narrow], tree, **kwargs)[0]
    second = ci.request_ci(ci_client, celery_app, "s2", [narrow], tree, **kwargs)[0]

    assert second.state == "queued" and "budget is full" in second.detail
    assert ci_client.llen("hw.gaudi") == 0  # held back, not handed to the broker
    go.touch()
    assert finished(ci_client, first.run_id)["state"] == "success"
    # s2 asks for the same tree, so once released it finds the result instead of rerunning.
    assert finished(ci_client, second.run_id)["state"] == "reused"
    # finished() waits for SERIES' rows; s2's row is published just after the run ends too.
    wait_for(
        lambda: load_series(ci_client, "s2").ci["gaudi/fixed"].state == "reused" or None,
        "s2's CI row to show the reused result",
        10,
    )
    released = [e["data"]["reason"] for e in history(ci_client, "s2") if e["kind"] == "ci-enqueue"]
    assert released == ["budget freed"]


def test_pacing_holds_a_heads_run_a_newer_head_replaces_it_and_a_retest_is_not_paced(
    ci_client: redis.Redis, celery_app: Celery, world: World, marks: Path, start_runners: Any
) -> None:
    start_runners(("gaudi", "gaudi1@%h"))
    check = StepSpec("fixed", sh('echo "$CARRY_UPSTREAM_SHA" >> "$MARK/started"'))
    check = replace(check, env={"MARK": str(marks)})
    paced = replace(target("gaudi", check), pace=PacePolicy(min_interval_s=3600, daily_budget=2))
    heads = [world.head({"paced.txt": f"{n}\n"}) for n in range(4)]
    first = request(ci_client, celery_app, world, heads[0], [paced])[0]
    assert finished(ci_client, first.run_id)["state"] == "success"

    second = request(ci_client, celery_app, world, heads[1], [paced])[0]
    assert second.state == "queued" and second.detail.startswith("paced: starts at ")
    assert "ci.min_interval_s is 3600" in second.detail
    assert rows(ci_client)["gaudi/fixed"].detail == second.detail  # the dashboard says why
    assert ci_client.llen("hw.gaudi") == 0  # held here, not in the broker
    third = request(ci_client, celery_app, world, heads[2], [paced])[0]
    assert state_of(ci_client, second.run_id) == "cancelled"  # a burst tests only the newest
    issuer = job_issuer()
    assert ci.release_paced(ci_client, celery_app, issuer=issuer) == []  # its time has not come
    later = time.time() + 3601
    assert ci.release_paced(ci_client, celery_app, later, issuer=issuer) == [third.run_id]
    assert finished(ci_client, third.run_id)["state"] == "success"
    reasons = [e["data"]["reason"] for e in events(ci_client, "ci-enqueue", third.run_id)]
    assert "its pacing time came" in reasons

    fourth = request(ci_client, celery_app, world, heads[3], [paced])[0]
    assert "ci.daily_budget is 2: 2 runs started in the last 24 h" in fourth.detail
    retest = request(ci_client, celery_app, world, heads[3], [paced], force=True)[0]
    assert retest.run_id == fourth.run_id  # the held run goes now, under its own id
    assert finished(ci_client, fourth.run_id)["state"] == "success"
    started = (marks / "started").read_text().split()
    assert started == [heads[0], heads[2], heads[3]]


# --------------------------------------------------------------------------- isolation


def test_check_code_gets_none_of_the_runners_credentials(
    ci_client: redis.Redis, celery_app: Celery, world: World, url: str, start_runners: Any
) -> None:
    """Check code is hostile: the runner's broker URL (carry's control plane) and any token
    in its environment never reach it; a variable the host passes on purpose does."""
    secrets = {"GITHUB_TOKEN": "ghp_runnerhostsecret0001", "HF_TOKEN": "hf_passedonpurpose"}
    start_runners(("gaudi", "gaudi1@%h"), env={**secrets, "CARRY_RUNNER_PASS_ENV": "HF_TOKEN"})
    snoop = StepSpec(
        "snoop",
        sh(
            'env | sort; test -z "$REDIS_URL" && test -z "$GITHUB_TOKEN" '
            '&& test -z "$CARRY_RUNNER_PASS_ENV" && test "$HF_TOKEN" = hf_passedonpurpose '
            '&& test -n "$PATH" && test -n "$CARRY_RUN_ID" && echo "token is $HF_TOKEN"'
        ),
    )
    run = request(ci_client, celery_app, world, world.head(), [target("gaudi", snoop)])[0]
    info = finished(ci_client, run.run_id)
    text = log_text(ci_client, run.run_id)
    assert info["state"] == "success", text
    assert url.split("://", 1)[1] not in text and "stdout: REDIS_URL=" not in text
    assert secrets["GITHUB_TOKEN"] not in text
    # What a step prints of a secret it was given is redacted before it is stored.
    assert "stdout: token is [redacted]" in text and secrets["HF_TOKEN"] not in text


def test_secrets_the_runner_never_held_are_redacted_from_the_run_log_by_their_form(
    ci_client: redis.Redis, celery_app: Celery, world: World, start_runners: Any
) -> None:
    """A step prints credentials carry never knew the value of (a database URL of the host's,
    tokens it found): on stdout and stderr alike, the stored run log holds none of them."""
    leaks = {
        "postgres://ci:pg-pass-91823@db.internal:5432/ci": "postgres://ci:[redacted]@db.internal",
        "ghp_" + "Z9" * 18: "ghp_[redacted]",
        "github_pat_" + "11AB" * 6: "github_pat_[redacted]",
        "hf_" + "q" * 34: "hf_[redacted]",
        "Authorization: Bearer eyJhbGciOi.payload.sig": "Authorization: Bearer [redacted]",
    }
    start_runners(("gaudi", "gaudi1@%h"))
    printed = "; ".join(f"echo 'out {leak}'; echo 'err {leak}' >&2" for leak in leaks)
    row = request(
        ci_client,
        celery_app,
        world,
        world.head(),
        [target("gaudi", StepSpec("leaky", sh(printed)))],
    )[0]
    info = finished(ci_client, row.run_id)
    text = log_text(ci_client, row.run_id)
    assert info["state"] == "success", text
    for shown in leaks.values():
        assert f"stdout: out {shown}" in text and f"stderr: err {shown}" in text, text
    for secret in ("pg-pass-91823", "Z9" * 18, "11AB" * 6, "q" * 34, "payload.sig"):
        assert secret not in text


def test_an_error_that_names_a_url_with_a_password_is_stored_without_it(
    ci_client: redis.Redis, celery_app: Celery, world: World, start_runners: Any
) -> None:
    """The runner's own errors (here its refusal of a repository its config does not name;
    a config never holds a URL with a password) reach the run's detail, its CI rows and the
    history: redacted there as in the run log."""
    start_runners(("gaudi", "gaudi1@%h"))
    check = StepSpec("fixed", sh("test -f fixed.txt"))
    once = target("gaudi", check, retry=RetryPolicy(max_attempts=1))
    world.runner_config.allow([once])
    tree = replace(
        world.tree(world.head()), upstream_url="http://carry:pw-4815162342@127.0.0.1:9/u"
    )
    trusted_push(ci_client, SERIES, tree.upstream_sha)
    (row,) = ci.request_ci(
        ci_client, celery_app, SERIES, [once], tree, issuer=job_issuer(), debounce_s=0
    )
    info = finished(ci_client, row.run_id)
    assert info["state"] == "infra-error"
    # (The job itself names the URL as given; carry's config refuses a URL with a password.)
    info.pop("payload")
    stored = json.dumps(
        [info, [r.detail for r in rows(ci_client).values()], events(ci_client, "ci-infra-error")]
    )
    assert "the job's upstream 'http://carry:[redacted]@127.0.0.1:9/u' is not" in stored, stored
    assert "pw-4815162342" not in stored + log_text(ci_client, row.run_id)


def _hostile_check(marks: Path, url: str, secret: str, name: str = "hostile") -> StepSpec:
    """The check code of bench/reliability's hostile-check scenario: it prints one line per
    attempt ("<attempt>|achieved|how" or "...|blocked|why") and fails if any was achieved."""
    script = marks / "hostile.py"
    script.write_text(HOSTILE_SCRIPT)
    # What the script looks for: the broker URL itself (this Redis has no password) and the
    # token, reversed so that they are in no environment themselves.
    needles = {"password": url[::-1], "token": secret[::-1]}
    (marks / "needles.json").write_text(json.dumps(needles))
    port = str(urlsplit(url).port)
    env = {"BROKER_PORT": port, "MARKS": str(marks), "RUNNER_SITE": str(RUNNER_SITE)}
    return StepSpec(name, (sys.executable, "-I", str(script)), env=env)


HostileRun = Callable[..., tuple[str, str]]


@pytest.fixture
def hostile_run(
    ci_client: redis.Redis,
    celery_app: Celery,
    world: World,
    marks: Path,
    url: str,
    start_runners: Any,
) -> Iterator[HostileRun]:
    """Runs the hostile check on a gaudi runner whose environment holds a GitHub token;
    returns the run's final state and its log. `sandbox` and `networked` are the runner's
    own config for it."""

    def run(*, sandbox: Any = None, networked: bool = False) -> tuple[str, str]:
        secret = "ghp_runnerhostsecret" + uuid.uuid4().hex[:8]
        name = "online" if networked else "hostile"
        if sandbox is not None:
            world.runner_config.set("gaudi", sandbox=sandbox)
        if networked:
            world.runner_config.networked.add(name)
        start_runners(("gaudi", "gaudi1@%h"), env={"GITHUB_TOKEN": secret})
        check = _hostile_check(marks, url, secret, name=name)
        row = request(ci_client, celery_app, world, world.head(), [target("gaudi", check)])[0]
        state = str(finished(ci_client, row.run_id)["state"])
        return state, log_text(ci_client, row.run_id)

    try:
        yield run
    finally:  # where a check without the sandbox got that far
        (RUNNER_SITE / RUNNER_PTH).unlink(missing_ok=True)


def test_check_code_cannot_see_the_runner_or_reach_the_broker(hostile_run: HostileRun) -> None:
    """Stripping the step's environment is not enough: a step running as the runner's user
    (root on many hosts) could read the runner's own environment in /proc, or just connect to
    the broker. In its own namespaces it sees neither the runner nor any route out."""
    state, text = hostile_run()
    assert state == "success", text
    for attempt in (
        "read the runner's environment in /proc",
        "see or signal the runner process",
        "connect to the broker",
    ):
        assert f"stdout: {attempt}|blocked|" in text, text
    assert "runs in its own PID, mount, IPC and UTS namespaces and a user namespace" in text
    assert "holds no power over the host's, with no network" in text


def test_a_step_gets_the_network_only_where_the_runners_config_says_so(
    hostile_run: HostileRun,
) -> None:
    """`network: true` on a step (say, one that downloads a model) gives it a network of its
    own with a way out (slirp4netns) but no route to the broker or the runner host (issue 33:
    it used to get the host's network, and with it the broker)."""
    state, text = hostile_run(networked=True)
    assert state == "success", text
    assert "stdout: connect to the broker|blocked|" in text, text
    assert "stdout: read the runner's environment in /proc|blocked|" in text
    assert "with a network of its own (slirp4netns)" in text


def test_a_runner_configured_without_a_sandbox_says_so_in_every_run_log(
    hostile_run: HostileRun,
) -> None:
    """sandbox: none is the runner's owner's choice, and the hostile check shows what it costs."""
    state, text = hostile_run(sandbox={"mode": "none", "accept_risk": sandbox.ACCEPTED_RISK})
    assert state == "failure", text
    assert "runs without a sandbox (the runner's config says sandbox: none)" in text
    assert "stdout: see or signal the runner process|achieved|" in text, text


@pytest.mark.skipif(
    sandbox.bwrap_unavailable() is not None and not os.environ.get("CI"),
    reason=f"no bubblewrap here: {sandbox.bwrap_unavailable()}",
)
def test_under_bwrap_a_check_builds_in_its_tree_and_cannot_write_the_host(
    ci_client: redis.Redis, celery_app: Celery, world: World, start_runners: Any
) -> None:
    """sandbox: bwrap on a real runner: the check writes its tree, and the host's files (here
    one that stands for the runner's own code, outside /tmp) are read-only to it, even as root."""
    host = Path(tempfile.mkdtemp(prefix="carry-runner-code-", dir="/var/tmp"))
    code = host / "carry_code.py"
    code.write_text("trusted = True\n")
    try:
        world.runner_config.set("gaudi", sandbox="bwrap")
        start_runners(("gaudi", "gaudi1@%h"))
        script = f"test -f fixed.txt && echo built > build.txt && {{ echo planted >> {code} || exit 1; }}"
        check = StepSpec("fixed", sh(script))
        run = request(ci_client, celery_app, world, world.head(), [target("gaudi", check)])[0]
        info = finished(ci_client, run.run_id)
        text = log_text(ci_client, run.run_id)
        assert info["state"] == "failure", text
        assert "Read-only file system" in text, text
        assert "runs under bubblewrap in its own PID, mount, IPC and UTS namespaces" in text
        assert code.read_text() == "trusted = True\n"
    finally:
        shutil.rmtree(host)


def test_a_job_cannot_plant_hooks_or_config_for_the_next(
    ci_client: redis.Redis,
    celery_app: Celery,
    world: World,
    marks: Path,
    start_runners: Any,
) -> None:
    """The clone is shared between jobs: what one job's code writes into .git (a hook, a
    core.fsmonitor command) must not run when carry's git prepares the next job."""
    start_runners(("gaudi", "gaudi1@%h"))
    pwned = marks / "pwned"
    plant = StepSpec(
        "plant",
        sh(
            "for h in post-checkout pre-commit post-applypatch applypatch-msg; do "
            'printf "#!/bin/sh\\ntouch %s-$h\\n" "$PWNED" > .git/hooks/$h; '
            "chmod +x .git/hooks/$h; done; "
            'git config core.fsmonitor "touch $PWNED-fsmonitor; false"; '
            "true"  # where the sandbox makes .git read-only, every write above fails
        ),
        env={"PWNED": str(pwned)},
    )
    first = request(ci_client, celery_app, world, world.head(), [target("gaudi", plant)])[0]
    assert finished(ci_client, first.run_id)["state"] == "success"
    check = StepSpec("fixed", sh("test -f fixed.txt"))
    second = request(ci_client, celery_app, world, world.head(), [target("gaudi", check)])[0]
    info = finished(ci_client, second.run_id)
    assert info["state"] == "success", log_text(ci_client, second.run_id)
    assert sorted(p.name for p in marks.iterdir() if p.name.startswith("pwned")) == []


@pytest.mark.skipif(
    sandbox.namespaces_unavailable() is not None, reason="a private /tmp needs a mount namespace"
)
def test_a_jobs_tmp_is_its_own_and_goes_with_it(
    ci_client: redis.Redis,
    celery_app: Celery,
    world: World,
    marks: Path,
    start_runners: Any,
) -> None:
    """What a job's steps write to /tmp or TMPDIR lands in the job's own directory: the next
    job does not see it, the host's /tmp never holds it, and the directory is removed after
    the job (issue 33: /tmp had been shared between jobs under the default namespaces)."""
    (runner,) = start_runners(("gaudi", "gaudi1@%h"))
    name = f"carry-left-{uuid.uuid4().hex}"
    step = StepSpec(
        "tmp",
        sh(
            f'test -e /tmp/{name} && echo "found it" >> "$MARK/found"; '
            f'echo left > /tmp/{name} && echo left > "$TMPDIR/{name}-tmpdir"; '
            'echo "$TMPDIR" >> "$MARK/tmpdirs"; test -f fixed.txt'
        ),
        env={"MARK": str(marks)},
    )
    for _ in range(2):
        run = request(ci_client, celery_app, world, world.head(), [target("gaudi", step)])[0]
        assert finished(ci_client, run.run_id)["state"] == "success", log_text(
            ci_client, run.run_id
        )
    assert not (marks / "found").exists()
    assert not Path("/tmp", name).exists()
    tmpdirs = set((marks / "tmpdirs").read_text().split())
    assert len(tmpdirs) == 1 and next(iter(tmpdirs)).endswith(".tmp"), tmpdirs
    assert not Path(next(iter(tmpdirs))).exists()  # removed after the job
    assert list(runner.workdir.glob("clones/*.tmp")) == []


def test_a_job_cannot_leave_its_home_for_the_next_or_the_runner(
    ci_client: redis.Redis,
    celery_app: Celery,
    world: World,
    marks: Path,
    tmp_path: Path,
    start_runners: Any,
) -> None:
    """HOME is where code leaves what the next program runs: a Python user site's .pth file,
    shell and tool dotfiles, caches. Each job's steps get a home of their own, made anew: not
    the runner's, and nothing of the previous job's."""
    runner_home = tmp_path / "runner-home"
    runner_home.mkdir()
    start_runners(("gaudi", "gaudi1@%h"), env={"HOME": str(runner_home)})
    site = ".local/lib/python3.11/site-packages"
    plant = StepSpec(
        "plant",
        sh(
            f'mkdir -p "$HOME/{site}" && echo "import os" > "$HOME/{site}/planted.pth" '
            '&& echo "$HOME" > "$MARK/home-1" && chmod 500 "$HOME/.local"'
        ),
        env={"MARK": str(marks)},
    )
    first = request(ci_client, celery_app, world, world.head(), [target("gaudi", plant)])[0]
    assert finished(ci_client, first.run_id)["state"] == "success", log_text(
        ci_client, first.run_id
    )
    # The next job finds an empty home, and swaps it for a link to a directory of the host's.
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "file").write_text("mine")
    look = StepSpec(
        "look",
        sh(
            f'echo "$HOME" >> "$MARK/homes"; test -d "$HOME" && test ! -e "$HOME/{site}" '
            # Where HOME is a mount of its own (namespaces), the swap fails: nothing to clean.
            f'&& {{ rm -rf "$HOME" && ln -s {kept} "$HOME" || true; }}'
        ),
        env={"MARK": str(marks)},
    )
    for _ in range(2):
        run = request(ci_client, celery_app, world, world.head(), [target("gaudi", look)])[0]
        assert finished(ci_client, run.run_id)["state"] == "success", log_text(
            ci_client, run.run_id
        )
    homes = {*(marks / "homes").read_text().split(), (marks / "home-1").read_text().strip()}
    assert str(runner_home) not in homes
    assert list(runner_home.iterdir()) == []
    assert (kept / "file").read_text() == "mine"  # the link was removed, not followed


def tiny_wheel(name: str) -> bytes:
    """A pure-Python wheel of one module that says where it was imported from."""
    files = {
        f"{name}/__init__.py": b"",
        f"{name}-0.1.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n",
        f"{name}-0.1.dist-info/WHEEL": "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [f"{path},sha256={_digest(data)},{len(data)}" for path, data in files.items()]
    record.append(f"{name}-0.1.dist-info/RECORD,,")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as wheel:
        for path, data in files.items():
            wheel.writestr(path, data)
        wheel.writestr(f"{name}-0.1.dist-info/RECORD", "\n".join(record) + "\n")
    return buffer.getvalue()


def _digest(data: str | bytes) -> str:
    raw = data.encode() if isinstance(data, str) else data
    return base64.urlsafe_b64encode(hashlib.sha256(raw).digest()).rstrip(b"=").decode()


def test_setup_installs_into_the_jobs_own_python_and_the_next_job_starts_clean(
    ci_client: redis.Redis, celery_app: Celery, world: World, start_runners: Any
) -> None:
    """The runner's Python is read-only to steps, so `pip install` in a setup step goes into
    the job's own virtual environment (first on PATH), which also sees the runner's packages
    (carry's checks). The next job's environment is made anew: what the first installed is
    gone, and the runner's Python never had it."""
    start_runners(("gaudi", "gaudi1@%h"))
    wheel = "carry_tiny-0.1-py3-none-any.whl"
    install = StepSpec("install", ("pip", "install", "-q", "--no-index", "--no-deps", wheel))
    where = "import carry_tiny, vllm_checks as c, sys; print(carry_tiny.__file__, c.__file__)"
    imports = StepSpec("imports", ("python", "-I", "-c", where))
    first = world.head({wheel: tiny_wheel("carry_tiny")})
    run = request(ci_client, celery_app, world, first, [target("gaudi", imports, setup=(install,))])
    info = finished(ci_client, run[0].run_id)
    text = log_text(ci_client, run[0].run_id)
    assert info["state"] == "success", text
    installed, checks = next(
        line.removeprefix("stdout: ").split()
        for line in text.splitlines()
        if "carry_tiny" in line and line.startswith("stdout: ")
    )
    assert Path(installed).is_relative_to(world.runner_config.path.parent / "runners"), installed
    assert ".python/" in installed and Path(checks).is_relative_to(REPO_ROOT)
    assert not any(Path(p).name.startswith("carry_tiny") for p in RUNNER_SITE.iterdir())
    absent = "import importlib.util as u, sys; sys.exit(u.find_spec('carry_tiny') is not None)"
    gone = StepSpec("gone", ("python", "-I", "-c", absent))
    again = request(ci_client, celery_app, world, world.head(), [target("gaudi", gone)])
    assert finished(ci_client, again[0].run_id)["state"] == "success", log_text(
        ci_client, again[0].run_id
    )


def test_a_runner_that_cannot_run_its_steps_does_not_start(
    ci_client: redis.Redis, world: World, url: str, tmp_path: Path
) -> None:
    """A step user this host does not have (or a sandbox it cannot give) would fail every job:
    the runner says why and exits before it takes a job from a runner that could run it."""
    world.runner_config.set("gaudi", step_user="no-such-user-here")
    ci_client.lpush("hw.gaudi", "a job for another gaudi runner")
    config = {"CARRY_CONFIG": str(world.runner_config.path)}
    runner = spawn_runner("gaudi", "gaudi1@%h", url, tmp_path, config)
    try:
        assert runner.proc.wait(timeout=60) == 2
    finally:
        stop_runner(runner)
    said = runner.log.read_text()
    assert "carry: error: runners.gaudi: step_user 'no-such-user-here' is not a user" in said
    assert runners(ci_client) == [] and ci_client.llen("hw.gaudi") == 1


# --------------------------------------------------------------------------- trust boundary


def test_a_forged_job_in_the_queue_runs_nothing(
    ci_client: redis.Redis, celery_app: Celery, world: World, marks: Path, start_runners: Any
) -> None:
    """Whoever can write to the broker can queue any payload; a job the service did not sign
    runs nothing (tests/integration/test_job_signing.py). Even one signed with the service's
    key (a key stolen, a service bug) runs only what the runner's own config names: signed
    here, a forged job for a real run (one waiting for an approval) and one for
    a made-up run are both refused, visibly, with no command run; the real run is left as
    it was (a forgery could end it as an infra-error)."""
    start_runners(("gaudi", "gaudi1@%h"))
    check = StepSpec("fixed", sh("test -f fixed.txt"))
    waiting = request(
        ci_client, celery_app, world, world.head(), [target("gaudi", check)], actor="x"
    )
    assert waiting[0].state == "waiting-approval"
    info = ci.run_info(ci_client, waiting[0].run_id)
    assert info is not None
    payload = info["payload"]
    pwned = marks / "pwned"
    touch = ["sh", "-c", f"touch {pwned}"]
    hijack = {**payload, "checks": [{**payload["checks"][0], "run": touch}]}
    made_up = {**payload, "run_id": "gaudi-forged", "checks": [{"name": "evil", "run": touch}]}
    for forged in (hijack, made_up):
        celery_app.send_task(
            ci_runs.TASK_NAME, args=[forged], kwargs=service_signed(forged), queue="hw.gaudi"
        )

    wait_for(lambda: pwned.exists() or len(events(ci_client, "ci-refused")) == 2, "both jobs")
    assert not pwned.exists(), "a forged command ran"
    reasons = {e["data"]["run_id"]: e["data"]["reason"] for e in events(ci_client, "ci-refused")}
    assert reasons == {
        waiting[0].run_id: "command of check 'fixed' differs from this runner's config",
        "gaudi-forged": "check 'evil' is not in this runner's config",
    }
    left = ci.run_info(ci_client, waiting[0].run_id)
    assert left is not None and left["state"] == "waiting-approval"
    assert rows(ci_client)["gaudi/fixed"].state == "waiting-approval"
    assert "differs from this runner's config" in log_text(ci_client, waiting[0].run_id)
    # "gaudi-forged" is no run id carry issues: its log is not the runner's to write
    assert log_text(ci_client, "gaudi-forged") == ""
    assert not events(ci_client, "ci-started")


def _forge_with_the_runners_password(
    url: str, client: redis.Redis, world: World, check: StepSpec, head: str, **signed: Any
) -> str:
    """What a check that stole its runner's broker password can do (issue 33): write a run
    record of its kind that carry never issued, for a head nobody approved, with only the
    runner's configured commands, and queue its job; returns the forged run id."""
    channel.set_runner_user(client, "gaudi", "hw.gaudi", "runner-password")
    limited = url.replace("redis://", "redis://carry-runner-gaudi:runner-password@", 1)
    attacker = redis.Redis.from_url(limited)
    run_id = "gaudi-0123456789ab"  # the form of a run id carry issues for this kind
    tree = world.tree(head)
    job = JobPayload(run_id, SERIES, "gaudi", "hw.gaudi", "f" * 64, head, tree, (), (check,))
    payload = job.to_dict()
    record = {"payload": json.dumps(payload), "series": SERIES, "kind": "gaudi"}
    record |= {"tree_key": "f" * 64, "head_sha": head, "state": "queued", "dispatched": "1"}
    attacker.hset(f"carry:ci:run:{run_id}", mapping=record)
    # The bytes a Celery client publishes for it (made here on a scratch queue), pushed onto
    # the runner's queue as its broker user may.
    make_app(url).send_task(
        ci_runs.TASK_NAME, args=[payload], kwargs=signed, queue="forge", task_id=run_id
    )
    message = json.loads(client.rpop("forge") or b"")
    message["properties"]["delivery_info"]["routing_key"] = "hw.gaudi"
    attacker.lpush("hw.gaudi", json.dumps(message))
    return run_id


def test_a_job_forged_with_the_runners_broker_password_runs_nothing(
    url: str, ci_client: redis.Redis, world: World, marks: Path, start_runners: Any
) -> None:
    """A well-formed job carry never issued, for a stranger's head, with a run record its
    kind's broker user may write: the runner ran it (the check ran on a head nobody
    approved). A job carries the service's signature; this one has none, or one the service
    made for another job: refused, nothing runs, the refusal is in the history."""
    check = marking_check(marks)
    world.runner_config.allow([target("gaudi", check)])
    start_runners(("gaudi", "gaudi1@%h"))
    stranger = world.head({"stranger.txt": "x\n"})
    push(ci_client, SERIES, stranger, "stranger", trusted=False)  # carry waits for an approval
    run_id = _forge_with_the_runners_password(url, ci_client, world, check, stranger)
    wait_for(lambda: events(ci_client, "ci-refused", run_id) or list(marks.iterdir()), "the job")
    assert list(marks.iterdir()) == [], "the forged job ran"
    (refused,) = events(ci_client, "ci-refused", run_id)
    assert refused["data"]["reason"] == (
        "the job carries no signature from carry's service (forged, or queued by hand)"
    )
    assert not events(ci_client, "ci-started")
    # A signature the service made for another job does not carry over to this one.
    borrowed = service_signed({"run_id": run_id, "kind": "gaudi", "checks": []})
    ci_client.delete(f"carry:ci:run:{run_id}")
    _forge_with_the_runners_password(url, ci_client, world, check, stranger, **borrowed)
    wait_for(lambda: len(events(ci_client, "ci-refused", run_id)) == 2, "the second job")
    assert list(marks.iterdir()) == [], "the job with a borrowed signature ran"
    reasons = [e["data"]["reason"] for e in events(ci_client, "ci-refused", run_id)]
    assert [r for r in reasons if r != refused["data"]["reason"]] == [
        "the job's signature does not verify with this runner's job public key: not signed by "
        "carry's service, or its payload changed since it was signed"
    ]


def test_an_expired_job_or_one_signed_for_another_kind_runs_nothing(
    ci_client: redis.Redis, celery_app: Celery, world: World, marks: Path, start_runners: Any
) -> None:
    """The service's signature names the job's kind and when it expires: a real job whose
    signature expired is refused (and its run ends, visibly: the runner cannot run it), and
    a job signed for gb10 runs nothing on a gaudi runner."""
    check = marking_check(marks)
    head = world.head()
    (queued,) = request(ci_client, celery_app, world, head, [target("gaudi", check)])
    info = ci.run_info(ci_client, queued.run_id)
    assert info is not None
    payload = info["payload"]
    # The service's delivery: the payload and its signature, never the key that made it.
    (raw,) = ci_client.lrange("hw.gaudi", 0, -1)
    message = json.loads(raw)
    body = base64.b64decode(message["body"])
    args, kwargs, _ = json.loads(body)
    assert args == [payload] and set(kwargs) == {"signed"}
    key_text = Path(os.environ["CARRY_JOB_SIGNING_KEY_PATH"]).read_text()
    key_body = [line for line in key_text.splitlines() if "-----" not in line]
    assert key_body and not any(line.encode() in raw + body for line in key_body)
    public = signing.public_key_from_text(Path(os.environ["CARRY_JOB_PUBLIC_KEY_PATH"]).read_text())
    assert (
        signing.verify_job(public, payload, kwargs["signed"], kind="gaudi", now=time.time()) is None
    )
    ci_client.delete("hw.gaudi")  # this test sends its own copies
    celery_app.send_task(
        ci_runs.TASK_NAME,
        args=[payload],
        kwargs=service_signed(payload, ttl_s=-5),
        queue="hw.gaudi",
    )
    elsewhere = {**payload, "run_id": "gb10-0123456789ab", "kind": "gb10", "queue": "hw.gb10"}
    celery_app.send_task(
        ci_runs.TASK_NAME, args=[elsewhere], kwargs=service_signed(elsewhere), queue="hw.gaudi"
    )
    start_runners(("gaudi", "gaudi1@%h"))
    wait_for(lambda: len(events(ci_client, "ci-refused")) == 2, "both jobs refused")
    reasons = {e["data"]["run_id"]: e["data"]["reason"] for e in events(ci_client, "ci-refused")}
    assert reasons[queued.run_id].startswith("the job's signature expired")
    assert reasons["gb10-0123456789ab"] == (
        "the job is signed for runner kind 'gb10', this runner is 'gaudi'"
    )
    ended = finished(ci_client, queued.run_id)
    assert ended["state"] == "infra-error" and "signature expired" in ended["detail"]
    assert list(marks.iterdir()) == []


def test_a_runner_without_a_job_public_key_does_not_start(
    url: str, ci_client: redis.Redis, world: World, tmp_path: Path
) -> None:
    """A runner verifies every job with the service's public key: one that has none would
    take jobs only to refuse them, so it does not start, and says why in one line."""
    ci_client.lpush("hw.gaudi", "a job for a gaudi runner that can verify it")
    config = {"CARRY_CONFIG": str(world.runner_config.path)}
    empty = tmp_path / "no-keys-here"
    cases = {
        "none": {
            "CARRY_JOB_PUBLIC_KEY_PATH": "",
            "CARRY_JOB_SIGNING_KEY_PATH": "",
            "CARRY_CACHE_DIR": str(empty),
        },
        "a private key": {"CARRY_JOB_PUBLIC_KEY": "-----BEGIN PRIVATE KEY-----\nx\n"},
    }
    said = {}
    for case, env in cases.items():
        runner = spawn_runner("gaudi", f"gaudi-{len(said)}@%h", url, tmp_path, {**config, **env})
        try:
            assert runner.proc.wait(timeout=60) == 2, case
        finally:
            stop_runner(runner)
        said[case] = [ln for ln in runner.log.read_text().splitlines() if ln.startswith("carry:")]
    assert said["none"] == [f"carry: error: {NO_PUBLIC_KEY}"]
    assert said["a private key"] == [
        "carry: error: environment: CARRY_JOB_PUBLIC_KEY: that is a private key: a runner "
        "holds only the public half"
    ]
    assert runners(ci_client) == [] and ci_client.llen("hw.gaudi") == 1


def marking_check(marks: Path) -> StepSpec:
    """A check that leaves ran-<upstream sha> in `marks` for each tree it runs on."""
    return StepSpec(
        "fixed",
        sh('touch "$MARK/ran-$CARRY_UPSTREAM_SHA"; test -f fixed.txt'),
        env={"MARK": str(marks)},
    )


def test_a_copy_of_a_run_that_waits_for_approval_runs_nothing_until_it_is_approved(
    ci_client: redis.Redis, celery_app: Celery, world: World, marks: Path, start_runners: Any
) -> None:
    """A verbatim copy of a run that waits for /carry approve names only configured commands:
    the runner ran it, a stranger's head on the hardware with no approval. And a copy whose
    tree names an option for git (--upload-pack runs a command) reached git. Both are refused,
    and the run still waits, then runs once approved."""
    start_runners(("gaudi", "gaudi1@%h"))
    check = marking_check(marks)
    head = world.head()
    (waiting,) = request(ci_client, celery_app, world, head, [target("gaudi", check)], actor="x")
    info = ci.run_info(ci_client, waiting.run_id)
    assert waiting.state == "waiting-approval" and info is not None
    payload = info["payload"]
    pwned = marks / "pwned"
    option = {**payload["tree"], "upstream_url": f"--upload-pack=touch {pwned};"}
    for forged in (payload, {**payload, "tree": option}):
        celery_app.send_task(
            ci_runs.TASK_NAME, args=[forged], kwargs=service_signed(forged), queue="hw.gaudi"
        )

    wait_for(lambda: len(events(ci_client, "ci-refused")) == 2, "both copies refused")
    assert sorted(p.name for p in marks.iterdir()) == []
    reasons = sorted(e["data"]["reason"] for e in events(ci_client, "ci-refused"))
    assert reasons[0] == f"run {waiting.run_id} waits for /carry approve: carry has not queued it"
    assert reasons[1].startswith("the tree's upstream_url '--upload-pack=touch")
    run = ci.run_info(ci_client, waiting.run_id)
    assert run is not None and run["state"] == "waiting-approval"
    ci.approve(ci_client, SERIES, head, "maintainer", issuer=job_issuer(), celery_app=celery_app)
    assert finished(ci_client, waiting.run_id)["state"] == "success"
    assert sorted(p.name for p in marks.iterdir()) == [f"ran-{head}"]


def test_a_copy_of_a_queued_run_with_another_tree_runs_nothing(
    ci_client: redis.Redis, celery_app: Celery, world: World, marks: Path, start_runners: Any
) -> None:
    """A run carry queued names its tree; a copy of it that names another upstream commit (a
    head nobody approved) is another job, and the runner refuses it."""
    check = marking_check(marks)
    head = world.head()
    (queued,) = request(ci_client, celery_app, world, head, [target("gaudi", check)])
    info = ci.run_info(ci_client, queued.run_id)
    assert queued.state == "queued" and info is not None
    other = world.head({"stranger.txt": "x\n"})
    tree = {**info["payload"]["tree"], "upstream_sha": other}
    copy = {**info["payload"], "tree": tree}
    celery_app.send_task(
        ci_runs.TASK_NAME, args=[copy], kwargs=service_signed(copy), queue="hw.gaudi"
    )
    start_runners(("gaudi", "gaudi1@%h"))
    assert finished(ci_client, queued.run_id)["state"] == "success"
    wait_for(lambda: events(ci_client, "ci-refused"), "the copy refused")
    (refused,) = events(ci_client, "ci-refused")
    assert refused["data"]["reason"] == (
        f"its tree differs from run {queued.run_id} as carry issued it"
    )
    assert sorted(p.name for p in marks.iterdir()) == [f"ran-{head}"]


def test_a_malformed_message_in_the_queue_is_set_aside_and_the_runner_keeps_serving(
    url: str, ci_client: redis.Redis, celery_app: Celery, world: World, start_runners: Any
) -> None:
    """Anyone who may push to a runner's queue (its own broker user may, to requeue) can
    push bytes that are no Celery message; a stock kombu worker stopped at the first of them,
    with status 0. The runner sets each aside, whole, in its kind's quarantine list with one
    log line, and goes on serving real jobs, all with its least-privilege broker user."""
    channel.set_runner_user(ci_client, "gaudi", "hw.gaudi", "runner-password")
    limited = url.replace("redis://", "redis://carry-runner-gaudi:runner-password@", 1)
    (runner,) = start_runners(("gaudi", "gaudi1@%h"), env={"REDIS_URL": limited})
    junk = malformed(real_envelope(celery_app, ci_client))
    ci_client.lpush("hw.gaudi", *junk.values())
    check = StepSpec("fixed", sh("test -f fixed.txt"))
    run = request(ci_client, celery_app, world, world.head(), [target("gaudi", check)])[0]
    info = finished(ci_client, run.run_id)
    text = runner.log.read_text(errors="replace")
    assert info["state"] == "success", text[-3000:]
    assert runner.proc.poll() is None, text[-3000:]
    kept = quarantine.set_aside_messages(ci_client, channel.quarantine_key("gaudi"))
    assert sorted(kept) == sorted(junk.values())
    said = [line for line in text.splitlines() if "is not a Celery message" in line]
    assert sorted(why for why in junk if any(f"({why}, " in line for line in said)) == sorted(junk)
    assert len(said) == len(junk)
    assert "Traceback" not in text


def test_a_runner_stopped_by_an_unrecoverable_error_exits_non_zero(
    url: str, ci_client: redis.Redis, start_runners: Any
) -> None:
    """A runner whose worker stops on an error it cannot recover from (here its broker user
    loses BRPOP) exits non-zero, so that a supervisor restarting on failure restarts it;
    Celery's worker_main returned 0."""
    channel.set_runner_user(ci_client, "gaudi", "hw.gaudi", "runner-password")
    limited = url.replace("redis://", "redis://carry-runner-gaudi:runner-password@", 1)
    (runner,) = start_runners(("gaudi", "gaudi1@%h"), env={"REDIS_URL": limited})
    ci_client.execute_command("ACL", "SETUSER", "carry-runner-gaudi", "-brpop")
    status = wait_for(lambda: runner.proc.poll() is not None and [runner.proc.returncode], "exit")
    assert status != [0], runner.log.read_text(errors="replace")[-2000:]
    assert "Unrecoverable error" in runner.log.read_text(errors="replace")


def test_a_runner_needs_no_more_than_its_least_privilege_broker_user(
    url: str, ci_client: redis.Redis, celery_app: Celery, world: World, start_runners: Any
) -> None:
    """The runner's Redis user (bot/store/runner_channel.acl_rules: no series state, history,
    service queue or pub/sub beyond the live page) is enough for a whole run: the verdict,
    its rows and history arrive through the service's applier, and Redis denied nothing."""
    channel.set_runner_user(ci_client, "gaudi", "hw.gaudi", "runner-password")
    ci_client.execute_command("ACL", "LOG", "RESET")
    limited = url.replace("redis://", "redis://carry-runner-gaudi:runner-password@", 1)
    start_runners(("gaudi", "gaudi1@%h"), env={"REDIS_URL": limited})
    check = StepSpec("fixed", sh("test -f fixed.txt && echo present"))
    run = request(ci_client, celery_app, world, world.head(), [target("gaudi", check)])[0]
    info = finished(ci_client, run.run_id)
    assert info["state"] == "success", info
    assert rows(ci_client)["gaudi/fixed"].state == "success"
    assert [r["state"] for r in reported(ci_client)][-1] == "success"
    assert len(events(ci_client, "ci-started", run.run_id)) == 1
    assert len(events(ci_client, "ci-check", run.run_id)) == 1
    assert "stdout: present" in log_text(ci_client, run.run_id)
    # A forged job with a made-up run id is refused without touching what is not the runner's.
    forged = {**info["payload"], "run_id": "gaudi-forged"}
    forged["checks"] = [{"name": "evil", "run": ["true"]}]
    celery_app.send_task(
        ci_runs.TASK_NAME, args=[forged], kwargs=service_signed(forged), queue="hw.gaudi"
    )
    wait_for(lambda: events(ci_client, "ci-refused", "gaudi-forged"), "the forged job refused")
    assert ci_client.execute_command("ACL", "LOG") == []


def test_a_runner_without_config_runs_nothing(
    ci_client: redis.Redis, celery_app: Celery, world: World, marks: Path, start_runners: Any
) -> None:
    start_runners(("gaudi", "gaudi1@%h"), configured=False)
    check = StepSpec("mark", sh(f"touch {marks / 'ran'}"))
    run = request(ci_client, celery_app, world, world.head(), [target("gaudi", check)])[0]
    info = finished(ci_client, run.run_id)
    assert info["state"] == "infra-error" and "this runner has no config" in info["detail"]
    assert not (marks / "ran").exists()


# --------------------------------------------------------------------------- the step user


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="a root runner switches users")


@pytest.fixture
def enterable(tmp_path: Path) -> Iterator[None]:
    """Lets any user enter the test's directories (pytest makes them root's 0700), as a
    runner host's workdir must be for its step user."""
    chain = [
        p for p in (tmp_path, *tmp_path.parents) if p.is_relative_to("/tmp") and p != Path("/tmp")
    ]
    modes = {p: p.stat().st_mode & 0o777 for p in chain}
    for path in chain:
        path.chmod(modes[path] | 0o011)
    yield
    # pytest-of-<user> is every pytest session's: closing it again while another session's
    # step user is in a job there made that job an infra-error (the step user could not enter
    # its tree). It stays enterable (not readable); this session's own directories close.
    for path, mode in modes.items():
        if not path.name.startswith("pytest-of-"):
            path.chmod(mode)


@needs_root
def test_steps_run_as_the_step_user_and_cannot_write_the_runners_files(
    ci_client: redis.Redis,
    celery_app: Celery,
    world: World,
    marks: Path,
    start_runners: Any,
    enterable: None,
) -> None:
    """As root a step could rewrite the runner's installed code; as step_user it writes only
    the tree handed to it, and the next job's git still owns the clone."""
    world.runner_config.set("gaudi", step_user="nobody")
    start_runners(("gaudi", "gaudi1@%h"))
    runner_code = marks / "runner_code.py"  # stands for carry's own code on the host
    runner_code.write_text("trusted = True\n")
    runner_code.chmod(0o644)
    marks.chmod(0o755)
    probe = StepSpec(
        "as-user",
        sh(
            'echo "uid $(id -u)"; echo built > built.txt && echo "tree written"; '
            '(echo planted >> "$CODE") 2>/dev/null && echo "code written" || echo "code refused"; '
            'echo "head $(git rev-parse HEAD)"; '
            '(git update-ref refs/replace/x HEAD) 2>/dev/null && echo "git dir written" '
            '|| echo "git dir refused"; '
            "test -f fixed.txt"
        ),
        env={"CODE": str(runner_code)},
    )
    first = request(ci_client, celery_app, world, world.head(), [target("gaudi", probe)])[0]
    state = finished(ci_client, first.run_id)["state"]
    text = log_text(ci_client, first.run_id)
    assert state == "success", text
    assert "stdout: uid 65534" in text and "stdout: tree written" in text, text
    assert "stdout: code refused" in text, text
    # The step user's git reads the clone (root's .git), and cannot write it.
    heads = [line.split()[-1] for line in text.splitlines() if line.startswith("stdout: head ")]
    assert len(heads) == 1 and len(heads[0]) == 40, text  # git would say "dubious ownership"
    assert "stdout: git dir refused" in text, text
    assert "the tree belongs to nobody for the steps" in text
    assert "as nobody (uid 65534)" in text
    assert runner_code.read_text() == "trusted = True\n"
    again = StepSpec("fixed", sh("test -f fixed.txt && test ! -e built.txt"))
    second = request(ci_client, celery_app, world, world.head(), [target("gaudi", again)])[0]
    assert finished(ci_client, second.run_id)["state"] == "success", log_text(
        ci_client, second.run_id
    )


@needs_root
def test_a_workdir_the_step_user_cannot_enter_is_an_infra_error_naming_it(
    ci_client: redis.Redis, celery_app: Celery, world: World, start_runners: Any
) -> None:
    world.runner_config.set("gaudi", step_user="nobody")
    start_runners(("gaudi", "gaudi1@%h"))
    check = StepSpec("fixed", sh("test -f fixed.txt"))
    row = request(ci_client, celery_app, world, world.head(), [target("gaudi", check)])[0]
    info = finished(ci_client, row.run_id)
    text = log_text(ci_client, row.run_id)
    assert info["state"] == "infra-error", text
    assert "the step user nobody cannot enter" in str(info) + text


@pytest.fixture
def python_enterable() -> Iterator[None]:
    """Lets any user enter the directories above the runner's Python (this host keeps it
    under root's 0700 home), as on a runner host whose Python is in /usr or /opt."""
    python = Path(os.path.realpath(sys.executable))
    closed = [p for p in python.parents if not p.stat().st_mode & 0o001]
    for path in closed:
        path.chmod(path.stat().st_mode | 0o001)
    yield
    for path in closed:
        path.chmod(path.stat().st_mode & ~0o001)


@needs_root
def test_a_root_runner_runs_its_steps_as_nobody_by_default(
    ci_client: redis.Redis,
    world: World,
    celery_app: Celery,
    marks: Path,
    start_runners: Any,
    enterable: None,
    python_enterable: None,
) -> None:
    """step_user: auto (no step_user in the config): where nobody can enter the workdir and
    run the runner's Python, the steps run as nobody and read none of root's files (a runner
    host's broker password in an env file, say)."""
    secret = marks / "runner.env"
    secret.write_text("REDIS_URL=redis://carry-runner-gaudi:hunter2@broker:6379/0\n")
    secret.chmod(0o600)
    marks.chmod(0o755)
    (runner,) = start_runners(("gaudi", "gaudi1@%h"))
    probe = StepSpec(
        "whoami",
        sh('echo "uid $(id -u)"; cat "$HOST_FILE" 2>/dev/null || echo "secret refused"'),
        env={"HOST_FILE": str(secret)},
    )
    row = request(ci_client, celery_app, world, world.head(), [target("gaudi", probe)])[0]
    info = finished(ci_client, row.run_id)
    text = log_text(ci_client, row.run_id)
    assert info["state"] == "success", text
    assert "stdout: uid 65534" in text and "stdout: secret refused" in text, text
    assert "hunter2" not in text
    assert "as nobody (uid 65534)" in text
    registered = {r["name"]: r for r in runners(ci_client)}
    assert registered[runner.name]["steps"].endswith(", as nobody"), registered


@needs_root
def test_where_nobody_cannot_run_steps_a_root_runner_says_why_they_run_as_root(
    ci_client: redis.Redis, world: World, celery_app: Celery, start_runners: Any
) -> None:
    """pytest's directories are root's 0700: under step_user: auto steps then run as root,
    and the run log and the runners page say why."""
    (runner,) = start_runners(("gaudi", "gaudi1@%h"))
    probe = StepSpec("whoami", sh('echo "uid $(id -u)"'))
    row = request(ci_client, celery_app, world, world.head(), [target("gaudi", probe)])[0]
    info = finished(ci_client, row.run_id)
    text = log_text(ci_client, row.run_id)
    assert info["state"] == "success", text
    assert "stdout: uid 0" in text
    why = "as root (step_user: auto, and nobody cannot enter "
    assert why in text and "above the runner's workdir)" in text, text
    steps = {r["name"]: r for r in runners(ci_client)}[runner.name]["steps"]
    assert why in steps and "above the runner's workdir)" in steps, steps


def test_a_job_naming_a_repository_the_runners_config_does_not_is_refused(
    ci_client: redis.Redis, celery_app: Celery, world: World, start_runners: Any, marks: Path
) -> None:
    """Issue 33: the repository a runner fetches comes from its own configuration, not the
    job: a run (as carry issued it, even) whose upstream is another repository runs nothing."""
    start_runners(("gaudi", "gaudi1@%h"))
    ran = marks / "ran"
    check = StepSpec("fixed", sh(f"touch {ran}"))
    once = target("gaudi", check, retry=RetryPolicy(max_attempts=1))
    world.runner_config.allow([once])
    other = RepoBuilder(world.root / "elsewhere")
    other.commit("someone else's code", {"app.txt": "hello\n"})
    tree = replace(world.tree(world.head()), upstream_url=str(other.path))
    trusted_push(ci_client, SERIES, tree.upstream_sha)
    (row,) = ci.request_ci(
        ci_client, celery_app, SERIES, [once], tree, issuer=job_issuer(), debounce_s=0
    )
    info = finished(ci_client, row.run_id)
    assert info["state"] == "infra-error"
    text = log_text(ci_client, row.run_id)
    assert f"the job's upstream '{other.path}' is not '{world.upstream.path}'" in text, text
    assert "it ran nothing" in text and not ran.exists()
    (refused,) = events(ci_client, "ci-refused")
    assert "where this runner's config says series 's1' comes from" in refused["data"]["reason"]
