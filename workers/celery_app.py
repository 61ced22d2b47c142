"""The Celery application: Redis broker, at-least-once delivery, one task at a time per worker.

Queues:
  carry        ingest, rebase, publish, poll (the service's own workers)
  hw.<kind>    hardware jobs, consumed only by runner hosts of that kind (`carry runner --kind`)
"""

from __future__ import annotations

import os

from celery import Celery

# Longer than the longest job (hardware checks are bounded by their own timeouts), so Redis
# does not hand a running job to a second worker.
VISIBILITY_TIMEOUT_S = int(os.environ.get("CARRY_VISIBILITY_TIMEOUT_S", str(6 * 3600)))


def redis_url() -> str:
    return os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")


def make_app(broker: str | None = None) -> Celery:
    url = broker or redis_url()
    app = Celery("carry", broker=url, backend=None, include=["workers.tasks", "workers.ci"])
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_default_queue="carry",
        task_serializer="json",
        accept_content=["json"],
        broker_transport_options={
            "visibility_timeout": VISIBILITY_TIMEOUT_S,
            # Look for messages of dead workers on every idle poll, not every 10th.
            "unacked_restore_throttle": 1,
            "unacked_restore_interval": 1,
        },
        broker_connection_retry_on_startup=True,
        task_ignore_result=True,
        worker_hijack_root_logger=False,
        worker_send_task_events=False,
        task_routes={"carry.ci.run_job": {"queue": "hw.default"}},
    )
    return app


app = make_app()
