"""Hardware runs on the service: request them, cancel stale ones, reuse results, gate
untrusted heads, end them. The run record is bot/ci/runs.py, the job bot/ci/spec.py; leases and
slots are runner/lease.py, and the `carry.ci.run_job` task that runner hosts execute
runner/task.py.

What to do with a request is the planner's decision: a request is an event
(bot.core.events.RunRequested) that bot.core.planner.plan plans, pure, over the facts of the
series' lane on the runner kind (planner.Facts.lane, a LaneFacts); the rest comes from
bot.core.ci_plan. Under the kind's lock this module gathers those facts from the run store
(bot/store/ci_runs.py, which owns every `carry:ci:` key), plans the event, carries its actions
(bot.core.actions.RUN_ACTIONS) out, one adapter each (_APPLY), and records every step.

Each check's row is a CiState in SeriesState.ci under ci_plan.ci_key(kind, check), e.g.
"gaudi/async-inputs" (its `runner` field holds the same key, so tables name the check). Every
change is appended to the series history and sent to the service as a `carry.ci.report` task,
from the service and from runner hosts alike (runners hold no GitHub credentials): one path,
whose reports workers.ci.github puts on GitHub.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import redis
from celery import Celery

from bot.ci.job_keys import JobIssuer
from bot.ci.runs import (
    TASK_NAME,
    Run,
    check_keys,
    end_run,
    load_run,
    must_load,
)
from bot.ci.spec import (
    JobPayload,
    LogLimits,
    StepSpec,
    TreeSpec,
    recipe_digest,
)
from bot.config import CarryConfig
from bot.core import actions as act
from bot.core import events as ev
from bot.core.ci_pacing import Pace, PacePolicy
from bot.core.ci_plan import (
    ACTIVE_STATES,
    FINAL_STATES,
    REUSABLE,
    Budget,
    RetryPolicy,
    resolve_approval,
    reused_detail,
    tree_key,
)
from bot.core.history import HistoryKind
from bot.core.planner import ActiveRun, Facts, LaneFacts, StoredResult, plan
from bot.core.state import CiState, CiStatus, SeriesState
from bot.core.trust import Push, Trust, decide, record
from bot.queue.celery_app import app
from bot.store import ci_runs as store
from bot.store.ci_runs import Issued, IssuedState, in_flight, kind_lock, stored_result
from bot.store.series import (
    append_history,
    ensure_series,
    load_series,
    now_iso,
    update_series,
)
from workers.ci.probes import probe_ended
from workers.ci.rows import ci_row, publish_rows, rows_of

log = logging.getLogger("carry.ci")


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
    inconclusive_blocks: bool = False  # the series' ci.inconclusive_blocks
    pace: PacePolicy = field(
        default_factory=PacePolicy
    )  # the series' ci.min_interval_s and ci.daily_budget


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
                kind,
                runner.queue,
                setup,
                checks,
                budget,
                tuple(artifacts),
                retry or RetryPolicy(),
                inconclusive_blocks=series.ci.inconclusive_blocks,
                pace=PacePolicy(series.ci.min_interval_s, series.ci.daily_budget),
            )
        )
    return targets


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
    issuer: JobIssuer,
    force: bool = False,
    debounce_s: float | None = None,
    purpose: str = "head",
    trusted: bool | None = None,
    approved_descendant: bool = False,
) -> list[CiState]:
    """Asks for hardware runs of one exact tree on each target; returns the CI rows.

    Whether the tree's upstream head may run unapproved is bot.core.trust's decision over the
    series' recorded pushes and approvals (`approved_descendant`: git found the head in an
    approved SHA). `force` (`/carry retest`) skips result reuse. New runs wait `debounce_s` (by
    default the issuer's, CARRY_CI_DEBOUNCE_S) in the broker, so a burst of heads starts one
    run, on the newest; `issuer` signs the jobs (the Runtime's `job_issuer`).
    A `bisect` run probes a commit between two heads (workers/bisect.py): it has a lane of its
    own (it neither cancels nor is cancelled by the head's runs), its rows are not the
    series' CI rows, and `trusted` is the trust of the red head whose ancestors it tests.
    """
    state = ensure_series(client, series_id)
    why = ""
    if trusted is None:
        decided = trust_of(state, tree.upstream_sha, approved_descendant)
        trusted, why = decided.may_run, decided.reason
    delay = issuer.debounce_s if debounce_s is None else debounce_s
    rows: list[CiState] = []
    for target in targets:
        job = replace(_new_job(series_id, target, tree, force), purpose=purpose)
        pacing = target.pace if purpose == "head" else PacePolicy()
        with kind_lock(client, target.kind):
            rows += _plan_and_apply(client, celery_app, issuer, job, trusted, delay, pacing, why)
    return rows


def trust_of(state: SeriesState, sha: str, approved_descendant: bool = False) -> Trust:
    """bot.core.trust's decision for one upstream head of the series, from its stored facts."""
    return decide(sha, state.pushes, state.approvals, approved_descendant)


def record_push(client: redis.Redis, series_id: str, push: Push) -> bool:
    """Adds a push of the series' watched ref to its state (False: already recorded)."""

    def add(state: SeriesState) -> bool:
        pushes = record(state.pushes, push)
        if pushes is None:
            return False
        state.pushes = pushes
        return True

    ensure_series(client, series_id)
    return update_series(client, series_id, add) is not None


def _new_job(series_id: str, target: CiTarget, tree: TreeSpec, force: bool) -> JobPayload:
    return JobPayload(
        run_id=store.new_run_id(target.kind),
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
        inconclusive_blocks=target.inconclusive_blocks,
    )


def _plan_and_apply(
    client: redis.Redis,
    celery_app: Celery,
    issuer: JobIssuer,
    job: JobPayload,
    trusted: bool,
    debounce_s: float,
    pacing: PacePolicy,
    why_untrusted: str = "",
) -> list[CiState]:
    event = ev.RunRequested(
        series_id=job.series_id,
        runner_kind=job.kind,
        tree_key=job.tree_key,
        head_sha=job.head_sha,
        trusted=trusted,
        force=job.force,
        why_untrusted=why_untrusted,
    )
    actions = _run_decisions(event, plan(event, Facts.of_lane(_facts(client, job, pacing))))
    rows: list[CiState] = []
    for action in actions:
        append_history(
            client,
            job.series_id,
            HistoryKind(action.kind.value),
            runner_kind=job.kind,
            run_ids=action.run_ids,
            tree_key=job.tree_key,
            head=job.head_sha,
            reason=action.reason,
            key=action.key,
        )
        rows = _APPLY[type(action)](_Apply(client, celery_app, issuer, job, debounce_s), action)
    if isinstance(actions[0], act.SupersedeRuns):  # cancelled runs may have left room
        _release_deferred_locked(client, celery_app, issuer, job.kind)
    return rows


def _run_decisions(event: ev.RunRequested, actions: list[act.Action]) -> list[act.RunDecision]:
    """The planner's answer to a run request: run decisions only, each carried out here."""
    other = [action for action in actions if not isinstance(action, act.RunDecision)]
    if other or not actions:
        raise TypeError(f"{event.key}: the planner answered a run request with {actions!r}")
    return [action for action in actions if isinstance(action, act.RunDecision)]


def _facts(client: redis.Redis, job: JobPayload, pacing: PacePolicy) -> LaneFacts:
    active: tuple[ActiveRun, ...] = ()
    current = store.current_run(client, lane(job), job.kind)
    run = load_run(client, current) if current else None
    if run is not None and run.state in ACTIVE_STATES:
        active = (ActiveRun(run.run_id, run.state, run.tree_key, run.head_sha, run.dispatched),)
    raw = stored_result(client, job.kind, job.tree_key)
    result = None
    if raw and _verdict_of_issued_run(client, job, raw):
        state = _reusable_state(raw.get("state"))
        if state is not None:
            result = StoredResult(raw["run_id"], state, raw.get("head_sha", ""))
        else:
            log.warning(
                "%s: the stored %s verdict for tree %s is %r, not one carry reuses; the tree runs",
                job.series_id,
                job.kind,
                job.tree_key,
                raw.get("state"),
            )
    pace = Pace(pacing)
    if pacing.limits:
        now = time.time()
        pace = Pace(pacing, now, store.starts(client, job.series_id, job.kind, now))
    return LaneFacts(result, active, in_flight(client, job.kind), job.budget, pace)


def _reusable_state(value: object) -> CiStatus | None:
    """A stored verdict's state, when it is one a tree's result may be reused with."""
    try:
        state = CiStatus(str(value))
    except ValueError:
        return None
    return state if state in REUSABLE else None


def _verdict_of_issued_run(client: redis.Redis, job: JobPayload, raw: Mapping[str, Any]) -> bool:
    """Whether a stored verdict comes from a run the service issued and handed to a runner
    for this very tree: a verdict a runner's broker user planted under a tree's key is not one
    (it is logged, and the tree runs)."""
    issued = store.issued_run(client, str(raw.get("run_id", "")))
    if (
        issued is not None
        and issued.state == IssuedState.DISPATCHED
        and (issued.kind, issued.tree_key) == (job.kind, job.tree_key)
    ):
        return True
    log.warning(
        "%s: the stored %s verdict for tree %s names run %r, which carry did not issue for it; "
        "not reused",
        job.series_id,
        job.kind,
        job.tree_key[:12],
        raw.get("run_id"),
    )
    return False


@dataclass(frozen=True)
class _Apply:
    """What an adapter of a run decision works with: the store, the broker, the service's
    issuer of jobs, the job the request would run and how long a new run waits in the broker."""

    client: redis.Redis
    celery_app: Celery
    issuer: JobIssuer
    job: JobPayload
    debounce_s: float

    def continued(self, action: act.NewRun) -> JobPayload:
        """The job, under the id of the run the action continues (releasing a run that waited
        for approval, or one held back and retested, keeps its id)."""
        if action.continues is None:
            return self.job
        return replace(self.job, run_id=action.continues)


def _supersede(on: _Apply, action: act.RunDecision) -> list[CiState]:
    assert isinstance(action, act.SupersedeRuns)
    for run_id in action.runs:
        cancel_run(on.client, on.celery_app, run_id, action.reason, issuer=on.issuer)
    return []


def _reuse_result(on: _Apply, action: act.RunDecision) -> list[CiState]:
    assert isinstance(action, act.ReuseResult)
    return _reuse(on.client, on.celery_app, on.job, action.source_run)


def _join(on: _Apply, action: act.RunDecision) -> list[CiState]:
    assert isinstance(action, act.JoinRun)
    joined = load_run(on.client, action.run)
    return rows_of(joined) if joined else []


def _wait_approval(on: _Apply, action: act.RunDecision) -> list[CiState]:
    assert isinstance(action, act.WaitForApproval)
    return _record_run(
        on.client, on.celery_app, on.job, "waiting-approval", action.reason, dispatched=False
    )


def _held_back(on: _Apply, action: act.RunDecision) -> list[CiState]:
    """A run recorded as queued but not handed to the broker: the series' pacing holds it until
    its time (PaceRun), or the kind's full budget until a place frees (DeferOverBudget)."""
    assert isinstance(action, act.PaceRun | act.DeferOverBudget)
    job = on.continued(action)
    rows = _record_run(on.client, on.celery_app, job, "queued", action.reason, dispatched=False)
    if isinstance(action, act.PaceRun):
        store.pace(on.client, job.run_id, action.not_before)
    else:
        store.defer(on.client, job.kind, job.run_id)
    return rows


def _enqueue(on: _Apply, action: act.RunDecision) -> list[CiState]:
    assert isinstance(action, act.EnqueueRun)
    job = on.continued(action)
    waits = "waiting for a runner"
    return _dispatch(on.client, on.celery_app, on.issuer, job, waits, on.debounce_s)


# one adapter per run decision (tests/unit/test_history_kinds.py holds it to RUN_ACTIONS)
_APPLY: dict[type[act.RunDecision], Callable[[_Apply, act.RunDecision], list[CiState]]] = {
    act.SupersedeRuns: _supersede,
    act.ReuseResult: _reuse_result,
    act.JoinRun: _join,
    act.WaitForApproval: _wait_approval,
    act.PaceRun: _held_back,
    act.DeferOverBudget: _held_back,
    act.EnqueueRun: _enqueue,
}


def _record_run(
    client: redis.Redis,
    celery_app: Celery,
    job: JobPayload,
    state: str,
    detail: str,
    *,
    dispatched: bool,
) -> list[CiState]:
    values = {
        "payload": json.dumps(job.to_dict()),
        "series": job.series_id,
        "kind": job.kind,
        "tree_key": job.tree_key,
        "head_sha": job.head_sha,
        "state": state,
        "detail": detail,
        "dispatched": "1" if dispatched else "0",
    }
    if state == CiStatus.WAITING_APPROVAL:
        issued = IssuedState.WAITING_APPROVAL
    else:
        issued = IssuedState.DISPATCHED if dispatched else IssuedState.HELD
    store.record_issued(
        client, Issued(job.run_id, job.series_id, job.kind, job.tree_key, job.head_sha, issued)
    )
    store.write_run(client, job.run_id, lane(job), job.kind, values)
    rows = rows_of(must_load(client, job.run_id))
    if job.purpose == "head":
        publish_rows(
            client,
            celery_app,
            job.series_id,
            rows,
            replace_rows=True,
            inconclusive_blocks=job.inconclusive_blocks,
        )
    return rows


def _dispatch(
    client: redis.Redis,
    celery_app: Celery,
    issuer: JobIssuer,
    job: JobPayload,
    detail: str,
    countdown: float,
) -> list[CiState]:
    rows = _record_run(client, celery_app, job, "queued", detail, dispatched=True)
    store.add_in_flight(client, job.kind, job.run_id)
    if job.purpose == "head":
        store.note_start(client, job.series_id, job.kind, job.run_id, time.time())
    try:
        payload = job.to_dict()
        celery_app.send_task(
            TASK_NAME,
            args=[payload],
            # only the service can sign (issue 33)
            kwargs={"signed": issuer.sign(payload, now=time.time())},
            queue=job.queue,
            task_id=job.run_id,
            countdown=countdown if countdown > 0 else None,
        )
    except Exception as err:
        run = load_run(client, job.run_id)
        if run is not None:
            why = f"could not enqueue the job: {err}"
            finish(client, celery_app, run, CiStatus.INFRA_ERROR, why, issuer=issuer)
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
        rows.append(
            ci_row(key, CiStatus.REUSED, source_run, job, detail, int(result.get("attempt", 1)))
        )
    store.forget_current(client, lane(job), job.kind)
    if job.purpose == "head":
        publish_rows(
            client,
            celery_app,
            job.series_id,
            rows,
            replace_rows=True,
            inconclusive_blocks=job.inconclusive_blocks,
        )
    else:
        probe_ended(client, celery_app, job.series_id, job.head_sha, rows)
    return rows


def lane(job: JobPayload) -> str:
    """Where a job's current run is kept: the series' own lane for its heads, another for
    bisection probes, so neither supersedes the other."""
    return job.series_id if job.purpose == "head" else f"{job.series_id}~{job.purpose}"


# --------------------------------------------------------------------------- a run's effects


@dataclass
class ServiceEffects:
    """The service's RunEffects: it writes the history and the series' CI rows itself and
    releases the runs the budget held back (a runner reports these: runner.task)."""

    client: redis.Redis
    celery_app: Celery
    issuer: JobIssuer

    def history(self, series_id: str, kind: HistoryKind, **fields: Any) -> None:
        append_history(self.client, series_id, kind, **fields)

    def rows(self, run_id: str, only: str | None = None) -> None:
        """Publishes the run's rows as its record holds them now (`only`: one check's)."""
        run = load_run(self.client, run_id)
        if run is not None and run.payload.purpose != "head":
            probe_ended(self.client, self.celery_app, run.series, run.head_sha, rows_of(run))
        elif run is not None:
            rows = [r for r in rows_of(run) if only is None or r.runner == only]
            publish_rows(
                self.client,
                self.celery_app,
                run.series,
                rows,
                replace_rows=False,
                inconclusive_blocks=run.payload.inconclusive_blocks,
            )

    def budget_freed(self, kind: str) -> None:
        try:
            release_deferred(self.client, self.celery_app, kind, issuer=self.issuer)
        except Exception:
            log.exception("releasing deferred %s runs failed", kind)


def finish(
    client: redis.Redis,
    celery_app: Celery,
    run: Run,
    state: CiStatus,
    detail: str,
    *,
    issuer: JobIssuer,
) -> bool:
    """Ends a run (once), on the service: see end_run."""
    return end_run(client, ServiceEffects(client, celery_app, issuer), run, state, detail)


# --------------------------------------------------------------------------- cancel, approve


def cancel_run(
    client: redis.Redis, celery_app: Celery, run_id: str, reason: str, *, issuer: JobIssuer
) -> bool:
    """Cancels a run: the marker stops a running job (its runner kills the process group), a
    queued one is revoked in the broker. False when the run had already finished."""
    store.mark_cancelled(client, run_id, reason)
    run = load_run(client, run_id)
    if run is None or run.state in FINAL_STATES:
        return False
    if run.dispatched and run.state == "queued":
        celery_app.control.revoke(run_id)
    if run.state == "queued":  # no runner took it: it used no place in the series' pace
        store.forget_start(client, run.series, run.kind, run_id)
        store.unpace(client, run_id)
    finish(client, celery_app, run, CiStatus.CANCELLED, reason, issuer=issuer)
    return True


def approve(
    client: redis.Redis,
    series_id: str,
    sha: str,
    by: str,
    *,
    issuer: JobIssuer,
    celery_app: Celery | None = None,
) -> list[CiState]:
    """`/carry approve <sha>` from a user with write access (or `carry approve` by an
    operator): binds to that exact head SHA (an abbreviation must name one waiting head) and
    releases the runs waiting for it, and those whose heads it now covers (a trusted push on
    top of it)."""
    waiting = _waiting_runs(client, series_id)
    state = load_series(client, series_id)
    candidates = [run.head_sha for run in waiting]
    if state is not None and state.head_sha:
        candidates.append(state.head_sha)
    full = resolve_approval(sha, candidates)
    state = _add_approval(client, series_id, full)
    released = [run for run in waiting if trust_of(state, run.head_sha).may_run]
    append_history(
        client,
        series_id,
        HistoryKind.CI_APPROVED,
        sha=full,
        by=by,
        runs=[r.run_id for r in released],
    )
    return _release(client, celery_app or app, issuer, released)


def release_for_push(
    client: redis.Redis,
    series_id: str,
    push: Push,
    *,
    issuer: JobIssuer,
    celery_app: Celery | None = None,
) -> list[CiState]:
    """A push became known after runs were planned (a poll saw its head first): the runs
    that waited for approval and that the recorded pushes now cover start, as if it had been
    known all along."""
    state = load_series(client, series_id)
    if state is None:
        return []
    released = [r for r in _waiting_runs(client, series_id) if trust_of(state, r.head_sha).may_run]
    if released:
        append_history(
            client,
            series_id,
            HistoryKind.CI_TRUSTED_PUSHER,
            sha=push.after,
            by=push.pusher,
            runs=[r.run_id for r in released],
        )
    return _release(client, celery_app or app, issuer, released)


def _release(
    client: redis.Redis, celery_app: Celery, issuer: JobIssuer, released: list[Run]
) -> list[CiState]:
    rows: list[CiState] = []
    for run in released:
        with kind_lock(client, run.kind):
            still = load_run(client, run.run_id)  # a newer head may have superseded it since
            if still is not None and still.state == "waiting-approval":
                # an approval is a person's decision: not held back by the series' pacing
                job = run.payload
                rows += _plan_and_apply(client, celery_app, issuer, job, True, 0.0, PacePolicy())
    return rows


def _waiting_runs(client: redis.Redis, series_id: str) -> list[Run]:
    runs = []
    for run_id in store.current_runs(client, series_id):
        run = load_run(client, run_id)
        if run is not None and run.state == "waiting-approval":
            runs.append(run)
    return runs


def _add_approval(client: redis.Redis, series_id: str, sha: str) -> SeriesState:
    """Records the approval of `sha`; returns the series' state with it."""

    def add(state: SeriesState) -> bool:
        if sha in state.approvals:
            return False
        state.approvals.append(sha)
        return True

    ensure_series(client, series_id)
    state = update_series(client, series_id, add) or load_series(client, series_id)
    assert state is not None  # ensure_series made it
    return state


def release_deferred(
    client: redis.Redis, celery_app: Celery, kind: str, *, issuer: JobIssuer
) -> list[str]:
    """Dispatches runs held back by the budget, oldest first, while the budget allows."""
    with kind_lock(client, kind):
        return _release_deferred_locked(client, celery_app, issuer, kind)


def _release_deferred_locked(
    client: redis.Redis, celery_app: Celery, issuer: JobIssuer, kind: str
) -> list[str]:
    released: list[str] = []
    for run_id in store.deferred(client, kind):
        run = load_run(client, run_id)
        if run is None or run.state != "queued" or run.dispatched:
            store.undefer(client, kind, run_id)
            continue
        if in_flight(client, kind) >= run.payload.budget.capacity:
            break
        append_history(
            client,
            run.series,
            HistoryKind.CI_ENQUEUE,
            runner_kind=kind,
            run_ids=[run.run_id],
            reason="budget freed",
            tree_key=run.tree_key,
            head=run.head_sha,
        )
        _dispatch(client, celery_app, issuer, run.payload, "waiting for a runner", 0.0)
        released.append(run.run_id)
    return released


def release_paced(
    client: redis.Redis, celery_app: Celery, now: float | None = None, *, issuer: JobIssuer
) -> list[str]:
    """Dispatches the paced runs whose time has come (the beat's PACED_TASK, every
    PACED_EVERY_S); one whose kind's budget is full waits for the budget instead."""
    released: list[str] = []
    for run_id in store.paced_due(client, time.time() if now is None else now):
        run = load_run(client, run_id)
        if run is None or run.state != "queued" or run.dispatched:
            store.unpace(client, run_id)
            continue
        with kind_lock(client, run.kind):
            store.unpace(client, run_id)
            if in_flight(client, run.kind) >= run.payload.budget.capacity:
                store.defer(client, run.kind, run_id)
                continue
            append_history(
                client,
                run.series,
                HistoryKind.CI_ENQUEUE,
                runner_kind=run.kind,
                run_ids=[run_id],
                reason="its pacing time came",
                tree_key=run.tree_key,
                head=run.head_sha,
            )
            _dispatch(client, celery_app, issuer, run.payload, "waiting for a runner", 0.0)
        released.append(run_id)
    return released


# --------------------------------------------------------------------------- queries


def run_info(client: redis.Redis, run_id: str) -> dict[str, Any] | None:
    """A run as plain values (for the API, the dashboard and the check-run reporter): its
    payload (the PR head SHA is payload.tree.downstream_sha), state, attempt and checks."""
    run = load_run(client, run_id)
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
