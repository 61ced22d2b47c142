"""Asks GitHub to redeliver the webhook deliveries that failed.

GitHub does not redeliver a failed delivery by itself: a delivery carry answered with a 5xx
(Redis down), or could not answer at all (web down, restarting, over 10 s), is only recorded
on GitHub's side. Heads and PR states come back through polling, but a `/carry` comment or a
tick on the dashboard issue would be lost. So the beat runs this every
`polling.redeliver_every_s`: read the hook's recent deliveries (newest first, until past
GitHub's 3-day retention), choose the events with no 2xx attempt (bot/core/redelivery.py), and
ask for each once (by the hook's own numeric delivery id). The intake deduplicates by
X-GitHub-Delivery, the event's GUID, which a redelivery keeps and every hook of the event
shares, so an event is acted on once however often, and through however many hooks, it arrives
(tests/integration/test_one_event_two_hooks.py).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any, Final, Protocol

import redis

from bot.core.history import HistoryKind
from bot.core.redelivery import Attempt, DeliveryItemError, Redelivery, choose, read_further
from bot.github.forge import ForgeError, RateLimited
from bot.store import series as store
from bot.store.metrics import count_event
from workers.runtime import Runtime

log = logging.getLogger("carry.redelivery")

MAX_PAGES: Final = 10  # 1000 attempts: far more than carry's hook sees between two runs
# Redeliveries asked for in one run, oldest event first (the nearest to GitHub forgetting it);
# the rest wait for the next run. With MAX_PAGES it keeps a run within the task's call budget
# (CARRY_GITHUB_REQUEST_BUDGET, 100).
MAX_PER_RUN: Final = 50


class DeliveryLog(Protocol):
    """GitHub's record of a webhook's deliveries (bot.github.forge.Forge)."""

    def hook_deliveries(
        self, hook_id: int | None, cursor: str | None = None
    ) -> tuple[list[dict[str, Any]], str | None]: ...

    def redeliver(self, hook_id: int | None, delivery_id: int) -> None: ...


class NoHook:
    """carry knows no hook to read: neither `web.hook_id` nor a GitHub App."""


NO_HOOK: Final = NoHook()


def hook_of(rt: Runtime) -> int | NoHook | None:
    """The repository hook's id, None for the App's hook, or NO_HOOK."""
    if rt.config.web.hook_id is not None:
        return rt.config.web.hook_id
    return None if rt.settings.github_auth == "app" else NO_HOOK


def recent_attempts(github: DeliveryLog, hook_id: int | None, now: datetime) -> list[Attempt]:
    """The hook's attempts back to GitHub's retention (at most MAX_PAGES pages)."""
    attempts: list[Attempt] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        items, cursor = github.hook_deliveries(hook_id, cursor)
        page = []
        for item in items:
            try:
                page.append(Attempt.from_item(item))
            except DeliveryItemError as err:  # one odd item does not hide the others
                log.warning("%s", err)
        attempts += page
        if cursor is None or not read_further(page, now):
            break
    return attempts


def redeliver_failed(
    client: redis.Redis, github: DeliveryLog, hook_id: int | None, now: datetime | None = None
) -> list[Redelivery]:
    """Asks for each failed event once (at most MAX_PER_RUN); returns what was asked for. A
    refused request is recorded and the others still asked for (the next run tries it again)."""
    now = now or datetime.now(UTC)
    asked = []
    for chosen in choose(recent_attempts(github, hook_id, now), now)[:MAX_PER_RUN]:
        attempt = chosen.attempt
        fields = {
            "guid": attempt.guid,
            "delivery_id": attempt.id,
            "event": attempt.event,
            "action": attempt.action or "",
            "status_code": attempt.status_code,
            "attempts": chosen.attempts,
        }
        try:
            github.redeliver(hook_id, attempt.id)
        except ForgeError as err:
            log.warning("redelivery of %s not asked for: %s", attempt.guid, err)
            store.append_history(
                client, None, HistoryKind.REDELIVER_FAILED, error=str(err), **fields
            )
            if isinstance(err, RateLimited):
                break  # the others would be refused too: the next run asks for them
            continue
        log.info("asked GitHub to redeliver %s: %s", attempt.guid, chosen.reason)
        count_event(client, "delivery_redelivered")
        store.append_history(
            client, None, HistoryKind.DELIVERY_REDELIVERED, reason=chosen.reason, **fields
        )
        asked.append(chosen)
    return asked
