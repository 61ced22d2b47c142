"""Hardware runs as the workers see them: the run record read into a `Run`, its end, and the
CI rows a run writes into its series (and reports to the service). The keys are
bot/store/ci_runs.py's."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import redis
from celery import Celery

from bot.core.ci_plan import (
    ACTIVE_STATES,
    REUSABLE,
    UPSTREAM_VARIANT,
    ci_key,
)
from bot.core.state import CiState, CiStatus, SeriesState
from bot.log import redact
from bot.store.ci_runs import leave_budget, run_fields, transition
from bot.store.series import (
    append_history,
    now_iso,
    update_series,
)
from workers.runner.spec import (
    JobPayload,
    StepSpec,
)

log = logging.getLogger("carry.ci")

TASK_NAME = "carry.ci.run_job"
REPORT_TASK = "carry.ci.report"
SERVICE_QUEUE = "carry"


# --------------------------------------------------------------------------- the run record


@dataclass
class Run:
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


def load_run(client: redis.Redis, run_id: str) -> Run | None:
    raw = run_fields(client, run_id)
    if "payload" not in raw:
        return None
    checks = {
        k.removeprefix("check:"): json.loads(v) for k, v in raw.items() if k.startswith("check:")
    }
    return Run(
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


def must_load(client: redis.Redis, run_id: str) -> Run:
    run = load_run(client, run_id)
    if run is None:
        raise RuntimeError(f"run {run_id} vanished from Redis while it was being recorded")
    return run


class RunEffects(Protocol):
    """What a run's progress causes beyond its own record: history entries, the series' CI
    rows and the budget. The service does them (ServiceEffects); a runner reports them
    (workers.ci_runner.ReportedEffects), since its broker user may not write series state."""

    def history(self, series_id: str, kind: str, **fields: Any) -> None: ...

    def rows(self, run_id: str, only: str | None = None) -> None: ...

    def budget_freed(self, kind: str) -> None: ...


@dataclass
class ServiceEffects:
    client: redis.Redis
    celery_app: Celery

    def history(self, series_id: str, kind: str, **fields: Any) -> None:
        append_history(self.client, series_id, kind, **fields)

    def rows(self, run_id: str, only: str | None = None) -> None:
        """Publishes the run's rows as its record holds them now (`only`: one check's)."""
        run = load_run(self.client, run_id)
        if run is not None:
            rows = [r for r in rows_of(run) if only is None or r.runner == only]
            publish_rows(self.client, self.celery_app, run.series, rows, replace_rows=False)

    def budget_freed(self, kind: str) -> None:
        from workers.ci import release_deferred  # workers.ci builds on this module

        try:
            release_deferred(self.client, self.celery_app, kind)
        except Exception:
            log.exception("releasing deferred %s runs failed", kind)


def finish(client: redis.Redis, celery_app: Celery, run: Run, state: str, detail: str) -> bool:
    """Ends a run (once), on the service: see end_run."""
    return end_run(client, ServiceEffects(client, celery_app), run, state, detail)


def end_run(client: redis.Redis, effects: RunEffects, run: Run, state: str, detail: str) -> bool:
    """Ends a run (once): its unfinished rows take `state`; budget entries are dropped. The
    detail (an error's text, a URL in it) is redacted as carry's logs are before it is
    stored."""
    detail = redact(detail)
    if not transition(client, run.run_id, state, ACTIVE_STATES, detail=detail):
        return False
    leave_budget(client, run.kind, run.run_id)
    effects.history(
        run.series,
        f"ci-{state}",
        runner_kind=run.kind,
        run_id=run.run_id,
        tree_key=run.tree_key,
        head=run.head_sha,
        reason=detail,
    )
    effects.rows(run.run_id)
    return True


# --------------------------------------------------------------------------- CI rows


def ci_row(
    key: str, state: CiStatus, run_id: str, job: JobPayload, detail: str, attempt: int
) -> CiState:
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


def rows_of(run: Run) -> list[CiState]:
    """The rows of a run: a concluded check shows its verdict, the others the run's state."""
    rows = []
    for key in check_keys(run.kind, run.payload.checks):
        check = run.checks.get(key)
        if check is not None and check.get("verdict") in REUSABLE:
            state, detail = CiStatus(check["verdict"]), str(check.get("reason", ""))
            attempt = int(check.get("attempt", run.attempt))
        else:
            state, detail, attempt = CiStatus(run.state), run.detail, run.attempt
        rows.append(ci_row(key, state, run.run_id, run.payload, detail, attempt))
    return rows


def publish_rows(
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
    notify(celery_app, series_id, rows)


def notify(celery_app: Celery, series_id: str, rows: list[CiState]) -> None:
    for row in rows:
        try:
            celery_app.send_task(REPORT_TASK, args=[series_id, asdict(row)], queue=SERVICE_QUEUE)
        except Exception:  # reporting must never break a run; the row is stored regardless
            log.exception("reporting CI row %s of %s failed", row.runner, series_id)


def check_keys(kind: str, checks: Iterable[StepSpec]) -> list[str]:
    """The CI rows a job produces, in order: each check, then its A/B variant."""
    keys = []
    for check in checks:
        keys.append(ci_key(kind, check.name))
        if check.ab:
            keys.append(ci_key(kind, check.name, UPSTREAM_VARIANT))
    return keys
