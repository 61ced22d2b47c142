"""Celery tasks of the service: ingest events, rebase series, publish, poll upstreams.

Every task is safe to run twice: ingest skips events already handled, rebase skips a head and
series content it has checked, and each action carries an idempotency key.
"""

from __future__ import annotations

import logging
from typing import Any

import redis
from celery import Task
from celery.exceptions import SoftTimeLimitExceeded
from celery.signals import task_failure, worker_process_init, worker_ready

from bot.ci import runs as ci_runs
from bot.config import Settings, load_settings
from bot.core import events as ev
from bot.core import transitions as tr
from bot.core.history import HistoryKind
from bot.core.notify import STUCK_TASK
from bot.core.planner import plan, plan_duplicate
from bot.git.mirror import MirrorError
from bot.git.runner import GitError, GitOutOfMemory
from bot.github.forge import ForgeError, RateLimited, retry_delay
from bot.log import correlated, install_secrets, secret_values
from bot.queue.celery_app import GIT_TASKS, QUICK_QUEUE, app
from bot.store import deliveries
from bot.store import series as store
from bot.store.metrics import count_event
from workers import attention, dashboard_issue, poller, publish, redelivery, repo_identity, requeue
from workers import bisect as bisect  # registers carry.bisect
from workers import mention as mention  # registers carry.red_streak
from workers import notify as notify  # registers carry.notify
from workers.ci import github as hardware
from workers.ci import requests as ci
from workers.ci.reports import ReportApplier
from workers.cpu import yield_cpu
from workers.dispatch import carry_out
from workers.facts import gather
from workers.memory import limit_task_memory
from workers.rebase import rebase_series, register_series
from workers.runtime import Runtime, runtime
from workers.successor import find_successor

log = logging.getLogger("carry.tasks")

PERMISSION_RETRIES = 8  # about 8 minutes of backoff before a command is given up, aloud


def handle_event(rt: Runtime, event: ev.Event) -> None:
    """Plan and carry out one event. The event is marked handled only after every action ran,
    so a worker that dies half-way leaves it to the redelivery. Its repository is matched by
    GitHub's id (workers/repo_identity.py): a renamed repository's events are still carry's."""
    with correlated(event_key=event.key, delivery_id=event.delivery_id or None):
        resolved = repo_identity.resolve(rt, event)
        if resolved is None:
            return
        event = resolved
        if store.is_claimed(rt.redis, f"event:{event.key}"):
            store.append_history(rt.redis, None, HistoryKind.DUPLICATE_EVENT, key=event.key)
            if isinstance(event, ev.HeadMoved):  # a pusher a poll lacked; a head not followed
                for action in plan_duplicate(event, gather(rt, event=event)):
                    carry_out(rt, action)
            return
        count_event(rt.redis, event.kind)
        for action in plan(event, gather(rt, event=event)):
            carry_out(rt, action)
        store.claim(
            rt.redis, f"event:{event.key}", ttl_s=getattr(event, "remember_s", store.DONE_TTL_S)
        )


@app.task(name="carry.ingest", bind=True, acks_late=True, max_retries=10)
def ingest(self: Task, event: dict[str, Any]) -> None:
    with correlated(task_id=self.request.id):
        rt = runtime()
        handled = ev.event_from_dict(event)
        try:
            handle_event(rt, handled)
        except (ConnectionError, OSError) as err:
            raise self.retry(exc=err, countdown=min(60, 2**self.request.retries)) from err
        if handled.delivery_id:  # the sweep (workers/requeue.py) need not queue it again
            deliveries.settle(rt.redis, handled.delivery_id)


@app.task(name="carry.rebase", bind=True, acks_late=True, max_retries=None)
def rebase(
    self: Task,
    series_id: str,
    head_sha: str,
    head_ref: str = "",
    actor: str | None = None,
    force: bool = False,
    trigger: str = "",
) -> None:
    rt = runtime()
    with correlated(task_id=self.request.id, series=series_id):
        with store.series_lock(rt.redis, series_id, ttl_s=rt.settings.lock_ttl_s) as held:
            if not held:  # another job runs for this series: come back, it may supersede us
                raise self.retry(countdown=rt.settings.busy_retry_s, max_retries=None)
            try:
                finished = rebase_series(
                    rt,
                    series_id,
                    head_sha,
                    head_ref,
                    actor=actor,
                    force=force,
                    trigger=trigger,
                    lease=held,
                )
            except store.LeaseLost as err:  # its result is not stored: check this head again
                log.warning("%s: %s", series_id, err)
                store.append_history(
                    rt.redis, series_id, HistoryKind.LEASE_LOST, head=head_sha, reason=str(err)
                )
                raise self.retry(countdown=rt.settings.busy_retry_s, max_retries=None) from err
            except MemoryError as err:  # Python's own allocation, past CARRY_TASK_MEMORY_MB
                _out_of_memory(rt, series_id, head_sha, err)
                return
            except (MirrorError, GitError) as err:
                _visible_failure(
                    rt,
                    self,
                    series_id,
                    HistoryKind.REBASE_FAILED,
                    f"rebase on {head_sha[:12]}",
                    err,
                )
                return
            except SoftTimeLimitExceeded:
                _timed_out(rt, series_id, head_sha, rt.settings.rebase_time_limit_s)
                return
        if finished is not None:
            handle_event(rt, finished)


@app.task(name="carry.publish", bind=True, acks_late=True, max_retries=5)
def publish_task(
    self: Task,
    series_id: str,
    head_sha: str,
    digest: str,
    changed: bool,
    tree: str | None = None,
    every_head: bool = False,
) -> None:
    rt = runtime()
    with correlated(task_id=self.request.id, series=series_id):
        try:
            ready = publish.publish(
                rt, series_id, head_sha, digest, changed, tree, every_head=every_head
            )
            for event in ready:  # the tree to test: the planner decides (TEST_TREE)
                handle_event(rt, event)
        except (ForgeError, GitError, MirrorError) as err:
            _visible_failure(rt, self, series_id, HistoryKind.PUBLISH_FAILED, "publish", err)


def _retry_in(err: Exception, attempts: int) -> float:
    """Seconds before a failed step is tried again: what GitHub's rate limit asks, else a
    backoff."""
    return retry_delay(err, attempts)


def _timed_out(rt: Runtime, series_id: str, head_sha: str, limit_s: int) -> None:
    """A rebase stopped at its time limit: shown as the series' error, not retried (it would
    time out again); the other series' rebases went on meanwhile."""
    message = (
        f"rebase on {head_sha[:12]} timed out after {limit_s} s (CARRY_REBASE_TIME_LIMIT_S); "
        "the series is too big or its upstream too slow for the limit"
    )
    log.warning("%s: %s", series_id, message)
    _record_failure(
        rt,
        series_id,
        message,
        HistoryKind.REBASE_TIMED_OUT,
        final=True,
        head=head_sha,
        limit_s=limit_s,
    )


def _out_of_memory(rt: Runtime, series_id: str, head_sha: str, err: MemoryError) -> None:
    """A rebase that ran out of memory is the series' error, not retried: it would again."""
    limit_mb = rt.settings.task_memory_mb
    message = (
        f"rebase on {head_sha[:12]} ran out of memory (the task's limit: {limit_mb} MiB, "
        f"CARRY_TASK_MEMORY_MB){f': {err}' if str(err) else ''}"
    )
    log.warning("%s: %s", series_id, message)
    _record_failure(
        rt,
        series_id,
        message,
        HistoryKind.REBASE_OUT_OF_MEMORY,
        final=True,
        head=head_sha,
        limit_mb=limit_mb,
    )


def _record_failure(
    rt: Runtime, series_id: str, message: str, kind: HistoryKind, *, final: bool, **fields: Any
) -> None:
    """The series shows `message` as its error (final) or last event, and its history gets a
    `kind` entry, in one commit."""
    entry = {"error": message, **fields, "final": final}
    count_event(rt.redis, kind.replace("-", "_"))  # carry_events_total{kind="publish_failed"}
    store.update_series(
        rt.redis,
        series_id,
        lambda state: tr.step_failed(state, message, final=final),
        create={},
        also=lambda pipe: store.queue_history(pipe, series_id, kind, **entry),
    )


def _visible_failure(
    rt: Runtime,
    task: Task,
    series_id: str,
    kind: HistoryKind,
    what: str,
    err: Exception,
    *,
    limit: int = 5,
) -> None:
    """A failed step (upstream, git or GitHub trouble) is stored where the user sees it as a
    `kind` entry, then retried with backoff; after `limit` retries the failure stays as the
    series' state."""
    attempts = task.request.retries + 1
    # Out of memory: the same work would run out again (no retry loop).
    final = attempts > limit or isinstance(err, GitOutOfMemory)
    message = f"{what} failed (attempt {attempts}{', giving up' if final else ''}): {err}"
    _record_failure(
        rt,
        series_id,
        message,
        kind,
        final=final,
        what=what,
        attempt=attempts,
        error=str(err),
    )
    if not final:
        raise task.retry(exc=err, countdown=_retry_in(err, attempts), max_retries=limit)


@worker_process_init.connect
def _limit_pool_process(**_: object) -> None:
    """Each pool process of a service worker (and every git it starts) gets the task memory
    limit, CARRY_TASK_MEMORY_MB, the workers' CPU priority, CARRY_WORKER_NICE, and the secrets
    its logs redact. A runner host imports runner.task, not this module."""
    settings = load_settings()
    install_secrets(secret_values(settings))  # a process of its own
    limit_task_memory(settings.task_memory_mb)
    yield_cpu(settings.worker_nice)


@worker_ready.connect
def _register(**_: object) -> None:
    rt = runtime()
    register_series(rt)
    dashboard_issue.decision(rt)  # decided at start, said in one log line


@worker_ready.connect
def _ask_repo_ids(**_: object) -> None:
    """At start, GitHub is asked for the ids of the configured repositories carry has not
    learned yet (in a task: a slow GitHub does not hold up the worker's start)."""
    if runtime().settings.github_auth != "none":
        app.send_task(LEARN_REPO_IDS, queue=QUICK_QUEUE)


LEARN_REPO_IDS = "carry.learn_repo_ids"


@app.task(name=LEARN_REPO_IDS, bind=True, acks_late=True)
def learn_repo_ids(self: Task) -> None:
    rt = runtime()
    with correlated(task_id=self.request.id):
        repo_identity.learn_ids(rt, rt.forge())


@worker_ready.connect
def _apply_runner_reports(sender: Any = None, **_: object) -> None:
    """A service worker on the quick lane applies what the runners report (their broker
    users may not write series state or queue a task: workers/ci/reports.py)."""
    consumer = getattr(sender, "task_consumer", None)
    queues = {queue.name for queue in getattr(consumer, "queues", ())}
    rt = runtime()
    if QUICK_QUEUE not in queues or rt.settings.runner_kind or not rt.config.runners:
        return
    url = rt.settings.redis_url.get_secret_value()
    client = redis.Redis.from_url(url, health_check_interval=30)
    ReportApplier(client, app, sorted(rt.config.runners), rt.job_issuer).start()
    log.info("applying the reports of %s runners", ", ".join(sorted(rt.config.runners)))


# --------------------------------------------------------------------------- time limits


def time_limits(settings: Settings) -> dict[str, tuple[int, str]]:
    """The soft time limit of each service task (the hard one is a minute more), with the
    setting that gives it. Runner jobs (`carry.ci.run_job`) have their steps' own timeouts."""
    rebase = (settings.rebase_time_limit_s, "CARRY_REBASE_TIME_LIMIT_S")
    quick = (settings.quick_time_limit_s, "CARRY_QUICK_TIME_LIMIT_S")
    limits = {
        name: quick
        for name in app.tasks
        if name.startswith("carry.") and name not in GIT_TASKS and name != ci_runs.TASK_NAME
    }
    return limits | {
        "carry.rebase": rebase,
        "carry.find_successor": rebase,  # it checks the series on a head, as a rebase does
        "carry.bisect": rebase,  # it checks the series on a commit of the range
        "carry.publish": (settings.publish_time_limit_s, "CARRY_PUBLISH_TIME_LIMIT_S"),
        # it pushes carry/good/<series>, as a publish pushes carry's branch
        "carry.good_ref": (settings.publish_time_limit_s, "CARRY_PUBLISH_TIME_LIMIT_S"),
        "carry.poll": (settings.poll_time_limit_s, "CARRY_POLL_TIME_LIMIT_S"),
    }


def apply_time_limits(settings: Settings) -> None:
    for name, (limit_s, _setting) in time_limits(settings).items():
        task = app.tasks[name]
        task.soft_time_limit = limit_s
        task.time_limit = limit_s + 60


@task_failure.connect
def _record_time_out(
    sender: Task | None = None,
    exception: BaseException | None = None,
    kwargs: dict[str, Any] | None = None,
    **_: object,
) -> None:
    """A task stopped at its time limit is shown as timed out: as the series' error when it
    works for one series, else on the events page. The rebase says so itself."""
    timed_out = isinstance(exception, SoftTimeLimitExceeded)
    if not timed_out or sender is None or sender.name == "carry.rebase":
        return
    rt = runtime()
    limit_s, setting = time_limits(rt.settings).get(sender.name, (sender.soft_time_limit, "?"))
    series_id = (kwargs or {}).get("series_id")
    message = f"{sender.name} timed out after {limit_s} s ({setting}); it is not retried"
    log.warning("%s%s", f"{series_id}: " if series_id else "", message)
    if isinstance(series_id, str) and series_id:
        _record_failure(
            rt, series_id, message, HistoryKind.TASK_TIMED_OUT, final=True, task=sender.name
        )
    else:
        count_event(rt.redis, "task_timed_out")
        store.append_history(
            rt.redis,
            None,
            HistoryKind.TASK_TIMED_OUT,
            task=sender.name,
            limit_s=limit_s,
            error=message,
        )


@app.task(name="carry.poll", bind=True, acks_late=True)
def poll(self: Task) -> None:
    rt = runtime()
    with correlated(task_id=self.request.id):
        register_series(rt)
        for event in poller.head_events(rt):
            handle_event(rt, event)


@app.task(name="carry.poll_prs", bind=True, acks_late=True)
def poll_prs(self: Task) -> None:
    rt = runtime()
    with correlated(task_id=self.request.id):
        for event in poller.pr_events(rt):
            handle_event(rt, event)


@app.task(name=STUCK_TASK, bind=True, acks_late=True)
def tell_stuck(self: Task) -> None:
    rt = runtime()
    with correlated(task_id=self.request.id):
        attention.tell_stuck(rt)


@app.task(name="carry.check_permission", bind=True, acks_late=True, max_retries=PERMISSION_RETRIES)
def check_permission(
    self: Task,
    series_id: str,
    number: int,
    comment_id: int,
    author: str,
    body: str,
    head_at_comment: str | None = None,
    source: str = "",
) -> None:
    """Looks up the commenter's permission, then lets the planner decide on the command."""
    rt = runtime()
    with correlated(task_id=self.request.id, series=series_id):
        try:
            permission = rt.forge().permission(author)
        except ForgeError as err:  # PermissionUnknown too: the credentials may be fixed meanwhile
            _permission_unknown(rt, self, series_id, number, author, err)
            return
        event = ev.CommandAuthorized(
            series_id=series_id,
            number=number,
            comment_id=comment_id,
            author=author,
            permission=permission,
            body=body,
            head_at_comment=head_at_comment,
            source=source,
        )
        handle_event(rt, event)


def _permission_unknown(
    rt: Runtime, task: Task, series_id: str, number: int, author: str, err: ForgeError
) -> None:
    """A command whose author's permission cannot be read is never dropped without a word: it
    is recorded, answered once ("trying again") and retried; after the last retry the answer
    says it was not carried out. The error stays in the history, not in the reply."""
    attempts = task.request.retries + 1
    final = attempts > PERMISSION_RETRIES
    log.warning("%s: permission of %s not read (attempt %d): %s", series_id, author, attempts, err)
    store.append_history(
        rt.redis,
        series_id,
        HistoryKind.COMMAND_NOT_CHECKED,
        author=author,
        pr=number,
        error=str(err),
        attempt=attempts,
        final=final,
    )
    if attempts == 1:
        body = f"@{author}: carry could not check your permission; trying again."
        rt.send("carry.reply", {"series_id": series_id, "number": number, "body": body})
    if final:
        body = (
            f"@{author}: carry could not check your permission after {attempts} tries, so "
            "your command was not carried out; carry's dashboard says why. Comment it again."
        )
        rt.send("carry.reply", {"series_id": series_id, "number": number, "body": body})
        return
    raise task.retry(exc=err, countdown=_retry_in(err, attempts), max_retries=PERMISSION_RETRIES)


@app.task(name="carry.reply", bind=True, acks_late=True, max_retries=5)
def reply(self: Task, series_id: str, number: int, body: str) -> None:
    rt = runtime()
    with correlated(task_id=self.request.id, series=series_id):
        try:
            rt.forge().comment(number, body)
        except RateLimited as err:  # longer than a worker waits: the broker holds it meanwhile
            log.warning("%s", err)
            raise self.retry(exc=err, countdown=err.retry_after_s) from err


@app.task(name="carry.find_successor", bind=True, acks_late=True, max_retries=5)
def find_successor_task(self: Task, series_id: str, repo: str, number: int) -> None:
    """The series' base PR closed unmerged: propose its successor, with the evidence."""
    rt = runtime()
    with correlated(task_id=self.request.id, series=series_id):
        try:
            find_successor(rt, series_id, repo, number)
        except ForgeError as err:
            what = f"finding the successor of {repo}#{number}"
            _visible_failure(rt, self, series_id, HistoryKind.SUCCESSOR_FAILED, what, err)


@app.task(name="carry.dashboard_issue", bind=True, acks_late=True, max_retries=5)
def dashboard_issue_task(self: Task, force: bool = False) -> None:
    """Brings the dashboard issue up to date (the beat asks every interval; a tick forces it)."""
    rt = runtime()
    with correlated(task_id=self.request.id):
        if not dashboard_issue.enabled(rt):
            return
        try:
            done = dashboard_issue.refresh(rt, rt.forge(), force=force)
        except ForgeError as err:
            attempts = self.request.retries + 1
            log.warning("dashboard issue not updated (attempt %d): %s", attempts, err)
            count_event(rt.redis, "dashboard_issue_failed")
            store.append_history(
                rt.redis, None, HistoryKind.DASHBOARD_ISSUE_FAILED, attempt=attempts, error=str(err)
            )
            raise self.retry(exc=err, countdown=_retry_in(err, attempts)) from err
        if done is dashboard_issue.Refresh.BUSY and force:
            raise self.retry(countdown=rt.settings.busy_retry_s)


@app.task(name="carry.redeliver", bind=True, acks_late=True)
def redeliver(self: Task) -> None:
    """Asks GitHub to redeliver the webhook deliveries that failed (it never does by itself);
    the beat asks every `polling.redeliver_every_s`, and a failure waits for the next run."""
    rt = runtime()
    with correlated(task_id=self.request.id):
        hook = redelivery.hook_of(rt)
        if isinstance(hook, redelivery.NoHook):
            log.info("no webhook to read failed deliveries of: set web.hook_id")
            return
        try:
            # its POSTs wait for the installation's write budget and holds, and a refusal holds
            # the installation's other writes, as every write does
            redelivery.redeliver_failed(rt.redis, rt.github(), hook)
        except ForgeError as err:
            log.warning("failed deliveries not read: %s", err)
            count_event(rt.redis, "redeliver_failed")
            store.append_history(rt.redis, None, HistoryKind.REDELIVER_FAILED, error=str(err))


@app.task(name=requeue.REQUEUE_TASK, bind=True, acks_late=True)
def requeue_lost(self: Task) -> None:
    """Queues again the acknowledged deliveries whose message the broker lost (the beat runs
    it every requeue.REQUEUE_EVERY_S)."""
    with correlated(task_id=self.request.id):
        requeue.requeue_lost(runtime(), app)


@app.task(name=ci_runs.PACED_TASK, bind=True, acks_late=True)
def release_paced(self: Task) -> None:
    rt = runtime()
    with correlated(task_id=self.request.id):
        ci.release_paced(rt.redis, app, issuer=rt.job_issuer)


@app.task(name="carry.approve", bind=True, acks_late=True)
def approve(self: Task, series_id: str, sha: str, by: str) -> None:
    rt = runtime()
    with correlated(task_id=self.request.id, series=series_id):
        ci.approve(rt.redis, series_id, sha, by, issuer=rt.job_issuer, celery_app=app)


@app.task(name="carry.retest", bind=True, acks_late=True)
def retest(self: Task, series_id: str, runner: str | None, by: str) -> None:
    rt = runtime()
    with correlated(task_id=self.request.id, series=series_id):
        hardware.retest(rt, series_id, runner, by)
