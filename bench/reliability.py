"""Reliability figures: what carry loses or duplicates when things fail, and how it recovers.

Every scenario uses real processes on 127.0.0.1 (the `carry web` process, Celery workers,
private redis-server instances, the GitHub emulator, git) and is bounded in time and count.
The result is one table: scenario | what was done | lost | duplicated | recovered how.

  python bench/reliability.py                 # every scenario (a few minutes)
  python bench/reliability.py --quick         # smaller counts (CI)
  python bench/reliability.py --only fuzz-parser --only fuzz-webhooks
  python bench/reliability.py --scenario override-race   # --scenario is --only
  python bench/reliability.py --seed 7        # the fuzzers' seed (printed with the table)

Exit status 1 when a scenario's expectation failed (something lost or duplicated, a 500, an
unexpected parser exception, no recovery); the table says which.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import copy
import json
import logging
import math
import os
import random
import re
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import redis
import requests
from celery.exceptions import Retry
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from pydantic import SecretStr

from bot.ci import runs as ci_runs
from bot.ci.spec import StepSpec, TreeSpec
from bot.config import Settings
from bot.core import events as ev
from bot.core.ci_plan import FINAL_STATES, REUSABLE, RetryPolicy
from bot.core.patchfile import PatchFileError, parse_patch
from bot.core.state import SeriesState
from bot.core.trust import ZERO_SHA, Push
from bot.emulator import GitHubEmulator
from bot.git.engine import Engine, PatchInput
from bot.git.mirror import Mirror, MirrorError
from bot.git.runner import GitError
from bot.github.forge import Forge, ForgeCaches, ForgeError
from bot.queue.celery_app import app as celery_app
from bot.store import runner_channel as channel
from bot.store import runners
from bot.store import series as store
from bot.store.metrics import GITHUB_KEY, record_rate_limit
from bot.web.webhooks import (
    BODY_DEADLINE_S,
    SIGNATURE_HEADER,
    sign,
)
from runner.sandbox import ACCEPTED_RISK, bwrap_unavailable, namespaces_unavailable
from runner.sandbox_net import host_addresses
from workers import runtime as runtime_module
from workers import tasks
from workers.ci import requests as ci
from workers.ci.reports import ReportApplier
from workers.runtime import Runtime

# The scenarios drive carry through the test suite's harness (a whole deployment in a temporary
# directory, a repository builder), so the checkout's root must be importable when this file
# runs as `python bench/reliability.py`.
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from harness.carry_env import (  # noqa: E402
    BODY,
    DOWNSTREAM_REPO,
    SECRET,
    SERIES,
    UPSTREAM_REPO,
    CarryEnv,
    lanes_empty,
    slow_git_shim,
    wait_for,
)
from harness.gitrepo import RepoBuilder, git  # noqa: E402

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


# =========================================================================== 1. load


@dataclass
class Sent:
    status: dict[str, int] = field(default_factory=dict)  # delivery -> status (0: no answer)
    latencies: list[float] = field(default_factory=list)
    seconds: float = 0.0


def send_deliveries(
    url: str, bodies: list[tuple[str, bytes]], clients: int, seconds: float
) -> Sent:
    """Sends each (delivery id, body) once, from `clients` threads, until done or `seconds`."""
    sent, lock = Sent(), threading.Lock()
    deadline = time.monotonic() + seconds
    chunks = [bodies[i::clients] for i in range(clients)]

    def run(chunk: list[tuple[str, bytes]]) -> None:
        with httpx.Client(timeout=10) as http:
            for delivery, body in chunk:
                if time.monotonic() > deadline:
                    return
                started = time.perf_counter()
                try:
                    status = http.post(
                        f"{url}/webhooks/github",
                        content=body,
                        headers=signed_headers(body, delivery),
                    ).status_code
                except httpx.HTTPError:
                    status = 0
                with lock:
                    sent.status[delivery] = status
                    sent.latencies.append(time.perf_counter() - started)

    started = time.monotonic()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(run, chunks))
    sent.seconds = time.monotonic() - started
    return sent


def scenario_load(root: Path, scale: Scale) -> Row:
    server = RedisServer(root / "redis").start()
    try:
        with carry_env(root / "carry", server.url) as env:
            url = env.start_web()
            bodies = [
                (f"load-{n}-{uuid.uuid4()}", push_body(OTHER_REPO, secrets.token_hex(20)))
                for n in range(scale.load_deliveries)
            ]
            sent = send_deliveries(url, bodies, scale.load_clients, scale.load_seconds)
            acked = [d for d, status in sent.status.items() if 200 <= status < 300]
            again = random.Random(1).sample(acked, max(1, len(acked) // 20))
            by_id = dict(bodies)
            resent = send_deliveries(url, [(d, by_id[d]) for d in again], 4, 30)
            client = env.client
            in_store, queued = stored(client, acked), queued_deliveries(client)
    finally:
        server.kill()
    lost = [d for d in acked if d not in in_store or queued[d] == 0]
    doubled = sum(n - 1 for n in queued.values() if n > 1)
    refused = Counter(s for s in sent.status.values() if not 200 <= s < 300)
    rate = len(sent.status) / sent.seconds if sent.seconds else 0
    answered_duplicate = sum(1 for s in resent.status.values() if s == 200)
    return Row(
        "sustained webhook load",
        f"{len(sent.status)} signed pushes in {sent.seconds:.1f} s ({rate:.0f}/s, "
        f"{scale.load_clients} clients; p50 {percentile(sent.latencies, 0.5) * 1000:.0f} ms, "
        f"p99 {percentile(sent.latencies, 0.99) * 1000:.0f} ms), then {len(again)} redelivered",
        f"{len(lost)} of {len(acked)} acknowledged"
        + (f" ({sum(refused.values())} refused: {dict(refused)})" if refused else ""),
        f"{doubled} queued twice; {answered_duplicate}/{len(again)} redeliveries "
        "answered 'duplicate'",
        "nothing to recover: every 2xx was in Redis and queued before it was sent",
        ok=not lost and not doubled and not refused and answered_duplicate == len(again),
    )


# =========================================================================== 2. worker kills


def scenario_worker_kill(root: Path, scale: Scale) -> Row:
    server = RedisServer(root / "redis").start()
    quick_redelivery = {
        "CARRY_VISIBILITY_TIMEOUT_S": "5",
        "CARRY_LOCK_TTL_S": "4",
        "CARRY_BUSY_RETRY_S": "0.2",
    }
    heads, recoveries, lost = [], [], []
    try:
        with carry_env(root / "carry", server.url, **quick_redelivery) as env:
            url = env.start_web()
            for n in range(scale.kill_rounds):
                head, seconds = _kill_round(env, url, root / f"round-{n}", n)
                heads.append(head)
                if seconds is None:
                    lost.append(head)
                else:
                    recoveries.append(seconds)
            rebased = Counter(e["data"].get("head") for e in env.history("rebased"))
            proposed = len(env.history("proposal"))
    finally:
        server.kill()
    doubled = [h for h in heads if rebased[h] > 1] + ["proposal"] * max(0, proposed - len(heads))
    return Row(
        "worker killed mid-job",
        f"{len(heads)} rebases, each worker SIGKILLed inside the engine, a new worker started",
        f"{len(lost)} of {len(heads)} jobs",
        f"{len(doubled)} (each head rebased once, proposed once)",
        "late ack: the job went back to the queue after the visibility timeout (5 s here, "
        "CARRY_VISIBILITY_TIMEOUT_S) and the series lock expired (CARRY_LOCK_TTL_S); "
        f"redone in {statistics.median(recoveries) if recoveries else math.nan:.1f} s median",
        ok=not lost and not doubled,
    )


def _kill_round(env: CarryEnv, url: str, workdir: Path, n: int) -> tuple[str, float | None]:
    marker = workdir / "in-engine"
    shim = slow_git_shim(workdir / "shim", marker)
    victim = env.start_worker(f"victim-{n}", path_prefix=str(shim))
    proposals = len(env.history("proposal"))
    before = env.upstream.head()
    after = env.upstream.commit(f"upstream change {n}", {f"other_{n}.py": f"x = {n}\n"})
    assert env.deliver(url, "push", env.push_payload(after, before)).status_code == 202
    wait_for(marker.exists, 60, "the rebase to reach the engine")
    stop_proc(victim, signal.SIGKILL)
    killed = time.monotonic()
    rescuer = env.start_worker(f"rescuer-{n}")
    try:
        env.wait_checked(after, timeout=60)
        wait_for(lambda: len(env.history("proposal")) > proposals, 30, "the proposal")
    except AssertionError:
        return after, None
    finally:
        stop_proc(rescuer)
    return after, time.monotonic() - killed


# =========================================================================== 3. Redis restarts


class Sender(threading.Thread):
    """Sends distinct deliveries until stopped; each one not acknowledged is redelivered later
    (as GitHub's "Redeliver" would). Records every delivery's final status."""

    def __init__(self, url: str, prefix: str) -> None:
        super().__init__(daemon=True)
        self.url, self.prefix = url, prefix
        self.acked: dict[str, float] = {}  # delivery -> when it was acknowledged
        self.pending: dict[str, bytes] = {}
        self.answers: Counter[int] = Counter()
        self.stop_at: float | None = None
        self._n = 0

    def run(self) -> None:
        with httpx.Client(timeout=5) as http:
            while self.stop_at is None or time.monotonic() < self.stop_at:
                self._n += 1
                body = push_body(OTHER_REPO, secrets.token_hex(20))
                self.send(http, f"{self.prefix}-{self._n}", body)
                time.sleep(0.005)

    def send(self, http: httpx.Client, delivery: str, body: bytes) -> bool:
        try:
            status = http.post(
                f"{self.url}/webhooks/github", content=body, headers=signed_headers(body, delivery)
            ).status_code
        except httpx.HTTPError:
            status = 0
        self.answers[status] += 1
        if 200 <= status < 300:
            self.acked[delivery] = time.monotonic()
            self.pending.pop(delivery, None)
            return True
        self.pending[delivery] = body
        return False

    def redeliver_pending(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        with httpx.Client(timeout=5) as http:
            while self.pending and time.monotonic() < deadline:
                for delivery, body in list(self.pending.items()):
                    self.send(http, delivery, body)
                time.sleep(0.2)


@dataclass
class RestartResult:
    acked_before: int
    lost: int
    keys_before: int
    keys_after: int
    outage_answers: Counter[int]


def scenario_redis_restart(root: Path, scale: Scale, *, aof: bool = True) -> Row:
    server = RedisServer(root / "redis", aof=aof).start()
    extra = {"CARRY_VISIBILITY_TIMEOUT_S": "10", "CARRY_LOCK_TTL_S": "5"}
    results: list[RestartResult] = []
    try:
        with carry_env(root / "carry", server.url, **extra) as env:
            url = env.start_web()
            env.start_worker()
            sender = Sender(url, f"restart-{uuid.uuid4().hex[:6]}")
            sender.start()
            for _ in range(scale.redis_restarts):
                results.append(_restart_once(server, env, sender, scale.restart_burst))
            sender.stop_at = time.monotonic()
            sender.join(timeout=10)
            sender.redeliver_pending(30)
            unprocessed, drained = _processed(env, list(sender.acked))
            why = _why_unprocessed(env, unprocessed)
            recovered_head = _fresh_head_rebased(env, url) if aof else None
            duplicates = _duplicate_events(env.client)
    finally:
        server.kill()
    outcome = Outcome(unprocessed, why, drained, recovered_head, duplicates)
    return _restart_row(results, sender, outcome, aof)


@dataclass
class Outcome:
    unprocessed: list[str]
    why: str
    drained: bool
    recovered_head: float | None
    duplicates: int


def _restart_once(server: RedisServer, env: CarryEnv, sender: Sender, burst: int) -> RestartResult:
    start = len(sender.acked)
    wait_for(lambda: len(sender.acked) >= start + burst, 60, "deliveries before the kill")
    client = env.client
    keys_before = int(client.dbsize())
    before = dict(sender.acked)
    answers_before = Counter(sender.answers)
    server.kill()
    time.sleep(1.0)  # an outage: the web answers 503, nothing is acknowledged
    server.start()
    wait_for(lambda: len(sender.acked) > len(before) + 10, 60, "deliveries after the restart")
    missing = len(before) - len(stored(client, list(before)))
    outage = Counter(sender.answers)
    outage.subtract(answers_before)
    return RestartResult(len(before), missing, keys_before, int(client.dbsize()), outage)


def _processed(env: CarryEnv, acked: list[str]) -> tuple[list[str], bool]:
    """The acknowledged deliveries no worker handled (their event is not claimed), and
    whether the queue drained."""
    client = env.client

    def drained() -> bool:
        return lanes_empty(client) and client.hlen("unacked") == 0

    try:
        wait_for(drained, 90, "the queue to drain")
        done = True
    except AssertionError:
        done = False
    pipe = client.pipeline()
    for delivery in acked:
        pipe.hget(f"carry:delivery:{delivery}", "event_key")
    keys = [k.decode() if k else None for k in pipe.execute()]
    pipe = client.pipeline()
    for key in keys:
        pipe.exists(f"carry:done:event:{key}")
    claimed = pipe.execute()
    missing = [d for d, k, c in zip(acked, keys, claimed, strict=True) if not (k and c)]
    return missing, done


def _why_unprocessed(env: CarryEnv, missing: list[str]) -> str:
    """The web's own account of a delivery that was acknowledged but never processed."""
    lines = (env.root / "web.log").read_text(errors="replace").splitlines()
    unrecorded = {
        line.split('"delivery_id": "', 1)[1].split('"', 1)[0]
        for line in lines
        if "could not un-record the delivery" in line and '"delivery_id": "' in line
    }
    stuck = [d for d in missing if d in unrecorded]
    if not stuck:
        return f" (e.g. delivery {missing[0]})" if missing else ""
    return (
        f" ({len(stuck)}: the hand-off to the queue failed while Redis was down, so did "
        "un-recording the delivery; GitHub's redelivery was then answered 'duplicate' and the "
        "event never reached a worker)"
    )


def _fresh_head_rebased(env: CarryEnv, url: str) -> float | None:
    before = env.upstream.head()
    after = env.upstream.commit("after the restarts", {"late.py": "x = 1\n"})
    started = time.monotonic()
    env.deliver(url, "push", env.push_payload(after, before))
    try:
        env.wait_checked(after, timeout=60)
    except AssertionError:
        return None
    return time.monotonic() - started


def _duplicate_events(client: redis.Redis) -> int:
    return sum(
        1 for e in store.history(client, None, limit=20_000) if e["kind"] == "duplicate-event"
    )


def _restart_row(results: list[RestartResult], sender: Sender, out: Outcome, aof: bool) -> Row:
    lost_each = ", ".join(f"{r.lost}/{r.acked_before}" for r in results)
    if not aof:
        return Row(
            "Redis restart WITHOUT persistence (contrast)",
            f"{len(results)} SIGKILL + restart of a Redis with no AOF, under webhook traffic",
            f"{lost_each} acknowledged deliveries gone from the store after each restart",
            "-",
            "none: what Redis held is gone, which is why the compose file turns AOF on",
        )
    outage = sum((r.outage_answers for r in results), Counter())
    answers = ", ".join(f"{n} x {s or 'no answer'}" for s, n in sorted(outage.items()) if s != 202)
    head = (
        f"a new head rebased {out.recovered_head:.1f} s after its push"
        if out.recovered_head is not None
        else "but did NOT rebase a new head within 60 s"
    )
    return Row(
        "Redis SIGKILLed and restarted (AOF, fsync everysec)",
        f"{len(results)} restarts under a steady stream of webhooks "
        f"({len(sender.acked)} acknowledged in all)",
        f"{lost_each} acknowledged deliveries missing from the store after each restart; "
        f"{len(out.unprocessed)} acknowledged but never processed{out.why}"
        + ("" if out.drained else " (the queue did not drain)"),
        f"0 effects doubled; {out.duplicates} redelivered ingest jobs skipped as duplicate events",
        f"during the ~1 s outages the web answered {answers or 'nothing else'} (GitHub "
        f"redelivers those; here every one was redelivered and accepted); the worker "
        f"reconnected, {head}",
        ok=all(r.lost == 0 for r in results)
        and not out.unprocessed
        and out.recovered_head is not None,
    )


# =========================================================================== 4. GitHub storms


OWNER, NAME = "downstream-org", "carry"
RETRY_BUDGET = 5  # bot.github.forge._retry(): GithubRetry(total=5)
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


def _timed(call: Callable[[], Any]) -> tuple[float, str | None]:
    """(seconds, None or the error). An error that is not a ForgeError is marked: the tasks
    only catch ForgeError, so anything else fails the job without a retry."""
    started = time.monotonic()
    try:
        call()
    except ForgeError as err:
        return time.monotonic() - started, f"ForgeError: {str(err)[:70]}"
    except requests.RequestException as err:
        kind = f"{type(err).__module__}.{type(err).__name__}"
        return time.monotonic() - started, f"escaped as {kind}, not ForgeError"
    return time.monotonic() - started, None


def scenario_github_5xx(root: Path, scale: Scale) -> Row:
    with emulated_github(root) as (gh, forge):
        forge.find_open_pull("topic")  # warm: the repository is looked up once
        gh.clear_requests()
        gh.inject_fault("server_error", times=scale.storm_size, method="GET", status=502)
        seconds, error = _timed(lambda: forge.find_open_pull("topic"))
        small = len(gh.api_requests("GET"))
        gh.clear_requests()
        gh.inject_fault("server_error", times=RETRY_BUDGET + 1, method="GET", status=503)
        long_seconds, long_error = _timed(lambda: forge.find_open_pull("topic"))
        big = len(gh.api_requests("GET"))
        _, after_error = _timed(lambda: forge.find_open_pull("topic"))
        gh.clear_requests()
        gh.inject_fault("server_error", times=1, method="POST", path="/repos/*/pulls")
        _, post_error = _timed(lambda: forge.create_pull("main", "topic", "t", "b", False))
        _timed(lambda: forge.create_pull("main", "topic", "t", "b", False))
        pulls = len(gh.pulls(OWNER, NAME))
    long_ok = long_error is not None and long_error.startswith("ForgeError")
    post_ok = post_error is not None and post_error.startswith("ForgeError")
    return Row(
        "GitHub 5xx storm",
        f"{scale.storm_size} x 502 on a GET; a storm one longer than the retry budget "
        f"({RETRY_BUDGET + 1} x 503); a 502 on POST /pulls, then the call again",
        "0 calls"
        if long_ok
        else f"the long storm's failure {long_error}: the publish and reply tasks catch only "
        "ForgeError, so such a job fails without retry and without a visible error (lost)",
        f"0: the failed POST was not retried blindly ({'ForgeError' if post_ok else post_error}); "
        f"calling again opened {pulls} PR",
        f"GET retried with backoff (factor 0.5 s): OK after {small - 1} retries in "
        f"{seconds:.1f} s; the long storm stopped after {big} attempts in {long_seconds:.1f} s; "
        f"next call {'OK' if after_error is None else after_error}",
        ok=error is None and long_ok and after_error is None and post_ok and pulls == 1,
    )


def scenario_github_429(root: Path, scale: Scale) -> Row:
    retry_after = 2
    with emulated_github(root) as (gh, forge):
        forge.find_open_pull("topic")
        gh.clear_requests()
        gh.inject_fault(
            "too_many_requests", times=scale.storm_size, method="GET", retry_after=retry_after
        )
        seconds, error = _timed(lambda: forge.find_open_pull("topic"))
        attempts = len(gh.api_requests("GET"))
        gh.clear_requests()
        gh.inject_fault("secondary_rate_limit", times=1, method="GET", retry_after=1)
        secondary_seconds, secondary_error = _timed(lambda: forge.find_open_pull("topic"))
        gh.set_rate_limit(token=TOKEN, remaining=4321)
        forge.find_open_pull("topic")
        server = RedisServer(root / "redis", aof=False).start()
        try:
            client = redis.Redis(port=server.port)
            record_rate_limit(client, forge.rate_remaining)
            recorded = client.hget(GITHUB_KEY, "remaining")
        finally:
            server.kill()
    waited = scale.storm_size * retry_after
    honoured = seconds >= waited * 0.95
    return Row(
        "GitHub 429 / rate-limit storm",
        f"{scale.storm_size} x 429 (Retry-After: {retry_after}) on a GET; a secondary-rate-limit "
        "403 (Retry-After: 1)",
        "0 calls" if error is None and secondary_error is None else f"failed: {error}",
        "0",
        f"Retry-After honoured: {attempts} attempts over {seconds:.1f} s (>= {waited} s asked); "
        f"403 secondary limit waited {secondary_seconds:.1f} s; carry_github_rate_limit_remaining "
        f"recorded {int(recorded or -1)}",
        ok=error is None
        and secondary_error is None
        and honoured
        and recorded == str(forge.rate_remaining).encode(),
    )


# =========================================================================== 5. mirrors


CORRUPTIONS: dict[str, Callable[[Path], None]] = {}


def corruption(name: str) -> Callable[[Callable[[Path], None]], Callable[[Path], None]]:
    def register(fn: Callable[[Path], None]) -> Callable[[Path], None]:
        CORRUPTIONS[name] = fn
        return fn

    return register


@corruption("mirror deleted")
def _delete_mirror(path: Path) -> None:
    shutil.rmtree(path)


@corruption("objects deleted")
def _delete_objects(path: Path) -> None:
    for child in (path / "objects").iterdir():
        if child.name not in ("info",):
            shutil.rmtree(child) if child.is_dir() else child.unlink()
    (path / "objects" / "pack").mkdir(exist_ok=True)


@corruption("pack truncated")
def _truncate_pack(path: Path) -> None:
    packs = sorted((path / "objects" / "pack").glob("*.pack"))
    if not packs:
        subprocess.run(["git", "--git-dir", str(path), "repack", "-adq"], check=True)
        packs = sorted((path / "objects" / "pack").glob("*.pack"))
    for pack in packs:
        pack.chmod(0o644)
        with open(pack, "r+b") as handle:
            handle.truncate(pack.stat().st_size // 2)


@corruption("HEAD and config garbage")
def _garbage_head(path: Path) -> None:
    (path / "HEAD").write_bytes(b"\x00garbage")
    (path / "config").write_bytes(b"[core\n bare = maybe\n")


def _upstream(root: Path) -> tuple[RepoBuilder, list[PatchInput], str]:
    up = RepoBuilder(root / "upstream")
    up.commit("base", {"mod.py": BODY})
    for n in range(30):
        up.commit(f"change {n}", {f"f{n}.py": f"v = {n}\n" * 50})
    up.checkout("main", new_branch="fix")
    up.commit("Carried fix", FIX)
    patch = up.git("format-patch", "--stdout", "main..fix").encode() + b"\n"
    up.checkout("main")
    head = up.commit("upstream moves", {"late.py": "x = 1\n"})
    return up, [PatchInput("0001-fix.patch", patch)], head


def run_engine(mirror: Mirror, head: str, patches: list[PatchInput]) -> str:
    """What workers.rebase does with a mirror: ensure, fetch the head, check the series."""
    mirror.ensure()
    if not mirror.has_commit(head):
        mirror.resolve("main")
    if not mirror.has_commit(head):
        mirror.resolve(head)
    report = Engine(mirror).check(head, patches)
    return report.patches[0].status.value


def scenario_mirror(root: Path, _scale: Scale) -> Row:
    up, patches, head = _upstream(root)
    outcomes: list[tuple[str, str, str, str]] = []
    for name, damage in CORRUPTIONS.items():
        cache = root / f"cache-{len(outcomes)}"
        mirror = Mirror(str(up.path), cache)
        baseline = run_engine(mirror, head, patches)
        damage(mirror.path)
        outcomes.append((name, baseline, *_after_damage(up, cache, head, patches)))
    failed = [o for o in outcomes if o[2] != o[1]]
    return Row(
        "corrupted or deleted mirror",
        f"{len(outcomes)} kinds of damage to a warm bare mirror ("
        + ", ".join(o[0] for o in outcomes)
        + "), then the engine run again as a rebase does",
        "0 (no state is kept in the mirror)",
        "0",
        "; ".join(
            f"{name}: " + (f"OK, {how}" if result == baseline else f"NOT fully recovered: {how}")
            for name, baseline, result, how in outcomes
        ),
        ok=not failed,
    )


def _after_damage(
    up: RepoBuilder, cache: Path, head: str, patches: list[PatchInput]
) -> tuple[str, str]:
    """(engine result after the damage, how it got there): a first run as the rebase task
    does it and, when that fails, the task's retry on the same cache."""
    path = Mirror(str(up.path), cache).path
    existed = path.exists()
    attempts: list[str] = []
    with _mirror_warnings() as warnings:
        for _attempt in range(2):
            try:
                result = run_engine(Mirror(str(up.path), cache), head, patches)
                break
            except (MirrorError, GitError) as err:
                attempts.append(_short(err))
        else:
            return "error", f"every attempt failed: {attempts[0]}"
    if not existed:
        how = "ensure() re-created it"
    elif warnings:
        how = "ensure() saw it corrupt and re-created it"
    else:
        how = "fetched into the damaged mirror"
    if attempts:
        how = f"1st attempt failed ({attempts[0][:70]}), the task's retry worked, {how}"
    fsck = _fsck(path)
    return (result, f"{how}; {fsck}") if "clean" in fsck else ("damaged", f"{how}; {fsck}")


def _short(err: Exception) -> str:
    """git's own words, without the 'cannot fetch from <path>:' carry puts in front."""
    text = " ".join(str(err).split())
    text = re.sub(r"^cannot (fetch from|read repository) \S+: ", "", text)
    return re.sub(r"(?<!\S)/(?:[^\s/]+/)+", ".../", text)[:90]  # absolute paths: last part


@contextlib.contextmanager
def _mirror_warnings() -> Iterator[list[str]]:
    seen: list[str] = []

    class Catch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    logger = logging.getLogger("carry.mirror")
    handler = Catch(logging.WARNING)
    logger.addHandler(handler)
    try:
        yield seen
    finally:
        logger.removeHandler(handler)


# =========================================================================== 6. full disk


def scenario_full_disk(root: Path, _scale: Scale) -> Row:
    cache = root / "small-cache"
    cache.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(cache)], capture_output=True
    )
    if mounted.returncode != 0:
        return Row(
            "full disk in the cache directory",
            "skipped: a 3 MB tmpfs cannot be mounted here (needs root / CAP_SYS_ADMIN): "
            + mounted.stderr.decode(errors="replace").strip()[:80],
            "-",
            "-",
            "-",
            ok=True,
        )
    try:
        return _full_disk(root, cache)
    finally:
        subprocess.run(["umount", "-l", str(cache)], capture_output=True)


def _full_disk(root: Path, cache: Path) -> Row:
    up = RepoBuilder(root / "big-upstream")
    up.commit("base", {"mod.py": BODY})
    rng = random.Random(3)
    blobs = {f"blob{n}.bin": rng.randbytes(512 * 1024) for n in range(10)}  # 5 MB, no gain
    up.checkout("main", new_branch="fix")
    up.commit("Carried fix", FIX)
    patch = [PatchInput("0001-fix.patch", up.git("format-patch", "--stdout", "main..fix").encode())]
    up.checkout("main")
    head = up.commit("big files", blobs)
    mirror = Mirror(str(up.path), cache)
    error = _engine_error(mirror, head, patch)
    fsck_full = _fsck(mirror.path)
    subprocess.run(["mount", "-o", "remount,size=64m", str(cache)], check=True)
    after = _engine_error(Mirror(str(up.path), cache), head, patch)
    fsck_after = _fsck(mirror.path)
    clear = error is not None and "No space left on device" in error
    return Row(
        "full disk in the cache directory",
        "the mirror cache on a 3 MB tmpfs, an upstream head with 5 MB of incompressible files; "
        "then the filesystem grown to 64 MB and the same rebase run again",
        "0 (nothing is stored when a fetch fails)",
        "0",
        f"clear error: {'yes' if clear else 'NO'} ({_around(error, 'No space left')}); "
        f"mirror while full: {fsck_full}; after space came back: "
        f"{'rebased OK' if after is None else 'failed: ' + after[:60]}, {fsck_after}",
        ok=clear and after is None and "fsck clean" in fsck_after,
    )


def _around(text: str | None, phrase: str) -> str:
    if not text:
        return "no error"
    at = text.find(phrase)
    return text[:100] if at < 0 else "..." + text[max(0, at - 60) : at + 40]


def _engine_error(mirror: Mirror, head: str, patches: list[PatchInput]) -> str | None:
    try:
        run_engine(mirror, head, patches)
    except (MirrorError, GitError, OSError) as err:
        return " ".join(str(err).split())
    return None


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


# =========================================================================== 7. fuzzed webhooks


HANDLED_EVENTS = (
    "ping",
    "push",
    "pull_request",
    "issue_comment",
    "check_run",
    "check_suite",
    "workflow_run",
    "installation",
    "installation_repositories",
)
JSON_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=40)
    | st.sampled_from(["", "0" * 40, "refs/heads/main", "2026-01-01T00:00:00Z", "owner/repo"])
)


def _json_containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner)


JSON_VALUES = st.recursive(JSON_LEAVES, _json_containers, max_leaves=12)


def webhook_seeds() -> list[tuple[str, Any]]:
    """Real payloads (octokit's examples in tests/data, when the checkout has them), else
    minimal ones of each shape carry reads."""
    manifest = WEBHOOK_EXAMPLES / "manifest.json"
    if manifest.is_file():
        files = json.loads(manifest.read_text())["files"]
        return [
            (meta["event"], json.loads((WEBHOOK_EXAMPLES / name).read_text()))
            for name, meta in sorted(files.items())
        ]
    sha = "a" * 40
    repo = {"full_name": "o/r", "name": "r", "owner": {"login": "o"}}
    pull = {"number": 1, "head": {"sha": sha}, "base": {"ref": "main"}, "merged": True}
    return [
        ("push", json.loads(push_body("o/r", sha))),
        ("pull_request", {"action": "closed", "pull_request": pull, "repository": repo}),
        ("ping", {"zen": "z", "hook_id": 1}),
    ]


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(node, dict):
        for key, child in node.items():
            yield from _paths(child, (*prefix, key))
    elif isinstance(node, list):
        for index, child in enumerate(node[:5]):
            yield from _paths(child, (*prefix, index))


def _set(root: Any, path: tuple[Any, ...], value: Any, delete: bool) -> Any:
    if not path:
        return value
    parent = root
    for part in path[:-1]:
        parent = parent[part]
    if delete and isinstance(parent, dict):
        parent.pop(path[-1], None)
    else:
        parent[path[-1]] = value
    return root


@st.composite
def mutated_payloads(draw: st.DrawFn, seeds: list[tuple[str, Any]]) -> tuple[str, Any]:
    event, payload = draw(st.sampled_from(seeds))
    payload = copy.deepcopy(payload)
    paths = list(_paths(payload))
    for _ in range(draw(st.integers(0, 4))):
        path = draw(st.sampled_from(paths))
        with contextlib.suppress(KeyError, IndexError, TypeError):
            payload = _set(payload, path, draw(JSON_VALUES), draw(st.booleans()))
        paths = list(_paths(payload))
    name = draw(st.sampled_from([event, event, event, *HANDLED_EVENTS]) | st.text(max_size=20))
    return name, payload


HEADER_TEXT = st.text(st.characters(codec="latin-1", exclude_characters="\r\n\x00"), max_size=150)


@st.composite
def webhook_requests(draw: st.DrawFn, seeds: list[tuple[str, Any]]) -> tuple[dict[str, str], bytes]:
    event, payload = draw(mutated_payloads(seeds))
    kind = draw(st.sampled_from(["json", "json", "json", "form", "bytes", "text"]))
    if kind == "bytes":
        body = draw(st.binary(max_size=3000))
    elif kind == "text":
        body = draw(st.text(max_size=500)).encode("utf-8", "surrogatepass")
    else:
        body = json.dumps(payload, allow_nan=True).encode("utf-8", "surrogatepass")
        if kind == "form":
            body = b"payload=" + quote(body).encode()
    content_type = {"form": "application/x-www-form-urlencoded"}.get(kind, "application/json")
    headers = {
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": draw(st.sampled_from([str(uuid.uuid4())]) | HEADER_TEXT),
        "Content-Type": draw(st.sampled_from([content_type, content_type]) | HEADER_TEXT),
        "X-Hub-Signature-256": draw(
            st.sampled_from([sign(SECRET, body)] * 6 + ["sha256=" + "0" * 64, "", "sha1=x"])
        ),
    }
    dropped = draw(st.sets(st.sampled_from(sorted(headers)), max_size=1))
    return {k: v for k, v in headers.items() if k not in dropped and v}, body


def edge_cases() -> list[tuple[str, dict[str, str], bytes]]:
    """Bodies a generator rarely reaches, each signed: a hostile sender with the secret (or a
    GitHub bug) must get a 4xx, never a 500."""
    sha = "b" * 40
    repo = {"full_name": "o/r", "name": "r", "owner": {"login": "o"}}
    pull = {"number": 1, "head": {"sha": sha}, "base": {"ref": "main"}, "merged": False}
    closed = {"action": "closed", "repository": repo}
    cases: dict[str, str | bytes] = {
        "deeply nested JSON": b"[" * 100_000 + b"]" * 100_000,
        "5000-digit integer": b'{"hook_id": ' + b"9" * 5000 + b"}",
        "NaN timestamp": json.dumps({**closed, "pull_request": {**pull, "closed_at": math.nan}}),
        "infinite timestamp": json.dumps({**closed, "pull_request": {**pull, "closed_at": 1e300}}),
        "huge epoch timestamp": json.dumps(
            {**closed, "pull_request": {**pull, "closed_at": 10**20}}
        ),
        "lone surrogate in repository name": json.dumps(
            json.loads(push_body("o/r", sha)) | {"repository": {**repo, "full_name": "\ud800"}}
        ),
        "lone surrogate in ref": json.dumps(json.loads(push_body("o/r", sha)) | {"ref": "\udfff"}),
        "UTF-16 body": json.dumps({"zen": "z"}).encode("utf-16"),
        "form without payload": b"other=1",
    }
    events = {"NaN timestamp": "pull_request", "infinite timestamp": "pull_request"}
    events["huge epoch timestamp"] = "pull_request"
    out = []
    for name, raw in cases.items():
        body = raw.encode() if isinstance(raw, str) else raw
        content_type = "application/x-www-form-urlencoded" if "form" in name else "application/json"
        headers = {
            "X-GitHub-Event": events.get(name, "ping" if "integer" in name else "push"),
            "X-GitHub-Delivery": str(uuid.uuid4()),
            "X-Hub-Signature-256": sign(SECRET, body),
            "Content-Type": content_type,
        }
        out.append((name, headers, body))
    return out


@dataclass
class FuzzResult:
    sent: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)  # what got a 5xx, shortest first

    def add(self, status: int, what: str) -> None:
        self.sent += 1
        self.statuses[status] += 1
        if status >= 500:
            self.failures.append(what)

    @property
    def five_hundreds(self) -> int:
        return sum(n for status, n in self.statuses.items() if status >= 500)


def fuzz_webhooks(
    url: str, examples: int, seed: int, *, edge: bool = True, deadline_s: float = 120
) -> FuzzResult:
    """Signed and unsigned, well- and ill-formed deliveries to a running web process; the
    hand-picked edge cases first unless `edge` is False."""
    result = FuzzResult()
    deadline = time.monotonic() + deadline_s
    with httpx.Client(timeout=30) as http:
        for name, headers, body in edge_cases() if edge else []:
            status = post_webhook(http, url, headers, body)
            result.add(status, f"edge case: {name}")
        seeds = webhook_seeds()

        @hypothesis_seed(seed)
        @settings(_fuzz_settings(examples))
        @given(webhook_requests(seeds))
        def send(request: tuple[dict[str, str], bytes]) -> None:
            if time.monotonic() > deadline:
                return
            headers, body = request
            status = post_webhook(http, url, headers, body)
            if status >= 0:
                result.add(status, f"{headers!r} {body[:200]!r}")

        send()
    result.failures.sort(key=len)
    return result


def post_webhook(http: httpx.Client, url: str, headers: dict[str, str], body: bytes) -> int:
    raw = {k.encode(): v.encode("utf-8", "surrogatepass") for k, v in headers.items()}
    for _attempt in range(2):  # a connection the server closed after its last answer: once more
        try:
            return http.post(f"{url}/webhooks/github", content=body, headers=raw).status_code
        except httpx.LocalProtocolError:
            return -1  # not sendable over HTTP/1.1 at all (the client refuses)
        except httpx.HTTPError:
            continue
    return 599  # the server dropped the connection twice: as bad as a 500


def _fuzz_settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )


def fuzz_api(url: str, examples: int, seed: int) -> FuzzResult:
    """Every GET operation of the app's OpenAPI document, with generated path and query values."""
    result = FuzzResult()
    openapi = httpx.get(f"{url}/openapi.json", timeout=10).json()
    operations = [
        (path, op.get("parameters", []))
        for path, ops in openapi["paths"].items()
        for method, op in ops.items()
        if method == "get"
    ]
    values = st.text(max_size=30) | st.integers(-(10**12), 10**12).map(str) | st.just("")
    with httpx.Client(timeout=30) as http:

        @hypothesis_seed(seed)
        @settings(_fuzz_settings(examples))
        @given(st.sampled_from(operations), st.data())
        def call(operation: tuple[str, list[dict[str, Any]]], data: st.DataObject) -> None:
            path, parameters = operation
            query = {}
            for parameter in parameters:
                value = data.draw(values)
                if parameter["in"] == "path":
                    path = path.replace("{" + parameter["name"] + "}", quote(value, safe="") or "x")
                elif parameter["in"] == "query" and data.draw(st.booleans()):
                    query[parameter["name"]] = value
            try:
                status = http.get(f"{url}{path}", params=query).status_code
            except httpx.HTTPError:
                status = 599
            result.add(status, f"GET {path} {query}")

        call()
    return result


def scenario_fuzz_webhooks(root: Path, scale: Scale, seed: int) -> Row:
    server = RedisServer(root / "redis", aof=False).start()
    try:
        with carry_env(root / "carry", server.url) as env:
            url = env.start_web()
            hooks = fuzz_webhooks(url, scale.fuzz_webhooks, seed)
            api = fuzz_api(url, scale.fuzz_api, seed)
            alive = httpx.get(f"{url}/healthz", timeout=5).status_code == 200
    finally:
        server.kill()
    failures = hooks.failures + api.failures
    edge = [f.removeprefix("edge case: ") for f in failures if f.startswith("edge case: ")]
    generated = [f[:140] for f in failures if not f.startswith("edge case: ")]
    shown = "; ".join([f"edge cases: {', '.join(edge)}"] * bool(edge) + generated[:2])
    return Row(
        "fuzzed webhook bodies and headers (+ API)",
        f"{hooks.sent} webhook requests to the running web process (hypothesis, seed {seed}: "
        f"mutated real payloads, random bytes, form bodies, odd headers and signatures, "
        f"{len(edge_cases())} hand-picked edge cases) and {api.sent} GETs generated from "
        f"/openapi.json; statuses {dict(sorted((hooks.statuses + api.statuses).items()))}",
        "-",
        "-",
        f"500s: {hooks.five_hundreds + api.five_hundreds} (expected 0)"
        + (f": {shown}" if shown else "")
        + f"; web still healthy: {'yes' if alive else 'NO'}",
        ok=not failures and alive,
    )


# =========================================================================== 8. fuzzed patches


def patch_seeds() -> list[bytes]:
    found = [p.read_bytes() for p in sorted((ROOT / "patches").glob("*/*.patch"))]
    synthetic = (
        b"From 1234567890123456789012345678901234567890 Mon Sep 17 00:00:00 2001\n"
        b"From: A <a@example.com>\nSubject: [PATCH 1/2] two files\n\nbody\n---\n"
        b"diff --git a/x.py b/y.py\nsimilarity index 90%\nrename from x.py\nrename to y.py\n"
        b"index 1111111..2222222 100644\n--- a/x.py\n+++ b/y.py\n@@ -1,3 +1,3 @@ def f():\n"
        b" a\r\n-b\n+c\n d\n\\ No newline at end of file\n"
        b"diff --git a/bin b/bin\nnew file mode 100755\nindex 0000000..3333333\n"
        b"GIT binary patch\nliteral 5\nMcmZQzU|?ix0000\n\nliteral 0\nHcmV?d00001\n\n"
        b"--\n2.39.5\n"
    )
    plain = b"--- a/f\n+++ b/f\n@@ -1 +1,2 @@\n-x\n+y\n+z\n"
    return [*found, synthetic, plain]


@st.composite
def mutated_patches(draw: st.DrawFn, seeds: list[bytes]) -> bytes:
    lines = draw(st.sampled_from(seeds)).splitlines(keepends=True) or [b""]
    for _ in range(draw(st.integers(1, 6))):
        i = draw(st.integers(0, max(0, len(lines) - 1)))
        op = draw(st.sampled_from(["drop", "dup", "junk", "flip", "numbers", "swap", "cut"]))
        lines = _mutate(lines, i, op, draw)
    return b"".join(lines)


def _mutate(lines: list[bytes], i: int, op: str, draw: st.DrawFn) -> list[bytes]:
    if not lines:
        return [draw(st.binary(max_size=40))]
    line = lines[i]
    if op == "drop":
        return lines[:i] + lines[i + 1 :]
    if op == "dup":
        return lines[: i + 1] + lines[i:]
    if op == "junk":
        return [*lines[:i], draw(st.binary(max_size=60)), *lines[i + 1 :]]
    if op == "flip" and line:
        j = draw(st.integers(0, len(line) - 1))
        return [
            *lines[:i],
            line[:j] + bytes([draw(st.integers(0, 255))]) + line[j + 1 :],
            *lines[i + 1 :],
        ]
    if op == "numbers":
        number = str(draw(st.integers(-5, 10**30))).encode()
        return [*lines[:i], _renumber(line, number), *lines[i + 1 :]]
    if op == "swap":
        j = draw(st.integers(0, len(lines) - 1))
        lines = lines[:]
        lines[i], lines[j] = lines[j], lines[i]
        return lines
    return lines[:i]  # cut


def _renumber(line: bytes, number: bytes) -> bytes:
    digits = [k for k, c in enumerate(line) if chr(c).isdigit()]
    if not digits:
        return b"@@ -" + number + b" +1," + number + b" @@\n"
    k = digits[len(digits) // 2]
    return line[:k] + number + line[k + 1 :]


DIFF_LINES = [
    b"diff --git a/f b/f\n",
    b"--- a/f\n",
    b"+++ b/f\n",
    b"@@ -1,2 +1,2 @@\n",
    b" c\n",
    b"-o\n",
    b"+n\n",
    b"\\ No newline at end of file\n",
    b"GIT binary patch\n",
    b"literal 3\n",
    b"new file mode 100644\n",
    b"rename from a\n",
    b"Subject: x\n",
]
PATCH_INPUTS = st.one_of(
    st.binary(max_size=2000),
    st.lists(st.sampled_from(DIFF_LINES), max_size=30).map(b"".join),
)


_MAIL = (
    b"From: a <a@b.c>\nDate: Tue, 1 Sep 2026 00:00:00 +0000\nSubject: [PATCH] x\n\n---\n"
    b"diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n"
)
PARSER_EDGE_CASES = {
    "Date with an overflowing hour": _MAIL.replace(b"00:00:00", b"00:30391819020:00"),
    "Date with a 20-digit day": _MAIL.replace(b"Tue, 1 Sep", b"Tue, 99999999999999999999 Sep"),
    "encoded-word garbage in Subject": _MAIL.replace(b"[PATCH] x", b"=?utf-8?q?=ff?= =?x?b?!?="),
    "unparsable From": _MAIL.replace(b"a <a@b.c>", b'<<<@@@>>> "unterminated'),
    "hunk length of 23 digits": _MAIL.replace(b"@@ -1 +1 @@", b"@@ -1," + b"9" * 23 + b" +1 @@"),
    "NUL bytes in a hunk": _MAIL.replace(b"-a\n", b"-\x00\n"),
}


@dataclass
class ParserFuzz:
    examples: int = 0
    parsed: int = 0
    refused: int = 0
    unexpected: Counter[str] = field(default_factory=Counter)
    smallest: dict[str, bytes] = field(default_factory=dict)


def fuzz_parser(
    examples: int, seed: int, *, edge: bool = True, deadline_s: float = 120
) -> ParserFuzz:
    """parse_patch on generated and mutated patch files: it may only raise PatchFileError."""
    result = ParserFuzz()
    deadline = time.monotonic() + deadline_s
    seeds = patch_seeds()
    for data in PARSER_EDGE_CASES.values() if edge else []:
        parse_one(result, data)

    @hypothesis_seed(seed)
    @settings(_fuzz_settings(examples))
    @given(mutated_patches(seeds) | PATCH_INPUTS)
    def parse(data: bytes) -> None:
        if time.monotonic() <= deadline:
            parse_one(result, data)

    parse()
    return result


def parse_one(result: ParserFuzz, data: bytes) -> None:
    result.examples += 1
    try:
        parse_patch(data, name="fuzzed.patch")
    except PatchFileError:
        result.refused += 1
        return
    except Exception as err:  # counting what escapes is the point
        kind = f"{type(err).__name__}: {str(err)[:60]}"
        result.unexpected[kind] += 1
        if kind not in result.smallest or len(data) < len(result.smallest[kind]):
            result.smallest[kind] = data
        return
    result.parsed += 1


def scenario_fuzz_parser(_root: Path, scale: Scale, seed: int) -> Row:
    result = fuzz_parser(scale.fuzz_parser, seed)
    escaped = sum(result.unexpected.values())
    detail = "; ".join(
        f"{kind} x{n} (smallest input {result.smallest[kind][:80]!r})"
        for kind, n in result.unexpected.most_common(3)
    )
    return Row(
        "fuzzed patch files -> parse_patch",
        f"{result.examples} inputs (hypothesis, seed {seed}): mutations of the real series' "
        f"patches and of synthetic ones (dropped, doubled, swapped, cut lines, flipped bytes, "
        f"huge hunk numbers), random bytes, random diff-line soups, "
        f"{len(PARSER_EDGE_CASES)} hand-picked mail-header and hunk edge cases",
        "-",
        "-",
        f"{result.parsed} parsed, {result.refused} refused with PatchFileError (naming the "
        f"line), {escaped} other exceptions (expected 0)" + (f": {detail}" if detail else ""),
        ok=escaped == 0,
    )


# =========================================================================== 9. override race


RACE_USERS = ("alice", "bob")  # maintainers with write access
RACE_KIND, RACE_CHECKS = "gaudi", ("build", "smoke")
RACE_BOT, RACE_TOKEN = "carry[bot]", "ghp_race" + "0" * 32
RACE_REF = "refs/heads/main"
RACE_WRITES = 100_000  # GitHub's content-creation limits, lifted for the race
RACE_WORKERS = 2  # carry worker processes (queue carry), besides this process's worker thread
DOWN_OWNER, DOWN_NAME = DOWNSTREAM_REPO.split("/")
# The first words of carry's answer to each command (bot.core.planner._command_action).
REPLY_STARTS = {
    "Paused:": "pause",
    "Resumed.": "resume",
    "Pinned ": "keep",
    "Dropping ": "drop",
    "Approved ": "approve",
}


def race_patches() -> list[dict[str, str]]:
    """Three patches, each making its own line of mod.py safe (each on top of the one before)."""
    changes, text = [], BODY
    for n in (10, 20, 30):
        text = text.replace(f"compute({n})", f"compute({n}, safe=True)")
        changes.append({"mod.py": text})
    return changes


Holds = Callable[[SeriesState], bool]


@dataclass
class Override:
    """The last override of one kind that was sent: it holds until the next of its kind."""

    kind: str  # "pause" (pause and resume) or "pin <patch>" (keep and drop)
    what: str  # the command as sent, with its author
    holds: Holds


def _paused_by(who: str | None) -> Holds:
    return lambda state: state.paused_by == who


def _pinned(name: str, keep: bool, who: str) -> Holds:
    return lambda state: _pin(state, name) == ((True, None) if keep else (False, who))


def _pin(state: SeriesState, name: str) -> tuple[bool, str | None] | None:
    patch = state.patch(name)
    return None if patch is None else (patch.pinned, patch.drop_requested_by)


def _shown(state: SeriesState, kind: str) -> str:
    if kind == "pause":
        return f"paused_by={state.paused_by}"
    pin = _pin(state, kind.split(" ", 1)[1])
    return "no such patch" if pin is None else f"pinned={pin[0]}, drop_requested_by={pin[1]}"


def _ci_shown(state: SeriesState, key: str) -> tuple[str, str] | None:
    row = state.ci.get(key)
    return None if row is None else (row.run_id, row.state)


@dataclass
class CiResult:
    """The rows one CI result left: row key -> (run id, state), as the runner wrote them."""

    run_id: str
    rows: dict[str, tuple[str, str]]


@dataclass
class RaceLedger:
    """What the writers sent, and what they found missing when they looked."""

    sent: Counter[str] = field(default_factory=Counter)  # pause | pin | approve -> sent
    lost: list[tuple[str, str, str]] = field(default_factory=list)  # (family, sent, found)
    current: dict[str, Override] = field(default_factory=dict)
    approvals: list[str] = field(default_factory=list)
    replies_due: Counter[str] = field(default_factory=Counter)  # command verb -> comments
    ci_rows_sent: int = 0
    ci_lost: list[str] = field(default_factory=list)
    ci_runs: Counter[str] = field(default_factory=Counter)  # how each run ended
    last_ci: CiResult | None = None
    heads: list[str] = field(default_factory=list)
    asked: list[str] = field(default_factory=list)  # heads the planner asked to rebase
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class OverrideRace:
    """One series, written to at once by: a rebaser (new upstream heads, each through the
    planner and then the `carry.rebase` task function, in this process), maintainers'
    commands (`/carry pause|resume|keep|drop|approve`, one thread per kind of override,
    entering the planner and the dispatcher as `carry.check_permission` hands them on), a CI
    requester whose runs a real runner process executes and reports, and real carry workers
    (the forced re-checks a pin asks for, approvals, replies, publishing and CI reports to the
    GitHub emulator).

    "Present" means: the last override of each kind sent (pause/resume; keep/drop of each
    patch) is in the state just before the next of its kind is sent and at the end, where a
    pin must also decide its patch; every approval is in the state's approvals at the end;
    the rows of every CI result are in the state until the next request replaces them, and
    at the end; every command has its reply on the PR (GitHub's record)."""

    def __init__(self, env: CarryEnv, rt: Runtime, gh: GitHubEmulator, seed: int) -> None:
        self.env, self.rt, self.gh, self.seed = env, rt, gh, seed
        self.client = rt.redis
        self.ledger = RaceLedger()
        self.patches_dir = env.downstream / "patches" / SERIES
        self.names = [p.name for p in sorted(self.patches_dir.glob("*.patch"))]
        self.downstream_sha = git(env.downstream, "rev-parse", "HEAD")
        self.pr = 0
        self.writers = 0
        self.stop_at = 0.0
        self._comment_id = 10_000
        self._trees: dict[str, str] = {}
        self._scratch = RepoBuilder(env.root / "scratch")
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="race-worker")
        checks = tuple(StepSpec(name, ("true",), 60) for name in RACE_CHECKS)  # as configured
        retry = RetryPolicy(max_attempts=1)
        self.target = ci.CiTarget(RACE_KIND, f"hw.{RACE_KIND}", checks=checks, retry=retry)

    # -- plumbing -----------------------------------------------------------------------
    def running(self) -> bool:
        return time.monotonic() < self.stop_at

    def state(self) -> SeriesState:
        state = store.load_series(self.client, SERIES)
        assert state is not None, "the series has no state"
        return state

    def guarded(self, name: str, work: Callable[[random.Random], None], n: int) -> threading.Thread:
        def run() -> None:
            try:
                work(random.Random(self.seed * 100 + n))
            except Exception as err:  # a writer that dies is reported, not lost in its thread
                traceback.print_exc()
                with self.ledger.lock:
                    self.ledger.errors.append(f"{name}: {type(err).__name__}: {err}")

        return threading.Thread(target=run, name=f"race-{name}", daemon=True)

    def rebase_task(self, head: str) -> None:
        """The `carry.rebase` task function, run by this process's one worker thread (a worker
        keeps its engine, whose caches belong to one thread); while another job holds the series
        lock it asks to be retried, and is, a moment later."""
        self._worker.submit(self._rebase, head).result()

    def _rebase(self, head: str) -> None:
        deadline = time.monotonic() + 60
        while True:
            try:
                tasks.rebase(series_id=SERIES, head_sha=head, head_ref=RACE_REF, actor="alice")
                return
            except Retry:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def command(self, body: str, author: str) -> None:
        """A maintainer's comment on carry's PR after its author's permission was looked up:
        what `carry.check_permission` hands to the planner and the dispatcher."""
        with self.ledger.lock:
            self._comment_id += 1
            comment_id = self._comment_id
        event = ev.CommandAuthorized(
            series_id=SERIES,
            number=self.pr,
            comment_id=comment_id,
            author=author,
            permission="write",
            body=body,
            head_at_comment=self.state().head_sha,
        )
        tasks.handle_event(self.rt, event)
        with self.ledger.lock:
            self.ledger.replies_due[body.split()[1]] += 1

    def sent(self, override: Override) -> None:
        with self.ledger.lock:
            self.ledger.current[override.kind] = override
            self.ledger.sent[override.kind.split()[0]] += 1

    def settle(self, kind: str, *, final: bool = False) -> None:
        """The override of `kind` sent last must be in the state still, just before the next
        of its kind replaces it, and at the end; at the end, once the re-check a pin asks for
        has run, a pin must also decide its patch (keep -> keep, drop -> drop)."""
        override = self.ledger.current.get(kind)
        if override is None:
            return
        state = self.state()
        found = None if override.holds(state) else _shown(state, kind)
        if found is None and final and kind.startswith("pin "):
            patch = state.patch(kind.split(" ", 1)[1])
            wanted = "drop" if override.what.startswith("/carry drop") else "keep"
            if patch is None or patch.decision != wanted:
                found = f"decision {patch.decision if patch else None}, not {wanted}"
        if found is not None:
            with self.ledger.lock:
                self.ledger.lost.append((kind.split()[0], override.what, found))

    # -- the writers ----------------------------------------------------------------------
    def rebaser(self, rng: random.Random) -> None:
        n = 0
        while self.running():
            n += 1
            before = self.ledger.heads[-1]
            head = self.env.upstream.commit(f"upstream {n}", {f"race/f{n % 7}.py": f"n = {n}\n"})
            self.ledger.heads.append(head)
            moved = ev.HeadMoved(
                repo=UPSTREAM_REPO, ref=RACE_REF, before=before, after=head, actor="alice"
            )
            tasks.handle_event(self.rt, moved)  # the push: a rebase, unless paused
            if self.asked_to_rebase(head):
                with self.ledger.lock:
                    self.ledger.asked.append(head)
                self.rebase_task(head)  # a worker of this process takes the job
            time.sleep(rng.uniform(0, 0.1))

    def asked_to_rebase(self, head: str) -> bool:
        """Whether the dispatcher carried out a `rebase` for this head (a paused series only
        records it)."""
        key = f"rebase:{SERIES}:{head}"
        recent = store.history(self.client, SERIES, limit=200)
        return any(e["kind"] == "rebase" and e["data"].get("key") == key for e in recent)

    def pauser(self, rng: random.Random) -> None:
        n = 0
        while self.running():
            self.settle("pause")
            who = RACE_USERS[(n // 2) % 2]
            if n % 2 == 0:
                self.command("/carry pause", who)
                self.sent(Override("pause", f"/carry pause by {who}", _paused_by(who)))
            else:
                self.command("/carry resume", who)
                self.sent(Override("pause", f"/carry resume by {who}", _paused_by(None)))
            n += 1
            time.sleep(rng.uniform(0.1, 0.5))

    def pinner(self, name: str) -> Callable[[random.Random], None]:
        kind = f"pin {name}"

        def pin(rng: random.Random) -> None:
            n = 0
            while self.running():
                self.settle(kind)
                who, keep = RACE_USERS[(n // 2) % 2], n % 2 == 0
                verb = "keep" if keep else "drop"
                self.command(f"/carry {verb} {name}", who)
                self.sent(
                    Override(kind, f"/carry {verb} {name} by {who}", _pinned(name, keep, who))
                )
                n += 1
                time.sleep(rng.uniform(0.4, 1.2))

        return pin

    def approver(self, rng: random.Random) -> None:
        n = 0
        while self.running():
            head = self.ledger.heads[-1]
            if head not in self.ledger.approvals:
                self.command(f"/carry approve {head}", RACE_USERS[n % 2])
                with self.ledger.lock:
                    self.ledger.approvals.append(head)
                    self.ledger.sent["approve"] += 1
                n += 1
            time.sleep(rng.uniform(0.2, 0.6))

    def tester(self, rng: random.Random) -> None:
        """Hardware CI of the series as it is checked now, one run at a time; a tree tested
        already is tested again as `/carry retest` does (force), so every request runs."""
        last_head = None
        while self.running():
            if self.ledger.last_ci is not None:
                self.settle_ci(self.ledger.last_ci)
            state = self.state()
            head, digest = state.checked_head, state.checked_digest
            assert head and digest, "the series was never checked"
            # alice, a maintainer, created the ref at the head (the series' trust: issue 33)
            ci.record_push(self.client, SERIES, Push(ZERO_SHA, head, "alice", trusted=True))
            rows = ci.request_ci(
                self.client,
                celery_app,
                SERIES,
                [self.target],
                self.tree(head, digest),
                force=head == last_head,
                debounce_s=0,
            )
            last_head = head
            if all(row.state in FINAL_STATES for row in rows):  # reused: this tree's result
                result: CiResult | None = CiResult(
                    rows[0].run_id, {row.runner: (row.run_id, row.state) for row in rows}
                )
                with self.ledger.lock:
                    self.ledger.ci_runs["reused"] += 1
            else:
                result = self.ci_result(rows[0].run_id)
            if result is not None:
                with self.ledger.lock:
                    self.ledger.last_ci = result
                    self.ledger.ci_rows_sent += len(result.rows)
            time.sleep(rng.uniform(0, 0.2))

    # -- CI -------------------------------------------------------------------------------
    def tree(self, head: str, digest: str) -> TreeSpec:
        """The exact tree to test: the downstream series applied on `head` (git am, as the
        runner builds it)."""
        if head not in self._trees:
            scratch = self._scratch
            scratch.git("fetch", "-q", str(self.env.upstream.path), head)
            scratch.git("checkout", "-q", "--detach", "--force", head)
            scratch.git(
                "am", "-q", "-3", "--keep-cr", *(str(self.patches_dir / n) for n in self.names)
            )
            self._trees[head] = scratch.git("rev-parse", "HEAD^{tree}")
        return TreeSpec(
            upstream_url=str(self.env.upstream.path),
            upstream_sha=head,
            downstream_url=str(self.env.downstream),
            downstream_ref=RACE_REF,
            downstream_sha=self.downstream_sha,
            patches_dir=f"patches/{SERIES}",
            series_digest=digest,
            expected_tree=self._trees[head],
        )

    def ci_result(self, run_id: str) -> CiResult | None:
        """Waits for the runner to end the run; the rows its result writes (None: the run did
        not end in time, which is reported as an error, not as a loss)."""
        deadline = max(self.stop_at, time.monotonic()) + 30
        while True:
            info = ci.run_info(self.client, run_id)
            if info is not None and info["state"] in FINAL_STATES:
                break
            if time.monotonic() > deadline:
                with self.ledger.lock:
                    self.ledger.errors.append(f"CI run {run_id} did not end in time")
                return None
            time.sleep(0.02)
        with self.ledger.lock:
            self.ledger.ci_runs[info["state"]] += 1
        rows = {}
        for key in ci_runs.check_keys(RACE_KIND, self.target.checks):
            verdict = (info["checks"].get(key) or {}).get("verdict")
            rows[key] = (run_id, verdict if verdict in REUSABLE else info["state"])
        return CiResult(run_id, rows)

    def settle_ci(self, result: CiResult, grace_s: float = 3.0) -> None:
        """The rows of the last CI result must be in the state until the next request replaces
        them (the runner writes them just after it ends the run: `grace_s` for that)."""
        deadline = time.monotonic() + grace_s
        while True:
            state = self.state()
            missing = [
                f"{key} of {run_id} ({want}): the state has {_ci_shown(state, key)}"
                for key, (run_id, want) in result.rows.items()
                if _ci_shown(state, key) != (run_id, want)
            ]
            if not missing or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        with self.ledger.lock:
            self.ledger.ci_lost += missing

    # -- the end --------------------------------------------------------------------------
    def close(self) -> None:
        self._worker.shutdown(wait=True, cancel_futures=True)

    def drained(self) -> bool:
        queues = ("carry", f"hw.{RACE_KIND}")
        return all(self.client.llen(q) == 0 for q in queues) and self.client.hlen("unacked") == 0

    def quiet(self) -> bool:
        if not self.drained():
            return False
        time.sleep(0.3)  # a task that just finished may queue another
        return self.drained()

    def replies(self) -> Counter[str]:
        """carry's answers on its PR (GitHub's record of them), by the verb they answer."""
        found: Counter[str] = Counter()
        for comment in self.gh.comments(DOWN_OWNER, DOWN_NAME, self.pr):
            if comment["user"]["login"] == RACE_BOT:
                body = str(comment["body"])
                verb = next((v for s, v in REPLY_STARTS.items() if body.startswith(s)), "other")
                found[verb] += 1
        return found


@dataclass
class RaceFigures:
    """What the override race sent and what was there at the end."""

    seconds: float
    overrides_sent: Counter[str]  # pause | pin | approve -> sent
    overrides_lost: Counter[str]
    ci_rows_sent: int
    ci_rows_lost: int
    replies_due: Counter[str]  # command verb -> commands that must be answered
    replies_sent: Counter[str]
    ci_runs: Counter[str]
    heads: int  # upstream heads pushed during the race
    asked: int  # of which the planner asked to rebase (the others came while paused)
    rebased: int  # of which carry checked
    superseded_by_older: list[str]  # asked for, never checked: skipped for an OLDER head
    rewinds: int  # checks of a head older than one checked before
    ended_behind: bool  # the series ended checked on a head older than the last one asked for
    drained: bool
    errors: list[str]
    lost_detail: list[str]
    writers: int

    @property
    def overrides_total(self) -> tuple[int, int]:
        return sum(self.overrides_sent.values()), sum(self.overrides_lost.values())

    @property
    def replies_lost(self) -> int:
        return sum(max(0, n - self.replies_sent[v]) for v, n in self.replies_due.items())

    @property
    def replies_extra(self) -> int:
        return sum(max(0, n - self.replies_due[v]) for v, n in self.replies_sent.items())

    @property
    def lost(self) -> dict[str, int]:
        """Every 'lost' column: each must be 0."""
        return {
            "overrides": self.overrides_total[1],
            "CI rows": self.ci_rows_lost,
            "replies": self.replies_lost,
        }

    def table(self) -> str:
        sent, lost = self.overrides_total
        due, replied = sum(self.replies_due.values()), sum(self.replies_sent.values())
        names = {"pause": "pause/resume", "pin": "keep/drop", "approve": "approve"}
        kinds = ", ".join(f"{names[k]} {n}" for k, n in sorted(self.overrides_sent.items()))
        return "\n".join(
            [
                f"override race, {self.seconds:.0f} s:",
                "| what | sent (due) | present at the end (sent) | lost |",
                "|---|---|---|---|",
                f"| overrides ({kinds}) | {sent} | {sent - lost} | {lost} |",
                f"| CI rows | {self.ci_rows_sent} | {self.ci_rows_sent - self.ci_rows_lost} "
                f"| {self.ci_rows_lost} |",
                f"| replies | {due} due | {replied} sent | {self.replies_lost} |",
                f"upstream heads: {self.rebase_line()}",
                *[f"  lost: {line}" for line in self.lost_detail[:10]],
                *[f"  error: {line}" for line in self.errors[:5]],
            ]
        )

    @property
    def heads_lost(self) -> bool:
        """A head asked for was never checked, or the series went back to an older head."""
        return bool(self.superseded_by_older) or self.rewinds > 0 or self.ended_behind

    def rebase_line(self) -> str:
        """What happened to the heads (a head asked for and never checked fails the row)."""
        return (
            f"{self.heads} pushed, {self.asked} asked to rebase (the others came while paused); "
            f"{len(self.superseded_by_older)} of those never checked, skipped as superseded by "
            f"an OLDER head; {self.rewinds} checks went back to an older head than one checked "
            f"before; the series ended checked on "
            + ("an OLDER head than the last one asked for" if self.ended_behind else "the last")
        )


def _race_config(env: CarryEnv) -> None:
    """The series has no runners of its own, so publishing starts no CI (the race's requester
    is the only one); the runner's config names the commands the requested jobs run."""
    env.write_config(trusted_authors=list(RACE_USERS))
    config = json.loads(env.config_path.read_text())
    checks = {name: {"run": ["true"], "timeout_s": 60} for name in RACE_CHECKS}
    runner = {"queue": f"hw.{RACE_KIND}", "workdir": str(env.root / "runner"), "checks": checks}
    config["runners"] = {RACE_KIND: runner}
    env.config_path.write_text(json.dumps(config, indent=2))


def _race_github(env: CarryEnv, root: Path) -> GitHubEmulator:
    """The GitHub emulator with the downstream repository (carry publishes there, and answers
    commands there); carry's processes get its token."""
    git(env.downstream, "init", "-q", "-b", "main")
    git(env.downstream, "add", "-A")
    git(env.downstream, "commit", "-q", "-m", "carry the series")
    gh = GitHubEmulator(root).start()
    # The race sends comments far faster than GitHub's content-creation limits allow (80 a
    # minute); it is about lost writes, not pacing: both sides get room for it.
    gh.set_content_limits(per_minute=RACE_WRITES, per_hour=RACE_WRITES)
    gh.create_repo(DOWN_OWNER, DOWN_NAME, from_path=env.downstream)
    gh.add_user(RACE_BOT, type="Bot")
    gh.add_token(RACE_TOKEN, RACE_BOT)
    gh.set_permission(DOWN_OWNER, DOWN_NAME, RACE_BOT, "write")
    env.extra_env.update(
        {
            "GITHUB_TOKEN": RACE_TOKEN,
            "GITHUB_BASE_URL": gh.base_url,
            "CARRY_BOT_LOGIN": RACE_BOT,
            "CARRY_CI_DEBOUNCE_S": "0",
            "CARRY_GITHUB_WRITES_PER_MINUTE": str(RACE_WRITES),
            "CARRY_GITHUB_WRITES_PER_HOUR": str(RACE_WRITES),
        }
    )
    return gh


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


def _send_tasks_to(broker: str) -> None:
    """Points carry's Celery app at another broker. Its producer pool keeps the connection it
    was made for, so it is dropped too (as Celery itself does after a fork)."""
    celery_app.conf.broker_url = broker
    celery_app.close()
    celery_app.amqp._producer_pool = None


def say(line: str) -> None:
    print(f"  {line}", file=sys.stderr, flush=True)


def run_override_race(root: Path, scale: Scale, seed: int) -> RaceFigures:
    """The override race on a deployment of its own under `root`: a private redis-server, the
    GitHub emulator, RACE_WORKERS carry workers and a runner; all stopped at the end."""
    server = RedisServer(root / "redis", aof=False).start()
    env = CarryEnv(root / "carry", server.url)
    env.carry_patches(race_patches())
    _race_config(env)
    gh: GitHubEmulator | None = None
    try:
        gh = _race_github(env, root / "gh")
        with ThreadPoolExecutor(RACE_WORKERS + 1) as pool:  # the processes start at once
            started = [pool.submit(env.start_worker, f"race-{n}") for n in range(RACE_WORKERS)]
            started.append(pool.submit(env.start_runner, RACE_KIND))
            for process in started:
                process.result()
        with _carry_in_this_process(env) as rt:
            race = OverrideRace(env, rt, gh, seed)
            try:
                return _race(race, scale)
            finally:
                race.close()
    finally:
        env.stop()
        if gh is not None:
            gh.stop()
        server.kill()


def _race(race: OverrideRace, scale: Scale) -> RaceFigures:
    # Upstream moves the carried lines down: the refreshed series differs from the
    # downstream branch, so the first check's publish opens carry's PR.
    first = race.env.upstream.commit("a header", {"mod.py": "# header\n" + BODY})
    race.ledger.heads.append(first)
    race.rebase_task(first)

    def opened() -> int | None:
        pr = race.state().pr
        return pr.number if pr else None

    race.pr = wait_for(opened, 60, "carry's PR")
    say(f"override race: carry's PR #{race.pr} is open; {scale.race_seconds:.0f} s of writers")
    writers: list[tuple[str, Callable[[random.Random], None]]] = [
        ("rebaser", race.rebaser),
        ("pauser", race.pauser),
        ("approver", race.approver),
        ("ci", race.tester),
    ]
    writers += [(f"pin {name}", race.pinner(name)) for name in race.names]
    threads = [race.guarded(name, work, n) for n, (name, work) in enumerate(writers)]
    race.writers = len(threads)
    began = time.monotonic()
    race.stop_at = began + scale.race_seconds
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=scale.race_seconds + 120)
    seconds = time.monotonic() - began
    try:  # the workers finish what was asked of them: approvals, replies, re-checks
        wait_for(race.quiet, scale.race_drain_s, "the queues to drain")
        drained = True
    except AssertionError:
        drained = False
    say(
        f"override race: writers stopped after {seconds:.1f} s, queues drained "
        f"{time.monotonic() - began - seconds:.1f} s later"
        if drained
        else f"override race: the queues did not drain in {scale.race_drain_s:.0f} s"
    )
    for kind in list(race.ledger.current):
        race.settle(kind, final=True)
    if race.ledger.last_ci is not None:
        race.settle_ci(race.ledger.last_ci)
    return _figures(race, seconds, drained)


def _figures(race: OverrideRace, seconds: float, drained: bool) -> RaceFigures:
    ledger, final = race.ledger, race.state()
    lost = Counter(family for family, _, _ in ledger.lost)
    detail = [f"{what} (found {found})" for _, what, found in ledger.lost]
    unapproved = [sha for sha in ledger.approvals if sha not in final.approvals]
    lost["approve"] += len(unapproved)
    detail += [f"/carry approve {sha[:12]} (not in the state's approvals)" for sha in unapproved]
    detail += [f"CI row {row}" for row in ledger.ci_lost]
    history = store.history(race.client, SERIES, limit=HISTORY_LIMIT)
    order = {head: n for n, head in enumerate(ledger.heads)}
    rebased = {e["data"].get("head") for e in history if e["kind"] == "rebased"}
    # A head the planner asked to rebase, skipped as superseded by an OLDER one, never checked.
    older = {
        e["data"]["head"]: e["data"]["newest"]
        for e in history
        if e["kind"] == "superseded"
        and order.get(e["data"].get("newest"), -1) < order.get(e["data"].get("head"), -1)
    }
    skipped = [
        f"{head[:12]} (carry:wanted was {older[head][:12]}, pushed before it)"
        for head in ledger.asked
        if head in older and head not in rebased
    ]
    # A check of a head older than one checked before it moves the series back in time.
    newest, rewinds = -1, 0
    for entry in reversed(history):
        if entry["kind"] == "rebased" and entry["data"].get("head") in order:
            at = order[entry["data"]["head"]]
            rewinds += at < newest
            newest = max(newest, at)
    last_asked = max((order[h] for h in ledger.asked), default=-1)
    behind = order.get(final.checked_head or "", -1) < last_asked
    return RaceFigures(
        seconds=seconds,
        overrides_sent=ledger.sent,
        overrides_lost=lost,
        ci_rows_sent=ledger.ci_rows_sent,
        ci_rows_lost=len(ledger.ci_lost),
        replies_due=ledger.replies_due,
        replies_sent=race.replies(),
        ci_runs=ledger.ci_runs,
        heads=len(ledger.heads) - 1,
        asked=len(ledger.asked),
        rebased=len(rebased & set(ledger.heads[1:])),
        superseded_by_older=skipped,
        rewinds=rewinds,
        ended_behind=behind,
        drained=drained,
        errors=ledger.errors,
        lost_detail=detail,
        writers=race.writers,
    )


HISTORY_LIMIT = 20_000


def scenario_override_race(root: Path, scale: Scale, seed: int) -> Row:
    figures = run_override_race(root, scale, seed)
    print(figures.table(), flush=True)
    sent, lost = figures.overrides_total
    due, replied = sum(figures.replies_due.values()), sum(figures.replies_sent.values())
    commands = ", ".join(f"{n} {verb}" for verb, n in sorted(figures.replies_due.items()))
    runs = ", ".join(f"{n} {state}" for state, n in sorted(figures.ci_runs.items()))
    problems = [*figures.errors] + ([] if figures.drained else ["the queues did not drain"])
    shown = "; ".join(figures.lost_detail[:3] + problems[:3])
    older = figures.superseded_by_older
    return Row(
        "overrides, CI rows and replies racing rebases on one series",
        f"{figures.seconds:.0f} s of {figures.writers} writer threads on one series: "
        f"{figures.heads} upstream heads (the planner, then the carry.rebase task function), "
        f"{due} maintainer commands ({commands}) through the planner and the dispatcher, "
        f"{sum(figures.ci_runs.values())} CI requests ({runs}) run by a runner process; "
        f"{RACE_WORKERS} carry workers ran the re-checks pins ask for, approvals, replies, "
        "publishes and CI reports (GitHub emulator)",
        f"overrides: {sent} sent / {sent - lost} present / {lost} lost; CI rows: "
        f"{figures.ci_rows_sent} sent / {figures.ci_rows_sent - figures.ci_rows_lost} present / "
        f"{figures.ci_rows_lost} lost; replies: {due} due / {replied} sent / "
        f"{figures.replies_lost} lost" + (f" ({shown})" if shown else ""),
        f"{figures.replies_extra} replies sent twice",
        "nothing to recover: each writer changes only its own fields, through update_series "
        f"(WATCH, re-run on a conflict); {figures.rebase_line()}"
        + (f" (e.g. {older[0]})" if older else ""),
        ok=not any(figures.lost.values())
        and not figures.replies_extra
        and not figures.heads_lost
        and figures.drained
        and not figures.errors,
    )


# =========================================================================== hostile check


HOSTILE_KIND, HOSTILE_CHECK = "gaudi", "hostile"
# The check's code needs only the standard library: the host's own Python runs it, which a
# step user can (this host's runner Python may sit under root's 0700 home).
HOSTILE_PYTHON = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
RUNNER_SITE = Path(sysconfig.get_paths()["purelib"])  # the runner's: it runs this interpreter
HOSTILE_TOKEN = "ghp_hostile" + "7" * 29  # in the runner host's environment, as a careless host has

# What the hostile check's code tries; it prints one "|"-separated line per attempt:
#   attempt | achieved or blocked | what happened
# and fails (exit 1) when any attempt was achieved. tests/integration/test_hardware_ci.py runs
# it too.
RUNNER_PYTHON_ATTEMPT = "plant code in the runner's own Python (a .pth in its site-packages)"
RUNNER_PTH = "carry_hostile_runner.pth"
UNDO_ATTEMPT = "undo the read-only view of the runner's Python (remount it, or unmount it)"
MKNOD_ATTEMPT = "make a device node for the host's disk (root's power over the host)"
SYSCTL_ATTEMPT = "change a kernel setting of the host's (core_pattern, written back as it was)"
DISK_ATTEMPT = "read the host's disks (a block device in /dev)"
SOCKET_ATTEMPT = "reach a host daemon through its unix socket (in /run or /tmp)"
HOST_FILE_ATTEMPT = "write a host file for root to run later (a file in /etc)"
POISON_ATTEMPT = "plant objects in the shared clone for the next job (a replace ref)"
POISON = b"poisoned by an earlier job\n"
# What a job leaves for the next job's git, clean-up and steps (issue 33): each is judged after
# the next job, by what ran or changed, not by whether the step's write went through.
COMMONDIR_ATTEMPT = "point the runner's git at a repository of the check's (a commondir)"
GIT_SWAP_ATTEMPT = "swap the clone's .git for a repository of the check's (renaming the runner's)"
GIT_LINK_ATTEMPT = "make .git a link, for the next job's clean-up to delete or write through"
LINGER_ATTEMPT = "leave a process running after the job (a double-forked setsid daemon)"
SHARED_TMP_ATTEMPT = "leave a file in /tmp for the next job (or on the host)"
BROKER_NET_ATTEMPT = "reach the broker over the network with network: true"
HOSTILE_NET_CHECK = "hostile-net"
# A check with network: true: it tries the runner's Redis on loopback and on each of the host's
# own addresses (where the scenario's Redis listens too), and says what way out it has.
HOSTILE_NET_SCRIPT = (
    f"BROKER_NET_ATTEMPT = {BROKER_NET_ATTEMPT!r}\n"
    + r"""
import os, socket
port = int(os.environ["BROKER_PORT"])
reached, refused = [], []
for host in ["127.0.0.1", *os.environ["HOST_ADDRS"].split()]:
    try:
        with socket.create_connection((host, port), timeout=3) as sock:
            sock.sendall(b"PING\r\n")
            reached.append(f"{host}: {sock.recv(32)!r}")
    except OSError as err:
        refused.append(f"{host}: {err.strerror or err}")
with open("/proc/net/route") as table:
    routes = [line.split() for line in table.read().splitlines()[1:]]
ways_out = sorted({r[0] for r in routes if r[1] == "00000000" and r[0] != "*"})
way = f"default route via {', '.join(ways_out)}" if ways_out else "no default route"
how = f"reached {'; '.join(reached)}" if reached else f"refused ({'; '.join(refused)})"
print(f"{BROKER_NET_ATTEMPT}|{'achieved' if reached else 'blocked'}|{how}; egress: {way}",
      flush=True)
print("hostile net check done", flush=True)
"""
)
HOSTILE_SCRIPT = (
    f"""
RUNNER_PYTHON_ATTEMPT, RUNNER_PTH = {RUNNER_PYTHON_ATTEMPT!r}, {RUNNER_PTH!r}
SHARED_TMP_ATTEMPT = {SHARED_TMP_ATTEMPT!r}
UNDO_ATTEMPT, MKNOD_ATTEMPT, SYSCTL_ATTEMPT = {UNDO_ATTEMPT!r}, {MKNOD_ATTEMPT!r}, {SYSCTL_ATTEMPT!r}
DISK_ATTEMPT, SOCKET_ATTEMPT = {DISK_ATTEMPT!r}, {SOCKET_ATTEMPT!r}
HOST_FILE_ATTEMPT, POISON_ATTEMPT = {HOST_FILE_ATTEMPT!r}, {POISON_ATTEMPT!r}
POISON = {POISON!r}
"""
    + r"""
import json, os, socket, sys, urllib.parse
port = int(os.environ["BROKER_PORT"])
marks = os.environ["MARKS"]
# What to look for, reversed in a file of the test's: in no environment, in no command line.
with open(os.path.join(marks, "needles.json")) as needles:
    secrets = {name: value[::-1].encode() for name, value in json.load(needles).items()}

ACHIEVED = []

def say(attempt, achieved, how):
    if achieved:
        ACHIEVED.append(attempt)
    print(f"{attempt}|{'achieved' if achieved else 'blocked'}|{how}", flush=True)

def proc_files(part):
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():
            try:
                yield pid, open(f"/proc/{pid}/{part}", "rb").read()
            except OSError:
                pass

own = "\0".join(f"{k}={v}" for k, v in os.environ.items()).encode()
say("find the broker's password in the step's environment", secrets["password"] in own,
    f"{len(os.environ)} variables, none of carry's")
say("find a GitHub token in the step's environment", secrets["token"] in own,
    "not passed on")
others = list(proc_files("environ"))
leaks = [pid for pid, data in others if any(v in data for v in secrets.values())]
say("read the runner's environment in /proc", bool(leaks),
    f"the secrets are in the environment of pids {leaks}" if leaks
    else f"{len(others)} other process(es) visible, none holds a secret")
# The broker's URL as the code under test would find it: in another process's environment,
# the one that holds the secrets first (other processes of the host may name other Redises).
found = [
    entry[len(b"REDIS_URL="):].decode(errors="replace")
    for _, data in sorted(others, key=lambda found: found[0] not in leaks)
    for entry in data.split(b"\0") if entry.startswith(b"REDIS_URL=")
]
user, password = (urllib.parse.urlsplit(found[0]).username, urllib.parse.urlsplit(found[0]).password) if found else (None, None)
runner = [
    pid for pid, data in proc_files("cmdline") if b"bot.cli\0runner" in data or b"runner.cli" in data
]
signalled = []
for pid in runner:
    try:
        os.kill(int(pid), 0)
        signalled.append(pid)
    except OSError:
        pass
say("see or signal the runner process", bool(runner or signalled),
    "not in the step's PID namespace" if not runner else f"pids {runner}, signalled {signalled}")

def broker(command):
    with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
        sock.sendall(command)
        return sock.recv(256)

auth = f"AUTH {user or 'default'} {password}\r\n".encode() if password else b""
for attempt, command in (
    ("connect to the broker", b"PING\r\n"),
    ("write an approval into carry's store", auth + b"SADD carry:hostile:approvals deadbeef\r\n"),
    ("queue a task for carry's workers", auth + b"LPUSH carry hostile-task\r\n"),
):
    try:
        reply = broker(command)
    except OSError as err:
        say(attempt, False, f"{err.strerror or err}: no route out of the step's network namespace")
        continue
    wrote = attempt == "connect to the broker" or b"-" not in reply
    used = password and command.startswith(b"AUTH")
    say(attempt, wrote, f"the broker answered {reply[:40]!r}"
        + (" (with the password from the runner's environment)" if used else ""))

# Code for the next job's Python (or the runner's) to run: a .pth in HOME's user site.
site_dir = os.path.join(os.environ.get("HOME", "/nonexistent"), ".local", "lib", "python3.11",
                        "site-packages")
left = os.path.join(site_dir, "carry_hostile.pth")
say("find what an earlier job left in HOME", os.path.exists(left),
    f"found {left}" if os.path.exists(left) else "HOME is the job's own, made anew")
try:
    os.makedirs(site_dir, exist_ok=True)
    with open(left, "w") as out:
        out.write(f"import os; open(os.path.join({marks!r}, 'pth-ran'), 'w')\n")
except OSError as err:
    print(f"could not plant {left}: {err}", flush=True)

# Code for the runner's own Python: a .pth in its site-packages runs in every later
# process of that interpreter, the next job's steps and the runner itself (with its broker
# credentials) included.
runner_pth = os.path.join(os.environ["RUNNER_SITE"], RUNNER_PTH)

def plant_in_runner_python():
    try:
        with open(runner_pth, "w") as out:
            out.write(f"import os; open(os.path.join({marks!r}, 'runner-pth-ran'), 'w')\n")
        return None
    except OSError as err:
        return err.strerror or str(err)

refused = plant_in_runner_python()
say(RUNNER_PYTHON_ATTEMPT, refused is None, f"wrote {runner_pth}" if refused is None
    else f"{refused}: the runner's Python is read-only to steps")

# Root in the step's mount namespace could take the read-only view away again. Only tried
# where the step has a mount namespace of its own (its PID 1 is the sandbox's): on a bare
# host these calls would change the host's own mounts.
import ctypes
libc = ctypes.CDLL(None, use_errno=True)

def mount_point(path):
    points = []
    for line in open("/proc/self/mountinfo"):
        fields = line.split()
        point = fields[4].encode().decode("unicode_escape")
        if path == point or path.startswith(point.rstrip("/") + "/"):
            points.append((len(point), point, "ro" in fields[5].split(",")))
    return max(points)[1:]

def undo_read_only():
    if refused is None:
        return True, "nothing to undo: the runner's Python was writable"
    init = open("/proc/1/cmdline", "rb").read()
    if b"sandbox_init" not in init and b"bwrap" not in init:
        return False, "no mount namespace of its own: left the host's mounts alone"
    point, read_only = mount_point(os.path.realpath(os.environ["RUNNER_SITE"]))
    tried = []
    for how, call in (
        ("remount", lambda: libc.mount(point.encode(), point.encode(), None, 0x20 | 0x1000, None)),
        ("unmount", lambda: libc.umount2(point.encode(), 2)),
    ):
        if call() == 0 and plant_in_runner_python() is None:
            return True, f"{how}ed {point} and wrote {runner_pth}"
        tried.append(f"{how} {point}: {os.strerror(ctypes.get_errno()) or 'done, still read-only'}")
    return False, "; ".join(tried)

say(UNDO_ATTEMPT, *undo_read_only())
node = os.path.abspath("carry-hostile-disk")
import stat
try:
    os.mknod(node, 0o600 | stat.S_IFBLK, os.makedev(8, 0))
    os.unlink(node)
    say(MKNOD_ATTEMPT, True, "made a block device node for 8:0 (the first disk) in its tree")
except OSError as err:
    say(MKNOD_ATTEMPT, False, f"{err.strerror or err}: the step holds no root power over the host")
# A host's core_pattern runs a program as root on every crash: whoever may write it owns the
# host. Written back unchanged, so that a run where it is allowed changes nothing.
try:
    with open("/proc/sys/kernel/core_pattern", "rb") as setting:
        pattern = setting.read()
    with open("/proc/sys/kernel/core_pattern", "wb") as setting:
        setting.write(pattern)
    say(SYSCTL_ATTEMPT, True, "wrote /proc/sys/kernel/core_pattern")
except OSError as err:
    say(SYSCTL_ATTEMPT, False, f"{err.strerror or err}: /proc/sys/kernel/core_pattern")
# Every file of the host, secrets included, is on its disks.
disks = sorted(
    entry.path for entry in os.scandir("/dev")
    if stat.S_ISBLK(os.stat(entry.path, follow_symlinks=False).st_mode)
)
opened, refusals = None, []
for disk in disks:
    try:
        os.close(os.open(disk, os.O_RDONLY))
        opened = disk
        break
    except OSError as err:
        refusals.append(f"{disk}: {err.strerror}")
say(DISK_ATTEMPT, opened is not None, f"opened {opened} for reading" if opened
    else "; ".join(refusals[:3]) or "no block device in the step's /dev")

# A network namespace keeps no one from a unix socket in the file system: Docker's, systemd's
# or a database's would let the step act outside the sandbox (the scenario runs a stand-in
# daemon's socket under /tmp; each connection is closed at once). The search is the check's
# own, not sandbox_init's: a check that used the code it tests could not see that code miss one.
def unix_sockets(directory, depth):
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        try:
            mode = os.stat(entry.path, follow_symlinks=False).st_mode
        except OSError:
            continue
        if stat.S_ISSOCK(mode):
            yield entry.path
        elif depth > 1 and stat.S_ISDIR(mode):
            yield from unix_sockets(entry.path, depth - 1)

found = [path for top, depth in (("/run", 4), ("/tmp", 2)) for path in unix_sockets(top, depth)]
reached = None
for path in found:
    with socket.socket(socket.AF_UNIX) as client:
        client.settimeout(2)
        try:
            client.connect(path)
            reached = path
            break
        except OSError:
            pass
say(SOCKET_ATTEMPT, reached is not None, f"connected to {reached}" if reached
    else f"{len(found)} socket(s) found, none answered" if found
    else "no socket of the host's to be seen in /run or /tmp")

# /etc/cron.d, a profile script, a unit file: whatever the host's root runs later. The file is
# removed at once (and says nothing), so a run where this works leaves the host as it was.
planted = f"/etc/carry-hostile-{os.getpid()}"
try:
    with open(planted, "x"):
        pass
    os.unlink(planted)
    say(HOST_FILE_ATTEMPT, True, f"created {planted} (and removed it)")
except OSError as err:
    say(HOST_FILE_ATTEMPT, False, f"{err.strerror or err}: {planted}")

# The clone is the runner's, kept between jobs: a replace ref that swaps a file of the tree
# the next job builds (and verifies by its id), then hooks and config for the next job's git
# (last: the check's own git would run them).
import subprocess
def git(*args, stdin=None):
    done = subprocess.run(["git", *args], input=stdin, capture_output=True)
    return done.stdout.decode().strip(), done.returncode, done.stderr.decode().strip()

# A replace ref for the tree the job built: the next job's git would read the check's
# tree in its place, while the tree's id (what the runner verifies) stays the same.
target = git("ls-files")[0].splitlines()[0]
blob, failed, said = git("hash-object", "-w", "--stdin", stdin=POISON)
if not failed:
    listing = git("ls-tree", "HEAD")[0].replace(git("rev-parse", f"HEAD:{target}")[0], blob)
    evil, failed, said = git("mktree", stdin=(listing + "\n").encode())
if not failed:
    _, failed, said = git("replace", "-f", git("rev-parse", "HEAD^{tree}")[0], evil)
say(POISON_ATTEMPT, not failed, f"planted a replace ref: the tree's {target} is the check's"
    if not failed else f"{(said or 'refused').splitlines()[0]}: the clone's .git is read-only to steps")
hooks = os.path.join(".git", "hooks")
try:
    os.makedirs(hooks, exist_ok=True)
    for hook in ("post-checkout", "post-merge", "pre-commit"):
        path = os.path.join(hooks, hook)
        with open(path, "w") as out:
            out.write(f"#!/bin/sh\ntouch {marks}/hook-ran-{hook}\n")
        os.chmod(path, 0o755)
    os.system(f"git config core.hooksPath {hooks} && git config core.fsmonitor 'touch {marks}/fsmonitor-ran'")
    print("planted hooks for the next job", flush=True)
except OSError as err:
    print(f"could not plant hooks: {err.strerror or err}", flush=True)

# A daemon that outlives the job: double-forked, in a session of its own, its output closed.
# The scenario looks for it (by the job's id in its environment) once the job is over.
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        import time
        time.sleep(120)
        os._exit(0)
    os._exit(0)
os.wait()
print("left a daemon behind", flush=True)

# /tmp: what an earlier job left there, and a file for the next one.
left_in_tmp = os.path.join("/tmp", os.environ.get("TMP_NAME", f"carry-hostile-left-{port}"))
say(SHARED_TMP_ATTEMPT, os.path.exists(left_in_tmp),
    f"found {left_in_tmp}" if os.path.exists(left_in_tmp) else "/tmp is the job's own, made anew")
try:
    with open(left_in_tmp, "w") as out:
        out.write("left by an earlier job\n")
except OSError as err:
    print(f"could not leave {left_in_tmp}: {err}", flush=True)

# The runner's git directory, where the tree's .git names it (or is it), gets a commondir: a
# repository of the check's whose config runs a command (core.fsmonitor) in carry's next git.
# Then .git itself: renamed away and replaced, and a link to a directory of the host's that
# the next job's clean-up would delete in and write to.
def git_directory():
    if os.path.isfile(".git"):
        return open(".git").read().split("gitdir:", 1)[-1].strip()
    return os.path.abspath(".git")
# Where the scenario made no repositories (tests/integration/test_hardware_ci.py), the paths
# name none: a link that points nowhere is still one the clean-up must not follow.
NOWHERE = "/nonexistent/carry-hostile"
try:
    with open(os.path.join(git_directory(), "commondir"), "w") as out:
        out.write(os.environ.get("COMMON", NOWHERE) + "\n")
    print("wrote a commondir in the runner's git directory", flush=True)
except OSError as err:
    print(f"could not write a commondir: {err.strerror or err}", flush=True)
try:
    os.rename(".git", ".git-moved")
    print(f"renamed .git ({'a directory' if os.path.isdir('.git-moved') else 'a file'})", flush=True)
    os.symlink(os.environ.get("VICTIM", NOWHERE), ".git")
    print("made .git a link to a directory of the host's", flush=True)
except OSError as err:
    print(f"could not replace .git: {err.strerror or err}", flush=True)

print("hostile check done", flush=True)
sys.exit(1 if ACHIEVED else 0)  # a check that got anywhere fails
"""
)


@dataclass(frozen=True)
class Attempt:
    attempt: str
    achieved: bool
    how: str


def render_attempts(attempts: list[Attempt]) -> str:
    lines = ["| attempt by the check's code | result | how |", "|---|---|---|"]
    for a in attempts:
        lines.append(f"| {a.attempt} | {'ACHIEVED' if a.achieved else 'blocked'} | {a.how} |")
    return "\n".join(lines)


class RefusedAtStart(Exception):
    """The runner refused to start with the scenario's config: the one-line reason."""


def run_hostile_check(
    root: Path, *, sandbox: str | dict[str, str] = "auto", step_user: str = "auto"
) -> list[Attempt]:
    """A runner process (as `carry runner` starts it, sandbox: auto) runs a check whose code
    tries everything check code could want with carry: the broker's password and a GitHub token
    (in the step's environment, in the runner's in /proc), the runner process, the broker
    itself (a write, a queued task), hooks for the next job, a .pth in HOME for the next job's
    Python or the runner's, a .pth in the runner's own Python (and undoing its read-only
    view), a device node, a kernel setting, the host's disks, a host daemon's unix socket, a
    file in /etc; then a job nobody issued is put
    in the runner's queue. One row per attempt, from the check's own output and the marks.
    `sandbox` and `step_user` are the runner's settings (none and runner show what the
    sandbox and the step user keep out)."""
    password = secrets.token_hex(12)
    port = free_port()
    (root / "redis").mkdir(parents=True)
    server = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            # where a step with the host's network would find it too ("-": an address that
            # went away since, a test's veth pair, is skipped)
            *(f"-{address}" for address in host_addresses()),
            "--save",
            "",
            "--dir",
            str(root / "redis"),
            "--requirepass",
            password,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://:{password}@127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url, socket_connect_timeout=0.5)
    wait_for(lambda: _pings(client), 20, "redis-server")
    # The check's script, the marks it reads and the runner's workdir live outside /tmp (bwrap
    # gives the step a private one), where a step user may enter.
    outside_tmp = Path(tempfile.mkdtemp(prefix="carry-hostile-", dir="/var/tmp"))
    outside_tmp.chmod(0o711)
    marks = outside_tmp / "marks"
    marks.mkdir()
    script = outside_tmp / "hostile.py"
    script.write_text(HOSTILE_SCRIPT)
    # The runner's broker user, as the README sets it up: its own keys, its queue, nothing else.
    runner_password = secrets.token_hex(12)
    channel.set_runner_user(client, HOSTILE_KIND, f"hw.{HOSTILE_KIND}", runner_password)
    user = channel.runner_user(HOSTILE_KIND)
    runner_url = f"redis://{user}:{runner_password}@127.0.0.1:{port}/0"
    env = CarryEnv(root / "carry", url)
    env.carry_patches([FIX])
    victim, common = _planted_repositories(outside_tmp, marks)
    check = StepSpec(
        HOSTILE_CHECK,
        (HOSTILE_PYTHON, "-I", str(script)),
        120,
        {
            "BROKER_PORT": str(port),
            "MARKS": str(marks),
            "RUNNER_SITE": str(RUNNER_SITE),
            "VICTIM": str(victim),
            "COMMON": str(common),
            "TMP_NAME": f"carry-hostile-left-{secrets.token_hex(6)}",
        },
    )
    # What the runner holds: its broker password and (here, to show it is not passed on) a token.
    needles = {"password": runner_password[::-1], "token": HOSTILE_TOKEN[::-1]}
    (marks / "needles.json").write_text(json.dumps(needles))
    net_script = outside_tmp / "hostile_net.py"
    net_script.write_text(HOSTILE_NET_SCRIPT)
    net_check = StepSpec(
        HOSTILE_NET_CHECK,
        (HOSTILE_PYTHON, "-I", str(net_script)),
        60,
        {"BROKER_PORT": str(port), "HOST_ADDRS": " ".join(host_addresses())},
    )
    _hostile_config(env, [check, net_check], sandbox, step_user, outside_tmp / "runner")
    env.extra_env["GITHUB_TOKEN"] = HOSTILE_TOKEN
    runner_home = root / "runner-home"  # where the runner's own Python would find a .pth
    runner_home.mkdir()
    env.extra_env["HOME"] = str(runner_home)
    daemon = _stand_in_daemon()
    try:
        env.extra_env["REDIS_URL"] = runner_url
        try:
            env.start_runner(HOSTILE_KIND)
        except AssertionError as err:  # it exited before it was ready: its log says why
            raise RefusedAtStart(_refusal(str(err))) from None
        del env.extra_env["REDIS_URL"]
        with _carry_in_this_process(env) as rt:
            applier = ReportApplier(rt.redis, celery_app, [HOSTILE_KIND], block_ms=200).start()
            try:
                return _hostile_attempts(env, rt, [check, net_check], marks, runner_home)
            finally:
                applier.stop()
    finally:
        (RUNNER_SITE / RUNNER_PTH).unlink(missing_ok=True)  # if a check got that far
        env.stop()
        server.kill()
        server.wait()
        shutil.rmtree(Path(daemon.getsockname()).parent, ignore_errors=True)
        daemon.close()
        shutil.rmtree(outside_tmp, ignore_errors=True)


def _planted_repositories(where: Path, marks: Path) -> tuple[Path, Path]:
    """Two git directories of the host's that a check points carry's git at: `victim` (where
    it makes .git a link) and `common` (its commondir). Each config runs a command that leaves
    a mark in `marks` if carry's git ever reads it (core.fsmonitor, and a hook)."""
    made = []
    for name in ("victim", "common"):
        repo = where / f"{name}.git"
        subprocess.run(["git", "init", "-q", "--bare", str(repo)], check=True)
        (repo / "config").write_text(
            "[core]\n\trepositoryformatversion = 0\n\tbare = false\n"
            f"\tfsmonitor = touch {marks}/{name}-fsmonitor-ran\n\thooksPath = {repo}/hooks\n"
        )
        for hook in ("post-checkout", "reference-transaction"):
            (repo / "hooks" / hook).write_text(f"#!/bin/sh\ntouch {marks}/{name}-{hook}-ran\n")
            (repo / "hooks" / hook).chmod(0o755)
        (repo / "index.lock").write_text("the host's\n")
        made.append(repo)
    # The victim shares the common one's config, as a linked work tree's git directory does:
    # a clean-up that deletes the victim's own config still leaves git reading that one.
    (made[0] / "commondir").write_text(f"{made[1]}\n")
    return made[0], made[1]


def _snapshot(directory: Path) -> dict[str, bytes]:
    """Every file below `directory` (links not followed) and its bytes."""
    return {
        str(path.relative_to(directory)): path.read_bytes()
        for path in sorted(directory.rglob("*"))
        if path.is_file() and not path.is_symlink()
    }


def _lingering(run_id: str) -> list[int]:
    """Live processes whose environment names the run: what a job left running."""
    needle = f"CARRY_RUN_ID={run_id}".encode()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            environ = Path(entry.path, "environ").read_bytes()
            state = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if needle in environ.split(b"\0") and state not in ("Z", "X"):
            found.append(int(entry.name))
    return found


def _stand_in_daemon() -> socket.socket:
    """A listening unix socket where host daemons keep theirs (two levels under /tmp), as
    Docker's or a database's would be on a runner host."""
    directory = tempfile.mkdtemp(prefix="carry-hostile-daemon-", dir="/tmp")
    daemon = socket.socket(socket.AF_UNIX)
    daemon.bind(os.path.join(directory, "daemon.sock"))
    daemon.listen()
    return daemon


def _refusal(log: str) -> str:
    """The runner's one-line reason for refusing to start, from its log."""
    lines = [line.strip() for line in log.splitlines() if "refused" in line or "sandbox" in line]
    return lines[-1] if lines else (log.strip().splitlines() or ["no output"])[-1]


def _hostile_config(
    env: CarryEnv,
    checks: list[StepSpec],
    sandbox: str | dict[str, str],
    step_user: str,
    workdir: Path,
) -> None:
    env.write_config()
    config = json.loads(env.config_path.read_text())
    commands = {
        check.name: {
            "run": list(check.run),
            "timeout_s": int(check.timeout_s),
            "env": dict(check.env),
            **({"network": True} if check.name == HOSTILE_NET_CHECK else {}),
        }
        for check in checks
    }
    config["runners"] = {
        HOSTILE_KIND: {
            "queue": f"hw.{HOSTILE_KIND}",
            "workdir": str(workdir),
            "checks": commands,
            "sandbox": sandbox,
            "step_user": step_user,
        }
    }
    env.config_path.write_text(json.dumps(config, indent=2))


def _hostile_attempts(
    env: CarryEnv, rt: Runtime, checks: list[StepSpec], marks: Path, runner_home: Path
) -> list[Attempt]:
    check = checks[0]
    target = ci.CiTarget(
        HOSTILE_KIND,
        f"hw.{HOSTILE_KIND}",
        checks=tuple(checks),
        retry=RetryPolicy(max_attempts=1),
    )
    tree = _hostile_tree(env)
    victim, common = Path(check.env["VICTIM"]), Path(check.env["COMMON"])
    before = _snapshot(victim)
    first = _hostile_run(rt, target, tree, force=False)
    first_lines = _hostile_lines(rt, first)
    later = (*NEXT_JOB_ATTEMPTS, BROKER_NET_ATTEMPT)
    attempts = [a for a in first_lines if a.attempt not in later]
    time.sleep(1)  # a daemon the job left has long forked by now
    left = _lingering(first)
    for pid in left:  # the scenario's own clean-up: the next job must not meet it
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    second = _hostile_run(rt, target, tree, force=True)  # the next job, in the same clone
    ran = sorted(p.name for p in marks.iterdir() if p.name.startswith(("hook-ran", "fsmonitor")))
    attempts.append(
        Attempt(
            "leave git hooks and config that run in the next job",
            bool(ran),
            f"ran: {', '.join(ran)}"
            if ran
            else "the next job's clone got a fresh config, no hooks",
        )
    )
    next_job = _hostile_lines(rt, second)
    attempts.append(_home_attempt(next_job, runner_home))
    attempts.append(_forged_job(rt, marks, first))
    attempts.append(_blob_bomb(env.root / "blob-bomb"))
    attempts += _next_job_attempts(next_job, marks, victim, common, before, left)
    tmp_left = Path("/tmp", check.env["TMP_NAME"])
    if tmp_left.exists():
        tmp_left.unlink()
        attempts[-1] = Attempt(
            SHARED_TMP_ATTEMPT, True, f"{attempts[-1].how}; {tmp_left} was left on the host"
        )
    return attempts + [a for a in first_lines if a.attempt == BROKER_NET_ATTEMPT]


BLOB_BOMB_ATTEMPT = "make carry read a 40 MB file that its head packs in kilobytes (blob bomb)"


def _blob_bomb(root: Path) -> Attempt:
    """An upstream head (checked approved or not) turns a file the series edits into 40 MB of
    repeated lines (issue 33; bench/blob_bomb.py measures the cost): carry must not read it."""
    from bench.blob_bomb import build

    up = build(root, 40)
    patches = [PatchInput(str(p), p.read_bytes()) for p in up.patches]
    started = time.perf_counter()
    status = run_engine(Mirror(str(up.path), root / "cache"), up.head, patches)
    elapsed = time.perf_counter() - started
    return Attempt(
        BLOB_BOMB_ATTEMPT,
        status != "invalid" or elapsed > 5,
        f"the patch on it is {status} in {elapsed:.2f} s (a {up.pack_bytes // 1024} KiB pack; "
        "CARRY_MAX_BLOB_BYTES sized the file from its header and nothing read it)",
    )


HOME_ATTEMPT = "find what an earlier job left in HOME"
NEXT_JOB_ATTEMPTS = (HOME_ATTEMPT, SHARED_TMP_ATTEMPT)


def _next_job_attempts(
    next_job: list[Attempt],
    marks: Path,
    victim: Path,
    common: Path,
    before: dict[str, bytes],
    left: list[int],
) -> list[Attempt]:
    """The rows that only the next job (and what ran or changed on the host) can tell."""
    ran = {
        name: sorted(p.name for p in marks.iterdir() if p.name.startswith(name))
        for name in ("victim", "common")
    }
    ran["either"] = ran["victim"] + ran["common"]
    after = _snapshot(victim)
    changed = sorted(name for name in {*before, *after} if before.get(name) != after.get(name))
    (found_tmp,) = [a for a in next_job if a.attempt == SHARED_TMP_ATTEMPT]
    return [
        Attempt(
            COMMONDIR_ATTEMPT,
            bool(ran["common"]),
            f"the next job's git ran: {', '.join(ran['common'])}"
            if ran["common"]
            else f"nothing of {common.name} ran in the next job's git",
        ),
        Attempt(
            GIT_SWAP_ATTEMPT,
            bool(ran["either"]),
            f"the next job's git ran: {', '.join(ran['either'])}"
            if ran["either"]
            else f"nothing of {victim.name} or {common.name} ran in the next job's git",
        ),
        Attempt(
            GIT_LINK_ATTEMPT,
            bool(changed),
            f"the next job changed {victim}: {', '.join(changed)}"
            if changed
            else f"the link was removed, not followed: {victim} is as it was",
        ),
        Attempt(
            LINGER_ATTEMPT,
            bool(left),
            f"pids {left} still ran after the job"
            if left
            else "the step's init (a subreaper) killed every process the step left",
        ),
        found_tmp,
    ]


def _hostile_lines(rt: Runtime, run_id: str) -> list[Attempt]:
    lines = [e["text"] for e in runners.runlog(rt.redis, run_id, limit=10_000)]
    if "hostile check done" not in lines or "hostile net check done" not in lines:
        raise AssertionError("the hostile check did not run to its end:\n" + "\n".join(lines))
    return _reported_attempts(lines)


def _home_attempt(second_job: list[Attempt], runner_home: Path) -> Attempt:
    """The first job planted a .pth in its HOME's user site: the second job's check says
    whether it found it there, and the runner's own HOME must have stayed as it was."""
    (found,) = [a for a in second_job if a.attempt == HOME_ATTEMPT]
    planted = sorted(str(p.relative_to(runner_home)) for p in runner_home.rglob("*"))
    how = found.how if found.achieved else "the next job's HOME was its own, made anew"
    return Attempt(
        "leave code in HOME (a user site .pth) for the next job or the runner",
        found.achieved or bool(planted),
        f"{how}; the runner's HOME holds {planted}" if planted else f"{how}; not the runner's",
    )


def _reported_attempts(lines: list[str]) -> list[Attempt]:
    found = []
    for line in lines:
        parts = line.strip().split("|", 2)
        if len(parts) == 3 and parts[1] in ("achieved", "blocked"):
            found.append(Attempt(parts[0], parts[1] == "achieved", parts[2]))
    return found


def _hostile_tree(env: CarryEnv) -> TreeSpec:
    head = git(env.upstream.path, "rev-parse", "main")
    scratch = RepoBuilder(env.root / "scratch")
    scratch.git("fetch", "-q", str(env.upstream.path), head)
    scratch.git("checkout", "-q", "--detach", "--force", head)
    patches = sorted((env.downstream / "patches" / SERIES).glob("*.patch"))
    scratch.git("am", "-q", "-3", "--keep-cr", *(str(p) for p in patches))
    git(env.downstream, "init", "-q", "-b", "main")
    git(env.downstream, "add", "-A")
    git(env.downstream, "commit", "-q", "--allow-empty", "-m", "carry the series")
    return TreeSpec(
        upstream_url=str(env.upstream.path),
        upstream_sha=head,
        downstream_url=str(env.downstream),
        downstream_ref="refs/heads/main",
        downstream_sha=git(env.downstream, "rev-parse", "HEAD"),
        patches_dir=f"patches/{SERIES}",
        series_digest="d" * 64,
        expected_tree=scratch.git("rev-parse", "HEAD^{tree}"),
    )


def _hostile_run(rt: Runtime, target: ci.CiTarget, tree: TreeSpec, *, force: bool) -> str:
    ci.record_push(rt.redis, SERIES, Push(ZERO_SHA, tree.upstream_sha, "alice", trusted=True))
    rows = ci.request_ci(
        rt.redis,
        celery_app,
        SERIES,
        [target],
        tree,
        force=force,
        debounce_s=0,
    )
    (row,) = {r.run_id: r for r in rows}.values()  # one run, a row per check

    def ended() -> bool:
        info = ci.run_info(rt.redis, row.run_id)
        return info is not None and info["state"] in FINAL_STATES

    wait_for(ended, 120, f"hostile run {row.run_id}")
    return row.run_id


def _forged_job(rt: Runtime, marks: Path, model_run: str) -> Attempt:
    """Whoever can write to the broker can queue any payload: a copy of a real job whose check
    runs another command."""
    info = ci.run_info(rt.redis, model_run)
    assert info is not None
    payload = copy.deepcopy(info["payload"])
    forged = f"forged-{uuid.uuid4().hex[:8]}"
    payload["run_id"] = forged
    payload["checks"][0]["run"] = ["sh", "-c", f"touch {marks}/forged-ran"]
    celery_app.send_task(ci_runs.TASK_NAME, args=[payload], queue=payload["queue"], task_id=forged)

    def refused() -> list[dict[str, Any]]:
        entries = store.history(rt.redis, SERIES, limit=200)
        return [e for e in entries if e["kind"] == "ci-refused" and e["data"]["run_id"] == forged]

    entry = wait_for(refused, 60, "the runner to refuse the forged job")
    ran = (marks / "forged-ran").exists()
    return Attempt(
        "have the runner run a job nobody issued (a forged run_job in its queue)",
        ran,
        "it ran" if ran else f"refused, ran nothing: {entry[0]['data']['reason']}",
    )


# What only namespaces keep from a step: a step user still sees other processes (not their
# environment), has the host's network (the broker, with no credential) and reaches a
# daemon's socket that is open to every user.
NEEDS_NAMESPACES = (
    "see or signal the runner process",
    "connect to the broker",
    SOCKET_ATTEMPT,
    SHARED_TMP_ATTEMPT,  # without a mount namespace the step writes the host's /tmp
    BROKER_NET_ATTEMPT,  # without a network namespace, network: true is the host's
)


def scenario_hostile_check(
    root: Path, _scale: Scale, sandbox: str = "auto", step_user: str = "auto"
) -> Row:
    """One mode: every attempt must be blocked, or (no sandbox, the risk accepted) every
    attempt but NEEDS_NAMESPACES."""
    name = "hostile check code on a runner"
    if (sandbox, step_user) != ("auto", "auto"):
        name += f" (sandbox: {sandbox}, step_user: {step_user})"
    if sandbox == "bwrap" and bwrap_unavailable() is not None:
        return Row(name, f"not run: {bwrap_unavailable()}", "-", "-", "-", ok=True)
    if step_user not in ("auto", "runner") and os.geteuid() != 0:
        return Row(name, "not run: a step user needs a runner started as root", "-", "-", "-")
    setting: str | dict[str, str] = sandbox
    if sandbox == "none":  # what it costs, where the runner's owner accepts the risk
        setting = {"mode": "none", "accept_risk": ACCEPTED_RISK}
    attempts = run_hostile_check(root, sandbox=setting, step_user=step_user)
    print(render_attempts(attempts), flush=True)
    return _hostile_row(name, attempts, NEEDS_NAMESPACES if sandbox == "none" else ())


def _hostile_row(name: str, attempts: list[Attempt], allowed: Sequence[str]) -> Row:
    achieved = [a.attempt for a in attempts if a.achieved]
    return Row(
        name,
        f"a check's code tried {len(attempts)} things against carry's control plane "
        "(secrets, the runner, the broker, the next job) and a forged job was queued",
        f"{len(achieved)} of {len(attempts)} achieved"
        + (f": {'; '.join(achieved)}" if achieved else ""),
        "-",
        "nothing to recover: the step ran with a clean environment, in its own namespaces or "
        "as its own user; the runner ran only its own config's commands",
        ok=set(achieved) <= set(allowed) and len(attempts) >= 9,
    )


# Every sandbox mode, as a runner's config would say it (issue 33): those that cannot keep a job
# from later jobs are refused at start.
HOSTILE_MODES: tuple[tuple[str, str], ...] = (
    ("auto", "auto"),
    ("namespaces", "auto"),
    ("bwrap", "auto"),
    ("none", "auto"),  # a root runner's steps as nobody: the step-user-only mode
    ("none", "runner"),
)


def scenario_hostile_check_every_mode(root: Path, scale: Scale) -> list[Row]:
    """The hostile check under each of HOSTILE_MODES, one table per mode: every row blocked,
    or the runner refused to start and the table says so."""
    rows = []
    for index, (mode, step_user) in enumerate(HOSTILE_MODES):
        title = f"sandbox: {mode}, step_user: {step_user}"
        print(f"\n### {title}\n", flush=True)
        name = f"hostile check code on a runner ({title})"
        if mode == "bwrap" and bwrap_unavailable() is not None:
            print(f"not run: {bwrap_unavailable()}", flush=True)
            rows.append(Row(name, f"not run: {bwrap_unavailable()}", "-", "-", "-"))
            continue
        where = root / f"mode-{index}"
        try:
            attempts = run_hostile_check(where, sandbox=mode, step_user=step_user)
        except RefusedAtStart as refused:
            print(render_refusal(str(refused)), flush=True)
            expected = mode == "none" or (mode == "namespaces" and namespaces_unavailable())
            rows.append(Row(name, f"refused at start: {refused}", "-", "-", "-", ok=bool(expected)))
            continue
        print(render_attempts(attempts), flush=True)
        rows.append(_hostile_row(name, attempts, ()))
    rows.append(broker_user_row(root / "broker"))
    return rows


def broker_user_row(root: Path) -> Row:
    """bench/runner_broker.py: what the runner's broker user writes decides nothing (every
    mode alike: the broker, not the step's sandbox, is what is attacked)."""
    from bench.runner_broker import run_broker_attempts  # the harness imports this module

    title = "the runner's broker user, its password stolen (every sandbox mode)"
    print(f"\n### {title}\n", flush=True)
    attempts = [Attempt(a.attempt, a.achieved, a.how) for a in run_broker_attempts(root)]
    print(render_attempts(attempts), flush=True)
    achieved = [a.attempt for a in attempts if a.achieved]
    return Row(
        f"hostile check code with {title}",
        f"it wrote run records, verdicts and reports {len(attempts)} ways",
        f"{len(achieved)} of {len(attempts)} achieved"
        + (f": {'; '.join(achieved)}" if achieved else ""),
        "-",
        "refused and recorded by the service (ci-report-refused), or waiting for /carry approve",
        ok=not achieved and len(attempts) == 5,
    )


def render_refusal(reason: str) -> str:
    return "\n".join(
        [
            "| attempt by the check's code | result | how |",
            "|---|---|---|",
            f"| every attempt | refused at start | the runner did not start: {reason} |",
        ]
    )


# =========================================================================== 10. intake abuse

ABUSE_RSS_BOUND_MIB = 50.0  # per attack: peak growth of the web process's resident memory
ABUSE_LOG_LINES_BOUND = 1.0  # per refused or aborted request
# uvicorn's timeout_keep_alive: it closes an answered connection that stays idle this long.
UVICORN_KEEP_ALIVE_S = 5.0
SLOW_DECLARED_BYTES = 2048
SLOW_FIRST_BYTES = b'{"ref": "refs/'
UNSIGNED_BODY_BYTES = 1024 * 1024
ABORT_DECLARED_BYTES = 4096
ABORT_SENT_BYTES = 1000
# Below the intake's 64 bodies read at once, so that most aborts meet the body read rather than
# the wait for one; a few still find the bound reached while the server notices earlier
# disconnects.
ABORT_CONCURRENCY = 32
# What the answer to a raw request was, besides an HTTP status.
NOT_CONNECTED, NO_ANSWER, CLOSED_UNANSWERED = -2, -1, 0
ANSWER_NAMES = {NOT_CONNECTED: "not connected", NO_ANSWER: "no answer", CLOSED_UNANSWERED: "closed"}
# Figures the issue quoted, measured on an older carry: printed beside this run's, never measured.
# The per-request figures in brackets are only those divided out.
OLDER_CARRY = {
    "slow": "5,000 slow bodies held open: +67 MiB (13.7 KiB per connection)",
    "unsigned": "200 unsigned 1 MiB bodies: +209 MiB (1.0 MiB per body)",
    "aborted": "15,110 aborted bodies: 74.6 MB of log (a ~5 KB ERROR traceback each)",
}
OLDER_CARRY_LABEL = "older carry, figures from the issue (not measured in this run)"


@dataclass(frozen=True)
class WebProcess:
    """The running `carry web` process as /proc and its log file show it."""

    pid: int
    log_path: Path

    def rss_mib(self) -> float:
        status = Path(f"/proc/{self.pid}/status").read_text()
        found = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
        if found is None:
            raise RuntimeError(f"no VmRSS in /proc/{self.pid}/status")
        return int(found.group(1)) / 1024

    def open_fds(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def log_bytes(self) -> int:
        return self.log_path.stat().st_size


class PeakSampler(threading.Thread):
    """Samples the web process's RSS and open descriptors every 50 ms, keeping the peaks."""

    def __init__(self, web: WebProcess) -> None:
        super().__init__(daemon=True)
        self.web = web
        self.rss_mib, self.fds = web.rss_mib(), web.open_fds()
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(0.05):
            self.sample()

    def sample(self) -> None:
        self.rss_mib = max(self.rss_mib, self.web.rss_mib())
        self.fds = max(self.fds, self.web.open_fds())

    def stop(self) -> None:
        self._done.set()
        self.join()
        self.sample()


@dataclass
class LogWritten:
    size: int
    lines: list[str]

    @property
    def tracebacks(self) -> int:
        return sum(1 for line in self.lines if _holds_traceback(line))

    def messages(self) -> Counter[str]:
        return Counter(_message(line)[:70] for line in self.lines)


def _parsed(line: str) -> dict[str, Any] | None:
    try:
        parsed = json.loads(line)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _holds_traceback(line: str) -> bool:
    parsed = _parsed(line)
    if parsed is not None and ("exc" in parsed or "stack" in parsed):
        return True
    return "Traceback (most recent call last)" in line


def _message(line: str) -> str:
    parsed = _parsed(line)
    return str(parsed.get("msg", line)) if parsed is not None else line


def log_since(path: Path, offset: int) -> LogWritten:
    with path.open("rb") as log:
        log.seek(offset)
        data = log.read()
    return LogWritten(len(data), data.decode(errors="replace").splitlines())


@dataclass
class Footprint:
    """What one attack cost the web process: memory, descriptors, log written."""

    rss_before: float
    rss_peak: float
    rss_after: float
    fds_before: int
    fds_peak: int
    fds_after: int
    log: LogWritten

    @property
    def peak_growth(self) -> float:
        return self.rss_peak - self.rss_before

    @property
    def after_growth(self) -> float:
        return self.rss_after - self.rss_before

    def lines_per(self, requests: int) -> float:
        return len(self.log.lines) / requests if requests else math.nan

    def kib_per(self, requests: int) -> float:
        return self.peak_growth * 1024 / requests if requests else math.nan

    def describe(self, requests: int) -> str:
        size_per = self.log.size / requests if requests else math.nan
        return (
            f"RSS {self.rss_before:.0f} MiB before, {self.peak_growth:+.1f} MiB peak "
            f"({self.kib_per(requests):.1f} KiB per request), {self.after_growth:+.1f} MiB "
            f"after; log +{len(self.log.lines)} lines, "
            f"{self.log.size} B ({self.lines_per(requests):.2f} lines and {size_per:.0f} B per "
            f"request), {self.log.tracebacks} tracebacks"
        )


def measured(web: WebProcess, attack: Callable[[], Any]) -> tuple[Any, Footprint]:
    """Runs `attack`, then waits for the web process to drop its connections, and says what it
    cost: RSS and descriptors before, at their peak and after, and the log it wrote."""
    offset, fds_before, rss_before = web.log_bytes(), web.open_fds(), web.rss_mib()
    sampler = PeakSampler(web)
    sampler.start()
    try:
        outcome = attack()
        _settle(web, fds_before)
    finally:
        sampler.stop()
    footprint = Footprint(
        rss_before,
        sampler.rss_mib,
        web.rss_mib(),
        fds_before,
        sampler.fds,
        web.open_fds(),
        log_since(web.log_path, offset),
    )
    return outcome, footprint


def _settle(web: WebProcess, fds_before: int) -> None:
    deadline = time.monotonic() + UVICORN_KEEP_ALIVE_S + 10
    while web.open_fds() > fds_before + 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)  # the last log lines of the attack are written


def request_head(port: int, headers: dict[str, str], content_length: int) -> bytes:
    lines = ["POST /webhooks/github HTTP/1.1", f"Host: 127.0.0.1:{port}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    lines += [f"Content-Length: {content_length}", "", ""]
    return "\r\n".join(lines).encode()


def abuse_headers(delivery: str, *, signed: bool) -> dict[str, str]:
    headers = {
        "X-GitHub-Event": "push",
        "X-GitHub-Delivery": delivery,
        "Content-Type": "application/json",
    }
    if signed:  # shaped like GitHub's; the body never arrives whole, so it is never checked
        headers["X-Hub-Signature-256"] = "sha256=" + secrets.token_hex(32)
    return headers


async def read_status(reader: asyncio.StreamReader, timeout: float) -> int:
    try:
        line = await asyncio.wait_for(reader.readline(), timeout)
    except TimeoutError:
        return NO_ANSWER
    except ConnectionError:
        return CLOSED_UNANSWERED
    parts = line.split()
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else CLOSED_UNANSWERED


async def closed_by_server(reader: asyncio.StreamReader, timeout: float) -> bool:
    """Whether the server closed the connection (end of file) within `timeout`."""
    try:
        async with asyncio.timeout(timeout):
            while await reader.read(65536):
                pass
    except TimeoutError:
        return False
    except ConnectionError:
        pass
    return True


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()


def status_counts(statuses: list[int]) -> str:
    counted = Counter(statuses)
    return ", ".join(
        f"{n} x {ANSWER_NAMES.get(status, str(status))}" for status, n in sorted(counted.items())
    )


@dataclass
class SlowAnswer:
    status: int
    answered_s: float = math.nan  # since the first body bytes were sent
    closed_s: float = math.nan  # when the server closed the connection; nan: it did not


async def hold_slow_body(port: int, n: int, timeout: float) -> SlowAnswer:
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return SlowAnswer(NOT_CONNECTED)
    try:
        head = request_head(port, abuse_headers(f"slow-{n}", signed=True), SLOW_DECLARED_BYTES)
        writer.write(head)
        await writer.drain()
        writer.write(SLOW_FIRST_BYTES)
        await writer.drain()
        started = time.monotonic()
        answer = SlowAnswer(await read_status(reader, timeout))
        answer.answered_s = time.monotonic() - started
        if await closed_by_server(reader, timeout - answer.answered_s):
            answer.closed_s = time.monotonic() - started
        return answer
    finally:
        await _close(writer)


def slow_bodies(port: int, count: int) -> list[SlowAnswer]:
    timeout = BODY_DEADLINE_S + UVICORN_KEEP_ALIVE_S + 15

    async def attack() -> list[SlowAnswer]:
        return await asyncio.gather(*(hold_slow_body(port, n, timeout) for n in range(count)))

    return asyncio.run(attack())


@dataclass
class UnsignedAnswer:
    status: int  # answered before a byte of the body was sent
    body_pushed: bool = False  # the whole body was then sent anyway


async def send_unsigned_body(port: int, n: int, body: bytes) -> UnsignedAnswer:
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return UnsignedAnswer(NOT_CONNECTED)
    try:
        writer.write(request_head(port, abuse_headers(f"unsigned-{n}", signed=False), len(body)))
        await writer.drain()
        # No body byte goes before the answer: an intake that read the body before refusing
        # leaves this waiting, and the request counts as "no answer".
        answer = UnsignedAnswer(await read_status(reader, 10))
        with contextlib.suppress(ConnectionError):
            writer.write(body)  # then the attacker's megabyte anyway, as memory pressure
            await writer.drain()
            answer.body_pushed = True
        return answer
    finally:
        await _close(writer)


def unsigned_bodies(port: int, count: int) -> list[UnsignedAnswer]:
    body = b"x" * UNSIGNED_BODY_BYTES

    async def attack() -> list[UnsignedAnswer]:
        return await asyncio.gather(*(send_unsigned_body(port, n, body) for n in range(count)))

    return asyncio.run(attack())


async def abort_mid_body(port: int, n: int) -> bool:
    try:
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    try:
        head = request_head(port, abuse_headers(f"abort-{n}", signed=True), ABORT_DECLARED_BYTES)
        writer.write(head + b"x" * ABORT_SENT_BYTES)
        await writer.drain()
        await asyncio.sleep(0.01)  # the handler is then waiting for the rest when the socket goes
        return True
    finally:
        await _close(writer)


def aborted_bodies(port: int, count: int) -> list[bool]:
    async def attack() -> list[bool]:
        slots = asyncio.Semaphore(ABORT_CONCURRENCY)

        async def one(n: int) -> bool:
            async with slots:
                return await abort_mid_body(port, n)

        return await asyncio.gather(*(one(n) for n in range(count)))

    return asyncio.run(attack())


@dataclass
class Attack:
    """One attack on the running intake: what was sent, what came back, what it cost."""

    name: str
    done: str
    requests: int
    answers: str
    cost: Footprint
    bounds: dict[str, bool]  # what was promised -> whether it held
    older: str

    @property
    def ok(self) -> bool:
        return all(self.bounds.values())

    def row(self) -> Row:
        held = [name for name, ok in self.bounds.items() if ok]
        broken = [name for name, ok in self.bounds.items() if not ok]
        verdict = f"bounds NOT held: {'; '.join(broken)} (held: " if broken else "bounds held: "
        verdict += ", ".join(held) + (")" if broken else "")
        return Row(
            self.name,
            self.done,
            "-",
            "-",
            f"{self.answers}; {self.cost.describe(self.requests)}; {verdict}. "
            f"{OLDER_CARRY_LABEL}: {self.older}",
            ok=self.ok,
        )


def _common_bounds(cost: Footprint, requests: int, healthy: bool) -> dict[str, bool]:
    return {
        f"RSS peak growth < {ABUSE_RSS_BOUND_MIB:g} MiB": cost.peak_growth < ABUSE_RSS_BOUND_MIB,
        f"<= {ABUSE_LOG_LINES_BOUND:g} log line per request": cost.lines_per(requests)
        <= ABUSE_LOG_LINES_BOUND,
        "no traceback": cost.log.tracebacks == 0,
        "web healthy after": healthy,
    }


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def attack_slow_bodies(web: WebProcess, url: str, port: int, count: int) -> Attack:
    answers, cost = measured(web, lambda: slow_bodies(port, count))
    statuses = [a.status for a in answers]
    timed_out = [a for a in answers if a.status == 408]
    closed = [a.closed_s for a in answers if not math.isnan(a.closed_s)]
    timed_out_closed = [a for a in timed_out if not math.isnan(a.closed_s)]
    late = max((a.answered_s for a in timed_out), default=math.nan)
    # Past MAX_CONCURRENT_READS bodies a delivery waits for a read to end rather than getting
    # 503 at once (GitHub does not redeliver by itself), within the same deadline: every
    # answer comes by the deadline, read or not (the memory bound shows the reads stayed few).
    last_answer = max((a.answered_s for a in answers), default=math.nan)
    bounds = {
        "every connection answered 408 or 503": set(statuses) <= {408, 503},
        f"every answer within the {BODY_DEADLINE_S:g} s deadline (+1 s)": last_answer
        <= BODY_DEADLINE_S + 1.0,
        # A 503 whose body bytes arrive after it can stay open (uvicorn stops its keep-alive
        # timer; docs/reliability.md): only the intake's own refusals are bounded here.
        "every 408 closed by the server": len(timed_out_closed) == len(timed_out),
        **_common_bounds(cost, count, _healthy(url)),
    }
    return Attack(
        "intake abuse: slow bodies held open",
        f"{count} connections at once, each sending signed-looking headers (Content-Length "
        f"{SLOW_DECLARED_BYTES}) and {len(SLOW_FIRST_BYTES)} body bytes, then nothing; the web "
        f"process held up to {cost.fds_peak - cost.fds_before} more descriptors at once, "
        f"{cost.fds_after - cost.fds_before:+d} after",
        count,
        f"{status_counts(statuses)} (the 408s after {late:.1f} s, deadline "
        f"{BODY_DEADLINE_S:g} s); {len(closed)}/{count} closed by the server, the last after "
        f"{max(closed, default=math.nan):.1f} s",
        cost,
        bounds,
        OLDER_CARRY["slow"],
    )


def attack_unsigned_bodies(web: WebProcess, url: str, port: int, count: int) -> Attack:
    answers, cost = measured(web, lambda: unsigned_bodies(port, count))
    statuses = [a.status for a in answers]
    pushed = sum(a.body_pushed for a in answers)
    bounds = {
        "every unsigned body 401 before a body byte was sent": statuses == [401] * count,
        **_common_bounds(cost, count, _healthy(url)),
    }
    return Attack(
        "intake abuse: unsigned 1 MiB bodies",
        f"{count} connections at once, each sending headers without {SIGNATURE_HEADER} "
        f"(Content-Length {UNSIGNED_BODY_BYTES}), waiting for the answer, then pushing the "
        f"{UNSIGNED_BODY_BYTES // 1024 // 1024} MiB body anyway",
        count,
        f"{status_counts(statuses)}, each before a byte of its body was sent; "
        f"{pushed}/{count} bodies then pushed whole ({pushed * UNSIGNED_BODY_BYTES // 2**20} MiB)",
        cost,
        bounds,
        OLDER_CARRY["unsigned"],
    )


def attack_aborted_bodies(web: WebProcess, url: str, port: int, count: int) -> Attack:
    connected, cost = measured(web, lambda: aborted_bodies(port, count))
    sent = sum(connected)
    logged = "; ".join(f"{n} x '{msg}'" for msg, n in cost.log.messages().most_common(3))
    bounds = {
        "every abort connected": sent == count,
        **_common_bounds(cost, count, _healthy(url)),
    }
    return Attack(
        "intake abuse: bodies aborted mid-way",
        f"{count} connections ({ABORT_CONCURRENCY} at a time), each sending signed-looking "
        f"headers (Content-Length {ABORT_DECLARED_BYTES}) and {ABORT_SENT_BYTES} body bytes, "
        "then closing the socket",
        count,
        f"{sent}/{count} sent; logged: {logged or 'nothing'}",
        cost,
        bounds,
        OLDER_CARRY["aborted"],
    )


def _warm_up(web: WebProcess, port: int) -> None:
    """First requests import and allocate what every later one reuses: not an attack's cost.
    Their connections close and their log lines are written before the first attack starts."""
    fds = web.open_fds()
    unsigned_bodies(port, 10)
    aborted_bodies(port, 20)
    _settle(web, fds)


AttackOn = Callable[[WebProcess, str, int, int], Attack]


def run_intake_abuse(root: Path, scale: Scale) -> list[Attack]:
    """The three attacks, each on a `carry web` process of its own (warmed up first), so that
    no attack reuses memory an earlier one made the process take."""
    say(
        f"intake abuse: {scale.abuse_slow} slow, {scale.abuse_unsigned} unsigned, "
        f"{scale.abuse_aborts} aborted bodies"
    )
    plan: list[tuple[AttackOn, int]] = [
        (attack_slow_bodies, scale.abuse_slow),
        (attack_unsigned_bodies, scale.abuse_unsigned),
        (attack_aborted_bodies, scale.abuse_aborts),
    ]
    server = RedisServer(root / "redis", aof=False).start()
    try:
        with carry_env(root / "carry", server.url) as env:
            return [_on_fresh_web(env, attack, count) for attack, count in plan]
    finally:
        server.kill()


def _on_fresh_web(env: CarryEnv, attack: AttackOn, count: int) -> Attack:
    url = env.start_web()
    proc = env.procs[-1]
    web = WebProcess(proc.pid, env.root / "web.log")
    port = int(url.rsplit(":", 1)[1])
    try:
        _warm_up(web, port)
        return attack(web, url, port, count)
    finally:
        stop_proc(proc)


def render_comparison(attacks: list[Attack]) -> str:
    slow, unsigned, aborted = attacks
    header = ("attack", "this run", OLDER_CARRY_LABEL)
    cells = [
        (
            f"{slow.requests} slow bodies held open",
            _rss_growth(slow, "connection"),
            OLDER_CARRY["slow"],
        ),
        (
            f"{unsigned.requests} unsigned 1 MiB bodies",
            _rss_growth(unsigned, "body"),
            OLDER_CARRY["unsigned"],
        ),
        (
            f"{aborted.requests} aborted bodies",
            f"{aborted.cost.log.size / 1e6:.2f} MB of log "
            f"({aborted.cost.log.size / max(1, aborted.requests):.0f} B per abort), "
            f"{aborted.cost.log.tracebacks} tracebacks",
            OLDER_CARRY["aborted"],
        ),
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in cells]
    return "\n".join(lines)


def _rss_growth(attack: Attack, per: str) -> str:
    cost = attack.cost
    return (
        f"RSS {cost.peak_growth:+.1f} MiB peak ({cost.kib_per(attack.requests):.1f} KiB per {per})"
    )


def scenario_intake_abuse(root: Path, scale: Scale) -> list[Row]:
    attacks = run_intake_abuse(root, scale)
    print(render_comparison(attacks) + "\n", flush=True)
    return [attack.row() for attack in attacks]


def scenario_github_faults(root: Path, _scale: Scale) -> list[Row]:
    """bench/github_faults.py: one row per fault GitHub has in production, on one deployment."""
    from bench import github_faults  # the harness imports this module's helpers

    return [Row(*outcome.cells()) for outcome in github_faults.run(root)]


def scenario_every_head(root: Path, scale: Scale) -> Row:
    """bench/every_head.py: every head's tree tested on a real runner, one message per change."""
    from bench.every_head import run_every_head  # it builds on this module's neighbours

    figures = run_every_head(root, scale.every_head_heads)
    print(figures.table() + "\n", flush=True)
    wrong = [what for what, _, _, ok in figures.rows() if not ok]
    verified = sum(1 for head in figures.heads if head in figures.verdicts)
    return Row(
        "every-head",
        f"{verified} of {len(figures.heads)} heads verified, {figures.prs} PRs, "
        f"{len(figures.messages)} messages",
        "WRONG: " + "; ".join(wrong) if wrong else "0",
        "0",
        "last good at the end is the newest head" if not wrong else "see the table above",
        not wrong,
    )


# =========================================================================== main


# A scenario answers one row, or one per part (intake-abuse: one per attack).
SCENARIOS: dict[str, Callable[[Path, Scale, int], Row | list[Row]]] = {
    "load": lambda root, scale, _seed: scenario_load(root, scale),
    "worker-kill": lambda root, scale, _seed: scenario_worker_kill(root, scale),
    "redis-restart": lambda root, scale, _seed: scenario_redis_restart(root, scale),
    "redis-no-aof": lambda root, scale, _seed: scenario_redis_restart(root, scale, aof=False),
    "github-5xx": lambda root, scale, _seed: scenario_github_5xx(root, scale),
    "github-429": lambda root, scale, _seed: scenario_github_429(root, scale),
    "github-faults": lambda root, scale, _seed: scenario_github_faults(root, scale),
    "mirror": lambda root, scale, _seed: scenario_mirror(root, scale),
    "disk-full": lambda root, scale, _seed: scenario_full_disk(root, scale),
    "fuzz-webhooks": scenario_fuzz_webhooks,
    "fuzz-parser": scenario_fuzz_parser,
    "override-race": scenario_override_race,
    "hostile-check": lambda root, scale, _seed: scenario_hostile_check_every_mode(root, scale),
    "hostile-check-bwrap": lambda root, scale, _seed: scenario_hostile_check(root, scale, "bwrap"),
    "hostile-check-step-user": lambda root, scale, _seed: scenario_hostile_check(
        root, scale, "none", step_user="nobody"
    ),
    "intake-abuse": lambda root, scale, _seed: scenario_intake_abuse(root, scale),
    "every-head": lambda root, scale, _seed: scenario_every_head(root, scale),
}


def run_scenario(name: str, scale: Scale, seed: int) -> list[Row]:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"carry-reliability-{name}-") as tmp:
        try:
            answered = SCENARIOS[name](Path(tmp), scale, seed)
            rows = answered if isinstance(answered, list) else [answered]
        except Exception as err:  # one broken scenario must not hide the others
            traceback.print_exc()
            rows = [Row(name, "scenario crashed", "?", "?", f"{type(err).__name__}: {err}", False)]
    ok = all(row.ok for row in rows)
    print(
        f"  {name}: {'ok' if ok else 'FAILED'} in {time.monotonic() - started:.0f} s",
        file=sys.stderr,
        flush=True,
    )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller counts (CI)")
    parser.add_argument(
        "--only",
        "--scenario",
        dest="only",
        action="append",
        choices=sorted(SCENARIOS),
        default=[],
        metavar="SCENARIO",
        help=f"run only this scenario (repeatable): {', '.join(sorted(SCENARIOS))}",
    )
    parser.add_argument("--seed", type=int, default=None, help="the fuzzers' seed")
    args = parser.parse_args(argv)
    if shutil.which("redis-server") is None:
        print("reliability: redis-server is needed (apt-get install redis-server)", file=sys.stderr)
        return 2
    scale = QUICK if args.quick else Scale()
    seed = args.seed if args.seed is not None else random.randrange(1 << 16)
    names = args.only or [n for n in SCENARIOS if n != "redis-no-aof" or scale.contrast_without_aof]
    print(f"reliability: {len(names)} scenarios, seed {seed}", file=sys.stderr, flush=True)
    logging.getLogger("github").setLevel(logging.ERROR)  # PyGithub narrates its retries
    rows = [row for name in names for row in run_scenario(name, scale, seed)]
    print(render(rows))
    failed = [row.scenario for row in rows if not row.ok]
    if failed:
        print(f"\nexpectations not met: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
