"""The Celery application: Redis broker, at-least-once delivery, one task at a time per worker.

Queues (lanes):
  carry        the quick work: webhook intake, commands and their replies, permission
               lookups, CI reports, PR-state polls (GitHub calls only)
  carry.git    the git work, which can take minutes: rebase, publish, head polls, successor
               checks. `make run` and the compose file give it a worker of its own, so a slow
               series holds no webhook, reply or CI report behind it
  hw.<kind>    hardware jobs, consumed only by runner hosts of that kind (`carry runner --kind`)

Nothing here reads the environment at import: the broker URL and the visibility timeout come
from the validated settings (bot.config) when Celery first needs its configuration. carry's
entry points (`carry worker`, `carry runner`, ...) read and check them as they start, report a
bad value as one line, and hand them to the app (start_with); under the `celery` command no
entry point does, and celery_command_settings reads them at that first need instead.

The app names no task module: each process imports the tasks it runs, the service's worker
workers.tasks (`celery -A workers.tasks worker`), a runner host runner.task, so a runner host
loads none of the service's code.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from celery import Celery
from celery.signals import worker_shutdown

from bot import log as carry_log
from bot.config import ConfigError, Settings, load_settings
from bot.queue.broker_transport import broker_url

QUICK_QUEUE = "carry"
GIT_QUEUE = "carry.git"
SERVICE_QUEUES = f"{QUICK_QUEUE},{GIT_QUEUE}"  # what one `carry worker` consumes by default
GIT_TASKS = (
    "carry.rebase",
    "carry.publish",
    "carry.poll",
    "carry.find_successor",
    "carry.bisect",
    "carry.good_ref",
)
BROKER_TRANSPORT = "bot.queue.broker_transport:Transport"  # redis:// and rediss:// URLs


def broker_settings(settings: Settings, broker: str | None = None) -> dict[str, Any]:
    """What Celery takes from `settings`: the broker (`broker` if given, else REDIS_URL) and
    how long a message taken by a worker that died stays invisible."""
    return {
        "broker_url": broker_url(broker or settings.redis_url.get_secret_value()),
        # kombu's Redis transport, which sets aside a queued message it cannot decode
        # instead of stopping the worker (bot/queue/broker_transport.py)
        "broker_transport": BROKER_TRANSPORT,
        "broker_transport_options": {
            "visibility_timeout": settings.visibility_timeout_s,
            # Look for messages of dead workers on every idle poll, not every 10th.
            "unacked_restore_throttle": 1,
            "unacked_restore_interval": 1,
        },
    }


# The settings a carry entry point started this process with (start_with), for the broker
# configuration: one process, one app, one set of settings.
_STARTED_WITH: list[Settings] = []


def start_with(settings: Settings) -> None:
    """Called by carry's entry points (`carry web|worker|beat`, `carry runner`, `carry
    approve`) with the settings they read and checked, before Celery first reads its
    configuration (once read, it stays): the broker comes from those, not from a second read
    of the environment."""
    _STARTED_WITH[:] = [settings]


def make_app(broker: str | None = None) -> Celery:
    app = Celery("carry", backend=None)
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_default_queue=QUICK_QUEUE,
        task_serializer="json",
        accept_content=["json"],
        broker_connection_retry_on_startup=True,
        task_ignore_result=True,
        worker_hijack_root_logger=False,
        worker_send_task_events=False,
        task_routes={
            "carry.ci.run_job": {"queue": "hw.default"},
            **{name: {"queue": GIT_QUEUE} for name in GIT_TASKS},
        },
    )
    # A promise: evaluated when the configuration is first read, not at import, with the
    # settings handed to start_with by then, else those celery_command_settings reads.
    app.add_defaults(lambda: _checked_broker_settings(broker))
    return app


def run_worker(app: Celery, argv: list[str]) -> int:
    """Runs `celery worker` (argv names it) until it stops, and returns the worker's exit
    status: non-zero after an unrecoverable error, so that a supervisor restarting on failure
    restarts it. Celery's worker_main drops that status (it returns None, the process 0)."""
    status: list[int] = []

    def note(sender: Any, **_: Any) -> None:
        status.append(int(getattr(sender, "exitcode", None) or 0))

    worker_shutdown.connect(note, weak=False)
    try:
        app.worker_main(argv)
    finally:
        worker_shutdown.disconnect(note)
    return status[-1] if status else 0


def _checked_broker_settings(broker: str | None) -> dict[str, Any]:
    settings = _STARTED_WITH[-1] if _STARTED_WITH else celery_command_settings()
    return broker_settings(settings, broker)


def celery_command_settings() -> Settings:
    """The settings of a process no carry entry point started, read when Celery first needs
    them: one the `celery` command started (`celery -A bot.queue.celery_app worker`, `celery
    -A workers.tasks worker`), for which this is where the process starts, or a script or a
    test using the app directly. Under the `celery` command this is the first look, so a bad
    setting ends it here with carry's one-line message instead of a traceback (elsewhere the
    ConfigError is raised), and the secrets they name are installed for its logs, as an entry
    point installs them."""
    try:
        settings = load_settings()
    except ConfigError as err:
        if not _started_by_celery_command():
            raise
        print(f"carry: error: {'; '.join(err.problems)}", file=sys.stderr)
        raise SystemExit(2) from None
    carry_log.install_secrets(carry_log.secret_values(settings))
    return settings


def _started_by_celery_command() -> bool:
    program = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path()
    return program.name == "celery" or program.parts[-2:] == ("celery", "__main__.py")


app = make_app()
