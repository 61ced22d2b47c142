"""`carry runner --kind K`: a Celery worker on a hardware host that runs the jobs of one kind.

It consumes only the kind's queue (`runners.<kind>.queue`, by default hw.<kind>), one job at a
time (concurrency 1, prefetch 1, late acks, requeue when the job process is lost), and
registers itself through heartbeats (bot.store.series.heartbeat) so the API and dashboard list
it. Before it starts it kills what a previous, lost runner left running in its workdir.

Broker facts that matter here (Redis transport): an unacknowledged job returns to the queue
only after the visibility timeout (CARRY_VISIBILITY_TIMEOUT_S), so that timeout must be longer
than the longest job; a job whose pool process dies while the worker survives is requeued at
once (task_reject_on_worker_lost). The worker sweeps for expired jobs every
visibility/4 seconds (1..60), instead of kombu's default of every 100 s.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import redis
from celery.utils.nodenames import host_format

from bot.config import CarryConfig, ConfigError, Runner, load_config
from bot.store.series import PREFIX, heartbeat, now_iso
from workers import ci  # registers carry.ci.run_job on `app`
from workers.celery_app import VISIBILITY_TIMEOUT_S, app, redis_url
from workers.runner.job import reap_idle

log = logging.getLogger("carry.runner")
HEARTBEAT_S = float(os.environ.get("CARRY_HEARTBEAT_S", "15"))
DEFAULT_WORKDIR = Path("~/.cache/carry/runner").expanduser()


def main(
    kind: str,
    config_path: str | None = None,
    concurrency: int = 1,
    *,
    name: str | None = None,
    workdir: str | None = None,
    loglevel: str = "INFO",
) -> int:
    """Runs the worker until it is stopped; returns its exit status."""
    from workers import logging_hooks  # noqa: F401  (JSON logs, correlation ids per task)

    config = _config(config_path)
    runner = _runner(config, kind)
    queue = runner.queue if runner else f"hw.{kind}"
    node = host_format(name or f"{kind}@%h")
    where = Path(workdir or os.environ.get("CARRY_RUNNER_WORKDIR") or _config_workdir(runner))
    where.mkdir(parents=True, exist_ok=True)
    _prepare_process(kind, node, where)
    _warn_on_visibility(runner)
    info = {
        "kind": kind,
        "queue": queue,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "workdir": str(where),
        "concurrency": concurrency,
        "started_at": now_iso(),
    }
    stop = threading.Event()
    beat = threading.Thread(target=_beat, args=(node, info, stop), name="carry-heartbeat")
    beat.daemon = True
    beat.start()
    try:
        app.worker_main(argv=_worker_argv(queue, node, concurrency, loglevel))
    except SystemExit as exit_:
        return int(exit_.code or 0)
    finally:
        stop.set()
        _deregister(node)
    return 0


def _config(config_path: str | None) -> CarryConfig | None:
    path = config_path or os.environ.get("CARRY_CONFIG")
    if path is None:
        default = Path("config/carry.yaml")
        if not default.is_file():
            return None
        path = str(default)
    return load_config(path, check_dirs=False)  # a runner host has no copy of patches/


def _runner(config: CarryConfig | None, kind: str) -> Runner | None:
    if config is None:
        return None
    if kind not in config.runners:
        known = ", ".join(sorted(config.runners)) or "none"
        raise ConfigError([f"runner kind {kind!r} is not in runners (known: {known})"])
    return config.runners[kind]


def _config_workdir(runner: Runner | None) -> Path:
    return Path(runner.workdir).expanduser() if runner else DEFAULT_WORKDIR


def _prepare_process(kind: str, node: str, workdir: Path) -> None:
    """Settings the forked pool processes inherit, and the app restricted to runner tasks."""
    os.environ.update(
        CARRY_RUNNER_KIND=kind, CARRY_RUNNER_NAME=node, CARRY_RUNNER_WORKDIR=str(workdir)
    )
    ci.forward_reports = True  # runners hold no GitHub credentials: the service reports
    # A runner host needs only the hardware task, not the service's tasks or their config.
    app.conf.include = ["workers.ci"]
    sweep = max(1, min(60, VISIBILITY_TIMEOUT_S // 4))
    app.conf.broker_transport_options = {
        **(app.conf.broker_transport_options or {}),
        "unacked_restore_interval": sweep,
        "unacked_restore_throttle": 1,
    }
    killed = reap_idle(workdir)
    if killed:
        log.warning("killed %d process(es) left by a lost runner: %s", len(killed), killed)


def _warn_on_visibility(runner: Runner | None) -> None:
    if runner is None:
        return
    setup = sum(step.timeout_s for step in runner.setup)
    checks = sum(check.timeout_s for check in runner.checks.values())
    longest = 2 * setup + checks  # an A/B run sets up twice
    if longest >= VISIBILITY_TIMEOUT_S:
        log.warning(
            "CARRY_VISIBILITY_TIMEOUT_S=%d is not longer than the longest job (%d s): a job "
            "still running may be delivered again (carry detects that and waits, but raise it)",
            VISIBILITY_TIMEOUT_S,
            longest,
        )


def _worker_argv(queue: str, node: str, concurrency: int, loglevel: str) -> list[str]:
    return [
        "worker",
        "--queues",
        queue,
        "--concurrency",
        str(concurrency),
        "--pool",
        "prefork",
        "--prefetch-multiplier",
        "1",
        "--hostname",
        node,
        "--without-gossip",
        "--without-mingle",
        "--loglevel",
        loglevel,
    ]


def _beat(node: str, info: dict[str, Any], stop: threading.Event) -> None:
    client = redis.Redis.from_url(redis_url(), socket_timeout=10)
    first = True
    while True:
        try:
            heartbeat(
                client, node, {**info, "state": "idle"} if first else info, int(HEARTBEAT_S * 4)
            )
            first = False
        except redis.RedisError:
            log.warning("heartbeat of %s failed", node, exc_info=True)
        if stop.wait(HEARTBEAT_S):
            return


def _deregister(node: str) -> None:
    try:
        redis.Redis.from_url(redis_url(), socket_timeout=5).delete(f"{PREFIX}runner:{node}")
    except redis.RedisError:
        log.warning("could not remove the heartbeat of %s", node, exc_info=True)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="carry runner", description=__doc__.split("\n")[0])
    parser.add_argument("--kind", required=True, help="runner kind, a key of runners in config")
    parser.add_argument("--config", help="config file (default: $CARRY_CONFIG, config/carry.yaml)")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--name", help="worker name (default: <kind>@<host>; %%h is the host)")
    parser.add_argument("--workdir", help="where clones and artifacts live")
    parser.add_argument("--loglevel", default="INFO")
    return parser.parse_args(argv)


if __name__ == "__main__":
    args = parse_args()
    logging.basicConfig(level=args.loglevel.upper(), stream=sys.stderr)
    sys.exit(
        main(
            args.kind,
            args.config,
            args.concurrency,
            name=args.name,
            workdir=args.workdir,
            loglevel=args.loglevel,
        )
    )
