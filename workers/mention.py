"""The `carry.red_streak` task: a series' red streak gained a head (workers/ci/rows.py); once it
is `notify.red_streak_mention` heads long, the owners of the failing fix (its page's Owners
field) are mentioned, once per streak: a comment on the dashboard issue (where carry keeps one)
and a `red-streak` message to the webhooks (workers/notify.py sends it, signed and retried).
The decisions are bot.core.owners'.
"""

from __future__ import annotations

import logging
from typing import Any

from bot.core import owners as own
from bot.core.history import HistoryKind
from bot.core.notify import NOTIFY_TASK, series_page
from bot.core.state import SeriesState
from bot.github.forge import ForgeError
from bot.log import correlated
from bot.queue.celery_app import QUICK_QUEUE, app
from bot.series_loader import SeriesInvalid, load_series
from bot.store import dashboard_issue as record
from bot.store import series as store
from workers import dashboard_issue
from workers.runtime import Runtime, runtime

log = logging.getLogger("carry.mention")


@app.task(name=own.RED_STREAK_TASK, acks_late=True)
def red_streak(grew: dict[str, Any]) -> None:
    rt = runtime()
    with correlated(series=str(grew.get("series"))):
        mention(rt, grew)


def mention(rt: Runtime, grew: dict[str, Any]) -> bool:
    """Mentions the owners of the streak `grew` describes (the planner found it long enough:
    bot.core.planner) unless it was mentioned already or is green again; True when it did now."""
    streak = own.StreakGrew.from_dict(grew)
    if not _still_red(rt, streak) or not store.claim(
        rt.redis, own.mention_key(streak.series_id, streak.streak_head)
    ):
        return False  # green again meanwhile, or mentioned already: once per streak
    owners = own.owners_of(_pages(rt, streak.series_id), own.failing_checks(dict(streak.checks)))
    page = series_page(rt.config.web.public_url, streak.series_id)
    text = own.mention_text(streak, owners, page)
    where = _comment(rt, text)
    store.append_history(
        rt.redis,
        streak.series_id,
        HistoryKind.RED_STREAK,
        reason=text,
        owners=list(owners),
        head=streak.head,
        streak_head=streak.streak_head,
        streak_heads=streak.heads,
        dashboard_issue=where,
    )
    notice = own.mention_notice(streak, owners, page)
    app.send_task(NOTIFY_TASK, args=[notice], queue=QUICK_QUEUE)
    return True


def _still_red(rt: Runtime, streak: own.StreakGrew) -> bool:
    state: SeriesState | None = store.load_series(rt.redis, streak.series_id)
    return (
        state is not None
        and state.red_streak is not None
        and state.red_streak.head == streak.streak_head
    )


def _pages(rt: Runtime, series_id: str) -> list[Any]:
    series = rt.config.series_by_id(series_id)
    try:
        return list(load_series(rt.patches_root / series.patches, root=rt.downstream_dir).pages)
    except SeriesInvalid as err:
        log.warning("%s: its fix pages cannot be read for owners: %s", series_id, err)
        return []


def _comment(rt: Runtime, text: str) -> int | None:
    """The comment on the dashboard issue (opened first where carry has none yet); the
    issue's number, None where there is no dashboard issue or GitHub refused."""
    if not dashboard_issue.enabled(rt):
        return None
    forge = rt.forge()
    try:
        known = record.load(rt.redis, rt.config.downstream.repo)
        if known is None:
            dashboard_issue.refresh(rt, forge)
            known = record.load(rt.redis, rt.config.downstream.repo)
        if known is None:
            return None
        forge.comment(known.number, text)
        return known.number
    except ForgeError as err:
        log.warning("the owners' mention could not be said on the dashboard issue: %s", err)
        return None
