"""The `carry.notify` task: tells the configured webhooks that a series went red or green
again (bot.core.verified), once per webhook and change, retried with backoff until it lands.

A webhook's secret is read from the environment variable its config names, never from the task's
arguments or the config file; a missing one is said in the series' history, not sent unsigned.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx
from celery import Task

from bot.config import Settings, Webhook
from bot.core.history import HistoryKind
from bot.core.notify import NOTIFY_TASK, body, headers
from bot.log import correlated
from bot.queue.celery_app import app
from bot.store import series as store
from workers.runtime import runtime

log = logging.getLogger("carry.notify")

NOTIFY_RETRIES = 8
NOTIFY_TIMEOUT_S = 10.0


class NotifyError(RuntimeError):
    """A webhook did not take a message: why, in one line."""


def backoff_s(retries: int) -> float:
    return float(min(600, 5 * 2**retries))


@app.task(name=NOTIFY_TASK, bind=True, acks_late=True, max_retries=NOTIFY_RETRIES)
def notify(self: Task, notice: dict[str, Any]) -> None:
    rt = runtime()
    series_id = str(notice["series"])
    with correlated(task_id=self.request.id, series=series_id):
        failed = []
        for n, hook in enumerate(rt.config.notify.webhooks):
            key = f"notify:{notice['key']}:{n}"
            if store.is_claimed(rt.redis, key):
                continue  # told already (this is a retry for another webhook)
            try:
                send(hook, notice, rt.config.web.public_url)
            except NotifyError as err:
                failed.append(f"{_where(hook)}: {err}")
                continue
            store.claim(rt.redis, key)
            store.append_history(
                rt.redis,
                series_id,
                HistoryKind.NOTIFIED,
                webhook=_where(hook),
                change=notice["change"],
            )
        if not failed:
            return
        last = self.request.retries >= NOTIFY_RETRIES
        store.append_history(
            rt.redis,
            series_id,
            HistoryKind.NOTIFY_FAILED,
            change=notice["change"],
            errors=failed,
            reason="given up" if last else f"tried again in {backoff_s(self.request.retries):g} s",
        )
        if not last:
            raise self.retry(countdown=backoff_s(self.request.retries))


def send(hook: Webhook, notice: dict[str, Any], public_url: str | None) -> None:
    secret = None
    if hook.secret_env is not None:
        value = Settings.named_secret(hook.secret_env)
        if value is None:
            raise NotifyError(f"the environment variable {hook.secret_env} (its secret) is not set")
        secret = value.get_secret_value().encode()
    payload = body(notice, hook.format, public_url)
    log.info("telling %s that %s %s", _where(hook), notice["series"], notice["change"])
    try:
        answer = httpx.post(
            hook.url,
            content=payload,
            headers=headers(notice, payload, secret),
            timeout=NOTIFY_TIMEOUT_S,
        )
    except httpx.HTTPError as err:
        raise NotifyError(f"{type(err).__name__}: {err}") from None
    if not answer.is_success:
        raise NotifyError(f"answered {answer.status_code}: {answer.text[:200]}")


def _where(hook: Webhook) -> str:
    """The webhook as logs and history show it: scheme and host only (a Slack URL's path is
    its secret)."""
    url = httpx.URL(hook.url)
    return f"{url.scheme}://{url.host}" + (f":{url.port}" if url.port else "")
