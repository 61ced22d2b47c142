"""1. load: pushes at a steady rate; carry's web process must store and queue every one."""

from __future__ import annotations

import random
import secrets
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench.reliability.common import (
    OTHER_REPO,
    RedisServer,
    Row,
    Scale,
    carry_env,
    percentile,
    push_body,
    queued_deliveries,
    signed_headers,
    stored,
)


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
