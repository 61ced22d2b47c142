"""3. Redis restarts: redis-server killed and restarted under a stream of deliveries."""

from __future__ import annotations

import contextlib
import secrets
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import httpx
import redis
from celery import Celery

from bench.reliability.common import (
    OTHER_REPO,
    RedisServer,
    Row,
    Scale,
    carry_env,
    push_body,
    signed_headers,
    stored,
)
from bot.core.history import HistoryKind
from bot.store import deliveries
from bot.store import series as store
from harness.carry_env import CarryEnv, lanes_empty, wait_for
from workers.requeue import REQUEUE_TASK


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
    extra["CARRY_REQUEUE_AFTER_S"] = str(REQUEUE_AFTER_S)
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
            _processed(env, list(sender.acked))  # drained, as far as the broker kept messages
            requeued = _sweep(env)
            unprocessed, drained = _processed(env, list(sender.acked))
            why = _why_unprocessed(env, unprocessed)
            recovered_head = _fresh_head_rebased(env, url) if aof else None
            duplicates = _duplicate_events(env.client)
    finally:
        server.kill()
    outcome = Outcome(unprocessed, why, drained, recovered_head, duplicates, requeued)
    return _restart_row(results, sender, outcome, aof)


@dataclass
class Outcome:
    unprocessed: list[str]
    why: str
    drained: bool
    recovered_head: float | None
    duplicates: int
    requeued: int  # acknowledged deliveries whose message the broker lost, queued again


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


REQUEUE_AFTER_S = 3.0  # CARRY_REQUEUE_AFTER_S here (default 300)


def _sweep(env: CarryEnv) -> int:
    """What the beat's `carry.requeue_lost` does every minute, run once the queue drained and
    every open delivery is overdue: queue again the deliveries whose message the broker lost
    (kombu pops a message, then records it as unacknowledged: a kill in between loses it).
    Returns how many it queued again."""
    time.sleep(REQUEUE_AFTER_S + 0.5)
    client = env.client

    def requeued() -> int:
        entries = store.history(client, None, limit=20_000)
        return sum(1 for e in entries if e["kind"] == HistoryKind.DELIVERY_REQUEUED)

    before = requeued()
    Celery(broker=env.redis_url).send_task(REQUEUE_TASK, queue="carry")
    with contextlib.suppress(AssertionError):  # what stays open is counted as unprocessed
        wait_for(lambda: not deliveries.open_since(client, 1e18), 60, "the sweep")
    return requeued() - before


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
        f"{len(out.unprocessed)} acknowledged but never processed{out.why}; "
        f"{out.requeued} whose message the broker lost (popped, then killed before kombu "
        "recorded it as unacknowledged) queued again by the carry.requeue_lost sweep"
        + ("" if out.drained else " (the queue did not drain)"),
        f"0 effects doubled; {out.duplicates} redelivered ingest jobs skipped as duplicate events",
        f"during the ~1 s outages the web answered {answers or 'nothing else'} (GitHub "
        f"redelivers those; here every one was redelivered and accepted); the worker "
        f"reconnected, {head}",
        ok=all(r.lost == 0 for r in results)
        and not out.unprocessed
        and out.recovered_head is not None,
    )
