"""What every scenario shares: the result row and the scale, private redis-servers, a
carry deployment, signed push deliveries, an emulated GitHub, carry in this process."""

from __future__ import annotations

import base64
import contextlib
import json
import math
import os
import signal
import socket
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import redis
from hypothesis import HealthCheck, Phase, settings
from pydantic import SecretStr

from bot.config import Settings
from bot.emulator import GitHubEmulator
from bot.git.engine import Engine, PatchInput
from bot.git.mirror import Mirror
from bot.github.forge import Forge, ForgeCaches
from bot.queue.celery_app import app as celery_app
from bot.web.webhooks import sign
from harness.carry_env import BODY, SECRET, CarryEnv, wait_for
from harness.gitrepo import RepoBuilder
from workers import runtime as runtime_module
from workers.runtime import Runtime

ROOT = Path(__file__).resolve().parents[2]  # the checkout

WEBHOOK_EXAMPLES = ROOT / "tests" / "data" / "github" / "webhooks"  # octokit's payload examples
FIX = {"mod.py": BODY.replace("compute(10)", "compute(10, safe=True)")}
OTHER_REPO = "elsewhere-org/unwatched"  # pushes carry plans nothing for: cheap to process


# =========================================================================== results


@dataclass
class Row:
    scenario: str
    done: str
    lost: str
    duplicated: str
    recovered: str
    ok: bool = True


@dataclass(frozen=True)
class Scale:
    load_deliveries: int = 20_000
    load_seconds: float = 20.0
    load_clients: int = 8
    kill_rounds: int = 3
    redis_restarts: int = 3
    restart_burst: int = 150
    storm_size: int = 3
    fuzz_webhooks: int = 600
    fuzz_api: int = 200
    fuzz_parser: int = 3000
    contrast_without_aof: bool = True
    race_seconds: float = 20.0  # the override race: how long the writers race
    race_drain_s: float = 60.0  # then how long carry's workers may take to finish their tasks
    abuse_slow: int = 2000  # intake abuse: slow bodies held open at once
    abuse_unsigned: int = 200  # unsigned 1 MiB bodies at once
    abuse_aborts: int = 5000  # bodies aborted mid-way
    every_head_heads: int = 30  # every head verified: heads pushed one after another


QUICK = Scale(
    load_deliveries=300,
    load_seconds=10.0,
    kill_rounds=1,
    redis_restarts=1,
    restart_burst=60,
    storm_size=2,
    fuzz_webhooks=150,
    fuzz_api=60,
    fuzz_parser=800,
    contrast_without_aof=False,
    race_seconds=6.0,
    race_drain_s=20.0,
    every_head_heads=6,
    abuse_slow=200,
    abuse_unsigned=50,
    abuse_aborts=500,
)


def render(rows: list[Row]) -> str:
    header = ("scenario", "what was done", "lost", "duplicated", "recovered how")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        cells = (row.scenario, row.done, row.lost, row.duplicated, row.recovered)
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return "\n".join(lines)


# =========================================================================== helpers


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """A redis-server of our own on a fixed port, configured like docker-compose.yml's (AOF,
    fsync every second) or without any persistence; killed with SIGKILL and restarted."""

    def __init__(self, workdir: Path, *, aof: bool = True) -> None:
        self.workdir, self.aof, self.port = workdir, aof, free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        argv = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1"]
        argv += ["--dir", str(self.workdir), "--save", ""]
        argv += ["--logfile", str(self.workdir / "redis.log")]
        argv += ["--appendonly", "yes", "--appendfsync", "everysec"] if self.aof else []
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis.from_url(self.url, socket_connect_timeout=0.5)
        wait_for(lambda: _pings(client), 20, "redis-server")
        return self

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False


@contextlib.contextmanager
def carry_env(root: Path, redis_url: str, **extra_env: str) -> Iterator[CarryEnv]:
    env = CarryEnv(root, redis_url)
    env.carry_patches([FIX])
    env.write_config()
    env.extra_env.update(extra_env)
    try:
        yield env
    finally:
        env.stop()


def push_body(repo: str, after: str, before: str = "0" * 39 + "1") -> bytes:
    owner, name = repo.split("/")
    payload = {
        "ref": "refs/heads/main",
        "before": before,
        "after": after,
        "repository": {"full_name": repo, "name": name, "owner": {"login": owner}},
        "pusher": {"name": "bench"},
        "sender": {"login": "bench"},
    }
    return json.dumps(payload).encode()


def signed_headers(body: bytes, delivery: str, event: str = "push") -> dict[str, str]:
    return {
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": sign(SECRET, body),
        "Content-Type": "application/json",
    }


def queued_deliveries(client: redis.Redis, queue: str = "carry") -> Counter[str]:
    """delivery id -> number of ingest messages waiting in the Celery queue for it."""
    found: Counter[str] = Counter()
    for raw in client.lrange(queue, 0, -1):
        message = json.loads(raw)
        args = json.loads(base64.b64decode(message["body"]))
        event = args[1].get("event", {})
        found[str(event.get("delivery_id"))] += 1
    return found


def stored(client: redis.Redis, deliveries: list[str]) -> set[str]:
    pipe = client.pipeline()
    for delivery in deliveries:
        pipe.exists(f"carry:delivery:{delivery}")
    return {d for d, there in zip(deliveries, pipe.execute(), strict=True) if there}


def percentile(values: list[float], fraction: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def stop_proc(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


OWNER, NAME = "downstream-org", "carry"
TOKEN = "ghp_bench" + "0" * 30


@contextlib.contextmanager
def emulated_github(root: Path) -> Iterator[tuple[GitHubEmulator, Forge]]:
    repo = RepoBuilder(root / "downstream")
    repo.commit("base", {"README.md": "carry\n"})
    repo.checkout("main", new_branch="topic")
    repo.commit("topic", {"topic.txt": "x\n"})
    repo.checkout("main")
    with GitHubEmulator(root / "gh") as gh:
        gh.create_repo(OWNER, NAME, from_path=repo.path)
        gh.add_token(TOKEN, "carry-bot")
        gh.set_permission(OWNER, NAME, "carry-bot", "write")
        settings_ = Settings(github_token=SecretStr(TOKEN), github_base_url=gh.base_url)
        yield gh, Forge.connect(settings_, f"{OWNER}/{NAME}", caches=ForgeCaches())


def run_engine(mirror: Mirror, head: str, patches: list[PatchInput]) -> str:
    """What workers.rebase does with a mirror: ensure, fetch the head, check the series."""
    mirror.ensure()
    if not mirror.has_commit(head):
        mirror.resolve("main")
    if not mirror.has_commit(head):
        mirror.resolve(head)
    report = Engine(mirror).check(head, patches)
    return report.patches[0].status.value


def _fsck(path: Path) -> str:
    if not path.exists():
        return "no mirror left behind"
    proc = subprocess.run(
        ["git", "--git-dir", str(path), "fsck", "--no-dangling"], capture_output=True
    )
    if proc.returncode == 0:
        return "git fsck clean"
    text = " ".join(proc.stderr.decode(errors="replace").split()).replace(str(path), "<mirror>")
    return "git fsck fails: " + text[:80]


def _fuzz_settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )


@contextlib.contextmanager
def _carry_in_this_process(env: CarryEnv) -> Iterator[Runtime]:
    """carry's settings for `env` in this process's environment, a fresh runtime and the Celery
    app sending to env's Redis: carry's functions run here as a worker's would."""
    saved = dict(os.environ)
    os.environ.update(env.env)
    os.environ["CARRY_CACHE_DIR"] = str(env.root / "cache-bench")  # another worker host's
    broker = celery_app.conf.broker_url
    _send_tasks_to(env.redis_url)
    runtime_module.reset()
    try:
        yield runtime_module.runtime()
    finally:
        os.environ.clear()
        os.environ.update(saved)
        _send_tasks_to(broker)
        runtime_module.reset()


@contextlib.contextmanager
def tasks_sent_to(broker: str) -> Iterator[None]:
    """carry's Celery app in this process sends its tasks to `broker` meanwhile."""
    saved = celery_app.conf.broker_url
    _send_tasks_to(broker)
    try:
        yield
    finally:
        _send_tasks_to(saved)


def _send_tasks_to(broker: str) -> None:
    """Points carry's Celery app at another broker. Its producer pool keeps the connection it
    was made for, so it is dropped too (as Celery itself does after a fork)."""
    celery_app.conf.broker_url = broker
    celery_app.close()
    celery_app.amqp._producer_pool = None


def say(line: str) -> None:
    print(f"  {line}", file=sys.stderr, flush=True)
