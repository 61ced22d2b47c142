"""The CI rows of hardware runs, on the service: what a run shows for each of its checks,
stored in the series (SeriesState.ci); what follows is planned from a ChecksRecorded event."""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import UTC, datetime

import redis
from celery import Celery

from bot.ci.runs import SERVICE_QUEUE, Run, check_keys
from bot.ci.spec import JobPayload
from bot.core import events as ev
from bot.core.ci_plan import REUSABLE
from bot.core.ci_report import carry_over
from bot.core.history import HistoryKind
from bot.core.owners import StreakGrew, streak_grew
from bot.core.state import CiState, CiStatus, SeriesState
from bot.core.tree_branch import good_ref_due
from bot.core.verified import Notice, note_rows
from bot.queue.task_message import INGEST_TASK
from bot.store.series import append_history, now_iso, update_series

log = logging.getLogger("carry.ci")


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
    inconclusive_blocks: bool = False,
) -> None:
    """Stores rows in SeriesState.ci. A runner's late update never overwrites the row of a newer
    run (replace_rows=False keeps rows that another run owns). The verdict of each tree whose
    rows changed follows (bot.core.verified): a series that went red or green again is said in
    its history. What follows (the rows shown on GitHub, people told, a bisection, the owners
    mentioned, carry/good/<series> moved) is the planner's to decide: a ChecksRecorded event."""
    written: list[CiState] = []
    notices: list[Notice] = []
    grown: list[StreakGrew] = []
    good_head: list[str] = []

    def update(state: SeriesState) -> bool:
        written.clear()
        notices.clear()
        grown.clear()
        good_head.clear()
        good = state.last_good.head if state.last_good else None
        streak = replace(state.red_streak) if state.red_streak else None
        for row in rows:
            existing = state.ci.get(row.runner)
            if replace_rows or existing is None or existing.run_id == row.run_id:
                state.ci[row.runner] = carry_over(existing, row)
                written.append(row)
        for tree_key in dict.fromkeys(row.tree_key for row in written):
            notice = note_rows(state, tree_key, now_iso(), inconclusive_blocks)
            if notice is not None:
                notices.append(notice)
        last = state.red_streak.last if state.red_streak else None
        newest = next((h for h in state.heads if h.head == last), None)
        grew = streak_grew(state, streak, newest.checks if newest else {})
        if grew is not None:
            grown.append(grew)
        if state.last_good is not None and state.last_good.head != good and good_ref_due(state):
            good_head.append(state.last_good.head)
        return bool(written)

    update_series(client, series_id, update)
    for notice in notices:
        said(client, notice)
    # A row that lost its place (an old run ending) is still reported: its check run ends too.
    recorded = ev.ChecksRecorded(
        series_id=series_id,
        head_sha=rows[0].head_sha if rows else "",
        at=committed_at(),
        rows=tuple(rows),
        notices=tuple(notices),
        streak=grown[0] if grown else None,
        good_head=good_head[0] if good_head else None,
    )
    plan_recorded(celery_app, recorded)


def committed_at() -> str:
    """The moment of a commit, fine enough that two commits of one run are two events."""
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def plan_recorded(celery_app: Celery, recorded: ev.ChecksRecorded) -> None:
    """Hands what the store committed to the planner (the `carry.ingest` task)."""
    try:
        celery_app.send_task(INGEST_TASK, args=[ev.event_to_dict(recorded)], queue=SERVICE_QUEUE)
    except Exception:  # the rows are stored; what follows waits for the run's next report
        log.exception("handing %s's recorded checks to the planner failed", recorded.series_id)


def said(client: redis.Redis, notice: Notice) -> None:
    """A change of verdict, in the series' history."""
    fields = notice.to_dict()
    reason = str(fields.pop("summary"))
    fields.pop("series")
    fields.pop("key")
    append_history(
        client, notice.series_id, HistoryKind(notice.change.value), reason=reason, **fields
    )
