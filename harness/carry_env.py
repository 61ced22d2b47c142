"""A whole carry deployment in tmp_path: an upstream repo, a downstream checkout with a series,
a config file, and real worker / web processes talking to a real Redis."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import redis

from bot.core.state import SeriesState
from bot.local_redis import free_port
from bot.queue.celery_app import SERVICE_QUEUES
from bot.store import series as store
from harness.gitrepo import RepoBuilder, git
from harness.job_keys import install_job_keys
from workers import runtime as runtime_module

REPO_ROOT = Path(__file__).resolve().parents[1]  # the checkout whose carry runs

SECRET = "test-webhook-secret"
UPSTREAM_REPO = "upstream-org/engine"
DOWNSTREAM_REPO = "downstream-org/carry"
SERIES = "fix-main"
BODY = "".join(f"value_{i} = compute({i})\n" for i in range(1, 41))

PAGE = """# the-fix

Make value 10 safe.

| Field | Value |
|---|---|
| Affects | everyone computing value 10 |
| Releases | v1.0 |
| Patches | {patches} |
| Upstream | upstream-org/engine#7 (open) |
| Test | the unit test below |

## Problem

Value 10 is unsafe.

## Symptom

Crashes.

## Who is affected

Everyone.

## The fix

Pass safe=True.

## Verify

Run the check.
"""


def slow_git_shim(directory: Path, marker: Path) -> Path:
    """A directory holding a `git` that announces the engine's object reader starting (every
    check starts one) and makes it slow, so a worker can be killed mid-rebase."""
    directory.mkdir(parents=True, exist_ok=True)
    real = shutil.which("git") or "/usr/bin/git"
    shim = directory / "git"
    shim.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do if [ "$a" = --batch-command ]; then '
        f"echo $PPID >> {marker}; sleep 3; break; fi; done\n"
        f'exec {real} "$@"\n'
    )
    shim.chmod(0o755)
    return directory


@contextlib.contextmanager
def in_this_process(carry: CarryEnv, monkeypatch: Any) -> Iterator[CarryEnv]:
    """carry's settings for `carry` in this process's environment (no GitHub token), with a
    fresh runtime, so carry's functions can be called directly as a worker would."""
    for key, value in carry.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    runtime_module.reset()
    yield carry
    runtime_module.reset()


def authorized_comment(rt: Any, body: str, comment_id: int, author: str = "alice") -> None:
    """A comment by someone with write access, as carry.check_permission hands it on: the
    planner, then the dispatcher, in this process."""
    from bot.core.events import CommandAuthorized
    from workers.tasks import handle_event

    event = CommandAuthorized(
        series_id=SERIES,
        number=1,
        comment_id=comment_id,
        author=author,
        permission="write",
        body=body,
    )
    handle_event(rt, event)


def queued_tasks(client: Any) -> list[dict[str, Any]]:
    """The messages waiting in carry's own lanes (bot/queue/celery_app.py), oldest first in each
    lane: the quick lane's, then the git lane's."""
    return [
        json.loads(raw)
        for lane in SERVICE_QUEUES.split(",")
        for raw in reversed(client.lrange(lane, 0, -1))
    ]


def queued_names(client: Any) -> list[str]:
    return [message["headers"]["task"] for message in queued_tasks(client)]


def lanes_empty(client: Any) -> bool:
    return all(client.llen(lane) == 0 for lane in SERVICE_QUEUES.split(","))


def wait_for(condition: Callable[[], Any], timeout: float = 30, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@dataclass
class CarryEnv:
    root: Path
    redis_url: str
    upstream: RepoBuilder = field(init=False)
    downstream: Path = field(init=False)
    config_path: Path = field(init=False)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    extra_env: dict[str, str] = field(default_factory=dict)
    web: subprocess.Popen[bytes] | None = None  # `carry web`, once started

    def __post_init__(self) -> None:
        install_job_keys()  # the jobs this deployment hands to its runners are signed
        self.upstream = RepoBuilder(self.root / "upstream")
        self.upstream.commit("base", {"mod.py": BODY})
        self.downstream = self.root / "downstream"
        self.config_path = self.root / "carry.yaml"

    # -- building the series ------------------------------------------------------------
    def carry_patches(self, changes: list[dict[str, str]], *, base: str = "main") -> list[str]:
        """Commits `changes` on a branch from `base`, writes them as the series; returns names."""
        self.upstream.checkout(base, new_branch=f"carried-{uuid.uuid4().hex[:6]}")
        for n, files in enumerate(changes, 1):
            self.upstream.commit(f"Carried fix number {n}", files)
        series_dir = self.downstream / "patches" / SERIES
        for old in series_dir.glob("*.patch"):
            old.unlink()
        paths = self.upstream.format_patch(f"{base}..HEAD", series_dir)
        self.upstream.checkout("main")
        names = [p.name for p in paths]
        (series_dir / "series").write_text("\n".join(names) + "\n")
        touched = "; ".join(f"{name}: mod.py" for name in names)
        (series_dir / "the-fix.md").write_text(PAGE.format(patches=touched))
        return names

    def write_config(
        self,
        *,
        downstream: dict[str, Any] | None = None,
        runner_kinds: dict[str, Any] | None = None,
        **series_overrides: Any,
    ) -> None:
        series = {
            "id": SERIES,
            "upstream": "engine",
            "base": {"branch": "main"},
            "patches": SERIES,
            "runners": [],
            "checks": [],
            **series_overrides,
        }
        config = {
            "downstream": {
                "repo": DOWNSTREAM_REPO,
                "branch": "main",
                "patches_dir": "patches",
                **(downstream or {}),
            },
            "upstreams": {"engine": {"url": str(self.upstream.path), "repo": UPSTREAM_REPO}},
            "series": [series],
            "polling": {"refs_every_s": 3600},
            **({"runners": runner_kinds} if runner_kinds else {}),
        }
        self.config_path.write_text(json.dumps(config, indent=2))

    @property
    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "REDIS_URL": self.redis_url,
            "CARRY_CONFIG": str(self.config_path),
            "CARRY_DOWNSTREAM_DIR": str(self.downstream),
            "CARRY_CACHE_DIR": str(self.root / "cache"),
            "CARRY_WEBHOOK_SECRET": SECRET,
            "CARRY_ALLOW_OPEN_REDIS": "1",  # the benches' and tests' redis-servers have none
            "CARRY_BUSY_RETRY_S": "0.2",
            "CARRY_GITHUB_WRITE_PAUSE_S": "0",  # the emulator needs no pause between writes
            "PYTHONPATH": str(REPO_ROOT),
            **self.extra_env,
        }

    # -- processes ---------------------------------------------------------------------
    def spawn(
        self,
        argv: list[str],
        log_name: str,
        *,
        env: dict[str, str] | None = None,
        wrap: Callable[[list[str]], list[str]] | None = None,
    ) -> tuple[subprocess.Popen[bytes], Path]:
        """Starts one carry process in its own session, logging to root/<log_name>; `wrap`
        turns its command line into the one started (harness/unprivileged.py's, as a user)."""
        log_path = self.root / log_name
        log = open(log_path, "wb")  # noqa: SIM115
        line = [sys.executable, "-m", *argv]
        proc = subprocess.Popen(
            wrap(line) if wrap else line,
            env=env or self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO_ROOT,
            start_new_session=True,
        )
        self.procs.append(proc)
        return proc, log_path

    def wait_logged(self, proc: subprocess.Popen[bytes], log_path: Path, marker: bytes) -> None:
        def ready() -> bool:
            if proc.poll() is not None:
                raise AssertionError(log_path.read_text(errors="replace"))
            return marker in log_path.read_bytes()

        wait_for(ready, 30, log_path.stem)

    def start_worker(
        self, name: str = "w1", *, path_prefix: str | None = None
    ) -> subprocess.Popen[bytes]:
        """A plain Celery worker on queue `carry` (solo pool), as the pipeline tests use."""
        env = self.env
        if path_prefix:
            env["PATH"] = f"{path_prefix}:{env['PATH']}"
        argv = ["celery", "-A", "workers.tasks", "worker", "-Q", SERVICE_QUEUES, "-c", "1"]
        argv += ["--pool", "solo", "-n", f"{name}@carry-test", "--without-mingle"]
        argv += ["--without-gossip", "--loglevel", "INFO"]
        proc, log_path = self.spawn(argv, f"worker-{name}.log", env=env)
        self.wait_logged(proc, log_path, b"ready")
        return proc

    def start_carry_worker(
        self, name: str = "worker", *, path_prefix: str | None = None, queues: str | None = None
    ) -> Path:
        """`carry --log-level INFO worker` (what docker-compose runs), on every lane or only
        on `queues`; returns its log file."""
        env = self.env
        if path_prefix:
            env["PATH"] = f"{path_prefix}:{env['PATH']}"
        argv = ["bot.cli", "--log-level", "INFO", "worker"]
        argv += ["--queues", queues] if queues else []
        proc, log_path = self.spawn(argv, f"{name}.log", env=env)
        self.wait_logged(proc, log_path, b"ready.")
        return log_path

    def start_runner(
        self, kind: str, *, wrap: Callable[[list[str]], list[str]] | None = None
    ) -> subprocess.Popen[bytes]:
        argv = ["bot.cli", "runner", "--kind", kind, "--name", f"{kind}@carry-test"]
        proc, log_path = self.spawn(argv, f"runner-{kind}.log", wrap=wrap)
        self.wait_logged(proc, log_path, b"ready")
        return proc

    def start_web(self, port: int | None = None, *, env: dict[str, str] | None = None) -> str:
        """`carry web` on `port` (a free one by default), with `env` over the environment;
        returns its URL."""
        port = port or free_port()
        argv = ["bot.cli", "web", "--host", "127.0.0.1", "--port", str(port)]
        proc, log_path = self.spawn(argv, "web.log", env={**self.env, **(env or {})})
        self.web = proc
        url = f"http://127.0.0.1:{port}"

        def up() -> bool:
            if proc.poll() is not None:
                raise AssertionError(log_path.read_text())
            try:
                return httpx.get(f"{url}/healthz", timeout=0.5).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(up, 30, "web")
        return url

    def stop_web(self) -> None:
        """Stops `carry web` (as a deploy or a crash would) and waits until it is gone."""
        assert self.web is not None, "no web process was started"
        os.killpg(self.web.pid, signal.SIGTERM)
        self.web.wait(timeout=15)
        self.procs.remove(self.web)
        self.web = None

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.procs.clear()

    # -- webhooks ----------------------------------------------------------------------
    def push_payload(
        self, after: str, before: str, *, pusher: str = "maintainer"
    ) -> dict[str, Any]:
        return {
            "ref": "refs/heads/main",
            "before": before,
            "after": after,
            "forced": False,
            "repository": {
                "full_name": UPSTREAM_REPO,
                "name": "engine",
                "owner": {"login": "upstream-org"},
            },
            "pusher": {"name": pusher},
            "sender": {"login": pusher},
        }

    def deliver(
        self, url: str, event: str, payload: dict[str, Any], delivery: str | None = None
    ) -> httpx.Response:
        body = json.dumps(payload).encode()
        signature = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
        headers = {
            "X-GitHub-Event": event,
            "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
            "X-Hub-Signature-256": signature,
            "Content-Type": "application/json",
        }
        return httpx.post(f"{url}/webhooks/github", content=body, headers=headers, timeout=10)

    # -- store -------------------------------------------------------------------------
    @property
    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.redis_url)

    def state(self) -> SeriesState | None:
        return store.load_series(self.client, SERIES)

    def history(self, kind: str | None = None) -> list[dict[str, Any]]:
        entries = store.history(self.client, SERIES, limit=1000)
        return [e for e in entries if kind is None or e["kind"] == kind]

    def wait_checked(self, head: str, timeout: float = 60) -> SeriesState:
        def done() -> SeriesState | None:
            state = self.state()
            if state and state.checked_head == head and state.phase != "running":
                return state
            return None

        return wait_for(done, timeout, f"series checked on {head[:12]}")


SAFE_10 = {"mod.py": BODY.replace("compute(10)", "compute(10, safe=True)")}  # the one fix


@contextlib.contextmanager
def one_fix_in_this_process(
    root: Path, redis_url: str, monkeypatch: Any, *, committed: bool = False, **series: Any
) -> Iterator[CarryEnv]:
    """A series of one patch (SAFE_10) on the test upstream, its config written (`series`
    overrides its entry), and carry's settings in this process. `committed`: the downstream
    checkout is a git repository holding the series, as a clone of it would be."""
    carry = CarryEnv(root, redis_url)
    carry.carry_patches([SAFE_10])
    if committed:
        git(carry.downstream, "init", "-q", "-b", "main")
        git(carry.downstream, "add", "-A")
        git(carry.downstream, "commit", "-q", "-m", "carry the fixes")
    carry.write_config(**series)
    with in_this_process(carry, monkeypatch):
        yield carry
