"""The CI rows of hardware runs, on the service: what a run shows for each of its checks,
stored in the series (SeriesState.ci) and reported as `carry.ci.report` tasks."""

from __future__ import annotations

import logging
from dataclasses import asdict, replace

import redis
from celery import Celery

from bot.ci.runs import REPORT_TASK, SERVICE_QUEUE, Run, check_keys
from bot.ci.spec import JobPayload
from bot.core.ci_plan import REUSABLE
from bot.core.ci_report import carry_over
from bot.core.history import HistoryKind
from bot.core.notify import NOTIFY_TASK
from bot.core.owners import RED_STREAK_TASK, StreakGrew, streak_grew
from bot.core.state import CiState, CiStatus, SeriesState
from bot.core.tree_branch import GOOD_REF_TASK, good_ref_due
from bot.core.verified import Change, Notice, note_rows
from bot.queue.celery_app import GIT_QUEUE
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
    """Stores rows in SeriesState.ci and reports them. A runner's late update never overwrites
    the row of a newer run (replace_rows=False keeps rows that another run owns). The verdict
    of each tree whose rows changed follows (bot.core.verified); a series that went red or
    green again is said in its history and told to the configured webhooks."""
    written: list[CiState] = []
    notices: list[Notice] = []
    good_moved: list[bool] = []
    grown: list[StreakGrew] = []

    def update(state: SeriesState) -> bool:
        written.clear()
        notices.clear()
        good_moved.clear()
        grown.clear()
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
        moved = state.last_good is not None and state.last_good.head != good
        good_moved.append(moved and good_ref_due(state))
        return bool(written)

    update_series(client, series_id, update)
    for grew in grown:  # the owners are told after a streak (workers/mention.py)
        try:
            celery_app.send_task(RED_STREAK_TASK, args=[grew.to_dict()], queue=SERVICE_QUEUE)
        except Exception:  # the next red head of the streak sends it again
            log.exception("sending the red streak of %s failed", series_id)
    if any(good_moved):  # carry/good/<series> follows (workers/tree_branch.py)
        try:
            celery_app.send_task(GOOD_REF_TASK, args=[series_id], queue=GIT_QUEUE)
        except Exception:  # the next good head sends it again
            log.exception("sending the good ref task of %s failed", series_id)
    for notice in notices:
        announce(client, celery_app, notice)
    # A row that lost its place (an old run ending) is still reported: its check run ends too.
    notify(celery_app, series_id, rows)


def notify(celery_app: Celery, series_id: str, rows: list[CiState]) -> None:
    for row in rows:
        try:
            celery_app.send_task(REPORT_TASK, args=[series_id, asdict(row)], queue=SERVICE_QUEUE)
        except Exception:  # reporting must never break a run; the row is stored regardless
            log.exception("reporting CI row %s of %s failed", row.runner, series_id)


BISECT_TASK = "carry.bisect"


def announce(client: redis.Redis, celery_app: Celery, notice: Notice) -> None:
    """A change of verdict: in the series' history, then to the webhooks (workers.notify)."""
    fields = notice.to_dict()
    reason = str(fields.pop("summary"))
    fields.pop("series")
    fields.pop("key")
    append_history(
        client, notice.series_id, HistoryKind(notice.change.value), reason=reason, **fields
    )
    try:
        celery_app.send_task(NOTIFY_TASK, args=[notice.to_dict()], queue=SERVICE_QUEUE)
        if notice.change is Change.WENT_RED and notice.last_good is not None:
            # explain it: bisect the range from the last good head (workers/bisect.py)
            args = [notice.series_id, notice.to_dict()]
            celery_app.send_task(BISECT_TASK, args=args, queue=GIT_QUEUE)
    except Exception:  # the history entry stands; the webhooks miss this one, said in the log
        log.exception("sending the %s notice of %s failed", notice.change, notice.series_id)
