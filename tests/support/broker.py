"""Pointing carry's Celery app (the one process-wide app) at a test's Redis and back."""

from __future__ import annotations

from celery import Celery


def point_at(app: Celery, url: str | None) -> None:
    """Tasks this process sends go to `url` from now on. Setting conf.broker_url and closing
    the app's pool is not enough once the app has sent a task: its producer pool keeps the
    connections to the broker it had (a rebase's notice sent by an earlier test went to that
    test's Redis, and so did every later test's tasks)."""
    app.conf.broker_url = url
    app.close()
    app.amqp._producer_pool = None
