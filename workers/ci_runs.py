"""The store of hardware runs: the run record, its state transitions, the reusable results,
and the CI rows a run writes into its series (and reports to the service). Keys under
`carry:ci:` (workers/ci.py lists them)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

import redis
from celery import Celery

from bot.core.ci_plan import (
    ACTIVE_STATES,
    REUSABLE,
    UPSTREAM_VARIANT,
    ci_key,
)
from bot.core.state import CiState, SeriesState
from bot.store.series import (
    PREFIX,
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
CI = f"{PREFIX}ci:"
CANCEL_TTL_S = 7 * 24 * 3600
RESULT_TTL_S = 180 * 24 * 3600


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


def run_key(run_id: str) -> str:
    return f"{CI}run:{run_id}"


def current_key(series_id: str, kind: str) -> str:
    return f"{CI}current:{series_id}:{kind}"


def load_run(client: redis.Redis, run_id: str) -> Run | None:
    raw = {as_text(k): as_text(v) for k, v in client.hgetall(run_key(run_id)).items()}
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


def transition(
    client: redis.Redis, run_id: str, to: str, allowed: Iterable[str], **values: str
) -> bool:
    """Moves a run to state `to` if it is in one of `allowed` (atomic: WATCH/MULTI)."""
    key = run_key(run_id)
    allowed = tuple(allowed)
    with client.pipeline() as pipe:
        while True:
            try:
                pipe.watch(key)
                if as_text(pipe.hget(key, "state")) not in allowed:
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


def in_flight(client: redis.Redis, kind: str) -> int:
    """Dispatched, unfinished runs of a kind (entries of finished or lost records pruned)."""
    key = f"{CI}inflight:{kind}"
    members = [as_text(m) for m in client.zrange(key, 0, -1)]
    if not members:
        return 0
    pipe = client.pipeline()
    for run_id in members:
        pipe.hget(run_key(run_id), "state")
    states = [as_text(s) for s in pipe.execute()]
    stale = [m for m, s in zip(members, states, strict=True) if s not in ("queued", "running")]
    if stale:
        client.zrem(key, *stale)
    return len(members) - len(stale)


def finish(client: redis.Redis, celery_app: Celery, run: Run, state: str, detail: str) -> bool:
    """Ends a run (once): its unfinished rows take `state`; budget entries are dropped."""
    if not transition(client, run.run_id, state, ACTIVE_STATES, detail=detail):
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
    finished = load_run(client, run.run_id)
    if finished is not None:
        publish_rows(client, celery_app, run.series, rows_of(finished), replace_rows=False)
    return True


def stored_result(client: redis.Redis, kind: str, tree: str) -> dict[str, Any] | None:
    raw = client.get(f"{CI}result:{kind}:{tree}")
    return json.loads(raw) if raw else None


def cancel_reason(client: redis.Redis, run_id: str) -> str | None:
    raw = client.get(f"{CI}cancel:{run_id}")
    return as_text(raw) if raw is not None else None


# --------------------------------------------------------------------------- CI rows


def ci_row(
    key: str, state: str, run_id: str, job: JobPayload, detail: str, attempt: int
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
            state, detail = str(check["verdict"]), str(check.get("reason", ""))
            attempt = int(check.get("attempt", run.attempt))
        else:
            state, detail, attempt = run.state, run.detail, run.attempt
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


def as_text(value: Any) -> str:
    if value is None:
        return ""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
