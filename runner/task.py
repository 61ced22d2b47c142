"""The `carry.ci.run_job` task that runner hosts execute: refuse a job this runner's own
config does not name, admit one delivery per run (lease, budget, cancel, reuse), run its steps
and record every check, then conclude or retry."""

from __future__ import annotations

import logging
import os
import time
from dataclasses import asdict, dataclass, fields
from typing import Any

import redis
from celery import Task

from bot.ci.runs import (
    TASK_NAME,
    Run,
    RunEffects,
    check_keys,
    end_run,
    load_run,
)
from bot.ci.signing import JobSignature, signature_expiry_problem, signature_problem
from bot.ci.spec import (
    JobPayload,
    job_mismatch,
)
from bot.config import CarryConfig, ConfigError, Settings
from bot.core.ci_plan import (
    FINAL_STATES,
    REUSABLE,
    classify_outcome,
    next_attempt,
    overall,
    reused_detail,
    short,
    split_ci_key,
)
from bot.core.history import HistoryKind
from bot.core.state import CiStatus
from bot.git.mirror import MirrorError, normalize_source
from bot.github.urls import downstream_sources
from bot.log import correlated, redact, secret_values
from bot.queue.celery_app import app
from bot.store.ci_runs import (
    cancel_reason,
    is_run_id,
    lease_holder,
    lease_ttl_s,
    next_attempt_number,
    note_detail,
    record_check,
    release_lease,
    store_result,
    stored_result,
    transition,
)
from bot.store.runner_channel import send_report
from bot.store.runners import heartbeat
from bot.store.series import now_iso
from runner.job import (
    CheckResult,
    JobContext,
    JobResult,
    artifacts_dir,
    execute,
    host_env_for_steps,
)
from runner.lease import Watch, acquire_lease, holder_id, wait_for_slot
from runner.runtime import runner_runtime
from runner.sandbox_config import runner_sandbox
from runner.steps import RunLog

log = logging.getLogger("carry.ci")


# --------------------------------------------------------------------------- the runner task


@dataclass
class ReportedEffects:
    """A runner's RunEffects: reports on its kind's stream, which the service checks against
    the run record and applies (workers/ci/reports.py). The runner's broker user may write
    neither series state nor a service queue."""

    client: redis.Redis
    kind: str
    runner: str

    def history(self, series_id: str, kind: HistoryKind, **fields: Any) -> None:
        run_id = str(fields.get("run_id", ""))
        send_report(
            self.client,
            self.kind,
            "history",
            run_id,
            self.runner,
            series=series_id,
            event=kind.value,
            fields=fields,
        )

    def rows(self, run_id: str, only: str | None = None) -> None:
        send_report(self.client, self.kind, "rows", run_id, self.runner, only=only)

    def budget_freed(self, kind: str) -> None:
        send_report(self.client, self.kind, "budget-freed", "", self.runner)


@app.task(
    name=TASK_NAME,
    bind=True,
    acks_late=True,
    reject_on_worker_lost=True,
    max_retries=None,
)
def run_job(self: Task, payload: dict[str, Any], signed: Any = None) -> str:
    """Executes one hardware run (on a runner host, queue hw.<kind>). Returns how it ended.
    `signed` is the service's signature of the payload (bot/ci/signing.py): without a valid
    one the job runs nothing."""
    job = JobPayload.from_dict(payload)
    rt = runner_runtime()
    client = rt.store
    runner = rt.name(self.request.hostname)
    effects = ReportedEffects(client, rt.kind or job.kind, runner)
    with correlated(run_id=job.run_id, task_id=str(self.request.id)):
        forged = _forgery(payload, signed)
        refusal = forged or _unsigned_for_here(payload, signed)
        refusal = refusal or _refusal(job) or _not_as_issued(client, job)
        if refusal is not None:
            _refuse(client, effects, job, runner, refusal, forged=forged is not None)
            effects.budget_freed(job.kind)
            return "refused"
        admitted = _admit(client, effects, job, runner)
        if isinstance(admitted, str):
            effects.budget_freed(job.kind)
            return admitted
        if isinstance(admitted, float):
            raise self.retry(countdown=admitted)
        watch = Watch(client, job, runner)
        heartbeat(
            client, job.kind, runner, {"state": "busy", "run": job.run_id, "series": job.series_id}
        )
        try:
            result = _execute(client, effects, job, runner, admitted, watch)
        finally:
            watch.release()
            heartbeat(client, job.kind, runner, {"state": "idle", "run": "", "series": ""})
        ended = _conclude(self, client, effects, job, admitted, result)  # raises Retry to retry
        effects.budget_freed(job.kind)
        return ended


def _forgery(payload: dict[str, Any], signed: Any) -> str | None:
    """Why the job is not one carry's service signed (None when its signature verifies with
    this runner's public key over this very payload): whoever holds a broker password can
    queue a job, only the service can sign one."""
    try:
        key = runner_runtime().job_public_keys()
    except ConfigError as err:
        return f"this runner cannot verify jobs: {'; '.join(err.problems)}"
    return signature_problem(key, payload, signed)


def _unsigned_for_here(payload: dict[str, Any], signed: Any) -> str | None:
    """Why a job the service did sign is not valid here: signed for another kind, or expired."""
    kind = runner_runtime().kind or str(payload.get("kind", ""))
    return signature_expiry_problem(JobSignature.from_dict(signed), kind, now=time.time())


def _refusal(job: JobPayload) -> str | None:
    """Why the job must not run here: the queue is not trusted, the runner's own config is."""
    try:
        rt = runner_runtime()
        kind = rt.kind
        if not kind:
            return "this worker is not a runner (`carry runner --kind K` sets CARRY_RUNNER_KIND)"
        config = rt.config()
    except ConfigError as err:
        return f"this runner's settings or config cannot be read: {'; '.join(err.problems)}"
    runner = config.runners.get(kind) if config is not None else None
    if config is not None and runner is None:
        return f"runner kind {kind!r} is not in this runner's config"
    mismatch = job_mismatch(job, kind, runner)
    if mismatch is None and not is_run_id(kind, job.run_id):
        return f"run id {job.run_id!r} is not one carry issues for {kind} runs"
    if mismatch is None and config is not None:
        return foreign_source(job, config, rt.settings)
    return mismatch


def foreign_source(job: JobPayload, config: CarryConfig, settings: Settings) -> str | None:
    """Why the job would make this runner fetch a repository its own config does not name
    (None when it names them all): the series' upstream, and the downstream repository when
    the job does not carry the series' patches. The queue is not trusted."""
    try:
        series = config.series_by_id(job.series_id)
    except KeyError:
        return f"series {job.series_id!r} is not in this runner's config"
    own = config.upstreams[series.upstream].url
    if _source(job.tree.upstream_url) != _source(own):
        return (
            f"the job's upstream {redact(job.tree.upstream_url)!r} is not {redact(own)!r}, where this runner's "
            f"config says series {series.id!r} comes from"
        )
    allowed = downstream_sources(settings, config)
    if job.tree.series() is None and _source(job.tree.downstream_url) not in map(_source, allowed):
        named = " or ".join(repr(redact(url)) for url in allowed)
        return (
            f"the job's downstream {redact(job.tree.downstream_url)!r} is not {named}, this "
            "runner's downstream repository"
        )
    return None


def _source(url: str) -> str:
    """A repository as git would reach it (a local path resolved), for comparing."""
    try:
        return normalize_source(url).rstrip("/").removesuffix(".git")
    except MirrorError:
        return url


# What a job must hold as carry issued it (the run record keeps the issued payload): which
# series and tree, on which head, with which steps.
_ISSUED_FIELDS = ("series_id", "kind", "tree_key", "head_sha", "tree", "setup", "checks")


def _not_as_issued(client: redis.Redis, job: JobPayload) -> str | None:
    """Why a job (of a run id of this runner's kind) is not the run carry issued under its
    id (None when it is, or when carry knows no such run: _admit records that): a run that
    waits for `/carry approve` is queued by no one, and a job whose tree or steps differ from
    the issued run's is another job."""
    run = load_run(client, job.run_id)
    if run is None:
        return None
    if run.state == CiStatus.WAITING_APPROVAL:
        return f"run {job.run_id} waits for /carry approve: carry has not queued it"
    differs = _differences_from_issued(job, run.payload)
    if differs:
        verb = "differs" if len(differs) == 1 else "differ"
        return f"its {' and '.join(differs)} {verb} from run {job.run_id} as carry issued it"
    return None


def _differences_from_issued(job: JobPayload, issued: JobPayload) -> list[str]:
    ours, theirs = job.to_dict(), issued.to_dict()
    return [name for name in _ISSUED_FIELDS if ours[name] != theirs[name]]


def _refuse(
    client: redis.Redis,
    effects: ReportedEffects,
    job: JobPayload,
    runner: str,
    reason: str,
    *,
    forged: bool = False,
) -> None:
    """Refuses a job that names commands this runner's config does not, or that is not the
    run carry issued: it runs nothing, and says so in the run's log, the history and, when
    the job is the run carry queued (this runner cannot run it), the run's verdict. A changed
    copy of a run, or one the service did not sign (a forgery), leaves the run as it is."""
    log.warning("refused run %s: %s", job.run_id, reason)
    effects.history(
        job.series_id, HistoryKind.CI_REFUSED, run_id=job.run_id, runner=runner, reason=reason
    )
    if not is_run_id(effects.kind, job.run_id):  # not a run of this kind: not its to write
        return
    runlog = RunLog(client, job.run_id, job.limits)
    runlog.note(f"[carry] {runner} refused run {job.run_id}, it ran nothing: {reason}")
    runlog.close()
    run = load_run(client, job.run_id)
    active = (CiStatus.QUEUED, CiStatus.RUNNING)
    if forged or run is None or run.state not in active:
        return
    if _differences_from_issued(job, run.payload):
        return
    # A copy of a run that a runner is executing now leaves that execution alone.
    if not lease_holder(client, job.run_id):
        end_run(client, effects, run, CiStatus.INFRA_ERROR, f"refused by {runner}: {reason}")


def _admit(
    client: redis.Redis, effects: RunEffects, job: JobPayload, runner: str
) -> int | float | str:
    """The attempt number when this delivery may run; a reason (str) when it must not run at
    all; seconds (float) to try again later when another live runner holds the run."""
    run = load_run(client, job.run_id)
    if run is None:
        effects.history(job.series_id, HistoryKind.CI_ORPHAN_JOB, run_id=job.run_id)
        return "unknown run"
    if run.state in FINAL_STATES:
        return f"already {run.state}"
    cancel = cancel_reason(client, job.run_id)
    if cancel is not None:
        end_run(client, effects, run, CiStatus.CANCELLED, cancel)
        return "cancelled"
    if not job.force and stored_result(client, job.kind, job.tree_key):
        _finish_reused(client, effects, run)
        return "reused"
    holder = acquire_lease(client, job.run_id, holder_id(runner))
    if holder is not None:
        effects.history(
            job.series_id,
            HistoryKind.CI_DUPLICATE_DELIVERY,
            run_id=job.run_id,
            runner=runner,
            holder=holder,
        )
        return float(max(1, lease_ttl_s(client, job.run_id)))
    return _start_attempt(client, effects, run, runner)


def _start_attempt(client: redis.Redis, effects: RunEffects, run: Run, runner: str) -> int | str:
    attempt = next_attempt_number(client, run.run_id)
    if run.state == "running":  # the previous attempt never concluded: its runner was lost
        lost = classify_outcome("job", None, lost=True, name=run.runner)
        effects.history(
            run.series,
            HistoryKind.CI_RUNNER_LOST,
            run_id=run.run_id,
            runner=run.runner,
            attempt=attempt - 1,
            reason=lost.reason,
        )
        if attempt > run.payload.retry.max_attempts:
            release_lease(client, run.run_id, holder_id(runner))
            end_run(
                client,
                effects,
                run,
                CiStatus.INFRA_ERROR,
                f"{lost.reason}; gave up after {attempt - 1} attempts",
            )
            return "gave up"
    if not wait_for_slot(client, effects, run, runner):
        release_lease(client, run.run_id, holder_id(runner))
        return "cancelled"
    transition(
        client,
        run.run_id,
        "running",
        ("queued", "running"),
        runner=runner,
        detail=f"attempt {attempt} on {runner}",
    )
    effects.history(
        run.series,
        HistoryKind.CI_STARTED,
        run_id=run.run_id,
        runner=runner,
        attempt=attempt,
        tree_key=run.tree_key,
        head=run.head_sha,
    )
    effects.rows(run.run_id)
    return attempt


def _finish_reused(client: redis.Redis, effects: RunEffects, run: Run) -> None:
    result = stored_result(client, run.kind, run.tree_key) or {}
    detail = reused_detail(str(result.get("state", "")), str(result.get("run_id", "")))
    end_run(client, effects, run, CiStatus.REUSED, detail)


def _execute(
    client: redis.Redis,
    effects: RunEffects,
    job: JobPayload,
    runner: str,
    attempt: int,
    watch: Watch,
) -> JobResult:
    rt = runner_runtime()
    workdir = rt.workdir
    logfile = artifacts_dir(workdir, job.run_id) / "logs" / f"attempt-{attempt}.log"
    runlog = RunLog(client, job.run_id, job.limits, logfile, secrets=secret_values(rt.settings))
    done = _done_checks(load_run(client, job.run_id))
    runlog.note(
        f"[carry] run {job.run_id} attempt {attempt} on {runner}: {job.kind} "
        f"tree {short(job.tree_key)} upstream {short(job.head_sha)}"
    )
    try:
        configured = rt.config()
        own = configured.runners.get(job.kind) if configured else None
        ctx = JobContext(
            workdir=workdir,
            log=runlog,
            cancelled=watch.cancelled,
            on_check=lambda result: _record_check(client, effects, job, attempt, runner, result),
            on_phase=lambda phase: note_detail(client, job.run_id, f"{phase} on {runner}"),
            done=done,
            env=host_env_for_steps(os.environ, rt.settings.runner_pass_env),
            attempt=attempt,
            # job_mismatch let the job in, so this runner's config names its kind
            sandbox=runner_sandbox(own, rt.settings, workdir),
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


def _runner_error(key: str, err: Exception) -> CheckResult:
    _, name, variant = split_ci_key(key)
    return CheckResult(key, name, variant, "infra-error", f"runner error: {err!r}")


def _done_checks(run: Run | None) -> dict[str, CheckResult]:
    """Checks concluded by earlier attempts: an infra retry does not run them again."""
    known = {f.name for f in fields(CheckResult)}
    return {
        key: CheckResult(**{k: v for k, v in value.items() if k in known})
        for key, value in (run.checks if run else {}).items()
        if value.get("verdict") in REUSABLE
    }


def _record_check(
    client: redis.Redis,
    effects: RunEffects,
    job: JobPayload,
    attempt: int,
    runner: str,
    result: CheckResult,
) -> None:
    data = {**asdict(result), "reason": redact(result.reason), "attempt": attempt, "runner": runner}
    if result.final:
        record_check(client, job.run_id, result.key, data)
    effects.history(job.series_id, HistoryKind.CI_CHECK, run_id=job.run_id, **data)
    if result.final:
        effects.rows(job.run_id, only=result.key)


def _conclude(
    task: Task,
    client: redis.Redis,
    effects: RunEffects,
    job: JobPayload,
    attempt: int,
    result: JobResult,
) -> str:
    run = load_run(client, job.run_id)
    if run is None or run.state in FINAL_STATES:
        return run.state if run else "unknown run"
    cancelled = [c for c in result.checks if c.verdict == "cancelled"]
    if cancelled:
        end_run(client, effects, run, CiStatus.CANCELLED, cancelled[0].reason)
        return "cancelled"
    unresolved = result.unresolved
    if not unresolved:
        # The A/B run on plain upstream informs (it may well fail: the bug is there); the
        # run's verdict is about the carried tree.
        verdict = overall(c.verdict for c in result.checks if not c.variant)
        _store_result(client, job, run, verdict, attempt)
        end_run(client, effects, run, CiStatus(verdict), _summary(result))
        return verdict
    why = "; ".join(dict.fromkeys(c.reason for c in unresolved))
    decision = next_attempt(job.retry, "infra-error", attempt)
    if not decision.retry:
        end_run(client, effects, run, CiStatus.INFRA_ERROR, f"{why} ({decision.reason})")
        return "infra-error"
    detail = f"infra error on attempt {attempt}: {why}; {decision.reason}"
    transition(client, job.run_id, "queued", ("running",), detail=detail)
    effects.history(
        job.series_id,
        HistoryKind.CI_RETRY,
        run_id=job.run_id,
        attempt=attempt,
        delay_s=decision.delay_s,
        reason=why,
    )
    effects.rows(job.run_id)
    raise task.retry(countdown=decision.delay_s)


def _summary(result: JobResult) -> str:
    return ", ".join(
        f"{c.name}{'@' + c.variant if c.variant else ''}: {c.verdict}" for c in result.checks
    )


def _store_result(
    client: redis.Redis, job: JobPayload, run: Run, verdict: str, attempt: int
) -> None:
    final = load_run(client, job.run_id)
    body = {
        "run_id": job.run_id,
        "state": verdict,
        "head_sha": job.head_sha,
        "series": job.series_id,
        "attempt": attempt,
        "at": now_iso(),
        "checks": final.checks if final else run.checks,
    }
    store_result(client, job.kind, job.tree_key, body, replace=job.force)
