"""Starting carry's processes: web, worker, beat, and `run` (all three, with Redis if needed)."""

from __future__ import annotations

import contextlib
import functools
import gc
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import redis

from bot import log as carry_log
from bot.ci import job_keys, signing
from bot.ci.runs import PACED_EVERY_S, PACED_TASK
from bot.config import (
    CarryConfig,
    ConfigError,
    Settings,
    load_settings,
    redact_url,
)
from bot.core.notify import STUCK_EVERY_S, STUCK_TASK
from bot.local_redis import LocalRedis, LocalRedisError, stored_password
from workers.requeue import REQUEUE_EVERY_S, REQUEUE_TASK

if TYPE_CHECKING:
    from celery import Celery


class ServiceError(RuntimeError):
    """A process cannot start; the message tells the user what to do."""


def settings() -> Settings:
    """The environment's settings, checked before a process starts: a bad variable is one
    line naming it (several are joined by '; '), never a traceback from deep inside Celery.
    Their secrets are installed for what the process stores or logs (bot.log.redact)."""
    try:
        checked = load_settings()
    except ConfigError as err:
        raise ServiceError("; ".join(err.problems)) from None
    carry_log.install_secrets(carry_log.secret_values(checked))
    return checked


def _celery_app(checked: Settings) -> Celery:
    """The one Celery app, its broker taken from the settings this process checked."""
    from bot.queue import celery_app

    celery_app.start_with(checked)
    return celery_app.app


def web(host: str, port: int) -> None:
    checked = settings()
    celery_app = _celery_app(checked)
    import uvicorn

    from bot.queue import logging_hooks  # noqa: F401  (correlation ids travel with each task)
    from bot.queue.task_message import ingest_message
    from bot.web.access import exposure_warning
    from bot.web.app import create_app
    from workers.runtime import runtime

    _json_logs()
    rt = runtime()

    token_env = rt.config.web.dashboard_token_env
    exposure = exposure_warning(host, port, Settings.dashboard_token(rt.config), token_env)
    if exposure is not None:
        logging.getLogger("carry.web").warning("WARNING: %s", exposure)
        print(f"carry web: WARNING: {exposure}", file=sys.stderr, flush=True)
    app = create_app(
        rt.config,
        rt.settings,
        rt.redis,
        exposure=exposure,
        queue_task=functools.partial(ingest_message, celery_app),
    )
    freeze_startup_objects()
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level="warning",
        log_config=None,
        limit_concurrency=rt.settings.web_max_connections,
    )


def freeze_startup_objects() -> int:
    """Moves every object alive now (modules, the app, its routes, models and config: some
    120,000) out of the garbage collector's reach for good, and returns how many. They live as
    long as the process; without this each full collection walks them all while the event loop
    waits, a pause of tens of milliseconds in the intake's p99 (bench/webhook.py). The gc's own
    advice for a long-lived server (gc.freeze); what a request leaves behind is still
    collected."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def refuse_open_broker(checked: Settings) -> None:
    """A worker and beat hand out and run jobs: never on a Redis anyone can use."""
    from bot.queue.broker_auth import open_broker_problem

    url = service_redis_url(checked)
    try:
        problem = open_broker_problem(url, checked.allow_open_redis)
    except redis.RedisError as err:  # not up yet: the worker waits for it, as it always did
        logging.getLogger("carry.service").warning(
            "cannot tell whether Redis at %s needs a password yet: %s", redact_url(url), err
        )
        return
    if problem is not None:
        raise ServiceError(problem)


def worker(queues: str = "carry,carry.git", concurrency: int = 1) -> int:
    """Runs a worker until it is stopped; returns its exit status."""
    checked = settings()
    refuse_open_broker(checked)
    celery_app = _celery_app(checked)
    from bot.queue import logging_hooks  # noqa: F401  (JSON logs, correlation ids per task)
    from bot.queue.celery_app import run_worker

    _json_logs()
    _check_config()
    from workers.tasks import apply_time_limits

    apply_time_limits(checked)
    job_keys.service_signing_key(checked)  # the jobs it hands to runners are signed
    return run_worker(
        celery_app,
        [
            "--quiet",  # no banner: every line on stderr is a JSON log line
            "worker",
            "-Q",
            queues,
            "-c",
            str(concurrency),
            "--loglevel",
            "INFO",
            "-n",
            f"carry-{os.getpid()}@%h",
        ],
    )


def beat_schedule(config: CarryConfig, env: Settings) -> dict[str, dict[str, object]]:
    """What the beat sends, and how often (seconds)."""
    schedule: dict[str, dict[str, object]] = {
        "poll-upstream-heads": {
            "task": "carry.poll",
            "schedule": float(config.polling.refs_every_s),
        },
        "poll-upstream-prs": {
            "task": "carry.poll_prs",
            "schedule": float(config.polling.pr_state_every_s),
        },
    }
    if config.downstream.dashboard_issue is not False and env.github_auth != "none":
        # on by default; each refresh asks whether this worker keeps it (workers/dashboard_issue)
        schedule["refresh-dashboard-issue"] = {
            "task": "carry.dashboard_issue",
            "schedule": float(config.polling.dashboard_issue_every_s),
        }
    if config.web.hook_id is not None or env.github_auth == "app":
        # GitHub never redelivers a failed delivery by itself: carry asks it to.
        schedule["redeliver-failed-deliveries"] = {
            "task": "carry.redeliver",
            "schedule": float(config.polling.redeliver_every_s),
        }
    # an acknowledged delivery whose message the broker lost is queued again (workers/requeue)
    schedule["requeue-lost-deliveries"] = {"task": REQUEUE_TASK, "schedule": REQUEUE_EVERY_S}
    if config.notify.stuck_hours is not None:
        # a series waiting for a human is told it is stuck when hours pass, heads or not
        schedule["tell-stuck-series"] = {"task": STUCK_TASK, "schedule": STUCK_EVERY_S}
    if any(series.ci.min_interval_s or series.ci.daily_budget for series in config.series):
        # a paced run starts when its time comes: ci.min_interval_s, ci.daily_budget
        schedule["release-paced-runs"] = {"task": PACED_TASK, "schedule": PACED_EVERY_S}
    return schedule


def beat() -> None:
    checked = settings()
    refuse_open_broker(checked)
    cache_dir = checked.cache_dir
    celery_app = _celery_app(checked)
    from bot.queue import logging_hooks  # noqa: F401  (JSON logs)

    _json_logs()
    config = _check_config()
    celery_app.conf.beat_schedule = beat_schedule(config, checked)
    beat_log = logging.getLogger("carry.beat")
    if "redeliver-failed-deliveries" not in celery_app.conf.beat_schedule and (
        checked.webhook_secret is not None
    ):
        beat_log.warning(
            "web.hook_id is not set: a webhook delivery that fails (carry down or Redis "
            "down) is not asked for again, and GitHub does not redeliver it by itself"
        )
    schedule = cache_dir / "celerybeat-schedule"
    schedule.parent.mkdir(parents=True, exist_ok=True)
    # The first polls run now, not one interval later: an unreachable upstream or a head moved
    # while carry was down is known at start-up. (A webhook for the same head is the
    # planner's to deduplicate.)
    for entry in celery_app.conf.beat_schedule.values():
        celery_app.send_task(entry["task"])
    beat_log.info("queued the first polls at start-up")
    celery_app.Beat(schedule=str(schedule), loglevel="INFO", quiet=True).run()


def _json_logs() -> None:
    """JSON lines with correlation ids and secrets redacted, at the level `--log-level` set."""
    carry_log.setup(logging.getLogger().level, json_lines=True)


def _check_config() -> CarryConfig:
    from workers.runtime import runtime

    return runtime().config


def _answers(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=0.5).ping())
    except redis.RedisError:
        return False


def ensure_redis(settings: Settings) -> tuple[str, LocalRedis | None, str]:
    """REDIS_URL if set (it must answer); else a private redis-server of carry's own: a free
    port on 127.0.0.1, its data in CARRY_CACHE_DIR/redis, the `default` user behind a
    password kept there (never another program's Redis that happens to answer on 6379).
    Returns the URL, the private server (if started) and where the URL came from."""
    if "redis_url" in settings.model_fields_set:
        configured = settings.redis_url.get_secret_value()
        if not _answers(configured):
            raise ServiceError(
                f"REDIS_URL is set but Redis does not answer at {redact_url(configured)}"
            )
        return configured, None, "REDIS_URL"
    if shutil.which("redis-server") is None:
        raise ServiceError(
            "redis-server is not installed: install it (apt-get install redis-server) or set "
            "REDIS_URL to a Redis of yours"
        )
    workdir = settings.cache_dir / "redis"
    try:
        workdir.mkdir(parents=True, exist_ok=True, mode=0o700)
        password_file = workdir / "password"
        server = LocalRedis(workdir, persist=True, password=stored_password(password_file))
        server.start()
    except (OSError, LocalRedisError) as err:
        raise ServiceError(f"the private redis-server did not start: {err}") from None
    _write_private(workdir / "url", server.url)  # for `carry fixes` beside this run
    source = (
        f"a private redis-server started for this run: data in {workdir}, password in "
        f"{password_file}; set REDIS_URL to use another Redis"
    )
    return server.url, server, source


def _write_private(path: Path, text: str) -> None:
    path.unlink(missing_ok=True)
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as out:
        out.write(text + "\n")


def service_redis_url(settings: Settings) -> str:
    """The Redis of carry's service as another command (`carry fixes`) finds it: REDIS_URL
    if set, else the private redis-server a `carry run` on this cache directory started
    (while it runs), else the default URL."""
    if "redis_url" not in settings.model_fields_set:
        recorded = settings.cache_dir / "redis" / "url"
        with contextlib.suppress(OSError):
            return recorded.read_text().strip() or settings.redis_url.get_secret_value()
    return settings.redis_url.get_secret_value()


def redis_database(url: str) -> str:
    """'database 3 of redis://host:6379' (password redacted), as `carry run` reports it."""
    shown = redact_url(url)
    base, _, database = shown.rpartition("/")
    if database.isdigit() and "://" in base and not base.endswith("/"):
        return f"database {database} of {base}"
    return shown if shown.startswith("unix:") else f"database 0 of {shown.rstrip('/')}"


def run(host: str, port: int) -> int:
    """web, a worker per lane and beat in one command, until Ctrl-C."""
    checked = settings()
    try:
        _check_config()
    except ConfigError as err:
        raise ServiceError(str(err)) from err
    url, private_redis, source = ensure_redis(checked)
    print(f"carry: Redis: {redis_database(url)} ({source})", file=sys.stderr)
    if private_redis is None:  # one clear refusal here, not one from each process it starts
        refuse_open_broker(checked)
    env = {**os.environ, "REDIS_URL": url}
    if checked.webhook_secret is None:
        env["CARRY_WEBHOOK_SECRET"] = secrets.token_hex(32)
        print(
            "carry: CARRY_WEBHOOK_SECRET is unset: webhooks are refused, polling keeps watch",
            file=sys.stderr,
        )
    key_path = job_keys.private_key_path(checked)
    key, _ = job_keys.ensure_key_pair(key_path)
    print(
        f"carry: jobs are signed with {key_path}; runners verify them with "
        f"CARRY_JOB_PUBLIC_KEY={signing.public_key_text(key)} (`carry job-key` prints it)",
        file=sys.stderr,
    )
    if checked.github_auth == "none":
        print(
            "carry: no GitHub credentials: read-only mode (watch, rebase, show proposals; push nothing)",
            file=sys.stderr,
        )
    cli = [sys.executable, "-m", "bot.cli"]
    procs = {
        "web": subprocess.Popen([*cli, "web", "--host", host, "--port", str(port)], env=env),
        # One worker per lane (bot/queue/celery_app.py): a slow rebase holds up no reply.
        "worker": subprocess.Popen([*cli, "worker", "--queues", "carry"], env=env),
        "git-worker": subprocess.Popen([*cli, "worker", "--queues", "carry.git"], env=env),
        "beat": subprocess.Popen([*cli, "beat"], env=env),
    }
    print(f"carry: dashboard at http://{host}:{port}/", file=sys.stderr)
    return _supervise(procs, private_redis)


def _supervise(procs: dict[str, subprocess.Popen[bytes]], private_redis: LocalRedis | None) -> int:
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    code = 0
    while not stopping:
        for name, proc in procs.items():
            if proc.poll() is not None:
                print(f"carry: {name} exited with {proc.returncode}; stopping", file=sys.stderr)
                code, stopping = proc.returncode or 1, True
        time.sleep(0.5)
    for proc in procs.values():
        if proc.poll() is None:
            proc.terminate()
    for proc in procs.values():
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
    if private_redis is not None:  # last: the others may write on their way out
        private_redis.stop()
        (private_redis.workdir / "url").unlink(missing_ok=True)
    return code
