"""Telling people that a series needs a human (bot.core.attention decides): each notice is a
history entry committed with the state that made it, then a message to the webhooks
(workers/notify.py, once per webhook and change). The rebase tells new conflicts, reviews and
a wait past the heads limit; the beat's `carry.stuck` tells a wait past the hours limit
between heads, when upstream does not move."""

from __future__ import annotations

import logging
from typing import Any

from bot.core.attention import HumanNotice, StuckLimits, stuck_now
from bot.core.history import HistoryKind
from bot.core.notify import NOTIFY_TASK
from bot.core.state import SeriesState
from bot.store import series as store
from workers.runtime import Runtime

log = logging.getLogger("carry.attention")


def limits(rt: Runtime) -> StuckLimits:
    return StuckLimits(rt.config.notify.stuck_heads, rt.config.notify.stuck_hours)


def queue_notices(pipe: Any, series_id: str, notices: list[HumanNotice]) -> None:
    """The history entries, on the pipeline that commits the state they came from."""
    for notice in notices:
        told = notice.to_dict()
        reason = told.pop("summary")
        told.pop("series")
        store.queue_history(
            pipe, series_id, HistoryKind(notice.change.value), reason=reason, **told
        )


def send_notices(rt: Runtime, series_id: str, notices: list[HumanNotice]) -> None:
    """To the webhooks, after the state that made them was committed."""
    for notice in notices:
        try:
            rt.send(NOTIFY_TASK, {"notice": notice.to_dict()})
        except Exception:  # the history entry stands; the webhooks miss this one
            log.exception("sending the %s notice of %s failed", notice.change, series_id)


def tell_stuck(rt: Runtime) -> list[str]:
    """Each series whose wait for a human passed a limit since its last check is told so,
    once per stretch; returns their ids."""
    return [series.id for series in rt.config.series if _tell_if_stuck(rt, series.id)]


def _tell_if_stuck(rt: Runtime, series_id: str) -> bool:
    found: list[HumanNotice] = []

    def check(state: SeriesState) -> bool:
        notice = stuck_now(state, rt.clock(), limits(rt))
        found[:] = [notice] if notice is not None else []
        return notice is not None

    store.update_series(
        rt.redis, series_id, check, also=lambda pipe: queue_notices(pipe, series_id, found)
    )
    send_notices(rt, series_id, found)
    return bool(found)
