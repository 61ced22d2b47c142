"""`carry runner --kind K`: a Celery worker on a hardware host that runs the jobs of one kind.

It consumes only the kind's queue (`runners.<kind>.queue`, by default hw.<kind>), one job at a
time (concurrency 1, prefetch 1, late acks, requeue when the job process is lost), and
registers itself through heartbeats (bot.store.runners.heartbeat) so the API and dashboard list
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
from celery.signals import worker_ready
from celery.utils.nodenames import host_format

from bot.ci.job_keys import runner_public_keys
from bot.ci.signing import public_keys_text
from bot.config import (
    LOG_LEVELS,
    CarryConfig,
    ConfigError,
    Runner,
    Settings,
    load_config,
    load_settings,
    log_level,
    redact_url,
)
from bot.log import install_secrets, secret_values
from bot.queue.broker_auth import open_broker_problem
from bot.queue.celery_app import app, run_worker, start_with
from bot.store.runner_channel import transport_options
from bot.store.runners import forget_runner, heartbeat
from bot.store.series import now_iso
from runner import task  # noqa: F401  (registers carry.ci.run_job on `app`)
from runner.job import reap_idle
from runner.sandbox import Isolation, SandboxError, StepNetwork
from runner.sandbox_config import runner_sandbox
from runner.tree import workdir_problem

log = logging.getLogger("carry.runner")
DEFAULT_WORKDIR = Path("~/.cache/carry/runner").expanduser()


def _refuse_open_broker(settings: Settings) -> None:
    """A runner runs jobs from the broker: never from a Redis anyone can use."""
    url = settings.redis_url.get_secret_value()
    try:
        problem = open_broker_problem(url, settings.allow_open_redis)
    except redis.RedisError as err:  # not up yet: the worker waits for it
        log.warning(
            "cannot tell whether Redis at %s needs a password yet: %s", redact_url(url), err
        )
        return
    if problem is not None:
        raise ConfigError([f"environment: REDIS_URL: {problem}"])


def main(
    kind: str,
    config_path: str | None = None,
    concurrency: int = 1,
    *,
    name: str | None = None,
    workdir: str | None = None,
    loglevel: str = "INFO",
) -> int:
    """Runs the worker until it is stopped; returns its exit status. A bad setting or config
    raises ConfigError before anything starts."""
    from bot.queue import logging_hooks  # noqa: F401  (JSON logs, correlation ids per task)

    settings = load_settings()
    install_secrets(secret_values(settings))
    start_with(settings)  # the broker of the app's worker below
    _refuse_open_broker(settings)
    # No key to verify jobs with: it would take jobs only to refuse them.
    public_key = public_keys_text(runner_public_keys(settings))
    config = _config(config_path, settings)
    runner = _runner(config, kind)
    where = Path(workdir) if workdir else settings.runner_workdir or _config_workdir(runner)
    unsafe = workdir_problem(where)
    if unsafe is not None:
        raise ConfigError([unsafe])
    where.mkdir(parents=True, exist_ok=True)
    steps = _steps(kind, runner, where, settings)
    queue = runner.queue if runner else f"hw.{kind}"
    node = host_format(name or settings.runner_name or f"{kind}@%h")
    _prepare_process(kind, node, where, settings.visibility_timeout_s, public_key)
    _share_config(config_path, runner)
    _warn_on_visibility(runner, settings.visibility_timeout_s)
    info = {
        "kind": kind,
        "queue": queue,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "workdir": str(where),
        "concurrency": concurrency,
        "started_at": now_iso(),
        "ready": "0",  # "1" once the worker consumes its queue
        "steps": steps,
    }
    _say_when_ready(settings, node, info)
    stop = threading.Event()
    beat = threading.Thread(target=_beat, args=(settings, node, info, stop), name="carry-heartbeat")
    beat.daemon = True
    beat.start()
    try:
        return run_worker(app, _worker_argv(queue, node, concurrency, loglevel))
    except SystemExit as exit_:
        return int(exit_.code or 0)
    finally:
        stop.set()
        _deregister(settings, kind, node)


def _config(config_path: str | None, settings: Settings) -> CarryConfig | None:
    """--config, else CARRY_CONFIG, else config/carry.yaml if there is one (a runner host
    may have no config: it then serves hw.<kind> and refuses every job, since only its own
    config names the commands it may run)."""
    chosen = config_path is not None or "config_path" in settings.model_fields_set
    path = Path(config_path) if config_path is not None else settings.config_path
    if not chosen and not path.is_file():
        return None
    return load_config(path, check_dirs=False)  # a runner host has no copy of patches/


def _runner(config: CarryConfig | None, kind: str) -> Runner | None:
    if config is None:
        return None
    if kind not in config.runners:
        known = ", ".join(sorted(config.runners)) or "none"
        raise ConfigError([f"runner kind {kind!r} is not in runners (known: {known})"])
    return config.runners[kind]


def _steps(kind: str, runner: Runner | None, workdir: Path, settings: Settings) -> str:
    """How this runner runs setup and check steps, for the runners page. A sandbox or step
    user that this host cannot give is a ConfigError: a runner that would fail every job must
    not take them from the runners of its kind that can run them."""
    if runner is None:
        return "none: no config names this kind, so every job is refused"
    try:
        box = runner_sandbox(runner, settings, workdir)
    except SandboxError as err:
        raise ConfigError([f"runners.{kind}: {err}"]) from None
    if box.isolation is Isolation.NONE:
        log.warning(
            "RISK: steps run without a sandbox (%s): a job can touch later jobs "
            "(runners.%s.sandbox.accept_risk says so)",
            box.why_none,
            kind,
        )
    if box.step_network is StepNetwork.HOST and runner.networked():
        log.warning(
            "RISK: steps with network: true get the host's network, the broker included "
            "(runners.%s.sandbox.step_network: host): code under test can reach carry's Redis",
            kind,
        )
    if box.cgroups is None:
        log.warning(
            "steps have no cgroup of their own (%s): a process a step leaves outside its "
            "process group is found by its environment only, and step_memory_mb holds per "
            "process, not for a step's processes together",
            box.why_no_cgroups,
        )
    if box.memory_mb is None:
        log.warning(
            "steps have no memory limit: runners.%s.step_memory_mb or CARRY_TASK_MEMORY_MB "
            "sets one",
            kind,
        )
    if box.user is None and os.geteuid() == 0:
        log.warning(
            "steps run as root (%s): runners.%s.step_user names an unprivileged user",
            box.why_root,
            kind,
        )
    return box.summary()


def _share_config(config_path: str | None, runner: Runner | None) -> None:
    """The pool processes read the config again for every job (runner.task.runner_config), from
    CARRY_CONFIG: --config goes there, so they read the file this process read."""
    if config_path is not None:
        os.environ["CARRY_CONFIG"] = str(Path(config_path).expanduser().resolve())
    if runner is None:
        log.warning("this runner has no config: it refuses every job (see --config)")


def _config_workdir(runner: Runner | None) -> Path:
    return Path(runner.workdir).expanduser() if runner else DEFAULT_WORKDIR


def _prepare_process(
    kind: str, node: str, workdir: Path, visibility_timeout_s: int, public_key: str
) -> None:
    """Settings the forked pool processes inherit, and the app restricted to runner tasks.
    The job public key read at start goes with them as a value: a pool process started later
    never reads a key file again (a file a step could have written)."""
    os.environ.update(
        CARRY_RUNNER_KIND=kind,
        CARRY_RUNNER_NAME=node,
        CARRY_RUNNER_WORKDIR=str(workdir),
        CARRY_JOB_PUBLIC_KEY=public_key,
    )
    # A runner host needs only the hardware task, not the service's tasks or their config.
    app.conf.include = ["runner.task"]
    sweep = max(1, min(60, visibility_timeout_s // 4))
    app.conf.broker_transport_options = {
        **(app.conf.broker_transport_options or {}),
        "unacked_restore_interval": sweep,
        "unacked_restore_throttle": 1,
        # Deliveries in progress live in the kind's own keys: the runner's broker user may
        # not touch the service's (from there a message could be restored to any queue).
        **transport_options(kind),
    }
    # No remote control: it is pub/sub, which the runner's broker user has no access to (and
    # a runner must not be able to broadcast commands to the service's workers).
    app.conf.worker_enable_remote_control = False
    killed = reap_idle(workdir)
    if killed:
        log.warning("killed %d process(es) left by a lost runner: %s", len(killed), killed)


def _warn_on_visibility(runner: Runner | None, visibility_timeout_s: int) -> None:
    if runner is None:
        return
    setup = sum(step.timeout_s for step in runner.setup)
    checks = sum(check.timeout_s for check in runner.checks.values())
    longest = 2 * setup + checks  # an A/B run sets up twice
    if longest >= visibility_timeout_s:
        log.warning(
            "CARRY_VISIBILITY_TIMEOUT_S=%d is not longer than the longest job (%d s): a job "
            "still running may be delivered again (carry detects that and waits, but raise it)",
            visibility_timeout_s,
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
        "--without-heartbeat",
        "--loglevel",
        loglevel,
    ]


def _beat(settings: Settings, node: str, info: dict[str, Any], stop: threading.Event) -> None:
    client = redis.Redis.from_url(settings.redis_url.get_secret_value(), socket_timeout=10)
    every = settings.heartbeat_s
    first = True
    while True:
        try:
            state = {**info, "state": "idle"} if first else info
            heartbeat(client, info["kind"], node, state, int(every * 4))
            first = False
        except redis.RedisError:
            log.warning("heartbeat of %s failed", node, exc_info=True)
        if stop.wait(every):
            return


def _say_when_ready(settings: Settings, node: str, info: dict[str, Any]) -> None:
    def ready(**_: Any) -> None:
        info["ready"] = "1"
        client = redis.Redis.from_url(settings.redis_url.get_secret_value(), socket_timeout=10)
        try:
            idle = {**info, "state": "idle"}
            heartbeat(client, info["kind"], node, idle, int(settings.heartbeat_s * 4))
        except redis.RedisError:
            log.warning("heartbeat of %s failed", node, exc_info=True)

    worker_ready.connect(ready, weak=False)


def _deregister(settings: Settings, kind: str, node: str) -> None:
    url = settings.redis_url.get_secret_value()
    try:
        forget_runner(redis.Redis.from_url(url, socket_timeout=5), kind, node)
    except redis.RedisError:
        log.warning("could not remove the heartbeat of %s", node, exc_info=True)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="carry runner", description=__doc__.split("\n")[0])
    parser.add_argument("--kind", required=True, help="runner kind, a key of runners in config")
    parser.add_argument("--config", help="config file (default: $CARRY_CONFIG, config/carry.yaml)")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--name", help="worker name (default: <kind>@<host>; %%h is the host)")
    parser.add_argument("--workdir", help="where clones and artifacts live")
    parser.add_argument(
        "--loglevel", default="INFO", type=_log_level_arg, help=f"one of {', '.join(LOG_LEVELS)}"
    )
    return parser.parse_args(argv)


def _log_level_arg(value: str) -> str:
    try:
        return log_level(value)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def run(argv: Sequence[str] | None = None) -> int:
    """`python -m runner.cli`: a bad setting or config is one line, status 2."""
    args = parse_args(argv)
    logging.basicConfig(level=args.loglevel, stream=sys.stderr)
    try:
        return main(
            args.kind,
            args.config,
            args.concurrency,
            name=args.name,
            workdir=args.workdir,
            loglevel=args.loglevel,
        )
    except ConfigError as err:
        print(f"carry: error: {'; '.join(err.problems)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(run())
