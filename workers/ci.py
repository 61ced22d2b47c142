"""Hardware CI, service side and task: request runs, cancel stale ones, reuse results, gate
untrusted heads, and the `carry.ci.run_job` task that runner hosts execute.

Decisions come from bot.core.ci_plan (pure); this module gathers the facts from Redis, carries
the actions out and records every step. Keys (all under `carry:ci:`):

  run:<run_id>             hash: the run (payload, state, attempt, runner, per-check results)
  current:<series>:<kind>  the newest run requested for a series on a runner kind
  cancel:<run_id>          cancel marker with its reason; the runner polls it and kills the step
  result:<kind>:<tree_key> the reusable verdict for one exact tree on one runner kind
  inflight:<kind>          zset of runs handed to the broker and not finished (the budget)
  deferred:<kind>          zset of runs held back because the budget was full
  lease:<run_id>           who executes the run now ("runner|host|pid"), with expiry
  slots:<kind>             zset of running leases (budget.running), expiring
  lock:<kind>              serializes planning for a runner kind

Each check's row is a CiState in SeriesState.ci under ci_plan.ci_key(kind, check), e.g.
"gaudi/async-inputs" (its `runner` field holds the same key, so tables name the check). Every
change is appended to the series history and sent to the service as a `carry.ci.report` task,
from the service and from runner hosts alike (runners hold no GitHub credentials): one path,
whose reports workers.hardware puts on GitHub.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import redis
from celery import Celery, Task

from bot.config import CarryConfig, ConfigError, load_config, load_settings
from bot.core.ci_plan import (
    ACTIVE_STATES,
    FINAL_STATES,
    REUSABLE,
    UPSTREAM_VARIANT,
    Action,
    ActiveRun,
    Budget,
    Facts,
    RetryPolicy,
    RunRequest,
    StoredResult,
    ci_key,
    classify_outcome,
    needs_approval,
    next_attempt,
    overall,
    plan_run,
    resolve_approval,
    reused_detail,
    short,
    split_ci_key,
    tree_key,
)
from bot.core.state import CiState, SeriesState
from bot.log import correlated, secret_values
from bot.store.series import (
    PREFIX,
    append_history,
    ensure_series,
    heartbeat,
    load_series,
    now_iso,
    update_series,
)
from workers.celery_app import app, redis_url
from workers.runner.job import (
    CheckResult,
    JobContext,
    JobResult,
    artifacts_dir,
    execute,
    host_env_for_steps,
)
from workers.runner.sandbox import resolve as resolve_sandbox
from workers.runner.spec import (
    JobPayload,
    LogLimits,
    StepSpec,
    TreeSpec,
    job_mismatch,
    recipe_digest,
)
from workers.runner.steps import RunLog

log = logging.getLogger("carry.ci")

TASK_NAME = "carry.ci.run_job"
REPORT_TASK = "carry.ci.report"
SERVICE_QUEUE = "carry"
CI = f"{PREFIX}ci:"
CANCEL_TTL_S = 7 * 24 * 3600
RESULT_TTL_S = 180 * 24 * 3600
POLL_S = 0.5


def _default_debounce_s() -> float:
    """CARRY_CI_DEBOUNCE_S: how long a new run waits in the broker (a burst of heads runs once)."""
    return load_settings().ci_debounce_s


def lease_s() -> int:
    """CARRY_CI_LEASE_S: how long a run's lease lives without renewal."""
    return load_settings().ci_lease_s


# --------------------------------------------------------------------------- targets


@dataclass(frozen=True)
class CiTarget:
    """What one runner kind runs for a series: its job spec from the config."""

    kind: str
    queue: str
    setup: tuple[StepSpec, ...] = ()
    checks: tuple[StepSpec, ...] = ()
    budget: Budget = field(default_factory=Budget)
    artifacts: tuple[str, ...] = ()
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    limits: LogLimits = field(default_factory=LogLimits)


def targets_from_config(
    config: CarryConfig,
    series_id: str,
    *,
    ab: Iterable[str] = (),
    artifacts: Sequence[str] = (),
    retry: RetryPolicy | None = None,
) -> list[CiTarget]:
    """One target per runner of the series, with the series' checks (A/B for those in `ab`)."""
    series = config.series_by_id(series_id)
    ab_checks = set(ab)
    targets = []
    for kind in series.runners:
        runner = config.runners[kind]
        setup = tuple(
            StepSpec(s.name, tuple(s.run), s.timeout_s, dict(s.env)) for s in runner.setup
        )
        checks = tuple(
            StepSpec(name, tuple(cmd.run), cmd.timeout_s, dict(cmd.env), ab=name in ab_checks)
            for name, cmd in ((n, runner.checks[n]) for n in series.checks if n in runner.checks)
        )
        budget = Budget(runner.budget.queued, runner.budget.running)
        targets.append(
            CiTarget(
                kind, runner.queue, setup, checks, budget, tuple(artifacts), retry or RetryPolicy()
            )
        )
    return targets


def check_keys(kind: str, checks: Iterable[StepSpec]) -> list[str]:
    """The CI rows a job produces, in order: each check, then its A/B variant."""
    keys = []
    for check in checks:
        keys.append(ci_key(kind, check.name))
        if check.ab:
            keys.append(ci_key(kind, check.name, UPSTREAM_VARIANT))
    return keys


def job_tree_key(target: CiTarget, tree: TreeSpec) -> str:
    names = [k.partition("/")[2] for k in check_keys(target.kind, target.checks)]
    recipe = recipe_digest(target.setup, target.checks)
    return tree_key(tree.upstream_sha, tree.series_digest, names, recipe)


# --------------------------------------------------------------------------- requests


def request_ci(
    client: redis.Redis,
    celery_app: Celery,
    series_id: str,
    targets: Sequence[CiTarget],
    tree: TreeSpec,
    *,
    trusted_authors: Iterable[str] = (),
    actor: str | None = None,
    force: bool = False,
    debounce_s: float | None = None,
) -> list[CiState]:
    """Asks for hardware runs of one exact tree on each target; returns the CI rows.

    `actor` is who pushed the upstream head (default: SeriesState.head_actor when the state's
    head is this tree's upstream SHA). `force` (`/carry retest`) skips result reuse. New runs
    wait `debounce_s` in the broker, so a burst of heads starts one run, on the newest.
    """
    state = ensure_series(client, series_id)
    if actor is None and state.head_sha == tree.upstream_sha:
        actor = state.head_actor
    if actor is None:
        actor = state.pushers.get(tree.upstream_sha)
    trusted = not needs_approval(actor, trusted_authors, state.approvals, tree.upstream_sha)
    delay = _default_debounce_s() if debounce_s is None else debounce_s
    rows: list[CiState] = []
    for target in targets:
        job = _new_job(series_id, target, tree, force)
        with _kind_lock(client, target.kind):
            rows += _plan_and_apply(client, celery_app, job, trusted, delay)
    return rows


def _new_job(series_id: str, target: CiTarget, tree: TreeSpec, force: bool) -> JobPayload:
    return JobPayload(
        run_id=f"{target.kind}-{secrets.token_hex(6)}",
        series_id=series_id,
        kind=target.kind,
        queue=target.queue,
        tree_key=job_tree_key(target, tree),
        head_sha=tree.upstream_sha,
        tree=tree,
        setup=target.setup,
        checks=target.checks,
        artifacts=target.artifacts,
        retry=target.retry,
        budget=target.budget,
        limits=target.limits,
        requested_at=now_iso(),
        force=force,
    )


@contextmanager
def _kind_lock(client: redis.Redis, kind: str) -> Iterator[None]:
    lock = client.lock(f"{CI}lock:{kind}", timeout=60, blocking_timeout=30)
    if not lock.acquire(blocking=True):
        raise TimeoutError(f"CI planning lock for {kind} is held for over 30 s")
    try:
        yield
    finally:
        with suppress(redis.exceptions.LockError):
            lock.release()


def _plan_and_apply(
    client: redis.Redis, celery_app: Celery, job: JobPayload, trusted: bool, debounce_s: float
) -> list[CiState]:
    request = RunRequest(job.series_id, job.kind, job.tree_key, job.head_sha, trusted, job.force)
    actions = plan_run(request, _facts(client, job))
    rows: list[CiState] = []
    for action in actions:
        append_history(
            client,
            job.series_id,
            f"ci-{action.verb}",
            runner_kind=job.kind,
            run_ids=action.run_ids,
            tree_key=job.tree_key,
            head=job.head_sha,
            reason=action.reason,
            key=action.key,
        )
        rows = _apply(client, celery_app, job, action, debounce_s)
    if actions[0].verb == "supersede":  # cancelled runs may have left room in the budget
        _release_deferred_locked(client, celery_app, job.kind)
    return rows


def _facts(client: redis.Redis, job: JobPayload) -> Facts:
    active: tuple[ActiveRun, ...] = ()
    current = _text(client.get(_current_key(job.series_id, job.kind)))
    run = _load_run(client, current) if current else None
    if run is not None and run.state in ACTIVE_STATES:
        active = (ActiveRun(run.run_id, run.state, run.tree_key, run.head_sha, run.dispatched),)
    raw = stored_result(client, job.kind, job.tree_key)
    result = StoredResult(raw["run_id"], raw["state"], raw.get("head_sha", "")) if raw else None
    return Facts(result, active, _in_flight(client, job.kind), job.budget)


def _apply(
    client: redis.Redis, celery_app: Celery, job: JobPayload, action: Action, debounce_s: float
) -> list[CiState]:
    if action.verb == "supersede":
        for run_id in action.run_ids:
            cancel_run(client, celery_app, run_id, action.reason)
        return []
    if action.verb == "reuse":
        return _reuse(client, celery_app, job, action.run_ids[0])
    if action.verb == "join":
        joined = _load_run(client, action.run_ids[0])
        return _rows(joined) if joined else []
    if action.run_ids:  # releasing the run that waited for approval: keep its id
        job = replace(job, run_id=action.run_ids[0])
    if action.verb == "wait-approval":
        return _record_run(
            client, celery_app, job, "waiting-approval", action.reason, dispatched=False
        )
    if action.verb == "over-budget":
        rows = _record_run(client, celery_app, job, "queued", action.reason, dispatched=False)
        client.zadd(f"{CI}deferred:{job.kind}", {job.run_id: time.time()})
        return rows
    return _dispatch(client, celery_app, job, "waiting for a runner", debounce_s)


def _record_run(
    client: redis.Redis,
    celery_app: Celery,
    job: JobPayload,
    state: str,
    detail: str,
    *,
    dispatched: bool,
) -> list[CiState]:
    key = _run_key(job.run_id)
    values: dict[str | bytes, str] = {
        "payload": json.dumps(job.to_dict()),
        "series": job.series_id,
        "kind": job.kind,
        "tree_key": job.tree_key,
        "head_sha": job.head_sha,
        "state": state,
        "detail": detail,
        "dispatched": "1" if dispatched else "0",
        "updated_at": now_iso(),
    }
    pipe = client.pipeline()
    pipe.hsetnx(key, "created_at", now_iso())
    pipe.hsetnx(key, "attempt", "0")
    pipe.hset(key, mapping=values)
    pipe.set(_current_key(job.series_id, job.kind), job.run_id)
    pipe.execute()
    rows = _rows(_must_load(client, job.run_id))
    _publish(client, celery_app, job.series_id, rows, replace_rows=True)
    return rows


def _dispatch(
    client: redis.Redis, celery_app: Celery, job: JobPayload, detail: str, countdown: float
) -> list[CiState]:
    rows = _record_run(client, celery_app, job, "queued", detail, dispatched=True)
    client.zadd(f"{CI}inflight:{job.kind}", {job.run_id: time.time()})
    client.zrem(f"{CI}deferred:{job.kind}", job.run_id)
    try:
        celery_app.send_task(
            TASK_NAME,
            args=[job.to_dict()],
            queue=job.queue,
            task_id=job.run_id,
            countdown=countdown if countdown > 0 else None,
        )
    except Exception as err:
        run = _load_run(client, job.run_id)
        if run is not None:
            _finish(client, celery_app, run, "infra-error", f"could not enqueue the job: {err}")
        raise
    return rows


def _reuse(
    client: redis.Redis, celery_app: Celery, job: JobPayload, source_run: str
) -> list[CiState]:
    result = stored_result(client, job.kind, job.tree_key) or {}
    checks: Mapping[str, Mapping[str, Any]] = result.get("checks", {})
    rows = []
    for key in check_keys(job.kind, job.checks):
        check = checks.get(key, {})
        verdict = str(check.get("verdict", result.get("state", "success")))
        detail = reused_detail(verdict, source_run, str(check.get("reason", "")))
        rows.append(_row(key, "reused", source_run, job, detail, int(result.get("attempt", 1))))
    client.delete(_current_key(job.series_id, job.kind))
    _publish(client, celery_app, job.series_id, rows, replace_rows=True)
    return rows


# --------------------------------------------------------------------------- cancel, approve


def cancel_run(client: redis.Redis, celery_app: Celery, run_id: str, reason: str) -> bool:
    """Cancels a run: the marker stops a running job (its runner kills the process group), a
    queued one is revoked in the broker. False when the run had already finished."""
    client.set(f"{CI}cancel:{run_id}", reason, ex=CANCEL_TTL_S)
    run = _load_run(client, run_id)
    if run is None or run.state in FINAL_STATES:
        return False
    if run.dispatched and run.state == "queued":
        celery_app.control.revoke(run_id)
    _finish(client, celery_app, run, "cancelled", reason)
    return True


def approve(
    client: redis.Redis, series_id: str, sha: str, by: str, *, celery_app: Celery | None = None
) -> list[CiState]:
    """`/carry approve <sha>` from a user with write access: binds to that exact head SHA (an
    abbreviation must name one waiting head) and releases the runs waiting for it."""
    waiting = _waiting_runs(client, series_id)
    state = load_series(client, series_id)
    candidates = [run.head_sha for run in waiting]
    if state is not None and state.head_sha:
        candidates.append(state.head_sha)
    full = resolve_approval(sha, candidates)
    _add_approval(client, series_id, full)
    released = [run for run in waiting if run.head_sha == full]
    append_history(
        client, series_id, "ci-approved", sha=full, by=by, runs=[r.run_id for r in released]
    )
    return _release(client, celery_app or app, released)


def release_for_pusher(
    client: redis.Redis, series_id: str, sha: str, pusher: str, *, celery_app: Celery | None = None
) -> list[CiState]:
    """A trusted pusher of `sha` became known after its runs were planned: the runs of that
    exact SHA that waited for approval start, as if it had been known all along."""
    released = [run for run in _waiting_runs(client, series_id) if run.head_sha == sha]
    if released:
        append_history(
            client,
            series_id,
            "ci-trusted-pusher",
            sha=sha,
            by=pusher,
            runs=[r.run_id for r in released],
        )
    return _release(client, celery_app or app, released)


def _release(client: redis.Redis, celery_app: Celery, released: list[_Run]) -> list[CiState]:
    rows: list[CiState] = []
    for run in released:
        with _kind_lock(client, run.kind):
            still = _load_run(client, run.run_id)  # a newer head may have superseded it since
            if still is not None and still.state == "waiting-approval":
                rows += _plan_and_apply(client, celery_app, run.payload, True, 0.0)
    return rows


def _waiting_runs(client: redis.Redis, series_id: str) -> list[_Run]:
    runs = []
    for key in client.scan_iter(f"{CI}current:{series_id}:*"):
        run = _load_run(client, _text(client.get(key)))
        if run is not None and run.state == "waiting-approval":
            runs.append(run)
    return runs


def _add_approval(client: redis.Redis, series_id: str, sha: str) -> None:
    def add(state: SeriesState) -> bool:
        if sha in state.approvals:
            return False
        state.approvals.append(sha)
        return True

    ensure_series(client, series_id)
    update_series(client, series_id, add)


def release_deferred(client: redis.Redis, celery_app: Celery, kind: str) -> list[str]:
    """Dispatches runs held back by the budget, oldest first, while the budget allows."""
    with _kind_lock(client, kind):
        return _release_deferred_locked(client, celery_app, kind)


def _release_deferred_locked(client: redis.Redis, celery_app: Celery, kind: str) -> list[str]:
    released: list[str] = []
    for raw in client.zrange(f"{CI}deferred:{kind}", 0, -1):
        run = _load_run(client, _text(raw))
        if run is None or run.state != "queued" or run.dispatched:
            client.zrem(f"{CI}deferred:{kind}", _text(raw))
            continue
        if _in_flight(client, kind) >= run.payload.budget.capacity:
            break
        append_history(
            client,
            run.series,
            "ci-enqueue",
            runner_kind=kind,
            run_ids=[run.run_id],
            reason="budget freed",
            tree_key=run.tree_key,
            head=run.head_sha,
        )
        _dispatch(client, celery_app, run.payload, "waiting for a runner", 0.0)
        released.append(run.run_id)
    return released


# --------------------------------------------------------------------------- queries


def stored_result(client: redis.Redis, kind: str, tree: str) -> dict[str, Any] | None:
    raw = client.get(f"{CI}result:{kind}:{tree}")
    return json.loads(raw) if raw else None


def run_info(client: redis.Redis, run_id: str) -> dict[str, Any] | None:
    """A run as plain values (for the API, the dashboard and the check-run reporter): its
    payload (the PR head SHA is payload.tree.downstream_sha), state, attempt and checks."""
    run = _load_run(client, run_id)
    if run is None:
        return None
    return {
        "run_id": run.run_id,
        "series": run.series,
        "kind": run.kind,
        "state": run.state,
        "detail": run.detail,
        "attempt": run.attempt,
        "runner": run.runner,
        "tree_key": run.tree_key,
        "head_sha": run.head_sha,
        "pr_head_sha": run.payload.tree.downstream_sha,
        "checks": run.checks,
        "payload": run.payload.to_dict(),
    }


# --------------------------------------------------------------------------- the run record


@dataclass
class _Run:
    run_id: str
    series: str
    kind: str
    tree_key: str
    head_sha: str
    state: str
    detail: str
    attempt: int
    runner: str
    dispatched: bool
    payload: JobPayload
    checks: dict[str, dict[str, Any]]


def _run_key(run_id: str) -> str:
    return f"{CI}run:{run_id}"


def _current_key(series_id: str, kind: str) -> str:
    return f"{CI}current:{series_id}:{kind}"


def _load_run(client: redis.Redis, run_id: str) -> _Run | None:
    raw = {_text(k): _text(v) for k, v in client.hgetall(_run_key(run_id)).items()}
    if "payload" not in raw:
        return None
    checks = {
        k.removeprefix("check:"): json.loads(v) for k, v in raw.items() if k.startswith("check:")
    }
    return _Run(
        run_id=run_id,
        series=raw["series"],
        kind=raw["kind"],
        tree_key=raw["tree_key"],
        head_sha=raw["head_sha"],
        state=raw.get("state", "queued"),
        detail=raw.get("detail", ""),
        attempt=int(raw.get("attempt") or 0),
        runner=raw.get("runner", ""),
        dispatched=raw.get("dispatched") == "1",
        payload=JobPayload.from_dict(json.loads(raw["payload"])),
        checks=checks,
    )


def _must_load(client: redis.Redis, run_id: str) -> _Run:
    run = _load_run(client, run_id)
    if run is None:
        raise RuntimeError(f"run {run_id} vanished from Redis while it was being recorded")
    return run


def _transition(
    client: redis.Redis, run_id: str, to: str, allowed: Iterable[str], **values: str
) -> bool:
    """Moves a run to state `to` if it is in one of `allowed` (atomic: WATCH/MULTI)."""
    key = _run_key(run_id)
    allowed = tuple(allowed)
    with client.pipeline() as pipe:
        while True:
            try:
                pipe.watch(key)
                if _text(pipe.hget(key, "state")) not in allowed:
                    pipe.reset()
                    return False
                pipe.multi()
                mapping: dict[str | bytes, str] = {"state": to, "updated_at": now_iso()}
                mapping.update(values)
                pipe.hset(key, mapping=mapping)
                pipe.execute()
                return True
            except redis.WatchError:
                continue


def _in_flight(client: redis.Redis, kind: str) -> int:
    """Dispatched, unfinished runs of a kind (entries of finished or lost records pruned)."""
    key = f"{CI}inflight:{kind}"
    members = [_text(m) for m in client.zrange(key, 0, -1)]
    if not members:
        return 0
    pipe = client.pipeline()
    for run_id in members:
        pipe.hget(_run_key(run_id), "state")
    states = [_text(s) for s in pipe.execute()]
    stale = [m for m, s in zip(members, states, strict=True) if s not in ("queued", "running")]
    if stale:
        client.zrem(key, *stale)
    return len(members) - len(stale)


def _finish(client: redis.Redis, celery_app: Celery, run: _Run, state: str, detail: str) -> bool:
    """Ends a run (once): its unfinished rows take `state`; budget entries are dropped."""
    if not _transition(client, run.run_id, state, ACTIVE_STATES, detail=detail):
        return False
    client.zrem(f"{CI}inflight:{run.kind}", run.run_id)
    client.zrem(f"{CI}deferred:{run.kind}", run.run_id)
    append_history(
        client,
        run.series,
        f"ci-{state}",
        runner_kind=run.kind,
        run_id=run.run_id,
        tree_key=run.tree_key,
        head=run.head_sha,
        reason=detail,
    )
    finished = _load_run(client, run.run_id)
    if finished is not None:
        _publish(client, celery_app, run.series, _rows(finished), replace_rows=False)
    return True


# --------------------------------------------------------------------------- CI rows


def _row(key: str, state: str, run_id: str, job: JobPayload, detail: str, attempt: int) -> CiState:
    return CiState(
        runner=key,
        state=state,
        run_id=run_id,
        tree_key=job.tree_key,
        head_sha=job.head_sha,
        detail=detail,
        updated_at=now_iso(),
        attempt=max(1, attempt),
        commit_sha=job.tree.downstream_sha,
    )


def _rows(run: _Run) -> list[CiState]:
    """The rows of a run: a concluded check shows its verdict, the others the run's state."""
    rows = []
    for key in check_keys(run.kind, run.payload.checks):
        check = run.checks.get(key)
        if check is not None and check.get("verdict") in REUSABLE:
            state, detail = str(check["verdict"]), str(check.get("reason", ""))
            attempt = int(check.get("attempt", run.attempt))
        else:
            state, detail, attempt = run.state, run.detail, run.attempt
        rows.append(_row(key, state, run.run_id, run.payload, detail, attempt))
    return rows


def _publish(
    client: redis.Redis,
    celery_app: Celery,
    series_id: str,
    rows: list[CiState],
    *,
    replace_rows: bool,
) -> None:
    """Stores rows in SeriesState.ci and reports them. A runner's late update never overwrites
    the row of a newer run (replace_rows=False keeps rows that another run owns)."""
    written: list[CiState] = []

    def update(state: SeriesState) -> bool:
        written.clear()
        for row in rows:
            existing = state.ci.get(row.runner)
            if replace_rows or existing is None or existing.run_id == row.run_id:
                state.ci[row.runner] = row
                written.append(row)
        return bool(written)

    update_series(client, series_id, update)
    # A row that lost its place (an old run ending) is still reported: its check run ends too.
    _notify(celery_app, series_id, rows)


def _notify(celery_app: Celery, series_id: str, rows: list[CiState]) -> None:
    for row in rows:
        try:
            celery_app.send_task(REPORT_TASK, args=[series_id, asdict(row)], queue=SERVICE_QUEUE)
        except Exception:  # reporting must never break a run; the row is stored regardless
            log.exception("reporting CI row %s of %s failed", row.runner, series_id)


# --------------------------------------------------------------------------- the runner task


_clients: dict[int, redis.Redis] = {}


def _client() -> redis.Redis:
    """One store client per process (pool processes are forked: never share a connection)."""
    pid = os.getpid()
    if pid not in _clients:
        _clients[pid] = redis.Redis.from_url(redis_url(), health_check_interval=30)
    return _clients[pid]


def runner_name(task: Task) -> str:
    configured = load_settings().runner_name
    return configured or str(task.request.hostname or socket.gethostname())


def runner_workdir() -> Path:
    return load_settings().runner_workdir or Path("~/.cache/carry/runner").expanduser()


@app.task(name=TASK_NAME, bind=True, acks_late=True, reject_on_worker_lost=True, max_retries=None)
def run_job(self: Task, payload: dict[str, Any]) -> str:
    """Executes one hardware run (on a runner host, queue hw.<kind>). Returns how it ended."""
    job = JobPayload.from_dict(payload)
    client = _client()
    celery_app = self.app
    runner = runner_name(self)
    with correlated(run_id=job.run_id, task_id=str(self.request.id)):
        refusal = _refusal(job)
        if refusal is not None:
            _refuse(client, celery_app, job, runner, refusal)
            _release_budget(client, celery_app, job)
            return "refused"
        admitted = _admit(client, celery_app, job, runner)
        if isinstance(admitted, str):
            _release_budget(client, celery_app, job)
            return admitted
        if isinstance(admitted, float):
            raise self.retry(countdown=admitted)
        watch = _Watch(client, job, runner)
        heartbeat(client, runner, {"state": "busy", "run": job.run_id, "series": job.series_id})
        try:
            result = _execute(client, celery_app, job, runner, admitted, watch)
        finally:
            watch.release()
            heartbeat(client, runner, {"state": "idle", "run": "", "series": ""})
        ended = _conclude(self, client, job, admitted, result)  # raises Retry to retry
        _release_budget(client, celery_app, job)
        return ended


def _refusal(job: JobPayload) -> str | None:
    """Why the job must not run here: the queue is not trusted, the runner's own config is."""
    kind = os.environ.get("CARRY_RUNNER_KIND", "")
    if not kind:
        return "this worker is not a runner (`carry runner --kind K` sets CARRY_RUNNER_KIND)"
    try:
        config = runner_config()
    except ConfigError as err:
        return f"this runner's config cannot be read: {'; '.join(err.problems)}"
    runner = config.runners.get(kind) if config is not None else None
    if config is not None and runner is None:
        return f"runner kind {kind!r} is not in this runner's config"
    return job_mismatch(job, kind, runner)


def _refuse(
    client: redis.Redis, celery_app: Celery, job: JobPayload, runner: str, reason: str
) -> None:
    """Ends a job that names commands this runner's config does not: it runs nothing, and says
    so in the run's log, the history and (when the run is known) its verdict."""
    log.warning("refused run %s: %s", job.run_id, reason)
    runlog = RunLog(client, job.run_id, job.limits)
    runlog.note(f"[carry] {runner} refused run {job.run_id}, it ran nothing: {reason}")
    runlog.close()
    append_history(
        client, job.series_id, "ci-refused", run_id=job.run_id, runner=runner, reason=reason
    )
    run = _load_run(client, job.run_id)
    # A copy of a run that a runner is executing now leaves that execution alone.
    if run is not None and not client.exists(f"{CI}lease:{job.run_id}"):
        _finish(client, celery_app, run, "infra-error", f"refused by {runner}: {reason}")


def runner_config() -> CarryConfig | None:
    """This runner host's own config (CARRY_CONFIG, else config/carry.yaml if there is one,
    as `carry runner` chose it), read again only when the file changes."""
    settings = load_settings()
    path = settings.config_path
    try:
        stat = path.stat()
    except OSError:
        if "config_path" in settings.model_fields_set:
            raise ConfigError([f"{path}: cannot read config file"]) from None
        return None
    return _load_runner_config(str(path.resolve()), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=4)
def _load_runner_config(path: str, mtime_ns: int, size: int) -> CarryConfig:
    # mtime_ns and size are only the cache key: an edited file is read again.
    return load_config(path, check_dirs=False)  # a runner host has no copy of patches/


def _admit(
    client: redis.Redis, celery_app: Celery, job: JobPayload, runner: str
) -> int | float | str:
    """The attempt number when this delivery may run; a reason (str) when it must not run at
    all; seconds (float) to try again later when another live runner holds the run."""
    run = _load_run(client, job.run_id)
    if run is None:
        append_history(client, job.series_id, "ci-orphan-job", run_id=job.run_id)
        return "unknown run"
    if run.state in FINAL_STATES:
        return f"already {run.state}"
    cancel = _cancel_reason(client, job.run_id)
    if cancel is not None:
        _finish(client, celery_app, run, "cancelled", cancel)
        return "cancelled"
    if not job.force and stored_result(client, job.kind, job.tree_key):
        _finish_reused(client, celery_app, run)
        return "reused"
    holder = _acquire_lease(client, job.run_id, _holder(runner))
    if holder is not None:
        append_history(
            client,
            job.series_id,
            "ci-duplicate-delivery",
            run_id=job.run_id,
            runner=runner,
            holder=holder,
        )
        return float(max(1, client.ttl(f"{CI}lease:{job.run_id}")))
    return _start_attempt(client, celery_app, run, runner)


def _start_attempt(client: redis.Redis, celery_app: Celery, run: _Run, runner: str) -> int | str:
    attempt = int(client.hincrby(_run_key(run.run_id), "attempt", 1))
    if run.state == "running":  # the previous attempt never concluded: its runner was lost
        lost = classify_outcome("job", None, lost=True, name=run.runner)
        append_history(
            client,
            run.series,
            "ci-runner-lost",
            run_id=run.run_id,
            runner=run.runner,
            attempt=attempt - 1,
            reason=lost.reason,
        )
        if attempt > run.payload.retry.max_attempts:
            _release_lease(client, run.run_id, _holder(runner))
            _finish(
                client,
                celery_app,
                run,
                "infra-error",
                f"{lost.reason}; gave up after {attempt - 1} attempts",
            )
            return "gave up"
    if not _wait_for_slot(client, celery_app, run, runner):
        _release_lease(client, run.run_id, _holder(runner))
        return "cancelled"
    _transition(
        client,
        run.run_id,
        "running",
        ("queued", "running"),
        runner=runner,
        detail=f"attempt {attempt} on {runner}",
    )
    append_history(
        client,
        run.series,
        "ci-started",
        run_id=run.run_id,
        runner=runner,
        attempt=attempt,
        tree_key=run.tree_key,
        head=run.head_sha,
    )
    started = _load_run(client, run.run_id)
    if started is not None:
        _publish(client, celery_app, run.series, _rows(started), replace_rows=False)
    return attempt


def _finish_reused(client: redis.Redis, celery_app: Celery, run: _Run) -> None:
    result = stored_result(client, run.kind, run.tree_key) or {}
    detail = reused_detail(str(result.get("state", "")), str(result.get("run_id", "")))
    _finish(client, celery_app, run, "reused", detail)


def _cancel_reason(client: redis.Redis, run_id: str) -> str | None:
    raw = client.get(f"{CI}cancel:{run_id}")
    return _text(raw) if raw is not None else None


def _execute(
    client: redis.Redis,
    celery_app: Celery,
    job: JobPayload,
    runner: str,
    attempt: int,
    watch: _Watch,
) -> JobResult:
    workdir = runner_workdir()
    logfile = artifacts_dir(workdir, job.run_id) / "logs" / f"attempt-{attempt}.log"
    runlog = RunLog(client, job.run_id, job.limits, logfile, secrets=secret_values(load_settings()))
    done = _done_checks(_load_run(client, job.run_id))
    runlog.note(
        f"[carry] run {job.run_id} attempt {attempt} on {runner}: {job.kind} "
        f"tree {short(job.tree_key)} upstream {short(job.head_sha)}"
    )
    try:
        configured = runner_config()
        own = configured.runners.get(job.kind) if configured else None
        ctx = JobContext(
            workdir=workdir,
            log=runlog,
            cancelled=watch.cancelled,
            on_check=lambda result: _record_check(client, celery_app, job, attempt, runner, result),
            on_phase=lambda phase: _note_phase(client, job.run_id, f"{phase} on {runner}"),
            done=done,
            env=host_env_for_steps(os.environ, load_settings().runner_pass_env),
            attempt=attempt,
            # job_mismatch let the job in, so this runner's config names its kind
            sandbox=resolve_sandbox(own.sandbox if own else "auto"),
            networked=own.networked() if own else frozenset(),
        )
        return execute(job, ctx)
    except Exception as err:  # a bug or an I/O error in the runner itself: infra, retried
        log.exception("run %s failed inside the runner", job.run_id)
        runlog.note(f"[carry] runner error: {err!r}")
        return JobResult(
            tuple(done.get(k) or _runner_error(k, err) for k in check_keys(job.kind, job.checks))
        )
    finally:
        runlog.close()


def _note_phase(client: redis.Redis, run_id: str, detail: str) -> None:
    client.hset(_run_key(run_id), "detail", detail)


def _runner_error(key: str, err: Exception) -> CheckResult:
    _, name, variant = split_ci_key(key)
    return CheckResult(key, name, variant, "infra-error", f"runner error: {err!r}")


def _done_checks(run: _Run | None) -> dict[str, CheckResult]:
    """Checks concluded by earlier attempts: an infra retry does not run them again."""
    known = {f.name for f in fields(CheckResult)}
    return {
        key: CheckResult(**{k: v for k, v in value.items() if k in known})
        for key, value in (run.checks if run else {}).items()
        if value.get("verdict") in REUSABLE
    }


def _record_check(
    client: redis.Redis,
    celery_app: Celery,
    job: JobPayload,
    attempt: int,
    runner: str,
    result: CheckResult,
) -> None:
    data = {**asdict(result), "attempt": attempt, "runner": runner}
    if result.final:
        client.hset(_run_key(job.run_id), f"check:{result.key}", json.dumps(data))
    append_history(client, job.series_id, "ci-check", run_id=job.run_id, **data)
    if result.final:
        run = _load_run(client, job.run_id)
        if run is not None:
            rows = [r for r in _rows(run) if r.runner == result.key]
            _publish(client, celery_app, job.series_id, rows, replace_rows=False)


def _conclude(
    task: Task, client: redis.Redis, job: JobPayload, attempt: int, result: JobResult
) -> str:
    celery_app = task.app
    run = _load_run(client, job.run_id)
    if run is None or run.state in FINAL_STATES:
        return run.state if run else "unknown run"
    cancelled = [c for c in result.checks if c.verdict == "cancelled"]
    if cancelled:
        _finish(client, celery_app, run, "cancelled", cancelled[0].reason)
        return "cancelled"
    unresolved = result.unresolved
    if not unresolved:
        # The A/B run on plain upstream informs (it may well fail: the bug is there); the
        # run's verdict is about the carried tree.
        verdict = overall(c.verdict for c in result.checks if not c.variant)
        _store_result(client, job, run, verdict, attempt)
        _finish(client, celery_app, run, verdict, _summary(result))
        return verdict
    why = "; ".join(dict.fromkeys(c.reason for c in unresolved))
    decision = next_attempt(job.retry, "infra-error", attempt)
    if not decision.retry:
        _finish(client, celery_app, run, "infra-error", f"{why} ({decision.reason})")
        return "infra-error"
    detail = f"infra error on attempt {attempt}: {why}; {decision.reason}"
    _transition(client, job.run_id, "queued", ("running",), detail=detail)
    append_history(
        client,
        job.series_id,
        "ci-retry",
        run_id=job.run_id,
        attempt=attempt,
        delay_s=decision.delay_s,
        reason=why,
    )
    retried = _load_run(client, job.run_id)
    if retried is not None:
        _publish(client, celery_app, job.series_id, _rows(retried), replace_rows=False)
    raise task.retry(countdown=decision.delay_s)


def _summary(result: JobResult) -> str:
    return ", ".join(
        f"{c.name}{'@' + c.variant if c.variant else ''}: {c.verdict}" for c in result.checks
    )


def _store_result(
    client: redis.Redis, job: JobPayload, run: _Run, verdict: str, attempt: int
) -> None:
    final = _load_run(client, job.run_id)
    body = {
        "run_id": job.run_id,
        "state": verdict,
        "head_sha": job.head_sha,
        "series": job.series_id,
        "attempt": attempt,
        "at": now_iso(),
        "checks": final.checks if final else run.checks,
    }
    key = f"{CI}result:{job.kind}:{job.tree_key}"
    # A forced retest replaces the stored verdict; otherwise the first verdict stays.
    client.set(key, json.dumps(body), ex=RESULT_TTL_S, nx=not job.force)


def _release_budget(client: redis.Redis, celery_app: Celery, job: JobPayload) -> None:
    """A run ended: runs the budget held back may start now."""
    try:
        release_deferred(client, celery_app, job.kind)
    except Exception:
        log.exception("releasing deferred %s runs failed", job.kind)


# --------------------------------------------------------------------------- leases and slots


def _holder(runner: str) -> str:
    return f"{runner}|{socket.gethostname()}|{os.getpid()}"


_RELEASE_IF_OWNER = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"""

# Takes (or renews) one of `limit` expiring slots; TIME keeps hosts' clocks out of it.
_SLOT = """
local now = tonumber(redis.call('time')[1])
redis.call('zremrangebyscore', KEYS[1], '-inf', now)
if redis.call('zscore', KEYS[1], ARGV[1]) or redis.call('zcard', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('zadd', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
  return 1
end
return 0
"""


def _acquire_lease(client: redis.Redis, run_id: str, me: str) -> str | None:
    """None when this process now holds the run's lease; else the live holder."""
    key = f"{CI}lease:{run_id}"
    for _ in range(3):
        if client.set(key, me, nx=True, ex=lease_s()):
            return None
        holder = _text(client.get(key))
        if holder == me or (holder and _holder_dead(holder)):
            client.eval(_RELEASE_IF_OWNER, 1, key, holder)
            continue
        if holder:
            return holder
    return "contended"


def _holder_dead(holder: str) -> bool:
    """A holder on this host whose process is gone (a killed pool child, a killed worker)."""
    _, host, pid = [*holder.split("|"), "", ""][:3]
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _release_lease(client: redis.Redis, run_id: str, me: str) -> None:
    client.eval(_RELEASE_IF_OWNER, 1, f"{CI}lease:{run_id}", me)


def _take_slot(client: redis.Redis, kind: str, run_id: str, limit: int) -> bool:
    return bool(client.eval(_SLOT, 1, f"{CI}slots:{kind}", run_id, limit, lease_s()))


def _wait_for_slot(client: redis.Redis, celery_app: Celery, run: _Run, runner: str) -> bool:
    """Blocks until the kind's running budget has room for this run; False if cancelled."""
    limit = run.payload.budget.running
    noted = False
    while not _take_slot(client, run.kind, run.run_id, limit):
        if not noted:
            client.hset(
                _run_key(run.run_id),
                "detail",
                f"{runner} waits for a {run.kind} slot (budget: {limit} running)",
            )
            noted = True
        reason = _cancel_reason(client, run.run_id)
        if reason is not None:
            _finish(client, celery_app, run, "cancelled", reason)
            return False
        time.sleep(POLL_S)
    return True


class _Watch:
    """While a run executes: answers "cancelled?" for the steps (rate-limited reads of the
    cancel marker) and keeps the lease and the running slot alive from a thread, so a long
    fetch or a silent step never looks like a lost runner."""

    def __init__(self, client: redis.Redis, job: JobPayload, runner: str) -> None:
        self.client = client
        self.job = job
        self.me = _holder(runner)
        self._checked = 0.0
        self._reason: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, name="carry-lease", daemon=True)
        self._thread.start()

    def cancelled(self) -> str | None:
        now = time.monotonic()
        if self._reason is not None or now - self._checked < POLL_S:
            return self._reason
        self._checked = now
        try:
            self._reason = _cancel_reason(self.client, self.job.run_id)
        except redis.RedisError:  # a Redis hiccup must not kill a test that runs for hours
            log.warning("cannot poll the cancel marker of %s", self.job.run_id, exc_info=True)
        return self._reason

    def _renew(self) -> None:
        lease = lease_s()
        while not self._stop.wait(lease / 4):
            try:
                self.client.set(f"{CI}lease:{self.job.run_id}", self.me, ex=lease)
                _take_slot(self.client, self.job.kind, self.job.run_id, self.job.budget.running)
            except redis.RedisError:
                log.warning("cannot renew the lease of %s", self.job.run_id, exc_info=True)

    def release(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        with suppress(redis.RedisError):
            _release_lease(self.client, self.job.run_id, self.me)
            self.client.zrem(f"{CI}slots:{self.job.kind}", self.job.run_id)


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
