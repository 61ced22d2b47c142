"""Celery signal hooks: JSON log lines whose correlation ids follow the work across processes.

Importing this module connects them (workers.service does, for `carry web|worker|beat`):
  * setup_logging: Celery installs no handler of its own; bot.log.setup writes JSON lines with
    the correlation ids and every secret of the environment redacted;
  * before_task_publish: the correlation ids of the code that enqueues a task (the webhook's
    delivery_id and event_key, the parent task's id) travel in the message's headers;
  * task_prerun / task_postrun: each task runs with those ids plus its own task_id and name
    bound, so every line it logs says which delivery, event and task it belongs to; a CI job
    adds its run_id (workers.ci.requests).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Final

from celery import Task, signals

from bot import log as carry_log

HEADER: Final = "carry_correlation"
_OPEN: dict[str, contextlib.ExitStack] = {}


@signals.setup_logging.connect
def _setup_logging(loglevel: int | str | None = None, **_: Any) -> None:
    carry_log.setup(loglevel or logging.INFO, json_lines=True)


@signals.before_task_publish.connect
def _carry_correlation(headers: dict[str, Any] | None = None, **_: Any) -> None:
    if headers is None:
        return
    ids = carry_log.correlation()
    parent = ids.pop("task_id", None)
    ids.pop("task", None)
    if parent:
        ids["parent_task_id"] = parent
    if ids:
        headers[HEADER] = ids


@signals.task_prerun.connect
def _bind(task_id: str | None = None, task: Task | None = None, **_: Any) -> None:
    if task_id is None:
        return
    carried = getattr(task.request, HEADER, None) if task is not None else None
    ids = {str(k): str(v) for k, v in carried.items()} if isinstance(carried, dict) else {}
    ids.pop("task_id", None)
    ids.pop("task", None)
    stack = contextlib.ExitStack()
    stack.enter_context(
        carry_log.correlated(**ids, task_id=task_id, task=task.name if task else None)
    )
    _OPEN[task_id] = stack


@signals.task_postrun.connect
def _unbind(task_id: str | None = None, **_: Any) -> None:
    stack = _OPEN.pop(task_id, None) if task_id is not None else None
    if stack is not None:
        with contextlib.suppress(ValueError):  # the context was left another way already
            stack.close()
