"""The sweep that queues again the acknowledged deliveries whose message was lost.

Run by the beat every REQUEUE_EVERY_S: every delivery open for CARRY_REQUEUE_AFTER_S (queued,
not settled by a worker) is decided by bot/core/requeue.py from what the store holds: settled
when its event was handled after all, queued again, or given up on with a history entry and
an error log line after MAX_REQUEUES runs that did not handle it.
"""

from __future__ import annotations

import logging
import time
from typing import Final

from celery import Celery

from bot.core import events as ev
from bot.core.history import HistoryKind
from bot.core.requeue import MAX_REQUEUES, OpenDelivery, Requeue, decide
from bot.queue.task_message import ingest_message
from bot.store import deliveries
from bot.store import series as store
from bot.store.metrics import count_event
from workers.runtime import Runtime

log = logging.getLogger("carry.requeue")

REQUEUE_TASK: Final = "carry.requeue_lost"
REQUEUE_EVERY_S: Final = 60.0


def requeue_lost(rt: Runtime, celery_app: Celery, now: float | None = None) -> dict[str, Requeue]:
    """One sweep; returns what was decided for each open delivery it looked at."""
    now = time.time() if now is None else now
    decided: dict[str, Requeue] = {}
    for delivery_id in deliveries.open_since(rt.redis, now - rt.settings.requeue_after_s):
        stored = deliveries.get_delivery(rt.redis, delivery_id)
        event = ev.event_from_dict(stored.event) if stored and stored.event else None
        key = stored.event_key if stored else None
        facts = OpenDelivery(
            delivery_id,
            has_event=event is not None,
            handled=bool(key and store.is_claimed(rt.redis, f"event:{key}")),
            requeued=deliveries.requeued(rt.redis, delivery_id),
        )
        verdict = decided[delivery_id] = decide(facts)
        if verdict is Requeue.AGAIN and event is not None:
            count = deliveries.requeue(
                rt.redis, delivery_id, ingest_message(celery_app, event), now
            )
            log.warning(
                "delivery %s was acknowledged but its event %s was never handled (its message "
                "was lost in the broker): queued again (%d of %d)",
                delivery_id,
                key,
                count,
                MAX_REQUEUES,
            )
            count_event(rt.redis, "delivery_requeued")
            store.append_history(
                rt.redis, None, HistoryKind.DELIVERY_REQUEUED, delivery=delivery_id, key=key
            )
            continue
        if verdict is Requeue.GIVE_UP:
            log.error(
                "delivery %s: its event %s was queued %d times and never handled; given up "
                "(the worker's log says why each run failed)",
                delivery_id,
                key,
                facts.requeued + 1,
            )
            store.append_history(
                rt.redis, None, HistoryKind.DELIVERY_FAILED, delivery=delivery_id, key=key
            )
        deliveries.settle(rt.redis, delivery_id)
    return decided
